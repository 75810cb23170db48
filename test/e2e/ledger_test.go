package e2e

// The quota ledger (issue 33) end to end, with the real binaries against the real
// kube-apiserver: tenants' offload quotas are OffloadTenant objects, an allowed create is
// charged to the object's status with a resourceVersion-checked write, and that holds
// across several bridge processes, through every front door (the Data API, the relay,
// the webhooks), when a bridge is killed in the middle of a burst, and when the API
// server cannot take the write.
//
// The bridges of these tests elect their reconciler through the Lease of their own
// namespace (lgLeaseNS) beside the suite's shared bridge's election: two elections, which
// docs/tenants.md warns against. Each tenant is reconciled by the election that wrote it
// first (status.reconcilers; the other defers while that one keeps writing), which these
// tests therefore also exercise.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	lgVK      = "lgr-vk"    // the virtual node of these tests
	lgLeaseNS = "lgr-lease" // --quota.lease-namespace of these tests' bridges
	lgLabel   = "sar-bridge-e2e/ledger-admission"
	lgConfig  = "sar-bridge-e2e-ledger"
	// chargedLabel is tenants.ChargedLabel: the reconciler's confirmation on a pod.
	chargedLabel = "sar-bridge.io/charged"
)

var tenantGVR = schema.GroupVersionResource{Group: "sar-bridge.io", Version: "v1alpha1", Resource: "offloadtenants"}

// lgFixtures: the virtual node, and the lease namespace with the Role the bridge needs
// there (what manifests/base grants in its own namespace).
var lgFixtures = `
apiVersion: v1
kind: Node
metadata:
  name: lgr-vk
  labels:
    virtual-node.interlink/type: virtual-kubelet
spec:
  taints:
    - {key: virtual-node.interlink/no-schedule, value: "true", effect: NoSchedule}
---
` + leaseNamespaceYAML(lgLeaseNS)

// leaseNamespaceYAML is a namespace where the suite's bridges may hold the reconciler's
// Lease (the Role manifests/base grants in its own namespace).
func leaseNamespaceYAML(ns string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: sar-bridge-ledger-lease, namespace: %[1]s}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "create", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: sar-bridge-ledger-lease, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sar-bridge-ledger-lease}
subjects:
  - {kind: ServiceAccount, name: sar-bridge, namespace: sar-bridge}
`, ns)
}

// lgArgs are the flags of every bridge of these tests: their own lease, and rounds of
// the reconciler every 2s (besides those pod events start).
func lgArgs(extra ...string) []string {
	return append([]string{"--quota.lease-namespace=" + lgLeaseNS, "--quota.reconcile-interval=2s"}, extra...)
}

// offloaderYAML is the ServiceAccount runner of namespace ns, bound to the ClusterRole
// interlink-offloader there (manifests/examples): it may offload from ns.
func offloaderYAML(ns string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: %[1]s}
`, ns)
}

// lgElection is the Lease the bridges of lgArgs elect their reconciler through, as
// status.reconcilers names it.
const lgElection = lgLeaseNS + "/sar-bridge-ledger"

// lgTenant sets up a tenant named like its namespace ns (labels added to the namespace):
// the namespace, its ServiceAccount runner allowed to offload, and the OffloadTenant
// with hard amounts, reconciled by the bridges of lgArgs (lgTenantFor). At the end of
// the test the tenant and the namespace's pods are deleted (the namespace stays: no
// controller would finalize it).
func lgTenant(t *testing.T, ns string, labels map[string]string, hard map[string]string) {
	t.Helper()
	lgTenantFor(t, lgElection, ns, labels, hard)
}

