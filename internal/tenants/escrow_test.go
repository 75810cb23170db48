package tenants

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// invariantClient is one store shared by every ledger of a test (its resourceVersion
// checks make their writes conflict for real); every status write is checked against
// (I): used + Σ slices ≤ hard, and counted.
type invariantClient struct {
	client.Client
	writes     atomic.Int64
	violations atomic.Int64
	first      atomic.Value // string: the first violation
}

func newInvariantClient(t *testing.T, objs ...client.Object) *invariantClient {
	ic := &invariantClient{}
	ic.Client = fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if ot, ok := obj.(*v1alpha1.OffloadTenant); ok {
			total := add(ot.Status.Used, slicesSum(ot, ""))
			for name, hard := range ot.Spec.Hard {
				if q := total[name]; q.Cmp(hard) > 0 {
					ic.violations.Add(1)
					ic.first.CompareAndSwap(nil, fmt.Sprintf("%s: used %v + slices %v > hard %v", name, ot.Status.Used, ot.Status.Slices, ot.Spec.Hard))
				}
			}
		}
		err := c.SubResource(sub).Update(ctx, obj, opts...)
		if err == nil {
			ic.writes.Add(1)
		}
		return err
	}}, objs...)
	return ic
}

// slicedLedger is a ledger with slices, as replica name: quick reports, a short idle.
func slicedLedger(c client.Client, name string, now func() time.Time) *Ledger {
	return NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(), Now: now,
		Slices: SliceOptions{Holder: name, Report: 20 * time.Millisecond, Idle: 60 * time.Millisecond, Min: 4, Max: 32}})
}

// noJitter starts every refill at half of a slice, so a test knows which charge does.
func noJitter(int) int { return 0 }

func podOf(i int, gen int64) Request {
	r := onePod(fmt.Sprint(i))
	r.Generation = gen
	return r
}

// TestSlicesExact: three ledgers (replicas) sharing one store charge a burst of
// distinct pods at once, through slices: every status write keeps used + Σ slices ≤
// hard; exactly min(hard, pods) are allowed, the rest refused (hard = pods: all of
// them, no over-deny); once the replicas are idle their slices are back and the
// ledger holds exactly the allowed pods, each pending once.
func TestSlicesExact(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hard, pods int
	}{
		{"small quota", 5, 36},
		{"hard = pods", 90, 90},
		{"hard = half", 60, 120},
		{"large quota", 1000, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := tenant("team-a", list("pods", fmt.Sprint(tc.hard), "cpu", fmt.Sprint(2*tc.hard)), nil)
			obj.Generation = 1
			c := newInvariantClient(t, obj)
			ledgers := []*Ledger{slicedLedger(c, "replica-0", nil), slicedLedger(c, "replica-1", nil), slicedLedger(c, "replica-2", nil)}
			var allowed, refused atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, tc.pods)
			for i := range tc.pods {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					var refusal *Refusal
					switch err := ledgers[i%3].Charge(ctx, podOf(i, 1)); {
					case err == nil:
						allowed.Add(1)
					case errors.As(err, &refusal):
						refused.Add(1)
					default:
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("charge: %v (want an allow or a refusal)", err)
			}
			want := min(tc.hard, tc.pods)
			if allowed.Load() != int64(want) || refused.Load() != int64(tc.pods-want) {
				t.Errorf("%d allowed, %d refused; want %d and %d", allowed.Load(), refused.Load(), want, tc.pods-want)
			}
			// Idle: reported and returned.
			var s v1alpha1.OffloadTenantStatus
			deadline := time.Now().Add(10 * time.Second)
			for {
				s = status(t, c, "team-a")
				if len(s.Slices) == 0 && len(s.Pending) == want || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if len(s.Slices) != 0 || len(s.Pending) != want || s.PendingCount != int32(want) {
				t.Fatalf("idle status: %d slices %+v, %d pending (count %d); want none and %d", len(s.Slices), s.Slices, len(s.Pending), s.PendingCount, want)
			}
			wantUsed(t, s, "pods", fmt.Sprint(want), "cpu", fmt.Sprint(want))
			seen := map[types.UID]bool{}
			for _, p := range s.Pending {
				if seen[p.UID] {
					t.Errorf("pod %s pending twice", p.UID)
				}
				seen[p.UID] = true
			}
			if v := c.violations.Load(); v > 0 {
				t.Errorf("%d status writes over hard; first: %v", v, c.first.Load())
			}
			if tc.hard >= 100 && c.writes.Load() > int64(tc.pods)/3 {
				// The point of slices: far fewer writes than pods.
				t.Errorf("%d status writes for %d pods", c.writes.Load(), tc.pods)
			}
		})
	}
}

