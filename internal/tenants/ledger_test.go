package tenants

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func tenant(name string, hard corev1.ResourceList, nodes map[string]corev1.ResourceList) *v1alpha1.OffloadTenant {
	return &v1alpha1.OffloadTenant{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.OffloadTenantSpec{Group: "interlink.io", Hard: hard, Nodes: nodes}}
}

func fakeClient(t testing.TB, funcs interceptor.Funcs, objs ...client.Object) client.Client {
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(testScheme(t)).
		WithStatusSubresource(&v1alpha1.OffloadTenant{}).WithObjects(objs...).Build(), funcs)
}

func onePod(name string) Request {
	return Request{Tenant: "team-a", UID: types.UID("uid-" + name), Namespace: "team-a", Name: name, Node: "vk-1",
		Amounts: corev1.ResourceList{"pods": resource.MustParse("1"), "cpu": resource.MustParse("1")}}
}

func status(t *testing.T, c client.Client, name string) v1alpha1.OffloadTenantStatus {
	t.Helper()
	var o v1alpha1.OffloadTenant
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &o); err != nil {
		t.Fatal(err)
	}
	return o.Status
}

func TestLedgerCharges(t *testing.T) {
	c := fakeClient(t, interceptor.Funcs{}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("2")},
		map[string]corev1.ResourceList{"vk-1": {"cpu": resource.MustParse("1500m")}}))
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant})
	ctx := context.Background()
	if err := l.Charge(ctx, onePod("a")); err != nil {
		t.Fatal(err)
	}
	// The same pod again, from another front door: charged once.
	if err := l.Charge(ctx, onePod("a")); err != nil {
		t.Fatal(err)
	}
	// Over the node's cpu.
	err := l.Charge(ctx, onePod("b"))
	var refusal *Refusal
	if want := `tenant "team-a" would use 2 cpu on virtual node "vk-1", over its quota there of 1500m (1 in use, this pod holds 1)`; !errors.As(err, &refusal) || refusal.Message != want {
		t.Fatalf("b: %v, want the refusal %q", err, want)
	}
	// Elsewhere it fits; then the pods run out.
	other := onePod("c")
	other.Node = "vk-2"
	if err := l.Charge(ctx, other); err != nil {
		t.Fatal(err)
	}
	err = l.Charge(ctx, Request{Tenant: "team-a", UID: "uid-d", Namespace: "team-a", Name: "d", Amounts: corev1.ResourceList{"pods": resource.MustParse("1")}})
	if want := `tenant "team-a" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod holds 1)`; !errors.As(err, &refusal) || refusal.Message != want {
		t.Fatalf("d: %v, want the refusal %q", err, want)
	}
	s := status(t, c, "team-a")
	if got := s.Used[corev1.ResourceName("pods")]; got.String() != "2" || len(s.Pending) != 2 || s.PendingCount != 2 {
		t.Errorf("status %+v, want 2 pods used and pending", s)
	}
	if got := s.NodesUsed["vk-1"][corev1.ResourceCPU]; got.String() != "1" || len(s.NodesUsed) != 1 {
		t.Errorf("nodesUsed %v, want 1 cpu on vk-1 only", s.NodesUsed)
	}
}

// TestLedgerBurst: concurrent charges of one tenant, as many bridges' decisions at once:
// exactly the quota's worth is charged, and the charges that arrive while a write is in
// flight go in one write after it. The first write is held until the other 59 charges
// wait, so the batching asserted does not depend on how goroutines are scheduled.
func TestLedgerBurst(t *testing.T) {
	var writes atomic.Int64
	gate := make(chan struct{})
	c := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if writes.Add(1) == 1 {
			<-gate
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("10")}, nil))
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant})
	var wg sync.WaitGroup
	var charged, refused atomic.Int64
	charge := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var refusal *Refusal
			switch err := l.Charge(context.Background(), onePod(fmt.Sprint(i))); {
			case err == nil:
				charged.Add(1)
			case errors.As(err, &refusal):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	charge(0)
	waitFor(t, "the first write", func() bool { return writes.Load() == 1 })
	for i := 1; i < 60; i++ {
		charge(i)
	}
	waitFor(t, "59 charges waiting", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.queues["team-a"]
		return q != nil && len(q.waiting) == 59
	})
	close(gate)
	wg.Wait()
	if charged.Load() != 10 || refused.Load() != 50 {
		t.Errorf("%d charged, %d refused; want 10 and 50", charged.Load(), refused.Load())
	}
	if s := status(t, c, "team-a"); len(s.Pending) != 10 {
		t.Errorf("%d pending charges, want 10", len(s.Pending))
	}
	if writes.Load() != 2 {
		t.Errorf("%d writes for 10 charges, want 2: the first, then the 59 that waited in one", writes.Load())
	}
}

