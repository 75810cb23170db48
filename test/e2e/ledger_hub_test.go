package e2e

// One tenant, one quota, many clusters (issue 43), end to end: a second real
// kube-apiserver with its own etcd is member cluster b and the hub (its OffloadTenants
// and ledgers); the suite's cluster is member a, whose bridge reaches the hub through a
// proxy (--tenants.kubeconfig). Each cluster's bridge decides its own pods against its
// own RBAC, and both charge the hub's one ledger; the hub's kube-apiserver is stopped
// once and started again.
//
// The hub is cluster b rather than the suite's cluster: the suite's shared bridge
// reconciles every OffloadTenant of the suite's cluster without a cluster name, and a
// hub's tenants must be reconciled only by bridges that have one.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// hubMember is the objects each member cluster needs for a tenant namespace: the
// namespace, its runner allowed to offload (interlink-offloader, manifests/examples).
func hubMember(ns string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n", ns) + offloaderYAML(ns)
}

// startHubCluster starts cluster b: a control plane of its own with manifests/base
// (the CRD, the bridge's ServiceAccount and RBAC), manifests/examples and the ledger
// tests' fixtures (the virtual node, the lease namespace).
func startHubCluster(t *testing.T, namespaces ...string) *cluster.Cluster {
	t.Helper()
	ctx := context.Background()
	binDir, err := cluster.ControlPlaneBinDir(ctx, suite.root, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	workDir, err := os.MkdirTemp(suite.workDir, "cluster-b-") // a fresh one each run (-count)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Start(cluster.Options{BinDir: binDir, WorkDir: workDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Logf("stopping cluster b: %v", err)
		}
	})
	if _, err := c.ApplyDir(ctx, filepath.Join(suite.root, "manifests", "base"), cluster.SkipKinds("Deployment", "Service")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ApplyDir(ctx, filepath.Join(suite.root, "manifests", "examples"), nil); err != nil {
		t.Fatal(err)
	}
	docs := []string{lgFixtures}
	for _, ns := range namespaces {
		docs = append(docs, hubMember(ns))
	}
	if _, err := c.ApplyYAML(ctx, strings.Join(docs, "\n---\n")); err != nil {
		t.Fatal(err)
	}
	return c
}

// hubLedger is a hub tenant's ledger as the test compares it: pods used, pending
// charges, and the pods of each cluster (status.clustersUsed).
type hubLedger struct {
	used     string
	pending  int
	clusters string
}

func hubLedgerOf(t *testing.T, hub *cluster.Cluster, name string) hubLedger {
	t.Helper()
	o := tenantObjectIn(t, hub, name)
	q := o.Status.Used[corev1.ResourcePods]
	return hubLedger{used: q.String(), pending: len(o.Status.Pending), clusters: o.Status.ClustersUsed}
}

func waitHubLedger(t *testing.T, hub *cluster.Cluster, name string, within time.Duration, want hubLedger) {
	t.Helper()
	var got hubLedger
	took, ok := poll(within, 100*time.Millisecond, func() bool {
		got = hubLedgerOf(t, hub, name)
		return got == want
	})
	if !ok {
		t.Fatalf("hub tenant %s: %+v after %v, want %+v (status %+v)", name, got, took.Round(time.Millisecond), want, tenantObjectIn(t, hub, name).Status)
	}
	t.Logf("hub tenant %s: %+v after %v", name, want, took.Round(time.Millisecond))
}

// storePodIn creates the pod in a cluster, bound to the virtual node.
func storePodIn(t *testing.T, client kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	p = p.DeepCopy()
	p.Spec.NodeName = lgVK
	if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", p.Namespace, p.Name, err)
	}
}

func authzCreatePods(ns string) authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "interlink.io", Resource: "pods"}
}

