package tenants

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
	"github.com/sar-bridge/sar-bridge/internal/virtualpods"
)

// The clock of the round tests.
var testNow = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

var tenantGR = schema.GroupResource{Group: "sar-bridge.io", Resource: "offloadtenants"}

// tenantOf maps team-a and team-a-2 to team-a, and any other namespace to itself.
func tenantOf(ns string) string {
	if ns == "team-a-2" {
		return "team-a"
	}
	return ns
}

// fakeDir is a TenantSource of fixed tenants, all with a quota.
type fakeDir map[string]*v1alpha1.OffloadTenant

func (d fakeDir) WithQuota() []string {
	var out []string
	for name := range d {
		out = append(out, name)
	}
	return out
}

func (d fakeDir) Quota(name string) (*v1alpha1.OffloadTenant, bool) { t, ok := d[name]; return t, ok }
func (d fakeDir) HasSynced() bool                                   { return true }

func list(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

// quotaTenant is a tenant with a quota, a generation and the given pending charges.
func quotaTenant(name string, pending ...v1alpha1.Charge) *v1alpha1.OffloadTenant {
	t := tenant(name, list("pods", "10", "cpu", "20"), map[string]corev1.ResourceList{"vk-1": list("cpu", "8")})
	t.Generation = 3
	t.Status.Pending = pending
	t.Status.PendingCount = int32(len(pending))
	return t
}

// pendingCharge is a charge of pod name (uid-<name>) in ns on vk-1, made age ago.
func pendingCharge(ns, name, cpu string, age time.Duration) v1alpha1.Charge {
	return v1alpha1.Charge{UID: types.UID("uid-" + name), Namespace: ns, Name: name, Node: "vk-1",
		Amounts: list("cpu", cpu, "pods", "1"), Time: metav1.NewTime(testNow.Add(-age))}
}

type podOpt func(*corev1.Pod)

func labelled(tenant, amounts string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{ChargedLabel: tenant}
		p.Annotations = map[string]string{ChargedAmountsAnnotation: amounts}
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deleting(p *corev1.Pod) { now := metav1.NewTime(testNow); p.DeletionTimestamp = &now }

// runningPod is pod name (uid-<name>) in ns on vk-1 with one container of cpu limits.
func runningPod(ns, name, cpu string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: "vk-1", Containers: []corev1.Container{{Name: "main",
			Resources: corev1.ResourceRequirements{Limits: list("cpu", cpu)}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func recScheme(t testing.TB) *fake.ClientBuilder {
	s := testScheme(t)
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1alpha1.OffloadTenant{})
}

// calls counts what a round asks of the API.
type calls struct{ podGets, patches, statusWrites atomic.Int64 }

// recClient is a fake API holding objs; podGetErr, when set, fails every GET of a pod.
func recClient(t testing.TB, n *calls, podGetErr error, objs ...client.Object) (client.Client, client.WithWatch) {
	inner := recScheme(t).WithObjects(objs...).Build()
	return interceptor.NewClient(inner, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				n.podGets.Add(1)
				if podGetErr != nil {
					return podGetErr
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			n.patches.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			n.statusWrites.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}), inner
}

// newTestTerm is a leadership term over c, without an election: its rounds are run
// by hand, and its view fed by hand.
func newTestTerm(t testing.TB, c client.Client, dir TenantSource) *term {
	t.Helper()
	r, err := NewReconciler(ReconcilerOptions{
		Client: c, Pods: func() (PodSource, error) { return newFakeSource(), nil }, Directory: dir, TenantOf: tenantOf,
		LeaseClient: kubefake.NewClientset(), LeaseNamespace: "sar-bridge",
		Now: func() time.Time { return testNow }, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	tm := r.newTerm()
	t.Cleanup(tm.queue.ShutDown)
	return tm
}

func reconcileOK(t *testing.T, tm *term, tenants ...string) {
	t.Helper()
	for _, name := range tenants {
		if err := tm.reconcile(context.Background(), name); err != nil {
			t.Fatalf("reconciling %s: %v", name, err)
		}
	}
}

func getPod(t *testing.T, c client.Client, ns, name string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// wantUsed checks status.used for the resources named (a missing one is 0).
func wantUsed(t *testing.T, s v1alpha1.OffloadTenantStatus, pairs ...string) {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		got := s.Used[corev1.ResourceName(pairs[i])]
		if want := resource.MustParse(pairs[i+1]); got.Cmp(want) != 0 {
			t.Errorf("used %s = %s, want %s (status %+v)", pairs[i], got.String(), want.String(), s)
		}
	}
}

// TestReconcileConfirms: a pending charge whose pod runs is confirmed on the pod (label
// and amounts, one patch) and leaves pending, in one status write; usage still holds
// it while the informer has not delivered the patch, and nothing is written again.
func TestReconcileConfirms(t *testing.T) {
	var n calls
	a := runningPod("team-a", "a", "2")
	c, api := recClient(t, &n, nil, a.DeepCopy(),
		quotaTenant("team-a", pendingCharge("team-a", "a", "2", 10*time.Second), pendingCharge("team-a", "b", "1", 10*time.Second)))
	tm := newTestTerm(t, c, fakeDir{"team-a": nil})
	tm.view.OnAdd("vk-1", a)
	reconcileOK(t, tm, "team-a")

	p := getPod(t, api, "team-a", "a")
	if p.Labels[ChargedLabel] != "team-a" || p.Annotations[ChargedAmountsAnnotation] != "cpu=2,pods=1" {
		t.Errorf("pod a: labels %v annotations %v, want the charge marked", p.Labels, p.Annotations)
	}
	s := status(t, c, "team-a")
	if len(s.Pending) != 1 || s.Pending[0].Name != "b" || s.PendingCount != 1 {
		t.Errorf("pending %+v, want b alone (its pod is young and unseen)", s.Pending)
	}
	wantUsed(t, s, "pods", "2", "cpu", "3")
	if got := s.NodesUsed["vk-1"][corev1.ResourceCPU]; got.String() != "3" {
		t.Errorf("nodesUsed %v, want 3 cpu on vk-1", s.NodesUsed)
	}
	ready := meta.FindStatusCondition(s.Conditions, ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || s.ObservedGeneration != 3 {
		t.Errorf("conditions %+v observedGeneration %d, want Ready and 3", s.Conditions, s.ObservedGeneration)
	}
	if n.patches.Load() != 1 || n.statusWrites.Load() != 1 || n.podGets.Load() != 0 {
		t.Errorf("%d patches, %d status writes, %d pod GETs; want 1, 1, 0", n.patches.Load(), n.statusWrites.Load(), n.podGets.Load())
	}

	// The informer has not shown the label yet: the pod still counts, nothing changes.
	reconcileOK(t, tm, "team-a")
	wantUsed(t, status(t, c, "team-a"), "pods", "2", "cpu", "3")
	// Then it does.
	tm.view.OnUpdate("vk-1", a, p)
	reconcileOK(t, tm, "team-a")
	wantUsed(t, status(t, c, "team-a"), "pods", "2", "cpu", "3")
	if n.patches.Load() != 1 || n.statusWrites.Load() != 1 {
		t.Errorf("%d patches, %d status writes after quiet rounds; want 1 and 1", n.patches.Load(), n.statusWrites.Load())
	}
	if got := testutil.ToFloat64(tm.r.metrics.confirmed); got != 1 {
		t.Errorf("confirmed_total %v, want 1", got)
	}
}

// TestReconcileReleasesEndedPods: a confirmed pod counts until it is deleted or ends;
// one that leaves the informer unseen deleted (its virtual node went away) counts
// until the API says it is gone.
func TestReconcileReleasesEndedPods(t *testing.T) {
	getErr := apierrors.NewServiceUnavailable("etcd is down")
	for _, tc := range []struct {
		name        string
		event       func(v *podView, p *corev1.Pod)
		inAPI       bool  // the pod is still stored
		getErr      error // GETs of pods fail
		wantPods    string
		wantRelease string // the reason counted, if released
	}{
		{name: "deleted", event: func(v *podView, p *corev1.Pod) { deleting(p); v.OnDelete("vk-1", p) }, wantPods: "0", wantRelease: releaseDeleted},
		{name: "succeeded", event: func(v *podView, p *corev1.Pod) {
			v.OnUpdate("vk-1", p, runningPod("team-a", "a", "2", labelled("team-a", "cpu=2,pods=1"), phase(corev1.PodSucceeded)))
		}, inAPI: true, wantPods: "0", wantRelease: releaseEnded},
		{name: "failed", event: func(v *podView, p *corev1.Pod) {
			v.OnUpdate("vk-1", p, runningPod("team-a", "a", "2", labelled("team-a", "cpu=2,pods=1"), phase(corev1.PodFailed)))
		}, inAPI: true, wantPods: "0", wantRelease: releaseEnded},
		{name: "node gone, pod stored", event: func(v *podView, p *corev1.Pod) { v.OnDelete("vk-1", p) }, inAPI: true, wantPods: "1"},
		{name: "node gone, pod gone", event: func(v *podView, p *corev1.Pod) { v.OnDelete("vk-1", p) }, wantPods: "0", wantRelease: releaseDeleted},
		{name: "node gone, API down", event: func(v *podView, p *corev1.Pod) { v.OnDelete("vk-1", p) }, getErr: getErr, wantPods: "1"},
		{name: "still running", event: func(*podView, *corev1.Pod) {}, inAPI: true, wantPods: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n calls
			a := runningPod("team-a", "a", "2", labelled("team-a", "cpu=2,pods=1"))
			objs := []client.Object{quotaTenant("team-a")}
			if tc.inAPI {
				objs = append(objs, a.DeepCopy())
			}
			c, _ := recClient(t, &n, tc.getErr, objs...)
			tm := newTestTerm(t, c, fakeDir{"team-a": nil})
			tm.view.OnAdd("vk-1", a)
			reconcileOK(t, tm, "team-a")
			wantUsed(t, status(t, c, "team-a"), "pods", "1", "cpu", "2")

			tc.event(tm.view, a.DeepCopy())
			reconcileOK(t, tm, "team-a")
			wantUsed(t, status(t, c, "team-a"), "pods", tc.wantPods)
			for _, reason := range []string{releaseEnded, releaseDeleted, releaseMissing} {
				want := 0.0
				if reason == tc.wantRelease {
					want = 1
				}
				if got := testutil.ToFloat64(tm.r.metrics.released.WithLabelValues(reason)); got != want {
					t.Errorf("released_total{reason=%q} = %v, want %v", reason, got, want)
				}
			}
		})
	}
}

// TestReconcilePendingNotSeen is the kubernetes#123434 case: a pending charge whose pod
// the informer has not seen is kept; it is released only once it is older than the
// pending timeout and a live GET says the pod does not exist (or is another pod, or
// has ended). A GET that fails keeps it.
func TestReconcilePendingNotSeen(t *testing.T) {
	for _, tc := range []struct {
		name        string
		age         time.Duration
		stored      *corev1.Pod
		getErr      error
		wantKept    bool
		wantGets    int64
		wantRelease string
	}{
		{name: "young, not stored yet", age: time.Minute, wantKept: true, wantGets: 0},
		{name: "young, stored unbound", age: 30 * time.Second, stored: unbound(runningPod("team-a", "x", "1")), wantKept: true, wantGets: 0},
		{name: "overdue, not found", age: 3 * time.Minute, wantKept: false, wantGets: 1, wantRelease: releaseMissing},
		{name: "overdue, GET fails", age: 3 * time.Minute, getErr: apierrors.NewTimeoutError("slow", 1), wantKept: true, wantGets: 1},
		{name: "overdue, exists unbound", age: 3 * time.Minute, stored: unbound(runningPod("team-a", "x", "1")), wantKept: true, wantGets: 1},
		{name: "overdue, the name is another pod's", age: 3 * time.Minute, stored: withUID(runningPod("team-a", "x", "1"), "uid-new"), wantKept: false, wantGets: 1, wantRelease: releaseMissing},
		{name: "overdue, ended", age: 3 * time.Minute, stored: runningPod("team-a", "x", "1", phase(corev1.PodFailed)), wantKept: false, wantGets: 1, wantRelease: releaseEnded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n calls
			objs := []client.Object{quotaTenant("team-a", pendingCharge("team-a", "x", "1", tc.age))}
			if tc.stored != nil {
				objs = append(objs, tc.stored)
			}
			c, _ := recClient(t, &n, tc.getErr, objs...)
			tm := newTestTerm(t, c, fakeDir{"team-a": nil})
			tm.view.OnAdd("vk-1", runningPod("team-a", "other", "4")) // an unconfirmed pod: counts nothing
			reconcileOK(t, tm, "team-a")

			s := status(t, c, "team-a")
			if kept := len(s.Pending) == 1; kept != tc.wantKept {
				t.Errorf("pending %+v, want kept=%v", s.Pending, tc.wantKept)
			}
			wantPods := "0"
			if tc.wantKept {
				wantPods = "1"
			}
			wantUsed(t, s, "pods", wantPods)
			if n.podGets.Load() != tc.wantGets {
				t.Errorf("%d GETs of pods, want %d", n.podGets.Load(), tc.wantGets)
			}
			if tc.wantRelease != "" {
				if got := testutil.ToFloat64(tm.r.metrics.released.WithLabelValues(tc.wantRelease)); got != 1 {
					t.Errorf("released_total{reason=%q} = %v, want 1", tc.wantRelease, got)
				}
			}
		})
	}
}

func unbound(p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeName = ""
	p.Status.Phase = corev1.PodPending
	return p
}

func withUID(p *corev1.Pod, uid types.UID) *corev1.Pod { p.UID = uid; return p }

// TestReconcilePendingSeen: a pending charge whose pod the informer shows ended is
// released without asking the API; one whose pod was seen with another UID is not
// that pod's; one that names no UID is not released for an ended pod of its name (the
// charge may be for a new pod of that name), but is confirmed on a running one.
func TestReconcilePendingSeen(t *testing.T) {
	var n calls
	nameOnly := func(name string) v1alpha1.Charge {
		c := pendingCharge("team-a", name, "1", time.Second)
		c.UID = ""
		return c
	}
	c, _ := recClient(t, &n, nil, runningPod("team-a", "named", "1"), quotaTenant("team-a",
		pendingCharge("team-a", "done", "1", time.Second), pendingCharge("team-a", "renamed", "1", time.Second),
		nameOnly("reused"), nameOnly("named")))
	tm := newTestTerm(t, c, fakeDir{"team-a": nil})
	tm.view.OnAdd("vk-1", runningPod("team-a", "done", "1", phase(corev1.PodSucceeded)))
	tm.view.OnAdd("vk-1", withUID(runningPod("team-a", "renamed", "1"), "uid-someone-else"))
	tm.view.OnAdd("vk-1", runningPod("team-a", "reused", "1", phase(corev1.PodFailed)))
	tm.view.OnAdd("vk-1", runningPod("team-a", "named", "1"))
	reconcileOK(t, tm, "team-a")
	s := status(t, c, "team-a")
	if len(s.Pending) != 2 || s.Pending[0].Name != "renamed" || s.Pending[1].Name != "reused" {
		t.Errorf("pending %+v, want renamed and reused", s.Pending)
	}
	wantUsed(t, s, "pods", "3")
	if n.podGets.Load() != 0 || n.patches.Load() != 1 {
		t.Errorf("%d GETs, %d patches; want none and one (named's confirmation)", n.podGets.Load(), n.patches.Load())
	}
}

// memoryOnly makes the pod's container set a memory limit and no CPU limit, with the
// flags annotation flags: the SLURM plugin then asks for the flags' --cpus-per-task.
func memoryOnly(flags string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: list("memory", "1Gi")}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[slurmjob.FlagsAnnotation] = flags
	}
}

// TestReconcileResize: what a pod holds is fixed when it is confirmed: a resize (or a
// flags annotation changed) that shrinks it frees nothing, and hand-written amounts
// never count less than the pod asks (PodAmounts of the pod the informer shows, slimmed
// by PodTransform).
func TestReconcileResize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		later   *corev1.Pod // what the informer shows after the confirmation
		wantCPU string
	}{
		{name: "unchanged", later: runningPod("team-a", "a", "4", labelled("team-a", "cpu=4,pods=1")), wantCPU: "4"},
		{name: "shrunk by pods/resize", later: runningPod("team-a", "a", "1", labelled("team-a", "cpu=4,pods=1")), wantCPU: "4"},
		{name: "grown", later: runningPod("team-a", "a", "6", labelled("team-a", "cpu=4,pods=1")), wantCPU: "6"},
		{name: "annotation lowered by hand", later: runningPod("team-a", "a", "4", labelled("team-a", "cpu=0,pods=1")), wantCPU: "4"},
		{name: "annotation unreadable", later: runningPod("team-a", "a", "4", labelled("team-a", "cpu=lots")), wantCPU: "4"},
		{name: "charged before whole cores (cpu=1m)", later: runningPod("team-a", "a", "1m", labelled("team-a", "cpu=1m,pods=1")), wantCPU: "1"},
		{name: "grown by the flags' --cpus-per-task", later: runningPod("team-a", "a", "4", labelled("team-a", "cpu=4,pods=1"), memoryOnly("-c 8")), wantCPU: "8"},
		{name: "shrunk by the flags' --cpus-per-task", later: runningPod("team-a", "a", "4", labelled("team-a", "cpu=4,pods=1"), memoryOnly("--cpus-per-task=2")), wantCPU: "4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n calls
			a := runningPod("team-a", "a", "4")
			c, api := recClient(t, &n, nil, a.DeepCopy(), quotaTenant("team-a", pendingCharge("team-a", "a", "4", time.Second)))
			tm := newTestTerm(t, c, fakeDir{"team-a": nil})
			tm.view.OnAdd("vk-1", a)
			reconcileOK(t, tm, "team-a")
			if got := getPod(t, api, "team-a", "a").Annotations[ChargedAmountsAnnotation]; got != "cpu=4,pods=1" {
				t.Fatalf("charged amounts %q", got)
			}
			slim, err := PodTransform(tc.later)
			if err != nil {
				t.Fatal(err)
			}
			tm.view.OnUpdate("vk-1", a, slim.(*corev1.Pod))
			reconcileOK(t, tm, "team-a")
			wantUsed(t, status(t, c, "team-a"), "cpu", tc.wantCPU, "pods", "1")
		})
	}
}

