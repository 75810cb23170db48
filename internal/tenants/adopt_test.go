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
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// fakeRunning is the live list of the virtual nodes' pods: fixed pods, or an error
// (the bridge's views not synced); lists counts the calls, and before, when set, runs
// at each call (a barrier between two ledgers).
type fakeRunning struct {
	pods   []*corev1.Pod
	err    error
	lists  atomic.Int64
	before func()
}

func (f *fakeRunning) VirtualPods(context.Context) ([]*corev1.Pod, error) {
	f.lists.Add(1)
	if f.before != nil {
		f.before()
	}
	out := make([]*corev1.Pod, len(f.pods))
	for i, p := range f.pods {
		out[i] = p.DeepCopy()
	}
	return out, f.err
}

// adoptTenant is team-a with hard.pods and generation 2, nothing counted yet.
func adoptTenant(hardPods string, pending ...v1alpha1.Charge) *v1alpha1.OffloadTenant {
	t := tenant("team-a", list("pods", hardPods), nil)
	t.Generation = 2
	t.Status.Pending = pending
	t.Status.PendingCount = int32(len(pending))
	return t
}

func adoptLedger(c client.Client, running RunningPods, reg prometheus.Registerer) *Ledger {
	return NewLedger(c, nil, LedgerOptions{Running: running, TenantOf: tenantOf, Registerer: reg, Now: func() time.Time { return testNow }})
}

func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	var refusal *Refusal
	if !errors.As(err, &refusal) || refusal.Message != want {
		t.Fatalf("charge: %v, want the refusal %q", err, want)
	}
}

func pendingNames(s v1alpha1.OffloadTenantStatus) string {
	var names []string
	for _, c := range s.Pending {
		names = append(names, c.Namespace+"/"+c.Name)
	}
	return strings.Join(names, " ")
}