// TestSlicesRecorded: a ledger's first charge takes a slice recorded in status with
// its holder and an expiry a lease away; the next charges cost no write until the
// report; a pod charged twice from the slice is charged once; a spec generation other
// than the slice's goes through a write.
func TestSlicesRecorded(t *testing.T) {
	obj := tenant("team-a", list("pods", "100", "cpu", "200"), nil)
	obj.Generation = 7
	c := newInvariantClient(t, obj)
	now := time.Now()
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(), Now: func() time.Time { return now },
		Slices: SliceOptions{Holder: "replica-0", Report: time.Hour, Min: 8, Max: 8, Jitter: noJitter}})
	ctx := context.Background()
	if err := l.Charge(ctx, podOf(0, 7)); err != nil {
		t.Fatal(err)
	}
	s := status(t, c, "team-a")
	if len(s.Slices) != 1 || s.Slices[0].Holder != "replica-0" || !s.Slices[0].Expires.Time.Equal(now.Add(DefaultSliceLease).Truncate(time.Second)) {
		t.Fatalf("slices %+v, want one of replica-0 expiring in %v", s.Slices, DefaultSliceLease)
	}
	// The first pod charged exactly, then a slice of 8 pods (of its size).
	if got := s.Slices[0].Amounts[corev1.ResourcePods]; got.String() != "8" || len(s.Pending) != 1 {
		t.Fatalf("slice %v, %d pending; want 8 pods and 1", s.Slices[0].Amounts, len(s.Pending))
	}
	writes := c.writes.Load()
	for i := 1; i <= 3; i++ {
		if err := l.Charge(ctx, podOf(i, 7)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Charge(ctx, podOf(3, 7)); err != nil { // again: once
		t.Fatal(err)
	}
	if c.writes.Load() != writes {
		t.Fatalf("%d writes for charges within the slice, want none", c.writes.Load()-writes)
	}
	// Pod 2 charged meanwhile through another front door (a ledger without slices):
	// when reported it is a duplicate, and its room stays in the slice.
	if err := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry()}).Charge(ctx, podOf(2, 7)); err != nil {
		t.Fatal(err)
	}
	// Another spec: the slice charges nothing under it; the write that charges the pod
	// reports the others.
	if err := l.Charge(ctx, podOf(4, 8)); err != nil {
		t.Fatal(err)
	}
	s = status(t, c, "team-a")
	if len(s.Pending) != 5 || s.Slices[0].Amounts.Pods().String() != "6" {
		t.Fatalf("%d pending, slice %v: want pods 1 and 3 reported, 2 once, the 5th charged exactly, and the slice less pods 1 and 3", len(s.Pending), s.Slices[0].Amounts)
	}
	if v := c.violations.Load(); v > 0 {
		t.Errorf("%d status writes over hard; first: %v", v, c.first.Load())
	}
	wantUsed(t, s, "pods", "5")
}

