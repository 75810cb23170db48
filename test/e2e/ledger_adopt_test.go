package e2e

// Adoption (issue 41) on the real API server with the real binary: pods already running
// on a tenant's virtual nodes when its quota appears are counted by the first charge
// itself (the charging bridge lists them), as a ResourceQuota counts the objects that
// exist when it is created; the reconciler, when one runs, marks them charged. A create
// over the quota is then refused, with no window in which the quota counts from zero,
// and nothing waits for the reconciler: with its lease held elsewhere, first charges
// are decided all the same.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// runningOnVK stores the pod bound to the virtual node and reports it Running, as
// interLink's Virtual Kubelet does once the HPC job is submitted.
func runningOnVK(t *testing.T, p *corev1.Pod) {
	t.Helper()
	stored := storePod(t, p)
	stored.Status.Phase = corev1.PodRunning
	if _, err := suite.cluster.Client.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), stored, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s/%s Running: %v", p.Namespace, p.Name, err)
	}
}

// TestLedgerAdoptsRunningPods: two pods run on the virtual node of a tenant without a
// quota; then hard.pods: 2 is set. The very next create is refused with the ledger's
// exact reason (its charge counted the two running pods first), the reconciler marks
// the two pods charged, and kubectl describe says which pods were adopted. A pod bound
// but not running is not adopted (its decision may be on its way). Deleting an adopted
// pod frees its room.
func TestLedgerAdoptsRunningPods(t *testing.T) {
	const ns = "lgr-adopt"
	lgTenant(t, ns, nil, map[string]string{}) // no quota yet
	b := newBridge(t, lgArgs()...)

	runningOnVK(t, lgPod(ns, "before-1"))
	runningOnVK(t, lgPod(ns, "before-2"))
	storePod(t, lgPod(ns, "bound-only")) // bound, Pending: not adopted
	// Without a quota nothing is charged, and decisions are allowed.
	decide(t, b, lgCreate(ns, "free"), allow())
	if got := chargedPods(t, ns, ns); len(got) != 0 {
		t.Fatalf("pods marked charged before any quota: %v", got)
	}

	patch := []byte(`{"spec":{"hard":{"pods":"2"}}}`)
	if _, err := suite.cluster.Dynamic.Resource(tenantGVR).Patch(context.Background(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting hard.pods: %v", err)
	}
	// The bridge learns of the quota from its informer, a moment after the patch: a
	// create decided before that is allowed uncharged, as before any quota. Once it
	// knows, the create is refused: its charge counts the running pods first. Any allow
	// charged on the way would show in the ledger below (a pending charge of "third").
	full := overQuota(ns, 3, "pods", 2, 2, 1)
	early := 0
	r, took, ok := pollDecision(t, b, 15*time.Second, func() map[string]any { return lgCreate(ns, "third") }, func(r *cluster.Response) bool {
		if allowedAnswer(r) {
			early++
		}
		return deniedAnswer(r)
	})
	if !ok || r.Reason() != full {
		t.Fatalf("third create after the quota: %s after %v, want refused with %q", r, took, full)
	}
	t.Logf("the create after hard.pods: 2 was refused %v after the patch (%d allowed uncharged before the bridge saw the quota)", took.Round(time.Millisecond), early)

	waitLedger(t, ns, 30*time.Second, ledgerState{used: "pods=2", pending: 0}, "pods")
	if got := chargedPods(t, ns, ns); !slices.Equal(got, []string{"before-1", "before-2"}) {
		t.Errorf("pods marked charged: %v, want before-1 and before-2", got)
	}
	o := tenantObject(t, ns)
	if a := o.Status.Adopted; a == nil || a.Pods != 2 || strings.Join(a.Names, " ") != ns+"/before-1 "+ns+"/before-2" {
		t.Errorf("status.adopted %+v, want the two running pods", a)
	}
	used, hard := kubectlUsedHard(t, ns)
	if used != "2" || hard != "2" {
		t.Errorf("kubectl get: USED %s HARD %s, want 2 and 2", used, hard)
	}
	stdout, stderr, code := kubectlCmd(t)("", "describe", "offloadtenant", ns)
	if code != 0 || stderr != "" {
		t.Fatalf("kubectl describe: exit %d, stderr %q", code, stderr)
	}
	// kubectl's describer of custom resources prints the status fields by name.
	for _, want := range []string{"  Adopted:\n", "    Names:\n      " + ns + "/before-1\n      " + ns + "/before-2\n", "    Pods:  2\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("kubectl describe lacks %q:\n%s", want, stdout)
		}
	}

	// An adopted pod deleted frees its room, exactly.
	zero := int64(0)
	if err := suite.cluster.Client.CoreV1().Pods(ns).Delete(context.Background(), "before-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitLedger(t, ns, 30*time.Second, ledgerState{used: "pods=1", pending: 0}, "pods")
	r, took, ok = pollDecision(t, b, 10*time.Second, func() map[string]any { return lgCreate(ns, "after-delete") }, allowedAnswer)
	if !ok {
		t.Fatalf("the create after deleting an adopted pod was not allowed within 10s: %s", r)
	}
	t.Logf("allowed %v after the ledger showed the deletion", took.Round(time.Millisecond))
	if r := decide(t, b, lgCreate(ns, "over-again"), deny()); r.Reason() != full {
		t.Errorf("over-again: reason %q, want %q", r.Reason(), full)
	}
}

// holdLease makes the ledger reconciler's Lease in lgLeaseNS held by a replica that is
// not there, for an hour: no bridge started now runs the reconciler. The Lease is
// deleted when the test ends.
func holdLease(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	leases := suite.cluster.Client.CoordinationV1().Leases(lgLeaseNS)
	holder, duration, now := "elsewhere", int32(3600), metav1.NewMicroTime(time.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, AcquireTime: &now, RenewTime: &now}
	l, err := leases.Get(ctx, "sar-bridge-ledger", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "sar-bridge-ledger", Namespace: lgLeaseNS}, Spec: spec}, metav1.CreateOptions{})
	case err == nil:
		l.Spec = spec
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("holding the ledger's lease elsewhere: %v", err)
	}
	t.Cleanup(func() {
		if err := leases.Delete(context.Background(), "sar-bridge-ledger", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the lease: %v", err)
		}
	})
}