// TestLedgerConflicts: another writer's update in between is re-read, and the charges
// re-decided against it; endless conflicts are an error, never an allow.
func TestLedgerConflicts(t *testing.T) {
	gr := schema.GroupResource{Group: "sar-bridge.io", Resource: "offloadtenants"}
	var conflicts atomic.Int64
	stealSlot := func(ctx context.Context, c client.Client) {
		// Another bridge takes the last slot first.
		var o v1alpha1.OffloadTenant
		if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &o); err != nil {
			t.Error(err)
			return
		}
		charge(&o, "", onePod("other-bridge"), time.Now())
		if err := c.Status().Update(ctx, &o); err != nil {
			t.Error(err)
		}
	}
	c := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		if conflicts.Add(1) == 1 {
			stealSlot(ctx, c)
			return apierrors.NewConflict(gr, "team-a", errors.New("the object has been modified"))
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("1")}, nil))
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant})
	var refusal *Refusal
	if err := l.Charge(context.Background(), onePod("mine")); !errors.As(err, &refusal) {
		t.Fatalf("after a conflict with a bridge that took the last slot: %v, want a refusal", err)
	}

	always := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
		return apierrors.NewConflict(gr, "team-a", errors.New("the object has been modified"))
	}}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("5")}, nil))
	err := NewLedger(always, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant}).Charge(context.Background(), onePod("x"))
	if err == nil || isRefusal(err) || !strings.Contains(err.Error(), `charging tenant "team-a"`) {
		t.Fatalf("endless conflicts: %v, want an error", err)
	}
}

func TestLedgerBounds(t *testing.T) {
	c := fakeClient(t, interceptor.Funcs{}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("100")}, nil))
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, MaxPending: 2})
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if err := l.Charge(ctx, onePod(name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Charge(ctx, onePod("c")); err == nil || isRefusal(err) || !strings.Contains(err.Error(), "holds 2 unconfirmed charges") {
		t.Fatalf("past MaxPending: %v, want an error", err)
	}
	// A tenant without an object: an error, never a charge-free allow.
	if err := l.Charge(ctx, Request{Tenant: "nobody", Namespace: "x", Name: "y"}); err == nil || !apierrors.IsNotFound(errors.Unwrap(err)) && !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing tenant: %v, want a not-found error", err)
	}
}

type fakePods map[string]*corev1.Pod

func (f fakePods) Pod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	return f[namespace+"/"+name], nil
}