// TestSlicesDeadHolder: a ledger charges pods from its slice and dies before reporting
// them (its writes fail from then on). Its slice holds the room until it expires; then
// the reconciler takes it back, counting as pending the pods its creates made (stored,
// unmarked, on a virtual node or waiting for one) and no other pod; the room that is
// left is free again.
func TestSlicesDeadHolder(t *testing.T) {
	obj := tenant("team-a", list("pods", "40", "cpu", "80"), nil)
	obj.Generation = 1
	var dead atomic.Bool
	unbound := runningPod("team-a", "2", "1")
	unbound.Spec.NodeName = ""
	unbound.Spec.Tolerations = []corev1.Toleration{{Key: "virtual-node.interlink/no-schedule", Operator: corev1.TolerationOpExists}}
	other := runningPod("team-a", "regular", "1") // on a node that is not virtual
	other.Spec.NodeName = "node-1"
	pods := []*corev1.Pod{runningPod("team-a", "0", "1"), runningPod("team-a", "1", "1"), unbound, other}
	objs := []client.Object{obj}
	for _, p := range pods {
		p.CreationTimestamp.Time = testNow.Add(-time.Minute)
		objs = append(objs, p)
	}
	inner := recScheme(t).WithObjects(objs...).Build()
	var c client.Client = interceptor.NewClient(inner, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if dead.Load() {
			return apierrors.NewServiceUnavailable("the holder is dead")
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}})
	then := testNow.Add(-time.Minute)
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(), Now: func() time.Time { return then }, // its own client: dies alone
		Slices: SliceOptions{Holder: "dead", Report: time.Hour, Min: 4, Max: 4, Jitter: noJitter}})
	ctx := context.Background()
	if err := l.Charge(ctx, podOf(0, 1)); err != nil { // exact, and a slice of 4
		t.Fatal(err)
	}
	dead.Store(true)
	for i := 1; i <= 2; i++ {
		if err := l.Charge(ctx, podOf(i, 1)); err != nil {
			t.Fatalf("pod %d from the slice: %v", i, err)
		}
	}
	s := status(t, c, "team-a")
	if len(s.Slices) != 1 || s.Slices[0].Amounts.Pods().String() != "4" || len(s.Pending) != 1 {
		t.Fatalf("status %+v: want pod 0 pending and a slice of 4 holding pods 1 and 2", s)
	}

	c = inner // the reconciler's and the live replica's client
	tm := newTestTerm(t, c, fakeDir{"team-a": obj})
	for _, p := range pods[:2] {
		tm.view.OnAdd("vk-1", p)
	}
	// Not expired yet: the slice holds.
	tm.r.opts.Now = func() time.Time { return then.Add(DefaultSliceLease) }
	reconcileOK(t, tm, "team-a")
	if s := status(t, c, "team-a"); len(s.Slices) != 1 {
		t.Fatalf("slices %+v taken back before their expiry", s.Slices)
	}
	tm.r.opts.Now = func() time.Time { return testNow }
	reconcileOK(t, tm, "team-a")
	s = status(t, c, "team-a")
	if len(s.Slices) != 0 {
		t.Fatalf("slices %+v, want the expired one taken back", s.Slices)
	}
	names := map[string]bool{}
	for _, p := range s.Pending {
		names[p.Name] = true
	}
	if !names["1"] || !names["2"] || names["regular"] {
		t.Errorf("pending %v: want pods 1 and 2 counted (0 confirmed), not the pod of a regular node", names)
	}
	wantUsed(t, s, "pods", "3")
	// The rest of the quota is free again: a live ledger gets 37 more, not 38.
	live := slicedLedger(c, "live", func() time.Time { return testNow })
	allowed := 0
	for i := 10; i < 50; i++ {
		if err := live.Charge(ctx, podOf(i, 1)); err == nil {
			allowed++
		}
	}
	if allowed != 37 {
		t.Errorf("%d allowed after the take-back, want 37", allowed)
	}
}