// lgTenantFor is lgTenant for the bridges of election: the tenant's status names it as
// the election whose reconciler wrote last (status.reconcilers), so the suite's shared
// bridge, elected through another Lease, leaves the tenant to them while they keep
// writing it; "" names none, for bridges that join the shared bridge's election.
func lgTenantFor(t *testing.T, election, ns string, labels map[string]string, hard map[string]string) {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, lgFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	nsObj := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns, "labels": labels}}
	tenant := map[string]any{"apiVersion": "sar-bridge.io/v1alpha1", "kind": "OffloadTenant", "metadata": map[string]any{"name": ns},
		"spec": map[string]any{"group": "interlink.io", "hard": hard}}
	docs := []string{mustYAML(t, nsObj), mustYAML(t, tenant), offloaderYAML(ns)}
	if _, err := suite.cluster.ApplyYAML(ctx, strings.Join(docs, "\n---\n")); err != nil {
		t.Fatalf("tenant %s: %v", ns, err)
	}
	if election != "" {
		claimTenant(t, ns, election)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = suite.cluster.Dynamic.Resource(tenantGVR).Delete(ctx, ns, metav1.DeleteOptions{})
		zero := int64(0)
		_ = suite.cluster.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
	for _, a := range []struct {
		user   string
		groups []string
		attrs  authorizationv1.ResourceAttributes
	}{
		{sa(ns, "runner"), cluster.ServiceAccountGroups(ns), authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "interlink.io", Resource: "pods"}},
		{sa("sar-bridge", "sar-bridge"), nil, authorizationv1.ResourceAttributes{Namespace: lgLeaseNS, Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "sar-bridge-ledger"}},
	} {
		if err := suite.cluster.WaitForAccess(ctx, a.user, a.groups, a.attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// claimTenant records election as the one whose reconciler reconciles the tenant
// (status.reconcilers), as its first write would.
func claimTenant(t *testing.T, tenant, election string) {
	t.Helper()
	ctx := context.Background()
	res := suite.cluster.Dynamic.Resource(tenantGVR)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := res.Get(ctx, tenant, metav1.GetOptions{})
		if err != nil {
			return err
		}
		record := map[string]any{"election": election, "holder": "e2e", "time": time.Now().UTC().Format(time.RFC3339)}
		if err := unstructured.SetNestedSlice(o.Object, []any{record}, "status", "reconcilers"); err != nil {
			return err
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(o.Object, "status", "pendingCount"); !found {
			_ = unstructured.SetNestedField(o.Object, int64(0), "status", "pendingCount")
		}
		_, err = res.UpdateStatus(ctx, o, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("tenant %s: recording its reconciler's election: %v", tenant, err)
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tenantObject reads an OffloadTenant directly from the suite's API server.
func tenantObject(t *testing.T, name string) *v1alpha1.OffloadTenant {
	t.Helper()
	return tenantObjectIn(t, suite.cluster, name)
}

// tenantObjectIn reads an OffloadTenant directly from c's API server.
func tenantObjectIn(t *testing.T, c *cluster.Cluster, name string) *v1alpha1.OffloadTenant {
	t.Helper()
	u, err := c.Dynamic.Resource(tenantGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading OffloadTenant %s at %s: %v", name, c.Host(), err)
	}
	var o v1alpha1.OffloadTenant
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o); err != nil {
		t.Fatal(err)
	}
	return &o
}

// ledgerState is what a tenant's ledger holds, as the tests compare it.
type ledgerState struct {
	used    string // "pods=N,cpu=Q": the resources asked for, each as a quantity ("0" when absent)
	pending int
}

func (s ledgerState) String() string { return fmt.Sprintf("used %s, %d pending", s.used, s.pending) }

// ledgerOf reads a tenant's ledger: used of the resources named, and the pending count.
func ledgerOf(t *testing.T, name string, resources ...corev1.ResourceName) ledgerState {
	t.Helper()
	o := tenantObject(t, name)
	parts := make([]string, len(resources))
	for i, r := range resources {
		q := o.Status.Used[r]
		parts[i] = string(r) + "=" + q.String()
	}
	return ledgerState{used: strings.Join(parts, ","), pending: len(o.Status.Pending)}
}

// waitCounted polls the tenant until its running pods are counted for its spec
// (status.adopted: the bridges count them as soon as they see the quota), so that a test
// that counts a bridge's writes or faults them starts after that write.
func waitCounted(t *testing.T, name string) {
	t.Helper()
	if _, ok := poll(20*time.Second, 50*time.Millisecond, func() bool {
		o := tenantObject(t, name)
		return o.Status.Adopted != nil && o.Status.Adopted.Generation == o.Generation
	}); !ok {
		t.Fatalf("tenant %s: its running pods not counted within 20s (status %+v)", name, tenantObject(t, name).Status)
	}
}

// waitLedger polls the tenant's ledger until it is want.
func waitLedger(t *testing.T, name string, within time.Duration, want ledgerState, resources ...corev1.ResourceName) {
	t.Helper()
	var got ledgerState
	took, ok := poll(within, 100*time.Millisecond, func() bool {
		got = ledgerOf(t, name, resources...)
		return got == want
	})
	if !ok {
		t.Fatalf("tenant %s: %v after %v, want %v (status %+v)", name, got, took.Round(time.Millisecond), want, tenantObject(t, name).Status)
	}
	t.Logf("tenant %s: %v after %v", name, want, took.Round(time.Millisecond))
}

// lgPod is a pod of the tenant's runner with one container; no UID, as a pod the Data API
// decides before it is stored.
func lgPod(ns, name string, opts ...podOpt) *corev1.Pod {
	p := newPod(ns, "runner", name, opts...)
	p.UID = ""
	return p
}

// lgCreate is the Data API input of the create of lgPod onto the virtual node.
func lgCreate(ns, name string, opts ...podOpt) map[string]any {
	return input("create", lgPod(ns, name, opts...), onNode(lgVK))
}

// storePod creates the pod in the API server, bound to the virtual node as interLink's
// Virtual Kubelet has it (no kubelet: it stays Pending), and returns it as stored.
func storePod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	p.Spec.NodeName = lgVK
	stored, err := suite.cluster.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	return stored
}

// chargedPods lists the pods of ns the reconciler has confirmed charged to tenant.
func chargedPods(t *testing.T, ns, tenant string) []string {
	t.Helper()
	list, err := suite.cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: chargedLabel + "=" + tenant})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// overQuota is the message of a pod refused over a hard amount: the ledger's and the
// policy's, which agree on whole amounts.
func overQuota(tenant string, total int, resource string, hard, inUse, holds int) string {
	return fmt.Sprintf("tenant %q would use %d %s on virtual nodes, over its quota of %d (%d in use, this pod holds %d)", tenant, total, resource, hard, inUse, holds)
}

// outcome is one create's answer, from the Data API or the relay.
type outcome struct {
	via, name string
	err       error // no answer at all (a connection refused or reset)
	status    int
	allowed   bool
	reason    string // the decision's reason, the relay's 403 line without its prefix, or an error's message
}

func (o outcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("%s %s: no answer: %v", o.via, o.name, o.err)
	}
	return fmt.Sprintf("%s %s: HTTP %d allowed=%v %q", o.via, o.name, o.status, o.allowed, o.reason)
}

// decideOutcome asks b's Data API.
func decideOutcome(b *cluster.Bridge, via, name string, in map[string]any) outcome {
	r, err := b.Decide(in)
	if err != nil {
		return outcome{via: via, name: name, err: err}
	}
	o := outcome{via: via, name: name, status: r.Status, allowed: r.Status == http.StatusOK && r.Allowed(), reason: r.Reason()}
	if r.Status != http.StatusOK {
		o.reason = r.Error.Message
	}
	return o
}

// relayPluginCreates counts the /create requests the stand-in plugin received.
func relayPluginCreates(p *cluster.Plugin) int {
	n := 0
	for _, r := range p.Requests() {
		if r.Path == "/create" {
			n++
		}
	}
	return n
}

// relayOutcome sends interLink's /create of a stored pod through a relay: allowed means
// the plugin's answer came back (the create was forwarded).
func relayOutcome(client *http.Client, base, via string, pod *corev1.Pod) outcome {
	body, err := json.Marshal(retrievedPodData{Pod: *pod, Containers: []retrievedContainer{{Name: "main"}}, JobConfig: map[string]any{}})
	if err != nil {
		return outcome{via: via, name: pod.Name, err: err}
	}
	req, err := http.NewRequest(http.MethodPost, base+"/create", bytes.NewReader(body))
	if err != nil {
		return outcome{via: via, name: pod.Name, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return outcome{via: via, name: pod.Name, err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return outcome{via: via, name: pod.Name, err: err}
	}
	o := outcome{via: via, name: pod.Name, status: res.StatusCode, reason: string(data)}
	switch res.StatusCode {
	case http.StatusOK:
		o.allowed = string(data) == cluster.PluginCreateAnswer
	case http.StatusForbidden:
		o.reason = strings.TrimPrefix(string(data), "sar-bridge: denied: ")
	}
	return o
}

// burst sends every create at once and returns the outcomes in order; onAnswer (may be
// nil) is called after each answer with the number of answers so far.
func burst(sends []func() outcome, onAnswer func(answered int64)) []outcome {
	out := make([]outcome, len(sends))
	var wg sync.WaitGroup
	var answered atomic.Int64
	start := make(chan struct{})
	for i, send := range sends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = send()
			if out[i].err == nil {
				n := answered.Add(1)
				if onAnswer != nil {
					onAnswer(n)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// tally sorts a burst's outcomes: the names allowed, the refusals by reason, the answers
// that were neither, and the creates that got no answer.
type tally struct {
	allowed    []string
	refused    map[string]int // by reason
	other      []outcome
	unanswered []outcome
}

func tallyOf(outs []outcome) tally {
	t := tally{refused: map[string]int{}}
	for _, o := range outs {
		switch {
		case o.err != nil:
			t.unanswered = append(t.unanswered, o)
		case o.allowed:
			t.allowed = append(t.allowed, o.name)
		case o.status == http.StatusOK || o.status == http.StatusForbidden:
			t.refused[o.reason]++
		default:
			t.other = append(t.other, o)
		}
	}
	sort.Strings(t.allowed)
	return t
}

// kubectlUsedHard is the USED and HARD columns kubectl get prints for the tenant.
func kubectlUsedHard(t *testing.T, tenant string) (used, hard string) {
	t.Helper()
	stdout, stderr, code := kubectlCmd(t)("", "get", "offloadtenants", tenant)
	if code != 0 || stderr != "" {
		t.Fatalf("kubectl get offloadtenants %s: exit %d, stderr %q", tenant, code, stderr)
	}
	header, row := tableRow(stdout, tenant)
	col := func(name string) string {
		i := slices.Index(header, name)
		if i < 0 || i >= len(row) {
			t.Fatalf("kubectl get offloadtenants %s: no %s column in:\n%s", tenant, name, stdout)
		}
		return row[i]
	}
	t.Logf("kubectl get offloadtenants %s:\n%s", tenant, stdout)
	return col("USED"), col("HARD")
}

// TestLedgerThreeBridges: three bridge processes — two standalone, one configured as
// interLink's sidecar (the relay on a unix socket) — share one tenant's quota of 10 pods.
//
//   - 60 concurrent creates, a third through each (the sidecar's through its relay, of
//     pods already stored and bound): exactly 10 allowed, 50 refused with the ledger's
//     message; kubectl get shows USED 10, HARD 10.
//   - The 10 pods created in the API server are confirmed by the elected reconciler.
//   - A second tenant's burst with one standalone bridge SIGKILLed in the middle: never
//     more than 10 charged, every answer exact.
//   - 3 of the first tenant's pods deleted: exactly 3 more creates are allowed.
func TestLedgerThreeBridges(t *testing.T) {
	const (
		tenantA, tenantB = "lgr-burst-a", "lgr-burst-b"
		hard, creates    = 10, 60
	)
	lgTenant(t, tenantA, nil, map[string]string{"pods": "10"})
	lgTenant(t, tenantB, nil, map[string]string{"pods": "10"})
	full := func(tenant string) string { return overQuota(tenant, hard+1, "pods", hard, hard, 1) }

	// The relay decides pods that are stored and bound already: a third of each burst.
	stored := map[string]*corev1.Pod{}
	for _, ns := range []string{tenantA, tenantB} {
		for i := 0; i < creates; i += 3 {
			p := storePod(t, lgPod(ns, fmt.Sprintf("relay-%02d", i)))
			stored[ns+"/"+p.Name] = p
		}
	}

	// Each reaches the API server through a proxy that can slow it down (burst 2).
	a, proxyA := faultBridge(t, lgArgs()...)
	b, proxyB := faultBridge(t, lgArgs()...)
	sidecar, proxyS, relayClient, relayBase := lgSidecar(t, lgArgs()...)
	bridges := map[string]*cluster.Bridge{"a": a, "b": b, "sidecar": sidecar}

	sendsOf := func(ns string) ([]func() outcome, map[string]string) {
		var sends []func() outcome
		via := map[string]string{}
		for i := range creates {
			switch i % 3 {
			case 0:
				p := stored[fmt.Sprintf("%s/relay-%02d", ns, i)]
				via[p.Name] = "sidecar relay"
				sends = append(sends, func() outcome { return relayOutcome(relayClient, relayBase, "sidecar relay", p) })
			case 1:
				name := fmt.Sprintf("data-a-%02d", i)
				via[name] = "a"
				sends = append(sends, func() outcome { return decideOutcome(a, "a", name, lgCreate(ns, name)) })
			case 2:
				name := fmt.Sprintf("data-b-%02d", i)
				via[name] = "b"
				sends = append(sends, func() outcome { return decideOutcome(b, "b", name, lgCreate(ns, name)) })
			}
		}
		return sends, via
	}

	var allowedA []string
	t.Run("60 concurrent creates through three bridges: exactly 10 allowed", func(t *testing.T) {
		sends, _ := sendsOf(tenantA)
		began := time.Now()
		got := tallyOf(burst(sends, nil))
		t.Logf("%d creates answered in %v", creates, time.Since(began).Round(time.Millisecond))
		if len(got.allowed) != hard || got.refused[full(tenantA)] != creates-hard || len(got.refused) != 1 || len(got.other) != 0 || len(got.unanswered) != 0 {
			t.Fatalf("allowed %d %v, refused %v, other %v, unanswered %v; want exactly %d allowed and %d refused with %q",
				len(got.allowed), got.allowed, got.refused, got.other, got.unanswered, hard, creates-hard, full(tenantA))
		}
		allowedA = got.allowed
		if s := ledgerOf(t, tenantA, "pods"); s.used != "pods=10" {
			t.Errorf("the ledger after the burst: %v, want pods=10 used", s)
		}
		if used, h := kubectlUsedHard(t, tenantA); used != "10" || h != "10" {
			t.Errorf("kubectl get offloadtenants %s: USED %s, HARD %s; want 10 and 10", tenantA, used, h)
		}
		// Each bridge's writes: batched, never more than one a charge (a batch that
		// charges nothing writes nothing).
		var charged float64
		for name, br := range bridges {
			w, c := metric(t, br, "sar_bridge_ledger_writes_total", map[string]string{"result": "success"}), metric(t, br, "sar_bridge_ledger_charges_total", map[string]string{"result": "charged"})
			counts := metric(t, br, "sar_bridge_ledger_counts_total", nil) // of the running pods, once a tenant's spec
			t.Logf("bridge %s: %v ledger writes (%v of them counts of running pods), %v charged, %v refused, %v conflicts", name, w, counts, c,
				metric(t, br, "sar_bridge_ledger_charges_total", map[string]string{"result": "refused"}), metric(t, br, "sar_bridge_ledger_writes_total", map[string]string{"result": "conflict"}))
			if w-counts > c {
				t.Errorf("bridge %s: %v ledger writes besides %v counts for %v charges", name, w, counts, c)
			}
			charged += c
		}
		if charged != hard {
			t.Errorf("the bridges charged %v pods, want %d", charged, hard)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("the reconciler confirms the 10 pods once they are stored", func(t *testing.T) {
		for _, name := range allowedA {
			if strings.HasPrefix(name, "data-") {
				storePod(t, lgPod(tenantA, name))
			}
		}
		waitLedger(t, tenantA, 30*time.Second, ledgerState{used: "pods=10", pending: 0}, "pods")
		if got := chargedPods(t, tenantA, tenantA); !slices.Equal(got, allowedA) {
			t.Errorf("pods confirmed charged %v, want exactly the allowed ones %v", got, allowedA)
		}
	})

	t.Run("a bridge killed in the middle of a burst changes nothing", func(t *testing.T) {
		sends, via := sendsOf(tenantB)
		// The API server's answers reach b after 150ms, a and the sidecar after 400ms:
		// b writes the ledger first. It is killed the moment its first charge is in the
		// API server, before the answer of that write can reach it: charged, never
		// answered. a and the sidecar then decide the rest of the burst.
		proxyB.Delay(150 * time.Millisecond)
		proxyA.Delay(400 * time.Millisecond)
		proxyS.Delay(400 * time.Millisecond)
		defer func() {
			proxyA.Pass()
			proxyS.Pass()
		}()
		killedAt := killOnCharge(t, b, tenantB, "data-b-")
		outs := burst(sends, nil)
		if _, err := b.WaitExit(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if killedAt() == "" {
			t.Fatal("bridge b charged nothing: it was never killed")
		}
		t.Logf("bridge b killed when the API server held its charge of %s", killedAt())
		got := tallyOf(outs)
		answered := map[string]int{}
		for _, o := range outs {
			if o.err == nil {
				answered[o.via]++
			}
		}
		t.Logf("answered by each: %v; no answer: %d; allowed %v; refused %v", answered, len(got.unanswered), got.allowed, got.refused)
		for _, o := range got.unanswered {
			if o.via != "b" {
				t.Errorf("a create sent to a live bridge got no answer: %v", o)
			}
		}
		if len(got.unanswered) != creates/3 {
			t.Errorf("%d creates unanswered, want the %d sent to bridge b (answered %v)", len(got.unanswered), creates/3, answered)
		}
		// Only the dead bridge may have failed to decide (it was dying); the live ones
		// answered everything with an allow or the ledger's exact refusal.
		for _, o := range got.other {
			if o.via != "b" || o.status != http.StatusServiceUnavailable {
				t.Errorf("neither an allow nor the quota's refusal: %v", o)
			}
		}
		for reason, n := range got.refused {
			if reason != full(tenantB) {
				t.Errorf("%d refused with %q, want only %q", n, reason, full(tenantB))
			}
		}
		// The ledger holds exactly 10: every allow answered, plus whatever the dead
		// bridge charged and could not answer (a charge written, then SIGKILL): those
		// are pods no one was told were allowed, so never more than 10 run, and they
		// are released once the pending timeout finds their pods missing.
		o := tenantObject(t, tenantB)
		used := o.Status.Used["pods"]
		if used.Value() != hard {
			t.Errorf("%s: used %s pods after the burst, want %d", tenantB, used.String(), hard)
		}
		charged := map[string]bool{}
		for _, c := range o.Status.Pending {
			charged[c.Name] = true
		}
		for _, name := range chargedPods(t, tenantB, tenantB) { // relay pods confirmed meanwhile
			charged[name] = true
		}
		var orphans []string
		for name := range charged {
			if !slices.Contains(got.allowed, name) {
				orphans = append(orphans, name)
				if via[name] != "b" {
					t.Errorf("pod %s was charged and not allowed, but was sent to the live %s", name, via[name])
				}
			}
		}
		for _, name := range got.allowed {
			if !charged[name] {
				t.Errorf("pod %s was allowed but is not charged", name)
			}
		}
		if len(got.allowed)+len(orphans) != hard || len(charged) != hard || len(orphans) == 0 {
			t.Errorf("%d allowed + %d charged by the dead bridge without an answer (%v) = %d charges, want %d, at least one of them b's", len(got.allowed), len(orphans), orphans, len(charged), hard)
		}
		if n := got.refused[full(tenantB)]; n != creates-creates/3-len(got.allowed) {
			t.Errorf("%d refused, want every other answer (%d)", n, creates-creates/3-len(got.allowed))
		}
		t.Logf("%d allowed and answered, %d charged by the killed bridge but never answered %v", len(got.allowed), len(orphans), orphans)
	})

	t.Run("deleting 3 pods frees exactly 3", func(t *testing.T) {
		zero := int64(0)
		for _, name := range allowedA[:3] {
			if err := suite.cluster.Client.CoreV1().Pods(tenantA).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
		}
		// The killed bridge may have led the reconcilers of lgLeaseNS: its lease then
		// expires (15s) before another takes over.
		waitLedger(t, tenantA, 45*time.Second, ledgerState{used: "pods=7", pending: 0}, "pods")
		for i, br := range []*cluster.Bridge{a, sidecar, a} {
			name := fmt.Sprintf("after-delete-%d", i)
			// A bridge's view of the tenant may lag the write that freed the room by a
			// moment: a refusal charges nothing, so asking again is harmless.
			r, took, ok := pollDecision(t, br, 10*time.Second, func() map[string]any { return lgCreate(tenantA, name) }, allowedAnswer)
			if !ok {
				t.Fatalf("create %d after the deletions: %s", i+1, r)
			}
			t.Logf("create %d after the deletions allowed after %v", i+1, took.Round(time.Millisecond))
		}
		for i, br := range []*cluster.Bridge{sidecar, a} {
			if r := decide(t, br, lgCreate(tenantA, fmt.Sprintf("after-delete-%d", 3+i)), deny()); r.Reason() != full(tenantA) {
				t.Errorf("reason %q, want %q", r.Reason(), full(tenantA))
			}
		}
		if s := ledgerOf(t, tenantA, "pods"); s != (ledgerState{used: "pods=10", pending: 3}) {
			t.Errorf("the ledger: %v, want pods=10 used and the 3 new charges pending", s)
		}
	})
}

// lgSidecar starts a bridge configured as interLink's sidecar: the relay on a unix socket
// in front of the plugin's, reaching the API server through a proxy (faultBridge).
func lgSidecar(t *testing.T, extra ...string) (*cluster.Bridge, *cluster.Proxy, *http.Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sb-lg-") // short: a socket path has a ~100 byte limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	plugin, err := cluster.StartPlugin("unix", filepath.Join(dir, "plugin.sock"))
	if err != nil {
		t.Fatalf("starting the stand-in plugin: %v", err)
	}
	t.Cleanup(func() { _ = plugin.Close() })
	listen := "unix://" + filepath.Join(dir, "bridge.sock")
	b, p := faultBridge(t, append([]string{"--interlink.listen=" + listen, "--interlink.plugin-url=" + plugin.URL}, extra...)...)
	client, base := cluster.InterlinkClient(listen)
	return b, p, client, base
}

// killOnCharge SIGKILLs b as soon as the API server holds a pending charge of tenant for
// a pod whose name starts with prefix; the returned func tells which pod's (""
// before). The watch ends with the test.
func killOnCharge(t *testing.T, b *cluster.Bridge, tenant, prefix string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := suite.cluster.Dynamic.Resource(tenantGVR).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + tenant})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	killed := ""
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			var o v1alpha1.OffloadTenant
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &o) != nil {
				continue
			}
			for _, c := range o.Status.Pending {
				if strings.HasPrefix(c.Name, prefix) {
					_ = b.SendSignal(syscall.SIGKILL)
					mu.Lock()
					killed = c.Name
					mu.Unlock()
					return
				}
			}
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return killed
	}
}

// TestLedgerRelayBurst: interLink's burst case. More of a tenant's pods than its quota
// holds are already bound to a virtual node (the scheduler knows nothing of the quota);
// interLink sends each to the relay at once: exactly the quota's worth is forwarded to the
// plugin, the rest refused with the ledger's message, and the reconciler confirms exactly
// the pods forwarded.
func TestLedgerRelayBurst(t *testing.T) {
	const (
		tenant      = "lgr-relay"
		hard, bound = 4, 12
	)
	lgTenant(t, tenant, nil, map[string]string{"pods": "4"})
	var pods []*corev1.Pod
	for i := range bound {
		pods = append(pods, storePod(t, lgPod(tenant, fmt.Sprintf("bound-%02d", i))))
	}
	_, plugin, client, base := relayBridge(t, false, false, lgArgs()...)
	var sends []func() outcome
	for _, p := range pods {
		sends = append(sends, func() outcome { return relayOutcome(client, base, "relay", p) })
	}
	got := tallyOf(burst(sends, nil))
	want := overQuota(tenant, hard+1, "pods", hard, hard, 1)
	if len(got.allowed) != hard || got.refused[want] != bound-hard || len(got.refused) != 1 || len(got.other)+len(got.unanswered) != 0 {
		t.Fatalf("forwarded %v, refused %v, other %v, unanswered %v; want %d forwarded and %d refused with 403 %q",
			got.allowed, got.refused, got.other, got.unanswered, hard, bound-hard, want)
	}
	if n := relayPluginCreates(plugin); n != hard {
		t.Errorf("the plugin received %d creates, want %d", n, hard)
	}
	waitLedger(t, tenant, 30*time.Second, ledgerState{used: "pods=4", pending: 0}, "pods")
	if confirmed := chargedPods(t, tenant, tenant); !slices.Equal(confirmed, got.allowed) {
		t.Errorf("pods confirmed charged %v, want exactly those forwarded %v", confirmed, got.allowed)
	}
	// interLink does not retry a 403, but a refused pod sent again is refused again: the
	// bound pods that were never charged hold nothing, and take no room either.
	for _, p := range pods {
		if !slices.Contains(got.allowed, p.Name) {
			if o := relayOutcome(client, base, "relay", p); o.status != http.StatusForbidden || o.reason != want {
				t.Errorf("%s sent again: %v, want 403 %q", p.Name, o, want)
			}
			break
		}
	}
	if n := relayPluginCreates(plugin); n != hard {
		t.Errorf("the plugin received %d creates, want %d", n, hard)
	}
}

// TestLedgerWebhooks: a pod created with kubectl by a user allowed to offload goes
// through the mutating and the validating webhook, is bound by the scheduler (the binding
// webhook) and is sent by interLink to the relay: it is charged once. A server-side dry
// run is decided and charges nothing.
func TestLedgerWebhooks(t *testing.T) {
	const tenant = "lgr-adm"
	ctx := context.Background()
	c := suite.cluster
	lgTenant(t, tenant, map[string]string{lgLabel: "on"}, map[string]string{"pods": "5"})
	grants, err := c.ApplyYAML(ctx, podEditor(tenant, []rule{podRule("create", "get")}, userSubject("lgr-dana"))+`---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload-dana, namespace: lgr-adm}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: lgr-dana, apiGroup: rbac.authorization.k8s.io}
`)
	if err != nil {
		t.Fatal(err)
	}
	applyAdmissionRBAC(t)
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), grants)
	})
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: tenant, Verb: "create", Resource: "pods"},
		{Namespace: tenant, Verb: "create", Group: "interlink.io", Resource: "pods"},
	} {
		if err := c.WaitForAccess(ctx, "lgr-dana", nil, attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	dana := certUser(t, "lgr-dana")

	ca, certFile, keyFile := webhookServing(t, "e2e-ledger CA")
	// One bridge serves the webhooks and interLink's relay, as the chart's does.
	b, plugin, relay, relayBase := relayBridge(t, false, false, lgArgs("--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile)...)

	// The shipped configurations, under a name of their own, for this namespace only.
	registerScopedWebhooks(t, b.HTTPSURL(), ca.CertPEM, lgConfig, lgLabel)

	// Aimed at the virtual nodes, not placed: the scheduler binds it later.
	aimed := func(name string) *corev1.Pod {
		p := admPod(name, withNodeSelector(map[string]string{"virtual-node.interlink/type": "virtual-kubelet"}),
			withToleration(corev1.Toleration{Key: "virtual-node.interlink/no-schedule", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}))
		p.Namespace, p.Spec.ServiceAccountName = tenant, "runner"
		return p
	}
	// The API server loads webhook configurations asynchronously: wait until a dry run
	// of a pod no one may make (a keyless Exists toleration) is refused by the bridge.
	probe := aimed("probe")
	probe.Spec.Tolerations = append(probe.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists})
	var last error
	if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
		_, last = dana.client.CoreV1().Pods(tenant).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "toleration without key and operator Exists")
	}); !ok {
		t.Fatalf("the webhooks are not in force: last dry run: %v", last)
	}

	charges := func() (charged, already float64) {
		return metric(t, b, "sar_bridge_ledger_charges_total", map[string]string{"result": "charged"}),
			metric(t, b, "sar_bridge_ledger_charges_total", map[string]string{"result": "already"})
	}
	// pending is the tenant's pending charges as uid/name.
	pending := func() []string {
		var out []string
		for _, c := range tenantObject(t, tenant).Status.Pending {
			out = append(out, string(c.UID)+"/"+c.Name)
		}
		return out
	}
	var pod *corev1.Pod
	t.Run("created with kubectl: charged once, by its UID", func(t *testing.T) {
		stdout, stderr, code := dana.kubectlCreate(t, aimed("job-1"))
		wantCreated(t, "lgr-dana, a pod aimed at virtual nodes", stdout, stderr, code, "job-1")
		var err error
		if pod, err = c.Client.CoreV1().Pods(tenant).Get(ctx, "job-1", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if s := ledgerOf(t, tenant, "pods"); s != (ledgerState{used: "pods=1", pending: 1}) {
			t.Errorf("after kubectl create: %v, want pods=1 used, 1 pending", s)
		}
		if got, want := pending(), []string{string(pod.UID) + "/job-1"}; !slices.Equal(got, want) {
			t.Errorf("pending %v, want %v (charged by the validating webhook, with the pod's UID)", got, want)
		}
		if charged, already := charges(); charged != 1 || already != 0 {
			t.Errorf("charges: %v charged, %v already; want 1 and 0 (the mutating webhook charges nothing)", charged, already)
		}
	})
	if pod == nil {
		t.FailNow()
	}
	t.Run("bound by the scheduler: the binding webhook charges nothing more", func(t *testing.T) {
		if err := c.Client.CoreV1().Pods(tenant).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: tenant},
			Target:     corev1.ObjectReference{Kind: "Node", Name: lgVK},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("binding job-1 to %s: %v", lgVK, err)
		}
		if s := ledgerOf(t, tenant, "pods"); s.used != "pods=1" {
			t.Errorf("after the binding: %v, want pods=1 used", s)
		}
		if charged, already := charges(); charged != 1 || already != 1 {
			t.Errorf("charges: %v charged, %v already; want 1 and 1 (the binding decided, found the charge)", charged, already)
		}
		// The reconciler confirms the bound pod: the charge moves onto it.
		waitLedger(t, tenant, 30*time.Second, ledgerState{used: "pods=1", pending: 0}, "pods")
		if got := chargedPods(t, tenant, tenant); !slices.Equal(got, []string{"job-1"}) {
			t.Errorf("pods confirmed charged %v, want [job-1]", got)
		}
	})
	t.Run("interLink's create of the stored pod through the relay charges nothing more", func(t *testing.T) {
		stored, err := c.Client.CoreV1().Pods(tenant).Get(ctx, "job-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if o := relayOutcome(relay, relayBase, "relay", stored); !o.allowed {
			t.Fatalf("relay /create of job-1: %v, want forwarded", o)
		}
		if n := relayPluginCreates(plugin); n != 1 {
			t.Errorf("the plugin received %d creates, want 1", n)
		}
		if s := ledgerOf(t, tenant, "pods"); s != (ledgerState{used: "pods=1", pending: 0}) {
			t.Errorf("after the relay's create: %v, want pods=1 used, none pending", s)
		}
		if charged, already := charges(); charged != 1 || already != 2 {
			t.Errorf("charges: %v charged, %v already; want 1 and 2", charged, already)
		}
	})
	t.Run("kubectl create --dry-run=server charges nothing", func(t *testing.T) {
		before := tenantObject(t, tenant)
		body, err := yaml.Marshal(aimed("job-dry"))
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runCmd(t, string(body), kubectlPath(t), "--kubeconfig", dana.kubeconfig, "create", "--dry-run=server", "-f", "-")
		const warning = "Warning: sar-bridge: dry run decided as the request would be; nothing is reserved\n"
		if want := "pod/job-dry created (server dry run)\n"; code != 0 || stdout != want || stderr != warning {
			t.Fatalf("kubectl create --dry-run=server: exit %d, stdout %q, stderr %q; want %q and the warning %q", code, stdout, stderr, want, warning)
		}
		after := tenantObject(t, tenant)
		if after.ResourceVersion != before.ResourceVersion || ledgerOf(t, tenant, "pods") != (ledgerState{used: "pods=1", pending: 0}) {
			t.Errorf("the dry run changed the ledger: resourceVersion %s → %s, status %+v", before.ResourceVersion, after.ResourceVersion, after.Status)
		}
		if charged, already := charges(); charged != 1 || already != 2 {
			t.Errorf("charges: %v charged, %v already; want 1 and 2 (a dry run never reaches the ledger)", charged, already)
		}
		if _, err := c.Client.CoreV1().Pods(tenant).Get(ctx, "job-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the dry run's pod exists: %v", err)
		}
	})
	t.Run("a burst of 40 creates through the webhooks: exactly the room left, each answered inside timeoutSeconds", func(t *testing.T) {
		webhookBurst(t, dana, tenant, aimed)
	})
}