// TestReconcileConflict: decisions charge the tenant while the reconciler writes; the
// conflict re-reads the tenant, and the new charges are neither lost nor double counted
// (one is a second charge of a pod already confirmed). Endless conflicts are an error
// and change nothing.
func TestReconcileConflict(t *testing.T) {
	var n calls
	a := runningPod("team-a", "a", "2")
	b := runningPod("team-a", "b", "1", labelled("team-a", "cpu=1,pods=1"))
	inner := recScheme(t).WithObjects(a.DeepCopy(), b.DeepCopy(), quotaTenant("team-a", pendingCharge("team-a", "a", "2", time.Second))).Build()
	ledger := NewLedger(inner, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Now: func() time.Time { return testNow }})
	var intercepted atomic.Int64
	c := interceptor.NewClient(inner, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		n.statusWrites.Add(1)
		if intercepted.Add(1) == 1 {
			// Bridges' decisions land first.
			for _, req := range []Request{
				{Tenant: "team-a", UID: "uid-new", Namespace: "team-a", Name: "new", Node: "vk-1", Amounts: list("cpu", "3", "pods", "1")},
				{Tenant: "team-a", UID: "uid-b", Namespace: "team-a", Name: "b", Node: "vk-1", Amounts: list("cpu", "1", "pods", "1")},
			} {
				if err := ledger.Charge(ctx, req); err != nil {
					t.Error(err)
				}
			}
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}})
	tm := newTestTerm(t, c, fakeDir{"team-a": nil})
	tm.view.OnAdd("vk-1", a)
	tm.view.OnAdd("vk-1", b)
	reconcileOK(t, tm, "team-a")
	s := status(t, c, "team-a")
	if len(s.Pending) != 2 || s.Pending[0].Name != "new" || s.Pending[1].Name != "b" {
		t.Errorf("pending %+v, want the new charges", s.Pending)
	}
	wantUsed(t, s, "pods", "3", "cpu", "6")
	if n.statusWrites.Load() != 2 {
		t.Errorf("%d status writes, want 2 (a conflict, then the write)", n.statusWrites.Load())
	}
	if got := testutil.ToFloat64(tm.r.metrics.conflicts); got != 1 {
		t.Errorf("conflicts_total %v, want 1", got)
	}

	// Endless conflicts.
	always := interceptor.NewClient(inner, interceptor.Funcs{SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
		return apierrors.NewConflict(tenantGR, "team-a", errors.New("the object has been modified"))
	}})
	tm2 := newTestTerm(t, always, fakeDir{"team-a": nil})
	tm2.r.opts.Retry.Duration = time.Millisecond
	err := tm2.reconcile(context.Background(), "team-a")
	if !apierrors.IsConflict(errors.Unwrap(err)) || !strings.Contains(err.Error(), "writing the ledger of tenant team-a") {
		t.Fatalf("endless conflicts: %v, want a wrapped conflict", err)
	}
	if after := status(t, c, "team-a"); len(after.Pending) != 2 {
		t.Errorf("pending %+v changed without a write", after.Pending)
	}
}