// TestLedgerAdoptsWithoutReconciler: the reconciler's lease is held by a replica that
// is not there, so no bridge runs it (the CI failure of the first attempt: after an API
// server restart no replica ran a round, and creates of a freshly quota'd tenant got
// 503 while their charges waited for it). First charges are decided all the same: a
// fresh quota with nothing running allows its first create at once; one over running
// pods refuses it with the exact reason, and the ledger holds the running pods as
// pending charges (no reconciler confirms them) with status.adopted naming them.
func TestLedgerAdoptsWithoutReconciler(t *testing.T) {
	const ns, fresh = "lgr-adopt-alone", "lgr-adopt-fresh"
	lgTenant(t, ns, nil, map[string]string{}) // no quota yet; also the lease namespace's RBAC
	holdLease(t)
	b := newBridge(t, lgArgs()...)
	sharedAdopted := metric(t, suite.bridge, "sar_bridge_ledger_adopted_total", nil)

	runningOnVK(t, lgPod(ns, "before-1"))
	runningOnVK(t, lgPod(ns, "before-2"))
	lgTenant(t, fresh, nil, map[string]string{"pods": "5"})
	// The fresh tenant's first create: charged at once, no 503, whether or not the
	// bridge has seen its quota yet (then it is allowed uncharged).
	r, took, ok := pollDecision(t, b, 15*time.Second, func() map[string]any { return lgCreate(fresh, "first") }, func(r *cluster.Response) bool {
		if r.Status != 200 {
			t.Fatalf("create of a freshly quota'd tenant: %s, want a decision", r)
		}
		return allowedAnswer(r) && ledgerOf(t, fresh, "pods") == ledgerState{used: "pods=1", pending: 1}
	})
	if !ok {
		t.Fatalf("the fresh tenant's first create was not allowed and charged within 15s: %s", r)
	}
	t.Logf("a freshly quota'd tenant's first create was allowed and charged %v after its quota, no reconciler running", took.Round(time.Millisecond))
	if a := tenantObject(t, fresh).Status.Adopted; a == nil || a.Pods != 0 || a.Generation != tenantObject(t, fresh).Generation {
		t.Errorf("fresh tenant's status.adopted %+v, want a count of 0 for its generation", a)
	}

	patch := []byte(`{"spec":{"hard":{"pods":"2"}}}`)
	if _, err := suite.cluster.Dynamic.Resource(tenantGVR).Patch(context.Background(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting hard.pods: %v", err)
	}
	full := overQuota(ns, 3, "pods", 2, 2, 1)
	r, took, ok = pollDecision(t, b, 15*time.Second, func() map[string]any { return lgCreate(ns, "third") }, func(r *cluster.Response) bool {
		if r.Status != 200 {
			t.Fatalf("create after hard.pods: 2: %s, want a decision", r)
		}
		return deniedAnswer(r)
	})
	if !ok || r.Reason() != full {
		t.Fatalf("third create after the quota: %s after %v, want refused with %q", r, took, full)
	}
	t.Logf("refused %v after the patch, no reconciler running", took.Round(time.Millisecond))
	if got := ledgerOf(t, ns, "pods"); got != (ledgerState{used: "pods=2", pending: 2}) {
		t.Errorf("ledger %+v, want pods=2 used, the two running pods pending", got)
	}
	o := tenantObject(t, ns)
	if a := o.Status.Adopted; a == nil || a.Pods != 2 || a.Generation != o.Generation || strings.Join(a.Names, " ") != ns+"/before-1 "+ns+"/before-2" {
		t.Errorf("status.adopted %+v, want the two running pods for generation %d", a, o.Generation)
	}
	if got := chargedPods(t, ns, ns); len(got) != 0 {
		t.Errorf("pods marked charged with no reconciler running: %v", got)
	}
	if metric(t, b, "sar_bridge_ledger_leader", nil) != 0 {
		t.Error("the bridge leads the reconciler, want the lease held elsewhere")
	}
	// Counted by whichever bridge saw the quota first: this one or the suite's.
	if got := metric(t, b, "sar_bridge_ledger_adopted_total", nil) + metric(t, suite.bridge, "sar_bridge_ledger_adopted_total", nil) - sharedAdopted; got != 2 {
		t.Errorf("sar_bridge_ledger_adopted_total went up by %v over both bridges, want 2", got)
	}
}