// webhookBurst sends 40 creates at once through the API server (and so through the
// webhooks, which charge them) as user u, into a tenant of hard.pods 5 holding 1: exactly
// 4 are stored and 36 refused with the ledger's message. It prints the creates' latency
// against the webhooks' timeoutSeconds (issue 41), and fails if any took as long: the
// API server would have refused it for the webhook's timeout, not the quota.
func webhookBurst(t *testing.T, u *admUser, tenant string, aimed func(string) *corev1.Pod) {
	const creates, room = 40, 4
	cfg, err := clientcmd.BuildConfigFromFlags("", u.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // the burst is the API server's and the bridge's, not a client's queue
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := suite.cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), lgConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var timeout time.Duration
	for _, w := range v.Webhooks {
		if w.TimeoutSeconds != nil {
			timeout = max(timeout, time.Duration(*w.TimeoutSeconds)*time.Second)
		}
	}
	latencies := make([]time.Duration, creates)
	errs := make([]error, creates)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			began := time.Now()
			_, errs[i] = cs.CoreV1().Pods(tenant).Create(context.Background(), aimed(fmt.Sprintf("burst-%02d", i)), metav1.CreateOptions{})
			latencies[i] = time.Since(began)
		}()
	}
	close(start)
	wg.Wait()
	full := overQuota(tenant, 6, "pods", 5, 5, 1)
	created, refused := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case strings.Contains(err.Error(), full):
			refused++
		default:
			t.Errorf("create burst-%02d: %v, want stored or refused with %q", i, err, full)
		}
	}
	slices.Sort(latencies)
	p := func(q float64) time.Duration { return latencies[int(q*float64(creates-1))].Round(time.Millisecond) }
	t.Logf("%d creates through the webhooks at once: %d stored, %d refused; latency p50 %v, p99 %v, max %v; the webhooks' timeoutSeconds %v",
		creates, created, refused, p(0.5), p(0.99), latencies[creates-1].Round(time.Millisecond), timeout)
	if created != room || refused != creates-room {
		t.Errorf("%d stored and %d refused, want %d and %d", created, refused, room, creates-room)
	}
	if timeout == 0 || latencies[creates-1] >= timeout {
		t.Errorf("the slowest create took %v, the webhooks' timeout is %v", latencies[creates-1], timeout)
	}
}