// TestReconcileForgedLabel: the label counts against the tenant of the pod's namespace,
// never the tenant it names, and never for less than the pod's spec.
func TestReconcileForgedLabel(t *testing.T) {
	var n calls
	c, _ := recClient(t, &n, nil, quotaTenant("team-a"), quotaTenant("team-b"))
	tm := newTestTerm(t, c, fakeDir{"team-a": nil, "team-b": nil})
	tm.view.OnAdd("vk-1", runningPod("team-b", "sly", "3", labelled("team-a", "cpu=0,pods=1")))
	tm.view.OnAdd("vk-1", runningPod("team-a-2", "moved", "1", labelled("team-c", "cpu=1,pods=1")))
	reconcileOK(t, tm, "team-a", "team-b")
	wantUsed(t, status(t, c, "team-a"), "pods", "1", "cpu", "1")
	wantUsed(t, status(t, c, "team-b"), "pods", "1", "cpu", "3")
}

// TestReconcileConditions: Ready says whether the spec can be read; observedGeneration
// follows the spec.
func TestReconcileConditions(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       func(*v1alpha1.OffloadTenantSpec)
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{name: "valid", spec: func(*v1alpha1.OffloadTenantSpec) {}, wantStatus: metav1.ConditionTrue, wantReason: ReasonReconciled},
		{name: "negative hard", spec: func(s *v1alpha1.OffloadTenantSpec) { s.Hard["cpu"] = resource.MustParse("-1") },
			wantStatus: metav1.ConditionFalse, wantReason: ReasonInvalidSpec, wantMsg: "spec.hard.cpu is negative (-1): no pod could ever fit"},
		{name: "negative on a node", spec: func(s *v1alpha1.OffloadTenantSpec) { s.Nodes["vk-1"]["cpu"] = resource.MustParse("-500m") },
			wantStatus: metav1.ConditionFalse, wantReason: ReasonInvalidSpec, wantMsg: `spec.nodes["vk-1"].cpu is negative (-500m)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n calls
			tn := quotaTenant("team-a")
			tc.spec(&tn.Spec)
			c, _ := recClient(t, &n, nil, tn)
			tm := newTestTerm(t, c, fakeDir{"team-a": nil})
			reconcileOK(t, tm, "team-a")
			s := status(t, c, "team-a")
			ready := meta.FindStatusCondition(s.Conditions, ConditionReady)
			if ready == nil || ready.Status != tc.wantStatus || ready.Reason != tc.wantReason || !strings.Contains(ready.Message, tc.wantMsg) || ready.ObservedGeneration != 3 {
				t.Errorf("Ready %+v, want %s %s %q", ready, tc.wantStatus, tc.wantReason, tc.wantMsg)
			}
			if s.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d, want 3", s.ObservedGeneration)
			}
			wantUsed(t, s, "pods", "0", "cpu", "0")
		})
	}
}

func TestAmountsEncoding(t *testing.T) {
	for _, tc := range []struct {
		in      corev1.ResourceList
		want    string
		wantErr string // decoding want's text
	}{
		{in: list("pods", "1", "memory", "4Gi", "cpu", "2000m"), want: "cpu=2,memory=4Gi,pods=1"},
		{in: list("nvidia.com/gpu", "2", "cpu", "500m"), want: "cpu=500m,nvidia.com/gpu=2"},
		{in: corev1.ResourceList{}, want: ""},
	} {
		got := EncodeAmounts(tc.in)
		if got != tc.want {
			t.Errorf("EncodeAmounts(%v) = %q, want %q", tc.in, got, tc.want)
		}
		back, err := DecodeAmounts(got)
		if err != nil || !sameAmounts(back, tc.in) {
			t.Errorf("DecodeAmounts(%q) = %v, %v; want %v", got, back, err, tc.in)
		}
	}
	for _, bad := range []string{"cpu", "=1", "cpu=lots", "cpu=1,,pods=1"} {
		if _, err := DecodeAmounts(bad); err == nil {
			t.Errorf("DecodeAmounts(%q): no error", bad)
		}
	}
}

// fakeSource is a PodSource fed by hand.
type fakeSource struct {
	mu       sync.Mutex
	handlers []virtualpods.Handler
	started  bool
	stopped  bool
	listing  bool // the first lists are not in yet
}

func newFakeSource() *fakeSource { return &fakeSource{} }

// listed ends the first lists.
func (f *fakeSource) listed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listing = false
}

func (f *fakeSource) AddEventHandler(h virtualpods.Handler) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = append(f.handlers, h)
	return nil
}

func (f *fakeSource) Start(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = true
	return nil
}

func (f *fakeSource) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started && !f.stopped && !f.listing
}

func (f *fakeSource) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
}

func (f *fakeSource) add(node string, p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.handlers {
		h.OnAdd(node, p)
	}
}

func (f *fakeSource) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started && !f.stopped
}

// sources hands out fake sources, one a term, and remembers them.
type sources struct {
	mu      sync.Mutex
	all     []*fakeSource
	listing bool // each source starts with its first lists not in
}

func (s *sources) next() (PodSource, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &fakeSource{listing: s.listing}
	s.all = append(s.all, f)
	return f, nil
}

func (s *sources) last() *fakeSource {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.all) == 0 {
		return nil
	}
	return s.all[len(s.all)-1]
}

// TestReconcilerLeaderElection: two reconcilers, one lease: one leads (and follows
// pods), the other waits; when the leader stops it hands the lease over at once, and
// the other takes over. Rounds then follow pod events.
func TestReconcilerLeaderElection(t *testing.T) {
	leases := kubefake.NewClientset()
	a := runningPod("team-a", "a", "2")
	c := recScheme(t).WithObjects(a.DeepCopy(), quotaTenant("team-a", pendingCharge("team-a", "a", "2", time.Second))).Build()
	type replica struct {
		r       *Reconciler
		pods    *sources
		cancel  context.CancelFunc
		stopped chan struct{}
	}
	start := func(name string) *replica {
		rep := &replica{pods: &sources{}, stopped: make(chan struct{})}
		r, err := NewReconciler(ReconcilerOptions{
			Client: c, Pods: rep.pods.next, Directory: fakeDir{"team-a": nil}, TenantOf: tenantOf,
			LeaseClient: leases, LeaseNamespace: "sar-bridge", Identity: name,
			LeaseDuration: 10 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 100 * time.Millisecond,
			Interval: time.Hour, Debounce: 10 * time.Millisecond, Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			t.Fatal(err)
		}
		rep.r = r
		ctx, cancel := context.WithCancel(context.Background())
		rep.cancel = cancel
		go func() {
			defer close(rep.stopped)
			if err := r.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
		t.Cleanup(func() { cancel(); <-rep.stopped })
		return rep
	}
	one, two := start("one"), start("two")
	leader := func() *replica {
		switch {
		case one.r.Leading() && two.r.Leading():
			t.Fatal("two reconcilers lead at once")
		case one.r.Leading():
			return one
		case two.r.Leading():
			return two
		}
		return nil
	}
	waitFor(t, "a reconciler to lead", func() bool { return leader() != nil })
	first := leader()
	other := map[*replica]*replica{one: two, two: one}[first]
	for range 20 { // the other stays a follower, following no pods
		if leader() != first || other.pods.last() != nil {
			t.Fatal("leadership moved, or the follower follows pods")
		}
		time.Sleep(50 * time.Millisecond)
	}
	lease, err := leases.CoordinationV1().Leases("sar-bridge").Get(context.Background(), DefaultLeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != first.r.Identity() {
		t.Fatalf("lease %+v, %v: want held by %s", lease, err, first.r.Identity())
	}

	// The leader's rounds follow pod events: the pending charge is confirmed.
	waitFor(t, "the leader's pod source to start", func() bool { return first.pods.last() != nil && first.pods.last().running() })
	first.pods.last().add("vk-1", a)
	waitFor(t, "the pending charge to be confirmed", func() bool {
		return len(status(t, c, "team-a").Pending) == 0
	})

	// The leader stops: the other takes over well before the lease would expire.
	began := time.Now()
	first.cancel()
	<-first.stopped
	if first.pods.last().running() {
		t.Error("the old leader's pod source still runs")
	}
	waitFor(t, "the other reconciler to take over", other.r.Leading)
	if took := time.Since(began); took >= 5*time.Second { // expiry: 10s
		t.Errorf("took over in %v: the lease was not released, it expired", took)
	} else {
		t.Logf("took over in %v", took)
	}
	if first.r.Leading() {
		t.Error("the stopped reconciler says it leads")
	}
}

// TestReconcilerLeadsAgainAfterLosingTheLease: a leader whose lease cannot be renewed
// (the API server down, or refusing it while its RBAC syncs after a restart) ends its
// term — it stops following pods and says it no longer leads — and once the API server
// answers again it campaigns, leads and reconciles in a new term, with new pod sources.
func TestReconcilerLeadsAgainAfterLosingTheLease(t *testing.T) {
	leases := kubefake.NewClientset()
	var down atomic.Bool
	leases.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("dial tcp: connect: connection refused")
		}
		return false, nil, nil
	})
	a, b := runningPod("team-a", "a", "2"), runningPod("team-a", "b", "2")
	c := recScheme(t).WithObjects(a.DeepCopy(), b.DeepCopy(), quotaTenant("team-a", pendingCharge("team-a", "a", "2", time.Second), pendingCharge("team-a", "b", "2", time.Second))).Build()
	pods := &sources{}
	reg := prometheus.NewRegistry()
	r, err := NewReconciler(ReconcilerOptions{
		Client: c, Pods: pods.next, Directory: fakeDir{"team-a": nil}, TenantOf: tenantOf,
		LeaseClient: leases, LeaseNamespace: "sar-bridge", Identity: "one",
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		Interval: time.Hour, Debounce: 10 * time.Millisecond, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	pending := func() int { return len(status(t, c, "team-a").Pending) }

	waitFor(t, "the first term", func() bool { return r.Leading() && pods.last() != nil && pods.last().running() })
	first := pods.last()
	first.add("vk-1", a)
	waitFor(t, "a's charge confirmed in the first term", func() bool { return pending() == 1 })

	down.Store(true)
	waitFor(t, "the lease lost", func() bool { return !r.Leading() })
	if first.running() {
		t.Error("the lost term's pod source still runs")
	}
	if got := testutil.ToFloat64(r.metrics.leader); got != 0 {
		t.Errorf("sar_bridge_ledger_leader %v after the lease was lost, want 0", got)
	}
	time.Sleep(500 * time.Millisecond) // campaigning against an API server that refuses
	if r.Leading() {
		t.Fatal("leads while the lease cannot be read")
	}

	down.Store(false)
	waitFor(t, "a second term", func() bool { return r.Leading() && pods.last() != first && pods.last().running() })
	if got := testutil.ToFloat64(r.metrics.leader); got != 1 {
		t.Errorf("sar_bridge_ledger_leader %v in the second term, want 1", got)
	}
	pods.last().add("vk-1", b)
	waitFor(t, "b's charge confirmed in the second term", func() bool { return pending() == 0 })
}

// TestReconcilerWaitsForPods: a new leader reconciles nothing before its pods are
// listed: a round over an empty view would drop every confirmed pod from usage.
func TestReconcilerWaitsForPods(t *testing.T) {
	a := runningPod("team-a", "a", "2", labelled("team-a", "cpu=2,pods=1"))
	held := quotaTenant("team-a")
	held.Status.Used = list("pods", "1", "cpu", "2")
	c := recScheme(t).WithObjects(a.DeepCopy(), held).Build()
	pods := &sources{listing: true}
	r, err := NewReconciler(ReconcilerOptions{
		Client: c, Pods: pods.next, Directory: fakeDir{"team-a": nil}, TenantOf: tenantOf,
		LeaseClient: kubefake.NewClientset(), LeaseNamespace: "sar-bridge",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
		Interval: 20 * time.Millisecond, Debounce: 10 * time.Millisecond, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	waitFor(t, "the reconciler to lead and follow pods", func() bool { return r.Leading() && pods.last() != nil && pods.last().running() })
	time.Sleep(200 * time.Millisecond) // ten intervals
	if s := status(t, c, "team-a"); len(s.Conditions) != 0 {
		t.Fatalf("status %+v written before the pods were listed", s)
	}
	pods.last().add("vk-1", a)
	pods.last().listed()
	waitFor(t, "a round", func() bool { return len(status(t, c, "team-a").Conditions) > 0 })
	wantUsed(t, status(t, c, "team-a"), "pods", "1", "cpu", "2")
}

// switchDir is a TenantSource whose one tenant gains and loses its quota.
type switchDir struct{ quota atomic.Bool }

func (d *switchDir) WithQuota() []string {
	if d.quota.Load() {
		return []string{"team-a"}
	}
	return nil
}

func (d *switchDir) Quota(name string) (*v1alpha1.OffloadTenant, bool) {
	if name == "team-a" && d.quota.Load() {
		return quotaTenant("team-a"), true
	}
	return nil, false
}

func (d *switchDir) HasSynced() bool { return true }

// TestReconcilerFollowsPodsOnlyWithQuotas: the leader follows no pod while no tenant has
// a quota, starts with the first quota and stops with the last.
func TestReconcilerFollowsPodsOnlyWithQuotas(t *testing.T) {
	c := recScheme(t).WithObjects(quotaTenant("team-a")).Build()
	dir := &switchDir{}
	pods := &sources{}
	reg := prometheus.NewRegistry()
	r, err := NewReconciler(ReconcilerOptions{
		Client: c, Pods: pods.next, Directory: dir, TenantOf: tenantOf,
		LeaseClient: kubefake.NewClientset(), LeaseNamespace: "sar-bridge",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
		Interval: time.Hour, Debounce: 10 * time.Millisecond, QuotaPoll: 10 * time.Millisecond, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	following := func() float64 { return testutil.ToFloat64(r.metrics.following) }

	waitFor(t, "the reconciler to lead", r.Leading)
	time.Sleep(100 * time.Millisecond) // ten polls
	if pods.last() != nil || following() != 0 {
		t.Fatal("pods followed while no tenant has a quota")
	}
	dir.quota.Store(true)
	waitFor(t, "the pods to be followed", func() bool { return pods.last() != nil && pods.last().running() && following() == 1 })
	first := pods.last()
	dir.quota.Store(false)
	waitFor(t, "the pods to be no longer followed", func() bool { return !first.running() && following() == 0 })
	dir.quota.Store(true)
	waitFor(t, "the pods to be followed again", func() bool { return pods.last() != first && pods.last().running() })
}

// runUntilCleanup runs r until the test ends, and waits for it to stop.
func runUntilCleanup(t *testing.T, r *Reconciler) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-stopped })
}

// lateDir is a view of the OffloadTenants that shows some of them late, as an informer
// re-listing after the API server restarted does.
type lateDir struct {
	mu    sync.Mutex
	shown fakeDir
}

func (d *lateDir) show(name string) { d.mu.Lock(); d.shown[name] = nil; d.mu.Unlock() }
func (d *lateDir) WithQuota() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shown.WithQuota()
}
func (d *lateDir) Quota(name string) (*v1alpha1.OffloadTenant, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shown.Quota(name)
}
func (d *lateDir) HasSynced() bool { return true }

// TestReconcilerTenantChanged: a tenant the view shows late (its pod's events came
// while the view had no quota for it) is reconciled as soon as TenantChanged says so,
// not at the next Interval; a status write (same generation) schedules nothing, a new
// spec generation schedules a round.
func TestReconcilerTenantChanged(t *testing.T) {
	a := runningPod("team-a", "a", "2")
	teamA := quotaTenant("team-a", pendingCharge("team-a", "a", "2", time.Second))
	c := recScheme(t).WithObjects(a.DeepCopy(), teamA.DeepCopy(), quotaTenant("team-b")).Build()
	dir := &lateDir{shown: fakeDir{"team-b": nil}}
	pods := &sources{}
	r, err := NewReconciler(ReconcilerOptions{
		Client: c, Pods: pods.next, Directory: dir, TenantOf: tenantOf,
		LeaseClient: kubefake.NewClientset(), LeaseNamespace: "sar-bridge", Identity: "one",
		Interval: time.Hour, Debounce: 10 * time.Millisecond, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, r)
	rounds := func() float64 {
		var n float64
		for _, result := range []string{reconcileWritten, reconcileUnchanged} {
			n += testutil.ToFloat64(r.metrics.reconciles.WithLabelValues(result))
		}
		return n
	}
	pending := func() int { return len(status(t, c, "team-a").Pending) }

	waitFor(t, "the term to follow pods", func() bool { return r.Leading() && pods.last() != nil && pods.last().running() })
	waitFor(t, "team-b's first round", func() bool { return rounds() == 1 })
	pods.last().add("vk-1", a) // team-a's round finds no quota in the view: nothing
	time.Sleep(200 * time.Millisecond)
	if pending() != 1 || rounds() != 1 {
		t.Fatalf("%d pending, %v rounds before the view shows team-a; want 1 and 1", pending(), rounds())
	}

	dir.show("team-a")
	r.TenantChanged(teamA)
	waitFor(t, "a's charge confirmed after TenantChanged", func() bool { return pending() == 0 })
	// The round of the pod's event may run late on a loaded machine, after the view
	// shows team-a: whichever of the two confirmed, let the other end first.
	settled := rounds()
	for deadline := time.Now().Add(5 * time.Second); ; settled = rounds() {
		time.Sleep(200 * time.Millisecond)
		if rounds() == settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("team-a's rounds do not settle")
		}
	}

	r.TenantChanged(teamA) // a status write: the same generation
	time.Sleep(200 * time.Millisecond)
	if got := rounds(); got != settled {
		t.Errorf("%v rounds after a change of the same generation, want %v", got, settled)
	}
	respec := teamA.DeepCopy()
	respec.Generation++
	r.TenantChanged(respec)
	waitFor(t, "a round for the new generation", func() bool { return rounds() == settled+1 })
}