// TestLedgerConfirmedPod: a stored pod the reconciler confirmed (labelled) is charged
// already, whatever front door decides it next.
func TestLedgerConfirmedPod(t *testing.T) {
	c := fakeClient(t, interceptor.Funcs{}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("1")}, nil))
	pods := fakePods{"team-a/a": {ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "a", UID: "uid-a", Labels: map[string]string{ChargedLabel: "team-a"}}}}
	l := NewLedger(c, pods, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant})
	req := onePod("a")
	req.Exists = true
	if err := l.Charge(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if s := status(t, c, "team-a"); len(s.Pending) != 0 || len(s.Used) != 0 {
		t.Errorf("status %+v: a confirmed pod was charged again", s)
	}
	// Another tenant's label, or another pod's uid, is no confirmation.
	req.UID = "uid-other"
	if err := l.Charge(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if s := status(t, c, "team-a"); len(s.Pending) != 1 {
		t.Errorf("status %+v, want the pod of another uid charged", s)
	}
}

// TestLedgerWriteMetrics: sar_bridge_ledger_writes_total{result="success"} counts the
// writes that landed and sar_bridge_ledger_batch_size the charges each carried: a batch
// whose charges were all refused, or all made before, writes nothing and counts nothing.
// sar_bridge_ledger_write_seconds times every round, one a batch, written or not.
func TestLedgerWriteMetrics(t *testing.T) {
	for _, tc := range []struct {
		name    string
		charges []Request // one after the other: each its own batch
		writes  int       // status writes that landed, and batches observed
		charged int       // charges they carried
		results string    // sar_bridge_ledger_charges_total
	}{
		{"one charge", []Request{onePod("a")}, 1, 1, "charged 1, already 0, refused 0"},
		{"the same pod again", []Request{onePod("a"), onePod("a")}, 1, 1, "charged 1, already 1, refused 0"},
		{"over the quota", []Request{onePod("a"), onePod("b"), onePod("c"), onePod("d")}, 2, 2, "charged 2, already 0, refused 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var writes atomic.Int64
			c := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				err := c.SubResource(sub).Update(ctx, obj, opts...)
				if err == nil {
					writes.Add(1)
				}
				return err
			}}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("2")}, nil))
			reg := prometheus.NewRegistry()
			l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: reg})
			for _, r := range tc.charges {
				_ = l.Charge(context.Background(), r)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var batches, rounds uint64
			var sum float64
			for _, f := range families {
				switch f.GetName() {
				case "sar_bridge_ledger_batch_size":
					batches, sum = f.GetMetric()[0].GetHistogram().GetSampleCount(), f.GetMetric()[0].GetHistogram().GetSampleSum()
				case "sar_bridge_ledger_write_seconds":
					rounds = f.GetMetric()[0].GetHistogram().GetSampleCount()
				}
			}
			got := fmt.Sprintf("%d writes landed, success %v, %d batches of %v charges, %d rounds timed",
				writes.Load(), testutil.ToFloat64(l.metrics.writes.WithLabelValues("success")), batches, sum, rounds)
			want := fmt.Sprintf("%d writes landed, success %d, %d batches of %d charges, %d rounds timed", tc.writes, tc.writes, tc.writes, tc.charged, len(tc.charges))
			if got != want {
				t.Errorf("%s, want %s", got, want)
			}
			if got := chargeResults(l); got != tc.results {
				t.Errorf("charges: %s, want %s", got, tc.results)
			}
		})
	}
}

func chargeResults(l *Ledger) string {
	return fmt.Sprintf("charged %v, already %v, refused %v", testutil.ToFloat64(l.metrics.charges.WithLabelValues("charged")),
		testutil.ToFloat64(l.metrics.charges.WithLabelValues("already")), testutil.ToFloat64(l.metrics.charges.WithLabelValues("refused")))
}

// TestLedgerChargeMetricsOnConflict: a batch re-decided after a conflict counts each of
// its charges once, by its final outcome.
func TestLedgerChargeMetricsOnConflict(t *testing.T) {
	gr := schema.GroupResource{Group: "sar-bridge.io", Resource: "offloadtenants"}
	gate := make(chan struct{})
	var updates atomic.Int64
	c := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		switch updates.Add(1) {
		case 1: // the first batch's write waits, so the next two charges make one batch
			<-gate
		case 2: // that batch's first write meets another writer
			return apierrors.NewConflict(gr, "team-a", errors.New("the object has been modified"))
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("5")}, nil))
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry()})
	var wg sync.WaitGroup
	charge := func(r Request) {
		defer wg.Done()
		if err := l.Charge(context.Background(), r); err != nil {
			t.Error(err)
		}
	}
	wg.Add(3)
	go charge(onePod("a"))
	waitFor(t, "the first write", func() bool { return updates.Load() == 1 })
	go charge(onePod("a"))
	go charge(onePod("b"))
	waitFor(t, "two charges queued", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.queues["team-a"]
		return q != nil && len(q.waiting) == 2
	})
	close(gate)
	wg.Wait()
	if got, want := chargeResults(l), "charged 2, already 1, refused 0"; got != want {
		t.Errorf("charges: %s, want %s (%d updates)", got, want, updates.Load())
	}
}