// withResources sets the first container's cpu request and limit ("" = unset).
func withResources(request, limit string) podOpt {
	return func(p *corev1.Pod) {
		r := corev1.ResourceRequirements{}
		if request != "" {
			r.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(request)}
		}
		if limit != "" {
			r.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
		}
		p.Spec.Containers[0].Resources = r
	}
}

// TestLedgerWhatAPodHolds: a pod holds its limits where it sets them, else its requests
// (what interLink's SLURM plugin allocates); and what it was charged is kept until it
// ends, whatever a pods/resize does to its spec.
func TestLedgerWhatAPodHolds(t *testing.T) {
	const cpuTenant, resizeTenant = "lgr-cpu", "lgr-resize"
	lgTenant(t, cpuTenant, nil, map[string]string{"cpu": "2"})
	lgTenant(t, resizeTenant, nil, map[string]string{"cpu": "40", "pods": "10"})
	b := newBridge(t, lgArgs()...)

	t.Run("limits over requests", func(t *testing.T) {
		// In order, against hard cpu: 2.
		for _, tc := range []struct {
			name             string
			request, limit   string
			reason, usedThen string // reason "" = allowed
		}{
			// 15 of these and a 16th were all allowed when usage summed requests: 512
			// CPUs on the HPC side for a quota of 2.
			{"request 100m limit 32", "100m", "32", overQuota(cpuTenant, 32, "cpu", 2, 0, 32), "cpu=0"},
			{"request 1 no limit", "1", "", "", "cpu=1"},
			{"request 100m limit 2", "100m", "2", overQuota(cpuTenant, 3, "cpu", 2, 1, 2), "cpu=1"},
			{"request 100m limit 1", "100m", "1", "", "cpu=2"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := decide(t, b, lgCreate(cpuTenant, strings.ReplaceAll(tc.name, " ", "-"), withResources(tc.request, tc.limit)), want{allowed: tc.reason == ""})
				if tc.reason != "" && r.Reason() != tc.reason {
					t.Errorf("reason %q, want %q", r.Reason(), tc.reason)
				}
				if s := ledgerOf(t, cpuTenant, "cpu"); s.used != tc.usedThen {
					t.Errorf("then: %v, want %s used", s, tc.usedThen)
				}
			})
		}
	})

	t.Run("a shrinking pods/resize frees nothing", func(t *testing.T) {
		decide(t, b, lgCreate(resizeTenant, "big", withResources("100m", "32")), allow())
		storePod(t, lgPod(resizeTenant, "big", withResources("100m", "32")))
		waitLedger(t, resizeTenant, 30*time.Second, ledgerState{used: "pods=1,cpu=32", pending: 0}, "pods", "cpu")
		p, err := suite.cluster.Client.CoreV1().Pods(resizeTenant).Get(context.Background(), "big", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Annotations["sar-bridge.io/charged-amounts"]; got != "cpu=32,memory=1Mi,pods=1" || p.Labels[chargedLabel] != resizeTenant {
			t.Fatalf("the confirmed pod: labels %v, charged amounts %q; want charged to %s with cpu=32,memory=1Mi,pods=1", p.Labels, got, resizeTenant)
		}

		rounds := metric(t, b, "sar_bridge_ledger_reconciles_total", nil)
		stdout, stderr, code := kubectlCmd(t)("", "-n", resizeTenant, "patch", "pod", "big", "--subresource=resize",
			"-p", `{"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"1"}}}]}}`)
		if code != 0 || stdout != "pod/big patched\n" {
			t.Fatalf("kubectl patch --subresource=resize: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		p, err = suite.cluster.Client.CoreV1().Pods(resizeTenant).Get(context.Background(), "big", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if lim := p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; lim.String() != "1" {
			t.Fatalf("after the resize the pod's cpu limit is %s, want 1", lim.String())
		}
		// Rounds after the resize (its pod event, then the 2s interval) have recalculated
		// the usage from the pods.
		// (This bridge may wait for the lease of lgLeaseNS to expire first: 15s.)
		took, ok := poll(40*time.Second, 100*time.Millisecond, func() bool {
			return metric(t, b, "sar_bridge_ledger_reconciles_total", nil) >= rounds+3
		})
		if !ok {
			t.Fatalf("the reconciler made no round after the resize")
		}
		t.Logf("3 rounds of the reconciler after the resize within %v", took.Round(time.Millisecond))
		if s := ledgerOf(t, resizeTenant, "pods", "cpu"); s != (ledgerState{used: "pods=1,cpu=32", pending: 0}) {
			t.Errorf("after the resize: %v, want the charged pods=1,cpu=32 used", s)
		}
		// The room a shrink would have freed is not there.
		r := decide(t, b, lgCreate(resizeTenant, "next", withResources("100m", "9")), deny())
		if want := overQuota(resizeTenant, 41, "cpu", 40, 32, 9); r.Reason() != want {
			t.Errorf("reason %q, want %q", r.Reason(), want)
		}
	})
}

// TestLedgerAPIServerDown: a bridge whose writes of the ledger do not reach the API
// server (503 from it, or the connection gone) answers a quota-bearing create with 503,
// never an allow, and nothing is charged; once the API server takes writes again the next
// create is charged once.
func TestLedgerAPIServerDown(t *testing.T) {
	const tenant = "lgr-down"
	lgTenant(t, tenant, nil, map[string]string{"pods": "5"})
	proxy, err := suite.cluster.StartHTTPFaultProxy()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	kc := filepath.Join(t.TempDir(), "via-http-proxy.kubeconfig")
	if err := proxy.WriteKubeconfig(context.Background(), suite.cluster, kc, "sar-bridge", "sar-bridge", time.Hour); err != nil {
		t.Fatal(err)
	}
	b := startTestBridge(t, kc, baseArgs(lgArgs()...)...)
	waitCounted(t, tenant) // the bridges' count of its running pods is written before any fault
	tenantPath := "/apis/sar-bridge.io/v1alpha1/offloadtenants/" + tenant
	statusPath := tenantPath + "/status"
	for i, tc := range []struct {
		name  string
		fault cluster.HTTPFault
		reads bool // the reads of the tenant fail too: client-go retries them until the write's timeout
	}{
		{"the API server answers 503", cluster.FaultUnavailable, false},
		{"the connection is dropped", cluster.FaultDrop, false},
		// The write never starts, its read waiting until the write's timeout (8s): an
		// attempt that ends with the context is an error, never a write that looks done
		// (client-go's RetryOnConflict returns nil for it: the create was allowed).
		{"the reads of the tenant go unanswered", cluster.FaultHang, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy.SetRule(func(r *http.Request) cluster.HTTPFault {
				write := r.URL.Path == statusPath && (r.Method == http.MethodPut || r.Method == http.MethodPatch)
				read := tc.reads && r.URL.Path == tenantPath && r.Method == http.MethodGet
				if write || read {
					return tc.fault
				}
				return cluster.FaultNone
			})
			defer proxy.SetRule(nil)
			faulted, errorsBefore := proxy.Faulted(), metric(t, b, "sar_bridge_ledger_writes_total", map[string]string{"result": "error"})
			r, err := b.Decide(lgCreate(tenant, fmt.Sprintf("refused-%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			checkError(t, r, http.StatusServiceUnavailable, "")
			if want := fmt.Sprintf("charging tenant %q", tenant); !strings.Contains(r.Error.Message, want) {
				t.Errorf("message %q does not say %q", r.Error.Message, want)
			}
			t.Logf("answer: %s", r)
			if proxy.Faulted() == faulted {
				t.Errorf("no write of the ledger reached the proxy")
			}
			if got := metric(t, b, "sar_bridge_ledger_writes_total", map[string]string{"result": "error"}); got != errorsBefore+1 {
				t.Errorf("sar_bridge_ledger_writes_total{result=error} %v, want %v", got, errorsBefore+1)
			}
			if s := ledgerOf(t, tenant, "pods"); s != (ledgerState{used: "pods=0", pending: 0}) {
				t.Errorf("the ledger after the 503: %v, want nothing charged", s)
			}
		})
	}
	// The API server takes writes again: one create, one charge.
	decide(t, b, lgCreate(tenant, "after"), allow())
	if s := ledgerOf(t, tenant, "pods"); s != (ledgerState{used: "pods=1", pending: 1}) {
		t.Errorf("after the outage: %v, want exactly the one create charged", s)
	}
}

// TestLedgerLeaseHandover: a replica stopped (SIGTERM, as a rollout stops a pod) hands
// the reconciler's lease over at once — the lease released, the other replica leading
// well before the 15s lease would have expired — so charges keep being confirmed through
// a rollout.
func TestLedgerLeaseHandover(t *testing.T) {
	lgTenant(t, "lgr-handover", nil, map[string]string{"pods": "10"}) // the lease namespace's RBAC
	one, two := newBridge(t, lgArgs()...), newBridge(t, lgArgs()...)
	leader := func() (*cluster.Bridge, *cluster.Bridge) {
		switch {
		case metric(t, one, "sar_bridge_ledger_leader", nil) == 1:
			return one, two
		case metric(t, two, "sar_bridge_ledger_leader", nil) == 1:
			return two, one
		}
		return nil, nil
	}
	var lead, other *cluster.Bridge
	if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool { lead, other = leader(); return lead != nil }); !ok {
		t.Fatal("neither replica leads")
	}
	leases := suite.cluster.Client.CoordinationV1().Leases(lgLeaseNS)
	held, err := leases.Get(context.Background(), "sar-bridge-ledger", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	lead.Stop()
	stopped := time.Since(began)
	took, ok := poll(20*time.Second, 50*time.Millisecond, func() bool { return metric(t, other, "sar_bridge_ledger_leader", nil) == 1 })
	after, err := leases.Get(context.Background(), "sar-bridge-ledger", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the leader stopped in %v; the other leads %v after the SIGTERM: lease %s → %s", stopped.Round(time.Millisecond),
		(stopped + took).Round(time.Millisecond), *held.Spec.HolderIdentity, *after.Spec.HolderIdentity)
	// Released, the lease is taken at the other's next try (every 2s, jittered up to
	// 4.4s); not released, only once it expired (15s) and then at a try.
	if !ok || stopped+took > 10*time.Second {
		t.Errorf("the other replica led %v after the leader was sent SIGTERM (took over: %v), want well before the lease expires", (stopped + took).Round(time.Millisecond), ok)
	}
}