// TestLedgerAdopts: the first charge of a spec generation counts the tenant's running
// pods on virtual nodes that no charge covers, as pending charges written with the
// charge itself, and records the count in status.adopted; a pod pending already (by
// UID or by name), marked charged (for any tenant), bound but not running, ended,
// unbound, or of another tenant counts nothing more.
func TestLedgerAdopts(t *testing.T) {
	byName := pendingCharge("team-a", "by-name", "1", time.Second)
	byName.UID = ""
	pods := []*corev1.Pod{
		runningPod("team-a", "old-1", "2"),
		runningPod("team-a-2", "old-2", "1"), // team-a's too (tenantOf)
		runningPod("team-a", "pending-uid", "4"),
		runningPod("team-a", "by-name", "4"),
		runningPod("team-a", "marked", "4", labelled("team-a", "cpu=4,pods=1")),
		runningPod("team-a", "marked-other", "4", labelled("team-b", "cpu=4,pods=1")),
		runningPod("team-a", "bound", "4", phase(corev1.PodPending)),
		runningPod("team-a", "done", "4", phase(corev1.PodSucceeded)),
		runningPod("team-a", "failed", "4", phase(corev1.PodFailed)),
		runningPod("team-b", "elsewhere", "4"),
	}
	unbound := runningPod("team-a", "unbound", "4")
	unbound.Spec.NodeName = ""
	pods = append(pods, unbound)

	uncovered := []*corev1.Pod{pods[0], pods[1], pods[6], pods[7], pods[8], pods[9], unbound}
	for _, tc := range []struct {
		name       string
		pods       []*corev1.Pod
		pending    []v1alpha1.Charge
		used       corev1.ResourceList // status.used before: what the pending charges and marked pods hold
		hard       string
		req        Request
		wantErr    string // a refusal's message; "" when charged
		wantUsed   []string
		wantNames  string // status.adopted.names
		wantPods   int32
		wantQueued string // status.pending's pods, in order
	}{{
		name: "uncharged running pods fill the quota", hard: "2", pods: uncovered,
		req:        onePod("third"),
		wantErr:    `tenant "team-a" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod holds 1)`,
		wantUsed:   []string{"pods", "2", "cpu", "3"},
		wantNames:  "team-a/old-1 team-a-2/old-2",
		wantPods:   2,
		wantQueued: "team-a/old-1 team-a-2/old-2",
	}, {
		name: "covered pods are not counted twice", hard: "10", pods: pods,
		pending:    []v1alpha1.Charge{pendingCharge("team-a", "pending-uid", "4", time.Second), byName},
		used:       list("pods", "4", "cpu", "13"), // the two pending and the two marked
		req:        onePod("fourth"),
		wantUsed:   []string{"pods", "7", "cpu", "17"},
		wantNames:  "team-a/old-1 team-a-2/old-2",
		wantPods:   2,
		wantQueued: "team-a/pending-uid team-a/by-name team-a/old-1 team-a-2/old-2 team-a/fourth",
	}, {
		name: "the pod charged is itself running uncovered: counted once", hard: "10", pods: pods,
		used:       list("pods", "2", "cpu", "8"), // the two marked
		req:        Request{Tenant: "team-a", UID: "uid-old-1", Namespace: "team-a", Name: "old-1", Node: "vk-1", Amounts: list("pods", "1", "cpu", "2")},
		wantUsed:   []string{"pods", "6", "cpu", "19"}, // old-1, old-2, pending-uid, by-name: all uncovered here
		wantNames:  "team-a/by-name team-a/old-1 team-a/pending-uid team-a-2/old-2",
		wantPods:   4,
		wantQueued: "team-a/by-name team-a/old-1 team-a/pending-uid team-a-2/old-2",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			o := adoptTenant(tc.hard, tc.pending...)
			o.Status.Used = tc.used
			c := fakeClient(t, interceptor.Funcs{}, o)
			running := &fakeRunning{pods: tc.pods}
			reg := prometheus.NewRegistry()
			l := adoptLedger(c, running, reg)
			err := l.Charge(context.Background(), tc.req)
			if tc.wantErr != "" {
				wantRefusal(t, err, tc.wantErr)
			} else if err != nil {
				t.Fatal(err)
			}
			s := status(t, c, "team-a")
			wantUsed(t, s, tc.wantUsed...)
			if got := pendingNames(s); got != tc.wantQueued || s.PendingCount != int32(len(s.Pending)) {
				t.Errorf("pending %q (count %d), want %q", got, s.PendingCount, tc.wantQueued)
			}
			a := s.Adopted
			if a == nil || a.Generation != 2 || a.Pods != tc.wantPods || strings.Join(a.Names, " ") != tc.wantNames || !a.Time.Time.Equal(testNow) {
				t.Fatalf("adopted %+v, want generation 2, %d pods %q at %v", a, tc.wantPods, tc.wantNames, testNow)
			}
			if got := testutil.ToFloat64(l.metrics.adopted); got != float64(tc.wantPods) {
				t.Errorf("adopted_total %v, want %d", got, tc.wantPods)
			}

			// Counted once a generation: the next charges list nothing and adopt nothing
			// more, even if more pods run now.
			before := s
			running.pods = append(running.pods, runningPod("team-a", "later", "1"))
			_ = l.Charge(context.Background(), onePod("again"))
			if running.lists.Load() != 1 {
				t.Errorf("%d lists, want 1: the generation was counted", running.lists.Load())
			}
			if s := status(t, c, "team-a"); !equality.Semantic.DeepEqual(s.Adopted, before.Adopted) {
				t.Errorf("adopted %+v after a second charge, want %+v", s.Adopted, before.Adopted)
			}

			// A new spec generation is counted again: only what is uncovered then.
			var cur v1alpha1.OffloadTenant
			if err := c.Get(context.Background(), client.ObjectKey{Name: "team-a"}, &cur); err != nil {
				t.Fatal(err)
			}
			cur.Generation = 3
			cur.Spec.Hard = list("pods", "100")
			if err := c.Update(context.Background(), &cur); err != nil {
				t.Fatal(err)
			}
			if err := l.Charge(context.Background(), onePod("after-spec")); err != nil {
				t.Fatal(err)
			}
			if a := status(t, c, "team-a").Adopted; a == nil || a.Generation != 3 || a.Pods != 1 || strings.Join(a.Names, " ") != "team-a/later" {
				t.Errorf("adopted after the spec changed: %+v, want generation 3 and team-a/later alone", a)
			}
		})
	}
}