// slowPods is a ChargedPods whose first read waits for release and every other takes a
// moment; it records the most reads in flight at once.
type slowPods struct {
	release chan struct{}

	mu                    sync.Mutex
	calls, inFlight, most int
}

func (p *slowPods) Pod(_ context.Context, _, _ string) (*corev1.Pod, error) {
	p.mu.Lock()
	p.calls++
	first := p.calls == 1
	p.inFlight++
	p.most = max(p.most, p.inFlight)
	p.mu.Unlock()
	if first {
		<-p.release
	} else {
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	p.inFlight--
	p.mu.Unlock()
	return nil, nil
}

// TestLedgerReadsStoredPodsAtOnce: a batch of stored pods (the relay's burst) reads them
// at once, a bounded number at a time, rather than one round trip after another.
func TestLedgerReadsStoredPodsAtOnce(t *testing.T) {
	c := fakeClient(t, interceptor.Funcs{}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("100")}, nil))
	pods := &slowPods{release: make(chan struct{})}
	l := NewLedger(c, pods, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant})
	stored := func(i int) Request {
		r := onePod(fmt.Sprint(i))
		r.Exists = true
		return r
	}
	var wg sync.WaitGroup
	charge := func(i int) {
		defer wg.Done()
		if err := l.Charge(context.Background(), stored(i)); err != nil {
			t.Error(err)
		}
	}
	wg.Add(1)
	go charge(0)
	// The first batch (one pod) is reading; 30 more charges wait for the next batch.
	waitFor(t, "the first read", func() bool { pods.mu.Lock(); defer pods.mu.Unlock(); return pods.calls == 1 })
	for i := 1; i <= 30; i++ {
		wg.Add(1)
		go charge(i)
	}
	waitFor(t, "30 charges queued", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.queues["team-a"]
		return q != nil && len(q.waiting) == 30
	})
	close(pods.release)
	wg.Wait()
	if pods.most < 2 || pods.most > maxConcurrentPodReads {
		t.Errorf("at most %d reads at once, want several and no more than %d", pods.most, maxConcurrentPodReads)
	}
	if s := status(t, c, "team-a"); len(s.Pending) != 31 {
		t.Errorf("%d pending, want 31", len(s.Pending))
	}
}

// noPods is a view of the virtual nodes' pods where none runs: nothing to adopt.
type noPods struct{}

func (noPods) VirtualPods(context.Context) ([]*corev1.Pod, error) { return nil, nil }

func namespaceTenant(namespace string) string { return namespace }

// An OffloadTenant CRD older than the bridge prunes the pods an entry of status.pending
// groups: a write that lost charges is no allow.
func TestLedgerOldCRD(t *testing.T) {
	cases := []struct {
		name  string
		batch []string
		want  []string // each create's error, "" for charged
	}{
		{"one pod: an entry of its own, kept", []string{"a"}, []string{""}},
		{"a batch: grouped, pruned", []string{"a", "b"}, []string{
			`charging tenant "team-a": the API server kept 1 of the 2 pending charges written to tenant "team-a": its OffloadTenant CRD is older than this bridge (apply manifests/crds)`,
			`charging tenant "team-a": the API server kept 1 of the 2 pending charges written to tenant "team-a": its OffloadTenant CRD is older than this bridge (apply manifests/crds)`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if err := c.SubResource(sub).Update(ctx, obj, opts...); err != nil {
					return err
				}
				// What such an API server answers: each entry's first pod only (one
				// entry here: the batch is charged in one second).
				o := obj.(*v1alpha1.OffloadTenant)
				o.Status.Pending = o.Status.Pending[:min(1, len(o.Status.Pending))]
				return nil
			}}, tenant("team-a", corev1.ResourceList{"pods": resource.MustParse("10")}, nil))
			l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant})
			var batch []*waiter
			for _, name := range tc.batch {
				batch = append(batch, &waiter{req: onePod(name)})
			}
			results := l.write(context.Background(), "team-a", batch)
			for i, err := range results {
				got := ""
				if err != nil {
					got = err.Error()
				}
				if got != tc.want[i] {
					t.Errorf("create %s: %q, want %q", tc.batch[i], got, tc.want[i])
				}
			}
		})
	}
}
