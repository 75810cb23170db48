package e2e

// Tenant offload quotas on the real control plane, one bridge: the quota is an
// OffloadTenant's spec.hard (sar-bridge.io/v1alpha1) and the usage its ledger, which
// every allowed create is charged to. A pod deleted frees its charge, concurrent creates
// cannot overshoot, `sar-bridge check` answers as the server does, and the data file's
// old quotas (data.interlink.quotas) refuse every create until they are moved across.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// quotaNS is a namespace of its own tenant, quota-e2e, so no other test's pods count
// against its quota.
const (
	quotaNS     = "quota-e2e"
	quotaTenant = "quota-e2e"
	quotaVK     = "quota-vk"
)

const quotaFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: quota-e2e
  labels:
    interlink.io/tenant: quota-e2e
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: quota-e2e}
---
apiVersion: v1
kind: Node
metadata:
  name: quota-vk
  labels:
    virtual-node.interlink/type: virtual-kubelet
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: quota-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: quota-e2e}
`

// quotaBridge applies the fixtures and the OffloadTenant quota-e2e with a quota of pods
// pods (deleted at the end of the test, with the namespace's pods), and starts a bridge.
func quotaBridge(t *testing.T, pods int) *cluster.Bridge {
	t.Helper()
	ctx := context.Background()
	tenant := fmt.Sprintf("apiVersion: sar-bridge.io/v1alpha1\nkind: OffloadTenant\nmetadata: {name: %s}\nspec: {group: interlink.io, hard: {pods: %q}}\n", quotaTenant, fmt.Sprint(pods))
	if _, err := suite.cluster.ApplyYAML(ctx, quotaFixtures+"---\n"+tenant); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = suite.cluster.Dynamic.Resource(tenantGVR).Delete(ctx, quotaTenant, metav1.DeleteOptions{})
		zero := int64(0)
		_ = suite.cluster.Client.CoreV1().Pods(quotaNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
	attrs := authorizationv1.ResourceAttributes{Namespace: quotaNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	if err := suite.cluster.WaitForAccess(ctx, sa(quotaNS, "runner"), cluster.ServiceAccountGroups(quotaNS), attrs, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return newBridge(t)
}

// quotaCreate is the decision input of a create of a new pod of the tenant onto the
// virtual node, before it is stored (no UID: it is charged by name).
func quotaCreate(name string) map[string]any {
	p := newPod(quotaNS, "runner", name)
	p.UID = ""
	return input("create", p, onNode(quotaVK))
}

// quotaStore creates the pod in the API server bound to the virtual node (no kubelet
// runs it: it stays Pending, and counts).
func quotaStore(t *testing.T, name string) {
	t.Helper()
	p := newPod(quotaNS, "runner", name, withNodeName(quotaVK))
	p.UID = ""
	if _, err := suite.cluster.Client.CoreV1().Pods(quotaNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func TestQuotaPods(t *testing.T) {
	b := quotaBridge(t, 2)
	full := overQuota(quotaTenant, 3, "pods", 2, 2, 1)
	decide(t, b, quotaCreate("one"), allow())
	decide(t, b, quotaCreate("two"), allow())
	if r := decide(t, b, quotaCreate("third"), deny()); r.Reason() != full {
		t.Errorf("third: reason %q, want %q", r.Reason(), full)
	}

	// `sar-bridge check` answers as the server does: same quota, same ledger, and it
	// charges nothing.
	podFile := filepath.Join(t.TempDir(), "pod.json")
	if err := os.WriteFile(podFile, []byte(mustMarshal(t, newPod(quotaNS, "runner", "checked"))), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runCLI(t, "", "check", "--kubeconfig="+adminKubeconfig(t), "-f", podFile, "--node", quotaVK)
	if got.code != 1 || !strings.Contains(got.stdout, full) {
		t.Errorf("check: exit code %d, stdout %q, stderr %q; want 1 and %q", got.code, got.stdout, got.stderr, full)
	}

	// Stored and confirmed, then one deleted: exactly its room is free again.
	quotaStore(t, "one")
	quotaStore(t, "two")
	waitLedger(t, quotaTenant, 30*time.Second, ledgerState{used: "pods=2", pending: 0}, "pods")
	if err := deleteQuotaPod("one"); err != nil {
		t.Fatal(err)
	}
	waitLedger(t, quotaTenant, 30*time.Second, ledgerState{used: "pods=1", pending: 0}, "pods")
	// The bridge's view of the ledger may lag its write by a moment: a refusal charges
	// nothing, so asking again is harmless.
	r, took, ok := pollDecision(t, b, 10*time.Second, func() map[string]any { return quotaCreate("after-delete") }, allowedAnswer)
	if !ok {
		t.Fatalf("the create after a deletion was not allowed within 10s: %s", r)
	}
	t.Logf("create allowed %s after the ledger showed the deletion", took.Round(time.Millisecond))
	// That allow is charged: the quota is full again.
	if r := decide(t, b, quotaCreate("one-too-many"), deny()); r.Reason() != full {
		t.Errorf("one-too-many: reason %q, want %q", r.Reason(), full)
	}
}

func deleteQuotaPod(name string) error {
	zero := int64(0)
	return suite.cluster.Client.CoreV1().Pods(quotaNS).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// TestQuotaConcurrentCreates: 10 creates at once under a quota of 3 pods, each
// through the Data API: exactly 3 are allowed, 7 refused with the ledger's message.
func TestQuotaConcurrentCreates(t *testing.T) {
	b := quotaBridge(t, 3)
	var wg sync.WaitGroup
	answers := make([]*cluster.Response, 10)
	errs := make([]error, 10)
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = b.Decide(quotaCreate(fmt.Sprintf("race-%d", i)))
		}()
	}
	close(start)
	wg.Wait()
	allowed, full := 0, overQuota(quotaTenant, 4, "pods", 3, 3, 1)
	for i, r := range answers {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		switch {
		case allowedAnswer(r):
			allowed++
		case deniedAnswer(r) && r.Reason() == full:
		default:
			t.Errorf("create %d: %s, want allowed or refused with %q", i, r, full)
		}
	}
	if allowed != 3 {
		t.Errorf("%d of 10 concurrent creates allowed under a quota of 3 pods, want exactly 3", allowed)
	}
	if s := ledgerOf(t, quotaTenant, "pods"); s != (ledgerState{used: "pods=3", pending: 3}) {
		t.Errorf("the ledger: %v, want the 3 allowed charged", s)
	}
}

// TestQuotaDataFileRefused: a data file that still has data.interlink.quotas (the quotas
// before OffloadTenants) makes every create a denial that says what to do, rather than
// quotas silently dropped; other operations are decided as before.
func TestQuotaDataFileRefused(t *testing.T) {
	b := quotaBridge(t, 5)
	var data map[string]map[string]any
	if err := json.Unmarshal([]byte(policyData), &data); err != nil {
		t.Fatal(err)
	}
	data["interlink"]["quotas"] = map[string]any{quotaTenant: map[string]any{"pods": 5}}
	path := filepath.Join(t.TempDir(), "old-quotas.json")
	if err := os.WriteFile(path, []byte(mustMarshal(t, data)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Later flags win: this data file replaces the suite's.
	old := newBridge(t, "--policies.data="+path)
	const moved = "data.interlink.quotas is no longer read: declare each tenant's quota as an OffloadTenant object (sar-bridge.io/v1alpha1, spec.hard) and remove it from the policy data"
	for _, tc := range []struct {
		name string
		in   map[string]any
		want want
	}{
		{"create, tenant with an OffloadTenant quota", quotaCreate("old-data"), deny(moved)},
		{"create, tenant without a quota", input("create", newPod("team-a", "runner", "old-data"), onNode("vk-1")), deny(moved)},
		{"status", input("status", newPod(quotaNS, "runner", "old-data"), onNode(quotaVK)), allow()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decide(t, old, tc.in, tc.want)
		})
	}
	if s := ledgerOf(t, quotaTenant, "pods"); s != (ledgerState{used: "pods=0", pending: 0}) {
		t.Errorf("the ledger: %v, want nothing charged", s)
	}
	// The same decisions without the old data: allowed.
	decide(t, b, quotaCreate("new-data"), allow())
}