// TestLedgerAdoptsOnceConcurrently: two bridges' first charges of a tenant at once,
// each with its own ledger, both listing before either writes: one write lands with
// the count, the other conflicts, re-reads, finds the generation counted and charges
// only. The running pods are counted once.
func TestLedgerAdoptsOnceConcurrently(t *testing.T) {
	c := fakeClient(t, interceptor.Funcs{}, adoptTenant("10"))
	var listed sync.WaitGroup
	listed.Add(2)
	barrier := func() { listed.Done(); listed.Wait() }
	pods := []*corev1.Pod{runningPod("team-a", "old-1", "1"), runningPod("team-a", "old-2", "1")}
	a, b := &fakeRunning{pods: pods, before: barrier}, &fakeRunning{pods: pods, before: barrier}
	la, lb := adoptLedger(c, a, nil), adoptLedger(c, b, nil)
	errs := make(chan error, 2)
	go func() { errs <- la.Charge(context.Background(), onePod("from-a")) }()
	go func() { errs <- lb.Charge(context.Background(), onePod("from-b")) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s := status(t, c, "team-a")
	wantUsed(t, s, "pods", "4")
	if s.Adopted == nil || s.Adopted.Pods != 2 || len(s.Pending) != 4 {
		t.Errorf("adopted %+v, pending %q: want the two running pods counted once, and both charges", s.Adopted, pendingNames(s))
	}
	if n := a.lists.Load() + b.lists.Load(); n != 2 {
		t.Errorf("%d lists, want 2: the loser of the conflict finds the count made", n)
	}
}

// TestLedgerAdoptFailsClosed: when the running pods cannot be listed (the bridge's
// views not synced, the API unreachable) or the ledger has no view of them, a first
// charge is an error that says why — no allow and no refusal — and nothing is written;
// it does not wait for anything either.
func TestLedgerAdoptFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running RunningPods
		want    string
	}{
		{"views not synced", &fakeRunning{err: errors.New("the bridge's view of the nodes has not synced yet: which nodes are virtual is unknown")},
			"the bridge's view of the nodes has not synced yet"},
		{"no view at all", nil, "this bridge has no view of the pods running on virtual nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var writes atomic.Int64
			c := fakeClient(t, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				writes.Add(1)
				return c.SubResource(sub).Update(ctx, obj, opts...)
			}}, adoptTenant("10"))
			l := adoptLedger(c, tc.running, nil)
			if tc.running == nil {
				l.opts.Running = nil // the interface holds no typed nil
			}
			start := time.Now()
			err := l.Charge(context.Background(), onePod("a"))
			if err == nil || isRefusal(err) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), `counting the pods of tenant "team-a" already running on virtual nodes`) {
				t.Fatalf("charge: %v, want an error naming %q", err, tc.want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the charge failed after %v: it must not wait", took)
			}
			if s := status(t, c, "team-a"); writes.Load() != 0 || s.Adopted != nil || len(s.Pending) != 0 {
				t.Errorf("%d writes, status %+v: want nothing written", writes.Load(), s)
			}
		})
	}
}