// A lone holder's slice holds at most a quarter of the room no other slice holds,
// however many grants topped it up: what a replica that dies strands until its lease
// expires. Beside other holders a slice may reach an even share of the room left, and
// near the end no more than its holder's demand; a grant never takes more than what no
// slice holds.
func TestGrantFor(t *testing.T) {
	pod := list("pods", "1")
	slice := func(holder string, pods int) v1alpha1.Slice {
		return v1alpha1.Slice{Holder: holder, Amounts: list("pods", fmt.Sprint(pods))}
	}
	for _, tc := range []struct {
		name             string
		hard, used, want int
		slices           []v1alpha1.Slice
		pending          int
		share            sharing
		grant            string // pods granted, "" for none
	}{
		{"first slice of a quota of 200: a quarter", 200, 0, 128, nil, 0, sharing{}, "50"},
		{"the next ones: a quarter of what is left", 200, 0, 128, []v1alpha1.Slice{slice("a", 50)}, 0, sharing{}, "37"},
		{"a large quota: what is wanted", 100000, 0, 128, nil, 0, sharing{}, "128"},
		// hard 200, 30 used, c holds 20 still, a 37, b 28: 85 unsliced. Per grant (a
		// quarter of 85) c would reach 41; per slice, a quarter of 105 is 26: 6 more.
		{"topped up: the slice, not the grant, is bounded", 200, 30, 128, []v1alpha1.Slice{slice("c", 20), slice("a", 37), slice("b", 28)}, 0, sharing{}, "6"},
		{"a slice already at its share: nothing", 200, 30, 128, []v1alpha1.Slice{slice("c", 30), slice("a", 37), slice("b", 28)}, 0, sharing{}, ""},
		{"near the end (under 4 slices of Min unsliced): nothing", 200, 140, 128, nil, 0, sharing{}, ""},
		{"pending entries left bound it too", 100000, 0, 128, nil, 1900, sharing{}, "25"},
		// 600 left, 350 of it unsliced: a third of 600 (200; c holds 50) is more than a
		// quarter of 400 (100).
		{"beside two others: an even share of the room left", 1000, 400, 256, []v1alpha1.Slice{slice("a", 100), slice("b", 100), slice("c", 50)}, 0, sharing{others: 2, demand: 600}, "150"},
		// 100 left, 60 unsliced: a third (34), under Initial, within the demand.
		{"near the end: the even share", 1000, 900, 128, []v1alpha1.Slice{slice("a", 20), slice("b", 20)}, 0, sharing{others: 2, demand: 600}, "34"},
		{"near the end, a slow holder: its demand, at least Min", 1000, 900, 128, []v1alpha1.Slice{slice("a", 20), slice("b", 20)}, 0, sharing{others: 2, demand: 4}, "16"},
		{"the share is more than what no slice holds: that much", 1000, 900, 128, []v1alpha1.Slice{slice("a", 40), slice("b", 40)}, 0, sharing{others: 2, demand: 600}, "20"},
		{"nothing unsliced: nothing", 500, 200, 128, []v1alpha1.Slice{slice("a", 150), slice("b", 150)}, 0, sharing{others: 2, demand: 600}, ""},
		{"a quota under four slices of Min: charged exactly", 60, 0, 128, nil, 0, sharing{others: 2, demand: 600}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := tenant("team-a", list("pods", fmt.Sprint(tc.hard)), nil)
			obj.Status.Used = list("pods", fmt.Sprint(tc.used))
			obj.Status.Slices = tc.slices
			obj.Status.Pending = make([]v1alpha1.Charge, tc.pending)
			opts := SliceOptions{Holder: "c"}
			opts.defaults()
			grant, _ := grantFor(obj, opts, DefaultMaxPending, pod, tc.want, tc.share)
			got := ""
			if grant != nil {
				got = grant.Pods().String()
			}
			if got != tc.grant {
				t.Errorf("granted %q pods, want %q", got, tc.grant)
			}
		})
	}
}

// A slice's demand is two seconds of creates at the rate of the latest second: the
// second before counts until a second without creates has passed.
func TestSliceDemand(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		asks []time.Duration // one create each, after t0
		at   time.Duration
		want int
	}{
		{"none", nil, 0, 0},
		{"this second", []time.Duration{0, 100 * time.Millisecond, 900 * time.Millisecond}, 950 * time.Millisecond, 6},
		{"the second before, while it is the busier", []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 1100 * time.Millisecond}, 1200 * time.Millisecond, 6},
		{"a second without creates forgets it", []time.Duration{0, 10 * time.Millisecond}, 2500 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &slice{}
			for _, d := range tc.asks {
				st.noteDemand(t0.Add(d), 1)
			}
			if got := st.demand(t0.Add(tc.at)); got != tc.want {
				t.Errorf("demand %d, want %d", got, tc.want)
			}
		})
	}
}

