package e2e

// Adoption (issue 41) on the real API server with the real binary: pods already running
// on a tenant's virtual nodes when its quota appears are counted, as a ResourceQuota
// counts the objects that exist when it is created, and marked charged; a create over
// the quota is then refused, with no window in which the quota counts from zero.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
// exact reason (usage counts the two running pods: the charge waits for the reconciler
// rather than count from zero), the two pods are marked charged, and kubectl describe
// says which pods were adopted. A pod bound but not running is not adopted (its decision
// may be on its way). Deleting an adopted pod frees its room.
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
	// knows, the create is refused: its charge waits for the reconciler's round, which
	// counts the running pods. Any allow charged on the way would show in the ledger
	// below (a pending charge of "third": it is never created).
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