func clusterUID(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Get(context.Background(), metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(ns.UID)
}

// TestLedgerHubTwoClusters: a tenant with hard.pods 10 on the hub gets 40 concurrent
// creates, half through each cluster's bridge: exactly 10 allowed, 30 refused with the
// ledger's message, the usage shown per cluster; deleting one cluster's pods frees
// exactly that many; the hub cut off from cluster a's bridge → 503 naming the hub for
// the quota tenant, allows for a tenant without quota; the hub back → charging resumes
// with nothing lost. A second cluster claiming a name held is refused at start-up, and
// `sar-bridge tenants release-cluster` takes a member out of the ledger.
func TestLedgerHubTwoClusters(t *testing.T) {
	const (
		tenant, free  = "lgr-hub", "lgr-hub-free"
		hard, creates = 10, 40
	)
	ctx := context.Background()
	hub := startHubCluster(t, tenant, free)
	// Cluster a: the same namespaces and runners, its own RBAC; no OffloadTenant.
	if _, err := suite.cluster.ApplyYAML(ctx, strings.Join([]string{lgFixtures, hubMember(tenant), hubMember(free)}, "\n---\n")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		for _, ns := range []string{tenant, free} {
			_ = suite.cluster.Client.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		}
	})
	// The tenants, on the hub only.
	tenants := mustYAML(t, map[string]any{"apiVersion": "sar-bridge.io/v1alpha1", "kind": "OffloadTenant", "metadata": map[string]any{"name": tenant},
		"spec": map[string]any{"group": "interlink.io", "hard": map[string]string{"pods": "10"}}}) + "\n---\n" +
		mustYAML(t, map[string]any{"apiVersion": "sar-bridge.io/v1alpha1", "kind": "OffloadTenant", "metadata": map[string]any{"name": free},
			"spec": map[string]any{"group": "interlink.io"}})
	if _, err := hub.ApplyYAML(ctx, tenants); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*cluster.Cluster{suite.cluster, hub} {
		for _, ns := range []string{tenant, free} {
			if err := c.WaitForAccess(ctx, sa(ns, "runner"), cluster.ServiceAccountGroups(ns), authzCreatePods(ns), true, 30*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Cluster b's bridge: its own cluster is the hub. Cluster a's: the hub through a proxy.
	dir := t.TempDir()
	kubeconfigB := filepath.Join(dir, "b.kubeconfig")
	if _, err := hub.WriteServiceAccountKubeconfig(ctx, kubeconfigB, "sar-bridge", "sar-bridge", time.Hour); err != nil {
		t.Fatal(err)
	}
	proxy, err := cluster.StartProxy(hub.Host())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	hubViaProxy := filepath.Join(dir, "hub-via-proxy.kubeconfig")
	if err := hub.WriteServiceAccountKubeconfigVia(ctx, hubViaProxy, "sar-bridge", "sar-bridge", proxy.URL(), time.Hour); err != nil {
		t.Fatal(err)
	}
	b := startTestBridge(t, kubeconfigB, baseArgs(lgArgs("--tenants.cluster-name=b")...)...)
	a := newBridge(t, lgArgs("--tenants.kubeconfig="+hubViaProxy, "--tenants.cluster-name=a")...)
	bridges := map[string]*cluster.Bridge{"a": a, "b": b}
	storeIn := map[string]kubernetes.Interface{"a": suite.cluster.Client, "b": hub.Client}

	t.Run("a second cluster under a name held is refused at start-up, naming both", func(t *testing.T) {
		hubDirect := filepath.Join(dir, "hub.kubeconfig")
		if _, err := hub.WriteServiceAccountKubeconfig(ctx, hubDirect, "sar-bridge", "sar-bridge", time.Hour); err != nil {
			t.Fatal(err)
		}
		bridgeSeq++
		c, err := cluster.StartBridge(cluster.BridgeOptions{Binary: suite.binary, Kubeconfig: suite.kubeconfig,
			Args:    baseArgs(lgArgs("--tenants.kubeconfig="+hubDirect, "--tenants.cluster-name=b")...),
			LogPath: filepath.Join(suite.workDir, fmt.Sprintf("bridge-%02d-hub-name-taken.log", bridgeSeq))})
		if c != nil {
			defer c.Stop()
		}
		if err == nil {
			t.Fatal("a bridge of cluster a claiming the name b started")
		}
		log := c.Log() // logfmt: the message's quotes are escaped
		for _, want := range []string{`is held on the hub (Lease lgr-lease/sar-bridge-cluster-b) by the cluster whose kube-system namespace has UID`,
			clusterUID(t, hub.Client), "this cluster's is \\\"" + clusterUID(t, suite.cluster.Client), "(API server " + hub.Host(), "(API server " + suite.cluster.Host()} {
			if !strings.Contains(log, want) {
				t.Errorf("the refused bridge's log does not say %q:\n%s", want, tail(log, 20))
			}
		}
	})

	full := overQuota(tenant, hard+1, "pods", hard, hard, 1)
	allowedIn := map[string][]string{}
	t.Run("40 concurrent creates through both clusters' bridges: exactly 10 allowed", func(t *testing.T) {
		var sends []func() outcome
		for i := range creates {
			via := []string{"a", "b"}[i%2]
			name := fmt.Sprintf("%s-%02d", via, i)
			sends = append(sends, func() outcome { return decideOutcome(bridges[via], via, name, lgCreate(tenant, name)) })
		}
		began := time.Now()
		got := tallyOf(burst(sends, nil))
		t.Logf("%d creates answered in %v: allowed %v", creates, time.Since(began).Round(time.Millisecond), got.allowed)
		if len(got.allowed) != hard || got.refused[full] != creates-hard || len(got.refused) != 1 || len(got.other) != 0 || len(got.unanswered) != 0 {
			t.Fatalf("allowed %d %v, refused %v, other %v, unanswered %v; want exactly %d allowed and %d refused with %q",
				len(got.allowed), got.allowed, got.refused, got.other, got.unanswered, hard, creates-hard, full)
		}
		for _, name := range got.allowed {
			via := name[:1]
			allowedIn[via] = append(allowedIn[via], name)
		}
		// Each cluster's bridge confirms its own pods once they are stored.
		for via, names := range allowedIn {
			for _, name := range names {
				storePodIn(t, storeIn[via], lgPod(tenant, name))
			}
		}
		waitHubLedger(t, hub, tenant, 30*time.Second, hubLedger{used: "10", pending: 0,
			clusters: fmt.Sprintf("a=%d,b=%d", len(allowedIn["a"]), len(allowedIn["b"]))})
	})
	if t.Failed() {
		return
	}

	t.Run("kubectl get -o wide and describe on the hub show the usage per cluster", func(t *testing.T) {
		admin := filepath.Join(t.TempDir(), "hub-admin.kubeconfig")
		if err := hub.WriteAdminKubeconfig(admin); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runCmd(t, "", kubectlPath(t), "--kubeconfig", admin, "get", "otenant", tenant, "-o", "wide")
		if code != 0 {
			t.Fatalf("kubectl get: exit %d, %s", code, stderr)
		}
		t.Logf("kubectl get otenant %s -o wide:\n%s", tenant, stdout)
		// Columns may be empty (CPU USED): the row's fields alone do not line up.
		header, row := tableRow(stdout, tenant)
		if want := fmt.Sprintf("a=%d,b=%d", len(allowedIn["a"]), len(allowedIn["b"])); !slices.Contains(header, "CLUSTERS") || !slices.Contains(row, want) {
			t.Errorf("no CLUSTERS column showing %s in:\n%s", want, stdout)
		}
		// kubectl describe: each member's entry of status.clusters, with what it uses.
		stdout, stderr, code = runCmd(t, "", kubectlPath(t), "--kubeconfig", admin, "describe", "otenant", tenant)
		if code != 0 {
			t.Fatalf("kubectl describe: exit %d, %s", code, stderr)
		}
		for _, c := range []string{"a", "b"} {
			want := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+Name:\s+%s\n\s+Used:\n(?:\s+\w+:\s+\S+\n)*?\s+Pods:\s+%d$`, c, len(allowedIn[c])))
			if !want.MatchString(stdout) {
				t.Errorf("kubectl describe shows no entry of cluster %s using %d pods (%s) in:\n%s", c, len(allowedIn[c]), want, stdout)
			}
		}
	})

	// The cluster that holds more of the pods (at least 5) deletes them.
	freed, other := "a", "b"
	if len(allowedIn["b"]) > len(allowedIn["a"]) {
		freed, other = "b", "a"
	}
	n := len(allowedIn[freed])
	t.Run("deleting one cluster's pods frees exactly that many", func(t *testing.T) {
		zero := int64(0)
		for _, name := range allowedIn[freed] {
			if err := storeIn[freed].CoreV1().Pods(tenant).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
		}
		clusters := map[string]int{freed: 0, other: hard - n}
		waitHubLedger(t, hub, tenant, 30*time.Second, hubLedger{used: fmt.Sprint(hard - n), pending: 0,
			clusters: fmt.Sprintf("a=%d,b=%d", clusters["a"], clusters["b"])})
	})
	if t.Failed() {
		return
	}

	t.Run("the hub stopped: 503 naming the hub for the quota tenant, allows without quota", func(t *testing.T) {
		// The hub's kube-apiserver stopped (etcd keeps its data): cluster a's bridge
		// reaches it through the proxy, which now finds nothing listening.
		if err := hub.StopAPIServer(2 * time.Second); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hub.StartAPIServer() }) // whatever fails below
		wantMsg := fmt.Sprintf("charging tenant %q in its ledger on the hub %s (--tenants.kubeconfig)", tenant, proxy.URL())
		var last *cluster.Response
		i := 0
		if _, ok := poll(20*time.Second, 200*time.Millisecond, func() bool {
			i++
			r, err := a.Decide(lgCreate(tenant, fmt.Sprintf("cut-%02d", i)))
			if err != nil {
				t.Fatal(err)
			}
			last = r
			if allowedAnswer(r) {
				t.Fatalf("cut-%02d allowed with the hub stopped: %s", i, r) // charged nowhere
			}
			return r.Status == http.StatusServiceUnavailable
		}); !ok {
			t.Fatalf("no 503 from cluster a's bridge with the hub stopped; last answer %s", last)
		}
		if !strings.Contains(last.Error.Message, wantMsg) {
			t.Errorf("503 message %q does not say %q", last.Error.Message, wantMsg)
		}
		t.Logf("answer: %s", last)
		decide(t, a, lgCreate(free, "free-1"), allow())
	})

	t.Run("the hub back: charging resumes with nothing lost", func(t *testing.T) {
		if err := hub.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		// The creates answered 503 charged nothing.
		if got := hubLedgerOf(t, hub, tenant); got.used != fmt.Sprint(hard-n) || got.pending != 0 {
			t.Errorf("the ledger once the hub is back: %+v, want %d used, nothing pending", got, hard-n)
		}
		var last outcome
		if _, ok := poll(20*time.Second, 200*time.Millisecond, func() bool {
			last = decideOutcome(a, "a", "resume-first", lgCreate(tenant, "resume-first"))
			return last.allowed
		}); !ok {
			t.Fatalf("cluster a's bridge does not charge again: %v", last)
		}
		// n-1 rooms left: n+3 creates through both bridges, exactly n-1 allowed.
		var sends []func() outcome
		for i := range n + 3 {
			via := []string{"a", "b"}[i%2]
			name := fmt.Sprintf("resume-%s-%02d", via, i)
			sends = append(sends, func() outcome { return decideOutcome(bridges[via], via, name, lgCreate(tenant, name)) })
		}
		got := tallyOf(burst(sends, nil))
		if len(got.allowed) != n-1 || got.refused[full] != 4 || len(got.refused) != 1 || len(got.other) != 0 || len(got.unanswered) != 0 {
			t.Fatalf("allowed %d %v, refused %v, other %v, unanswered %v; want exactly %d allowed and 4 refused with %q",
				len(got.allowed), got.allowed, got.refused, got.other, got.unanswered, n-1, full)
		}
		o := tenantObjectIn(t, hub, tenant)
		if used := o.Status.Used[corev1.ResourcePods]; used.String() != "10" {
			t.Errorf("the ledger: %s pods used, want 10 (status %+v)", used.String(), o.Status)
		}
		for _, c := range o.Status.Pending {
			if strings.HasPrefix(c.Name, "cut-") {
				t.Errorf("a create answered 503 was charged: %+v", c)
			}
		}
		// Stored, each in its cluster: confirmed by each cluster's reconciler, every
		// cluster's part counted once.
		held := map[string]int{other: hard - n}
		for _, name := range append(got.allowed, "resume-first") {
			via := "a"
			if strings.HasPrefix(name, "resume-b-") {
				via = "b"
			}
			held[via]++
			storePodIn(t, storeIn[via], lgPod(tenant, name))
		}
		waitHubLedger(t, hub, tenant, 30*time.Second, hubLedger{used: "10", pending: 0, clusters: fmt.Sprintf("a=%d,b=%d", held["a"], held["b"])})
	})
	if t.Failed() {
		return
	}

	t.Run("sar-bridge tenants release-cluster takes a member that is gone out of the ledger", func(t *testing.T) {
		a.Stop() // cluster a is gone: nothing recounts its part any more
		before := tenantObjectIn(t, hub, tenant)
		var partA corev1.ResourceList
		for _, e := range before.Status.Clusters {
			if e.Name == "a" {
				partA = e.Used
			}
		}
		pendingA := 0
		for _, c := range before.Status.Pending {
			if c.Cluster == "a" {
				pendingA++
			}
		}
		admin := filepath.Join(t.TempDir(), "hub-admin.kubeconfig")
		if err := hub.WriteAdminKubeconfig(admin); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runCmd(t, "", suite.binary, "tenants", "release-cluster", "a", "--tenants.kubeconfig", admin, "--quota.lease-namespace", lgLeaseNS)
		if code != 0 {
			t.Fatalf("release-cluster: exit %d, stderr %s", code, stderr)
		}
		usedA, usedBefore := partA[corev1.ResourcePods], before.Status.Used[corev1.ResourcePods]
		var parts []string
		for name, q := range partA {
			parts = append(parts, string(name)+"="+q.String())
		}
		slices.Sort(parts)
		if want := fmt.Sprintf("tenant %s: released %d pending charges, 0 quota slices, usage %s of cluster a\n", tenant, pendingA, strings.Join(parts, ",")); !strings.Contains(stdout, want) || usedA.IsZero() {
			t.Errorf("release-cluster printed %q, want a line %q", stdout, want)
		}
		after := tenantObjectIn(t, hub, tenant)
		wantUsed := usedBefore.DeepCopy()
		wantUsed.Sub(usedA)
		if used := after.Status.Used[corev1.ResourcePods]; used.Cmp(wantUsed) != 0 || len(after.Status.Clusters) != 1 || after.Status.Clusters[0].Name != "b" {
			t.Errorf("after release: used %s, clusters %+v; want %s and b's alone", used.String(), after.Status.Clusters, wantUsed.String())
		}
		if _, err := hub.Client.CoordinationV1().Leases(lgLeaseNS).Get(ctx, "sar-bridge-cluster-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the claim of name a: %v, want it removed", err)
		}
	})
}