// Creates that queue while a refill is being written (the slice ran out meanwhile) are
// charged from the room it adds once it lands, not in one more write of their own.
func TestSlicesQueuedBehindRefill(t *testing.T) {
	obj := tenant("team-a", list("pods", "1000"), nil)
	obj.Generation = 1
	gate, held := make(chan struct{}), make(chan struct{})
	var writes atomic.Int64
	c := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if writes.Add(1) == 2 {
			close(held)
			<-gate // the refill, in flight while the slice runs out
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}, obj)
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(),
		Slices: SliceOptions{Holder: "replica-0", Report: time.Hour, Min: 4, Initial: 8, Max: 8, Jitter: noJitter}})
	ctx := context.Background()
	// Pod 0 charged exactly with a slice of 8; pods 1–4 take it to half, which starts the
	// refill; pods 5–8 use the rest before it lands.
	for i := range 9 {
		if err := l.Charge(ctx, podOf(i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	<-held
	errs := make(chan error, 2)
	for i := 9; i <= 10; i++ {
		go func() { errs <- l.Charge(ctx, podOf(i, 1)) }()
	}
	waiting := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		if q := l.queues["team-a"]; q != nil {
			return len(q.waiting)
		}
		return 0
	}
	for deadline := time.Now().Add(5 * time.Second); waiting() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d creates queued, want 2", waiting())
		}
	}
	close(gate)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(l.metrics.charges.WithLabelValues("charged")); got != 1 {
		t.Errorf("%v creates charged in a write of their own, want 1 (pod 0): pods 9 and 10 from the refilled slice", got)
	}
	if got := testutil.ToFloat64(l.metrics.charges.WithLabelValues("slice")); got != 10 {
		t.Errorf("%v creates charged from the slice, want 10", got)
	}
}

// TestSlicesWakeOnReturn: a create that only another bridge's slice could fit waits
// for it, and is asked again as soon as the bridge's view shows the slice returned
// (Observe), not at the next poll; the view showing this bridge's own read wakes
// nothing.
func TestSlicesWakeOnReturn(t *testing.T) {
	obj := tenant("team-a", list("pods", "20"), nil)
	obj.Generation = 1
	var reads atomic.Int64 // the ledger's rounds: each reads the tenant
	c := fakeClient(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		reads.Add(1)
		return c.Get(ctx, key, obj, opts...)
	}}, obj)
	ctx := context.Background()
	var stored v1alpha1.OffloadTenant
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &stored); err != nil {
		t.Fatal(err)
	}
	stored.Status.Slices = []v1alpha1.Slice{{Holder: "replica-0", Amounts: list("pods", "20"), Expires: metav1.NewTime(time.Now().Add(time.Minute))}}
	if err := c.Status().Update(ctx, &stored); err != nil {
		t.Fatal(err)
	}
	// Polled every 6 minutes: only a wake answers within the test's time.
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(),
		Slices: SliceOptions{Holder: "replica-1", Report: time.Hour, Min: 4}})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, othersWait)
		defer cancel()
		done <- l.Charge(ctx, podOf(0, 1))
	}()
	waitingOthers := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.queues["team-a"]
		return q != nil && q.others
	}
	for deadline := time.Now().Add(2 * time.Second); !waitingOthers(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the create is not waiting for the other bridge's slice")
		}
	}
	// The view shows what this bridge read: no wake.
	var seen v1alpha1.OffloadTenant
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &seen); err != nil {
		t.Fatal(err)
	}
	before := reads.Load()
	l.Observe(&seen)
	select {
	case err := <-done:
		t.Fatalf("answered (%v) on the bridge's own read", err)
	case <-time.After(100 * time.Millisecond):
	}
	if n := reads.Load() - before; n != 0 {
		t.Errorf("%d rounds on the bridge's own read, want 0", n)
	}
	// replica-0 returns its slice; the view shows it (a new object: what the view has
	// shown is never changed).
	returned := seen.DeepCopy()
	returned.Status.Slices = nil
	if err := c.Status().Update(ctx, returned); err != nil {
		t.Fatal(err)
	}
	l.Observe(returned)
	if err := <-done; err != nil {
		t.Fatalf("charge after the slice came back: %v, want an allow", err)
	}
	wantUsed(t, status(t, c, "team-a"), "pods", "1")
}