// TestLedgerAdoptsWithSlices: with quota slices on, the write that grants a bridge its
// first slice counts the running pods no charge covers, as an exact charge does, and
// the slice comes out of what is left after them.
func TestLedgerAdoptsWithSlices(t *testing.T) {
	c := fakeClient(t, interceptor.Funcs{}, adoptTenant("1000"))
	running := &fakeRunning{pods: []*corev1.Pod{runningPod("team-a", "old-1", "2"), runningPod("team-a-2", "old-2", "1")}}
	l := NewLedger(c, nil, LedgerOptions{Running: running, TenantOf: tenantOf, Registerer: prometheus.NewRegistry(),
		Now: time.Now, Slices: SliceOptions{Holder: "bridge-a"}})
	if err := l.Charge(context.Background(), onePod("first")); err != nil {
		t.Fatal(err)
	}
	s := status(t, c, "team-a")
	if a := s.Adopted; a == nil || a.Generation != 2 || a.Pods != 2 || strings.Join(a.Names, " ") != "team-a/old-1 team-a-2/old-2" {
		t.Fatalf("adopted %+v, want generation 2 and the two running pods", a)
	}
	if len(s.Slices) != 1 || s.Slices[0].Holder != "bridge-a" {
		t.Fatalf("slices %+v, want one held by bridge-a", s.Slices)
	}
	// used + pending + slices within hard, the adopted pods among what is used.
	used, slice := s.Used[ResourcePods], s.Slices[0].Amounts[ResourcePods]
	total := used.DeepCopy()
	total.Add(slice)
	if used.Value() < 2 || total.Value() > 1000 {
		t.Errorf("used %s and a slice of %s pods: want the 2 adopted used, and at most 1000 in all", used.String(), slice.String())
	}
	if running.lists.Load() != 1 {
		t.Errorf("%d lists of the running pods, want 1", running.lists.Load())
	}
}

// TestLedgerObserveAdopts: a tenant seen with a quota whose spec was not counted yet is
// counted at once, with no create waiting (with slices and without); a tenant without a
// quota, one already counted, and a ledger that cannot write list nothing.
func TestLedgerObserveAdopts(t *testing.T) {
	pods := []*corev1.Pod{runningPod("team-a", "old-1", "1"), runningPod("team-a", "old-2", "1")}
	for _, slices := range []bool{false, true} {
		t.Run(fmt.Sprintf("slices=%v", slices), func(t *testing.T) {
			c := fakeClient(t, interceptor.Funcs{}, adoptTenant("10"))
			running := &fakeRunning{pods: pods}
			opts := LedgerOptions{Running: running, TenantOf: tenantOf, Now: func() time.Time { return testNow }}
			if slices {
				opts.Slices = SliceOptions{Holder: "replica-0"}
			}
			l := NewLedger(c, nil, opts)
			var seen v1alpha1.OffloadTenant
			if err := c.Get(context.Background(), client.ObjectKey{Name: "team-a"}, &seen); err != nil {
				t.Fatal(err)
			}
			l.Observe(&seen)
			deadline := time.Now().Add(5 * time.Second)
			var s v1alpha1.OffloadTenantStatus
			for s = status(t, c, "team-a"); s.Adopted == nil && time.Now().Before(deadline); s = status(t, c, "team-a") {
				time.Sleep(10 * time.Millisecond)
			}
			if a := s.Adopted; a == nil || a.Generation != 2 || a.Pods != 2 {
				t.Fatalf("adopted %+v, want generation 2 and 2 pods", a)
			}
			wantUsed(t, s, "pods", "2", "cpu", "2")
			if got := pendingNames(s); got != "team-a/old-1 team-a/old-2" || len(s.Slices) != 0 {
				t.Errorf("pending %q, slices %v; want the two running pods and no slice", got, s.Slices)
			}
			// Counted: seeing it again lists nothing. (A new object: the ledger keeps
			// what it is shown, as an informer's objects are never changed.)
			var again v1alpha1.OffloadTenant
			if err := c.Get(context.Background(), client.ObjectKey{Name: "team-a"}, &again); err != nil {
				t.Fatal(err)
			}
			l.Observe(&again)
			time.Sleep(50 * time.Millisecond)
			if n := running.lists.Load(); n != 1 {
				t.Errorf("%d lists, want 1", n)
			}
		})
	}
	t.Run("nothing to count", func(t *testing.T) {
		running := &fakeRunning{pods: pods}
		noQuota := tenant("team-a", nil, nil)
		noQuota.Generation = 2
		l := NewLedger(fakeClient(t, interceptor.Funcs{}, noQuota), nil, LedgerOptions{Running: running, TenantOf: tenantOf})
		l.Observe(noQuota)
		NewLedger(nil, nil, LedgerOptions{Running: running, TenantOf: tenantOf}).Observe(adoptTenant("10"))
		time.Sleep(50 * time.Millisecond)
		if n := running.lists.Load(); n != 0 {
			t.Errorf("%d lists, want none", n)
		}
	})
}
