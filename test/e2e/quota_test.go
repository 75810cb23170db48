package e2e

// Tenant offload quotas (data.interlink.quotas, policies/rego/quota.rego) on the real
// control plane: pods bound to a virtual node through the API count against their
// tenant's quota, a deletion frees it, and concurrent creates cannot overshoot it.

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
	"k8s.io/apimachinery/pkg/types"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// quotaNS is a namespace of its own tenant, quota-e2e (mapped to interlink.io by the
// bridges of these tests), so no other test's pods count against its quota.
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

// quotaBridge applies the fixtures and starts a bridge whose data gives tenant
// quota-e2e a quota of pods pods.
func quotaBridge(t *testing.T, pods int) *cluster.Bridge {
	t.Helper()
	b, _ := quotaBridgeData(t, pods)
	return b
}

// quotaBridgeData is quotaBridge, and the data file it decides with.
func quotaBridgeData(t *testing.T, pods int) (*cluster.Bridge, string) {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, quotaFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	attrs := authorizationv1.ResourceAttributes{Namespace: quotaNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	if err := suite.cluster.WaitForAccess(ctx, sa(quotaNS, "runner"), cluster.ServiceAccountGroups(quotaNS), attrs, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var data map[string]map[string]any
	if err := json.Unmarshal([]byte(policyData), &data); err != nil {
		t.Fatal(err)
	}
	data["interlink"]["quotas"] = map[string]any{quotaTenant: map[string]any{"pods": pods}}
	path := filepath.Join(t.TempDir(), "quota-data.json")
	if err := os.WriteFile(path, []byte(mustMarshal(t, data)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Later flags win: this data file replaces the suite's.
	return newBridge(t, "--openshift.mappings="+quotaTenant+"=interlink.io", "--policies.data="+path), path
}

// bindQuotaPod creates a pod bound to the virtual node through the API (no kubelet
// runs it: it stays Pending, which counts) and deletes it at the end of the test.
func bindQuotaPod(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	pods := suite.cluster.Client.CoreV1().Pods(quotaNS)
	p := newPod(quotaNS, "runner", name, withNodeName(quotaVK))
	p.UID = ""
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	t.Cleanup(func() { _ = deleteQuotaPod(name) })
}

func deleteQuotaPod(name string) error {
	zero := int64(0)
	return suite.cluster.Client.CoreV1().Pods(quotaNS).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// quotaCreate is the decision input of a create of a new pod of the tenant onto the
// virtual node.
func quotaCreate(name string) map[string]any {
	p := newPod(quotaNS, "runner", name)
	p.UID = types.UID("quota-" + name)
	return input("create", p, onNode(quotaVK))
}

func TestQuotaPods(t *testing.T) {
	b, data := quotaBridgeData(t, 2)
	bindQuotaPod(t, "bound-1")
	bindQuotaPod(t, "bound-2")

	// The informer sees the two pods within moments: poll until the third is denied.
	third := quotaCreate("third")
	r, took, ok := pollDecision(t, b, 10*time.Second, func() map[string]any { return third }, deniedAnswer)
	if !ok {
		t.Fatalf("the third create was not denied within 10s: %s", r)
	}
	t.Logf("third create denied after %s", took.Round(time.Millisecond))
	checkDecision(t, r, deny(`tenant "quota-e2e" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod requests 1)`))

	// `sar-bridge check` answers as the server does: same quota, same usage.
	podFile := filepath.Join(t.TempDir(), "pod.json")
	if err := os.WriteFile(podFile, []byte(mustMarshal(t, newPod(quotaNS, "runner", "checked"))), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runCLI(t, "", "check", "--kubeconfig="+adminKubeconfig(t), "--openshift.mappings="+quotaTenant+"=interlink.io",
		"--policies.data="+data, "-f", podFile, "--node", quotaVK)
	if want := `tenant "quota-e2e" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod requests 1)`; got.code != 1 || !strings.Contains(got.stdout, want) {
		t.Errorf("check: exit code %d, stdout %q, stderr %q; want 1 and %q", got.code, got.stdout, got.stderr, want)
	}

	if err := deleteQuotaPod("bound-1"); err != nil {
		t.Fatal(err)
	}
	next := quotaCreate("after-delete")
	r, took, ok = pollDecision(t, b, 10*time.Second, func() map[string]any { return next }, allowedAnswer)
	if !ok {
		t.Fatalf("the create after a deletion was not allowed within 10s: %s", r)
	}
	t.Logf("create allowed %s after the deletion", took.Round(time.Millisecond))

	// That allow is reserved until its pod shows up: the quota is full again.
	decide(t, b, quotaCreate("one-too-many"), deny(`tenant "quota-e2e" would use 3 pods`, "(2 in use, this pod requests 1)"))
}

// TestQuotaConcurrentCreates: 10 creates at once under a quota of 3 pods, each
// through the Data API: exactly 3 are allowed.
func TestQuotaConcurrentCreates(t *testing.T) {
	b := quotaBridge(t, 3)
	// The bridge is synced once a decision of the tenant answers (it waits for the
	// first list of pods); nothing of the tenant is bound.
	decide(t, b, input("status", newPod(quotaNS, "runner", "warm-up"), onNode(quotaVK)), allow())

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
	allowed := 0
	for i, r := range answers {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		switch {
		case allowedAnswer(r):
			allowed++
		case deniedAnswer(r):
			checkDecision(t, r, deny(`over its quota of 3`))
		default:
			t.Errorf("create %d: %s", i, r)
		}
	}
	if allowed != 3 {
		t.Errorf("%d of 10 concurrent creates allowed under a quota of 3 pods, want exactly 3", allowed)
	}
}