// TestSlicesBusyNotReported: far from the quota's end a busy slice is refilled without
// reporting its charges (the status a burst rewrites stays small; the charges are
// inside the slice's room meanwhile, (I) holding at every write), and the first write
// that must report (here a create the slice does not cover) reports them all.
func TestSlicesBusyNotReported(t *testing.T) {
	l, c := farFromEnd(t, 7, SliceOptions{Initial: 8, Max: 8, Jitter: noJitter})
	ctx := context.Background()
	charge := func(from, to int) {
		for i := from; i <= to; i++ {
			if err := l.Charge(ctx, podOf(i, 7)); err != nil {
				t.Fatal(err)
			}
			writesDone(t, l, "team-a") // each refill lands before the next create: none waits for one
		}
	}
	charge(0, 12)
	s := status(t, c, "team-a")
	if c.writes.Load() < 3 {
		t.Fatalf("%d writes, want the first charge and refills", c.writes.Load())
	}
	if len(s.Pending) != 1 {
		t.Errorf("%d pending after refills, want 1 (pod 0, charged exactly): a busy slice's refills report nothing", len(s.Pending))
	}
	if room := s.Slices[0].Amounts.Pods(); room.Value() < 12 {
		t.Errorf("slice of %v pods, want at least the 12 charged from it", room)
	}
	// At twice Max unreported, the refill reports them.
	charge(13, 16)
	if s = status(t, c, "team-a"); len(s.Pending) != 17 {
		t.Errorf("%d pending, want 17: 16 charged from the slice, reported at 2 × Max", len(s.Pending))
	}
	// A create of another spec is charged exactly, in a write that reports the rest.
	charge(17, 18)
	if err := l.Charge(ctx, podOf(100, 8)); err != nil {
		t.Fatal(err)
	}
	s = status(t, c, "team-a")
	if len(s.Pending) != 20 {
		t.Errorf("%d pending, want 20: pods 0–18 and pod 100", len(s.Pending))
	}
	wantUsed(t, s, "pods", "20")
	if v := c.violations.Load(); v > 0 {
		t.Errorf("%d status writes over hard; first: %v", v, c.first.Load())
	}
}

// TestSlicesCrowdedReturn: a slice idle for a fifth of Idle is returned as soon as the
// view shows no room left outside the slices (a create elsewhere may wait for it), and
// kept while there is.
func TestSlicesCrowdedReturn(t *testing.T) {
	obj := tenant("team-a", list("pods", "100"), nil)
	obj.Generation = 1
	c := newInvariantClient(t, obj)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(), Now: clock,
		Slices: SliceOptions{Holder: "replica-0", Report: time.Hour, Idle: time.Hour, Min: 4, Initial: 8, Max: 8, Jitter: noJitter}})
	ctx := context.Background()
	if err := l.Charge(ctx, podOf(0, 1)); err != nil {
		t.Fatal(err)
	}
	holds := func() bool {
		writesDone(t, l, "team-a")
		return sliceIndex(status(t, c, "team-a").Slices, "replica-0") >= 0
	}
	if !holds() {
		t.Fatal("no slice after the first charge")
	}
	mu.Lock()
	now = now.Add(13 * time.Minute) // idle past a fifth of Idle, not Idle
	mu.Unlock()
	var view v1alpha1.OffloadTenant
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &view); err != nil {
		t.Fatal(err)
	}
	l.Observe(&view)
	if !holds() {
		t.Fatal("slice returned while the view shows room outside the slices")
	}
	// Another replica's slice takes the rest, as the view shows it.
	rest := Sub(unsliced(&view), nil)
	taken := view.DeepCopy()
	taken.Status.Slices = append(taken.Status.Slices, v1alpha1.Slice{Holder: "replica-1", Amounts: rest, Expires: metav1.NewTime(now.Add(time.Minute))})
	taken.ResourceVersion = "other"
	l.Observe(taken)
	if holds() {
		t.Fatal("slice kept while the view shows no room outside the slices")
	}
	if v := c.violations.Load(); v > 0 {
		t.Errorf("%d status writes over hard; first: %v", v, c.first.Load())
	}
}

// writesDone waits until no write of the tenant's ledger runs or is queued.
func writesDone(t *testing.T, l *Ledger, tenant string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		q := l.queues[tenant]
		busy := q != nil && q.writing
		l.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the ledger's writes did not end")
		}
	}
}

