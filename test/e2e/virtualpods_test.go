package e2e

// The bridge's memory follows the pods it decides, not the size of the cluster (issue
// 35): pods are followed only on virtual nodes, one informer per virtual node, only by the
// replica elected to reconcile the quota ledger (issue 33), and only while some tenant
// has a quota. Checked on the real API server with the pod lists and watches it serves: a
// leader with no quota to keep lists and watches no pod, the first OffloadTenant with a
// quota starts one watch per virtual node and the last one gone stops them; a virtual
// node registered after start-up is followed; and a decision right after /ready already
// knows the tenants.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	vpNS     = "vpods-e2e" // its own tenant, by its label
	vpTenant = "vpods-e2e"
	vpVK     = "vpods-vk-1"
	vpLateVK = "vpods-vk-late"
	vpWorker = "vpods-worker"
)

const vpFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: vpods-e2e
  labels:
    interlink.io/tenant: vpods-e2e
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: vpods-e2e}
---
apiVersion: v1
kind: Node
metadata:
  name: vpods-vk-1
  labels:
    virtual-node.interlink/type: virtual-kubelet
---
apiVersion: v1
kind: Node
metadata:
  name: vpods-worker
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: vpods-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: vpods-e2e}
`

// vpSetUp applies the fixtures and waits until the tenant's runner may offload.
func vpSetUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, vpFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	attrs := authorizationv1.ResourceAttributes{Namespace: vpNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	if err := suite.cluster.WaitForAccess(ctx, sa(vpNS, "runner"), cluster.ServiceAccountGroups(vpNS), attrs, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// vpQuota applies the OffloadTenant vpods-e2e with a quota of pods pods; it is deleted
// at the end of the test.
func vpQuota(t *testing.T, pods int) {
	t.Helper()
	obj := fmt.Sprintf("apiVersion: sar-bridge.io/v1alpha1\nkind: OffloadTenant\nmetadata: {name: %s}\nspec: {group: interlink.io, hard: {pods: \"%d\"}}\n", vpTenant, pods)
	if _, err := suite.cluster.ApplyYAML(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vpNoQuota(t) })
}

// vpNoQuota deletes the OffloadTenant vpods-e2e.
func vpNoQuota(t *testing.T) {
	t.Helper()
	if err := suite.cluster.Dynamic.Resource(tenantGVR).Delete(context.Background(), vpTenant, metav1.DeleteOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Error(err)
	}
}

// vpBridge starts a bridge that campaigns for the ledger's reconciler with the suite's
// shared bridge (the default lease): one of the two leads. The flags map the tenant to
// the group its OffloadTenant names, so it has a group before and after the object.
func vpBridge(t *testing.T) *cluster.Bridge {
	t.Helper()
	return newBridge(t, "--openshift.mappings="+vpTenant+"=interlink.io")
}

// vpBind creates a pod of the tenant bound to node (it stays Pending: no kubelet) and
// deletes it at the end of the test.
func vpBind(t *testing.T, name, node string) {
	t.Helper()
	pods := suite.cluster.Client.CoreV1().Pods(vpNS)
	p := newPod(vpNS, "runner", name, withNodeName(node))
	p.UID = ""
	if _, err := pods.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	zero := int64(0)
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// vpCreate is the decision input of a create of a new pod of the tenant onto node.
func vpCreate(name, node string) map[string]any {
	p := newPod(vpNS, "runner", name)
	p.UID = ""
	return input("create", p, onNode(node))
}

// podTraffic is what the API server has served of pods: LIST requests and streamed lists
// (WatchList) so far, and the watches of pods open now.
type podTraffic struct{ lists, streamed, watches float64 }

func podTrafficNow(t *testing.T) podTraffic {
	t.Helper()
	raw, err := suite.cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("API server /metrics: %v", err)
	}
	s, err := cluster.ParseMetrics(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has("apiserver_request_total") || !s.Has("apiserver_longrunning_requests") {
		t.Fatal("the API server exposes no apiserver_request_total or apiserver_longrunning_requests")
	}
	return podTraffic{
		lists:    s.Sum("apiserver_request_total", map[string]string{"resource": "pods", "verb": "LIST"}),
		streamed: s.Sum("apiserver_watch_list_duration_seconds_count", map[string]string{"resource": "pods"}),
		watches:  s.Sum("apiserver_longrunning_requests", map[string]string{"resource": "pods", "verb": "WATCH"}),
	}
}

// virtualNodes is the number of virtual nodes in the cluster (the default
// --admission.node-selector): the pod informers the leader runs while a quota exists.
func virtualNodes(t *testing.T) float64 {
	t.Helper()
	nodes, err := suite.cluster.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "virtual-node.interlink/type=virtual-kubelet"})
	if err != nil {
		t.Fatal(err)
	}
	return float64(len(nodes.Items))
}

// waitWatches polls the pod watches open until they are want.
func waitWatches(t *testing.T, what string, want float64) {
	t.Helper()
	var got podTraffic
	took, ok := poll(20*time.Second, 100*time.Millisecond, func() bool {
		got = podTrafficNow(t)
		return got.watches == want
	})
	if !ok {
		t.Fatalf("%s: %v pod watches open, want %v", what, got.watches, want)
	}
	t.Logf("%s: %v pod watches after %v", what, want, took.Round(time.Millisecond))
}

// tenantsWithQuota lists the OffloadTenants that set hard amounts.
func tenantsWithQuota(t *testing.T) []string {
	t.Helper()
	list, err := suite.cluster.Dynamic.Resource(tenantGVR).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range list.Items {
		hard, _, _ := unstructured.NestedMap(u.Object, "spec", "hard")
		nodes, _, _ := unstructured.NestedMap(u.Object, "spec", "nodes")
		if len(hard) > 0 || len(nodes) > 0 {
			out = append(out, u.GetName())
		}
	}
	return out
}

// vpBaseline waits until no OffloadTenant sets a quota (other tests delete theirs) and
// the shared bridge follows no pod, and returns the API server's pod traffic then: what
// is not the bridges' (kube-apiserver 1.34 itself keeps one cluster-wide pod watch).
func vpBaseline(t *testing.T) podTraffic {
	t.Helper()
	if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
		return len(tenantsWithQuota(t)) == 0 && metric(t, shared(t), "sar_bridge_ledger_following_pods", nil) == 0
	}); !ok {
		t.Fatalf("OffloadTenants with a quota remain from other tests (%v), or the shared bridge still follows pods", tenantsWithQuota(t))
	}
	return podTrafficNow(t)
}

// leaders is how many of the bridges hold the ledger's lease, and how many of them
// follow the pods of virtual nodes.
func leaders(t *testing.T, bridges ...*cluster.Bridge) (leading, following float64) {
	t.Helper()
	for _, b := range bridges {
		leading += metric(t, b, "sar_bridge_ledger_leader", nil)
		following += metric(t, b, "sar_bridge_ledger_following_pods", nil)
	}
	return leading, following
}

// TestVirtualPodsOnlyWithQuotas: with no OffloadTenant setting a quota, the elected
// reconciler lists and watches no pod at all, even with pods bound to a virtual node and
// an ordinary one; the first quota starts one pod watch per virtual node (by one replica
// only), and the last one gone stops them.
func TestVirtualPodsOnlyWithQuotas(t *testing.T) {
	vpSetUp(t)
	vpBind(t, "on-vk", vpVK)
	vpBind(t, "on-worker", vpWorker)
	before := vpBaseline(t)
	b := vpBridge(t)
	if _, ok := poll(20*time.Second, 100*time.Millisecond, func() bool { l, _ := leaders(t, shared(t), b); return l == 1 }); !ok {
		l, _ := leaders(t, shared(t), b)
		t.Fatalf("%v of the two bridges lead the ledger's reconciler, want 1", l)
	}
	time.Sleep(3 * time.Second) // a leader following pods would have listed them by now
	if after := podTrafficNow(t); after != before {
		t.Fatalf("without quotas the API server served pods: %+v, then %+v; want no list, no streamed list and no watch", before, after)
	}
	if l, f := leaders(t, shared(t), b); l != 1 || f != 0 {
		t.Errorf("without quotas: %v leaders, %v following pods; want 1 and 0", l, f)
	}
	// A tenant without a quota is decided and charged nothing.
	decide(t, b, vpCreate("no-quota", vpVK), allow())

	vpQuota(t, 1)
	waitWatches(t, "a tenant has a quota", before.watches+virtualNodes(t))
	if l, f := leaders(t, shared(t), b); l != 1 || f != 1 {
		t.Errorf("with a quota: %v leaders, %v following pods; want 1 and 1", l, f)
	}
	// What is followed is what was charged: the pod bound without a decision holds
	// nothing, the create is allowed and charged; the next is over the quota.
	decide(t, b, vpCreate("with-quota", vpVK), allow())
	if r := decide(t, b, vpCreate("over", vpVK), deny()); r.Reason() != overQuota(vpTenant, 2, "pods", 1, 1, 1) {
		t.Errorf("reason %q, want %q", r.Reason(), overQuota(vpTenant, 2, "pods", 1, 1, 1))
	}

	vpNoQuota(t)
	waitWatches(t, "the last quota gone", before.watches)
	if l, f := leaders(t, shared(t), b); l != 1 || f != 0 {
		t.Errorf("the last quota gone: %v leaders, %v following pods; want 1 and 0", l, f)
	}
}

// TestVirtualPodsNodeAddedLater: a decision right after /ready already counts the
// tenant's ledger, and a virtual node registered after start-up is followed: a charged
// pod bound to it is confirmed by the reconciler.
func TestVirtualPodsNodeAddedLater(t *testing.T) {
	vpSetUp(t)
	baseline := vpBaseline(t)
	vpQuota(t, 1)
	waitWatches(t, "a tenant has a quota", baseline.watches+virtualNodes(t))
	// Charged by another bridge, for a pod on the virtual node registered later (once
	// that bridge has seen the new OffloadTenant: until then the tenant has no group).
	if r, _, ok := pollDecision(t, shared(t), 10*time.Second, func() map[string]any { return vpCreate("late-pod", vpLateVK) }, allowedAnswer); !ok {
		t.Fatalf("the shared bridge did not allow the create within 10s: %s", r)
	}
	b := vpBridge(t)
	// No polling: the decision right after /ready must already know the tenant and its
	// ledger (a bridge that had not listed the OffloadTenants would find no API group
	// for the tenant).
	if r := decide(t, b, vpCreate("first", vpVK), deny()); r.Reason() != overQuota(vpTenant, 2, "pods", 1, 1, 1) {
		t.Errorf("first decision after /ready: reason %q, want %q", r.Reason(), overQuota(vpTenant, 2, "pods", 1, 1, 1))
	}

	ctx := context.Background()
	watchesBefore := podTrafficNow(t).watches
	late := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: vpLateVK, Labels: map[string]string{"virtual-node.interlink/type": "virtual-kubelet"}}}
	if _, err := suite.cluster.Client.CoreV1().Nodes().Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = suite.cluster.Client.CoreV1().Nodes().Delete(context.Background(), vpLateVK, metav1.DeleteOptions{})
	})
	waitWatches(t, "a virtual node registered", watchesBefore+1)
	vpBind(t, "late-pod", vpLateVK)
	var p *corev1.Pod
	took, ok := poll(20*time.Second, 100*time.Millisecond, func() bool {
		var err error
		p, err = suite.cluster.Client.CoreV1().Pods(vpNS).Get(ctx, "late-pod", metav1.GetOptions{})
		return err == nil && p.Labels[chargedLabel] == vpTenant
	})
	if !ok {
		t.Fatalf("the charged pod on the virtual node registered after start-up was not confirmed within 20s: labels %v", p.Labels)
	}
	t.Logf("the late node's pod confirmed after %v", took.Round(time.Millisecond))
	waitLedger(t, vpTenant, 20*time.Second, ledgerState{used: "pods=1", pending: 0}, "pods")

	// The node deleted: its pod watch stops.
	if err := suite.cluster.Client.CoreV1().Nodes().Delete(ctx, vpLateVK, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWatches(t, "the virtual node deleted", watchesBefore)
}