// TestSlicesDryRefill: a refill that finds no room to grant (others' slices hold the
// rest) reads the tenant once, not at every create charged after it; a change the
// view shows (another bridge's write) lets the next charge try again.
func TestSlicesDryRefill(t *testing.T) {
	// replica-1 holds all but 9: pod 0 and a first slice of 8 take them, its refill
	// finds none.
	l, c, gets := besideOther(t, "159", "150", 8, nil)
	ctx := context.Background()
	charge := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			if err := l.Charge(ctx, podOf(i, 1)); err != nil {
				t.Fatal(err)
			}
			writesDone(t, l, "team-a")
		}
	}
	charge(0, 4) // the first write grants 8; half of them left after pod 4: a refill
	afterRefill := gets.Load()
	charge(5, 6) // within the slice: no refill tried again
	if n := gets.Load() - afterRefill; n != 0 {
		t.Errorf("%d reads of the tenant after a refill found no room, want 0", n)
	}
	// Another bridge's write, as the view shows it: the next charge refills.
	var view v1alpha1.OffloadTenant
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &view); err != nil {
		t.Fatal(err)
	}
	view.ResourceVersion = "changed"
	l.Observe(&view)
	before := gets.Load()
	charge(7, 7)
	if n := gets.Load() - before; n != 1 {
		t.Errorf("%d reads of the tenant after the view changed, want 1 (a refill)", n)
	}
}

// TestSlicesDryRefillRaced: another bridge's change that the view shows while a refill
// runs may be newer than what the refill read: the refill does not mark the slice dry,
// and the next charge tries again.
func TestSlicesDryRefillRaced(t *testing.T) {
	var onRead atomic.Value
	l, c, gets := besideOther(t, "159", "150", 8, &onRead)
	ctx := context.Background()
	charge := func(i int) {
		t.Helper()
		if err := l.Charge(ctx, podOf(i, 1)); err != nil {
			t.Fatal(err)
		}
		writesDone(t, l, "team-a")
	}
	for i := range 4 {
		charge(i)
	}
	var view v1alpha1.OffloadTenant
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &view); err != nil {
		t.Fatal(err)
	}
	view.ResourceVersion = "another bridge's"
	onRead.Store(func() { l.Observe(&view) })
	charge(4) // the refill, finding no room, with a change shown meanwhile
	onRead.Store(func() {})
	before := gets.Load()
	charge(5)
	charge(6) // 2 left of the 4 the slice was sized to (short): a refill is due
	if n := gets.Load() - before; n != 1 {
		t.Errorf("%d reads after a refill raced with a change, want 1 (a refill tried again)", n)
	}
}

// TestSlicesFirstGrantKeepsSize: a slice's first grant is of Initial and its size stays
// Initial: the creates charged from it do not start a refill before half of it is used
// (a second write at once, beside the other bridges' first ones at a burst's start).
func TestSlicesFirstGrantKeepsSize(t *testing.T) {
	l, c := farFromEnd(t, 1, SliceOptions{Initial: 8, Max: 32, Jitter: noJitter})
	ctx := context.Background()
	for i := range 3 {
		if err := l.Charge(ctx, podOf(i, 1)); err != nil {
			t.Fatal(err)
		}
		writesDone(t, l, "team-a")
	}
	if n := c.writes.Load(); n != 1 {
		t.Errorf("%d writes after 3 creates from a first slice of 8, want 1", n)
	}
	if room := status(t, c, "team-a").Slices[0].Amounts.Pods(); room.Value() != 8 {
		t.Errorf("slice of %v pods, want 8 (Initial)", room)
	}
	// Pod 0 was charged in the first write; pods 1–4 from the slice leave 4 of 8: a
	// refill, to twice its size at once: 16 free (20 in the status with the 4
	// unreported).
	for i := 3; i < 5; i++ {
		if err := l.Charge(ctx, podOf(i, 1)); err != nil {
			t.Fatal(err)
		}
		writesDone(t, l, "team-a")
	}
	if room := status(t, c, "team-a").Slices[0].Amounts.Pods(); c.writes.Load() != 2 || room.Value() != 20 {
		t.Errorf("%d writes and a slice of %v pods after 5 creates, want 2 and 20 (a refill at half, to twice the size)", c.writes.Load(), room)
	}
}

// TestSlicesShortGrantSize: a slice granted less than it asked for (the room no slice
// holds ran out) is refilled at half of what it holds, not at half of a size it could
// not reach, which would try a refill at the next charges already.
func TestSlicesShortGrantSize(t *testing.T) {
	// replica-1 holds 900: after pod 0, 40 are left for a first slice that asks for 64.
	l, c, gets := besideOther(t, "941", "900", 64, nil)
	ctx := context.Background()
	for i := range 16 { // 25 of 40 left: over half of what it holds
		if err := l.Charge(ctx, podOf(i, 1)); err != nil {
			t.Fatal(err)
		}
		writesDone(t, l, "team-a")
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("%d reads of the tenant, want 1 (the first write): a slice of 40 is not refilled at 32 left", n)
	}
	if room := status(t, c, "team-a").Slices[1].Amounts.Pods(); room.Value() != 40 {
		t.Errorf("slice of %v pods, want 40", room)
	}
}

// TestSlicesRefillJitter: a refill may start before half of the slice is used, by what
// Jitter draws (up to a quarter of its size), so that bridges charging a burst at the
// same rate do not refill at the same moment and conflict.
func TestSlicesRefillJitter(t *testing.T) {
	var drawn atomic.Int64 // the first n drawn from
	l, c := farFromEnd(t, 1, SliceOptions{Initial: 8, Max: 32,
		Jitter: func(n int) int { drawn.CompareAndSwap(0, int64(n)); return n - 1 }})
	ctx := context.Background()
	for i := range 3 { // pod 0 in the first write, 1–2 from the slice: 6 of 8 left
		if err := l.Charge(ctx, podOf(i, 1)); err != nil {
			t.Fatal(err)
		}
		writesDone(t, l, "team-a")
	}
	if n := c.writes.Load(); n != 2 {
		t.Errorf("%d writes after 3 creates, want 2: the refill starts at 6 of 8 left (half and a jitter of 2)", n)
	}
	if n := drawn.Load(); n != 3 {
		t.Errorf("jitter drawn from [0, %d) first, want [0, 3) (a quarter of 8, and 0)", n)
	}
}

// besideOther is replica-0's ledger of team-a (hard pods) while replica-1 holds a slice of
// others pods, with slices of size pods (no jitter), and the count of team-a's reads;
// onRead, when it holds a func, runs at each read.
func besideOther(t *testing.T, hard, others string, size int, onRead *atomic.Value) (*Ledger, client.Client, *atomic.Int64) {
	obj := tenant("team-a", list("pods", hard), nil)
	obj.Generation = 1
	obj.Status.Slices = []v1alpha1.Slice{{Holder: "replica-1", Amounts: list("pods", others), Expires: metav1.NewTime(time.Now().Add(time.Hour))}}
	gets := &atomic.Int64{}
	c := fakeClient(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*v1alpha1.OffloadTenant); ok {
			gets.Add(1)
		}
		if onRead != nil {
			if f, _ := onRead.Load().(func()); f != nil {
				f()
			}
		}
		return c.Get(ctx, key, obj, opts...)
	}}, obj)
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(),
		Slices: SliceOptions{Holder: "replica-0", Report: time.Hour, Idle: time.Hour, Min: 4, Initial: size, Max: size, Jitter: noJitter}})
	return l, c, gets
}

// farFromEnd is replica-0's ledger of team-a, whose hard.pods (10,000) a test does not
// reach, at spec generation gen; sizes are the test's, Min 4, and no report, idle return
// or renewal comes by time.
func farFromEnd(t *testing.T, gen int64, sizes SliceOptions) (*Ledger, *invariantClient) {
	obj := tenant("team-a", list("pods", "10000"), nil)
	obj.Generation = gen
	c := newInvariantClient(t, obj)
	sizes.Holder, sizes.Report, sizes.Idle, sizes.Min = "replica-0", time.Hour, time.Hour, 4
	return NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(), Slices: sizes}), c
}
