package e2e

// The quota ledger's reconciler (issue 33) on the real API server, in process, with the
// bridge's own identity (manifests/base's ClusterRole and Role): two reconcilers, one
// Lease, one active; charges confirmed on the pods (label and amounts), a charge whose
// pod never appears released after the pending timeout, a deleted or failed pod
// released, and the lease handed over when the leader stops.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/internal/tenants"
	"github.com/sar-bridge/sar-bridge/internal/virtualpods"
)

const (
	lrNS    = "ledger-e2e" // its own tenant, by name
	lrVK    = "ledger-vk"
	lrLease = "ledger-e2e" // not the bridges' lease: the suite's bridges may run their own
)

const lrFixtures = `
apiVersion: v1
kind: Namespace
metadata: {name: ledger-e2e}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: ledger-e2e}
---
apiVersion: v1
kind: Node
metadata:
  name: ledger-vk
  labels:
    virtual-node.interlink/type: virtual-kubelet
---
apiVersion: sar-bridge.io/v1alpha1
kind: OffloadTenant
metadata: {name: ledger-e2e}
spec:
  group: interlink.io
  hard: {pods: "10", cpu: "20"}
`

// lrClients are the bridge's clients: its ServiceAccount, nothing more.
type lrClients struct {
	ctrl    client.Client
	kube    kubernetes.Interface
	dynamic dynamic.Interface
}

func lrSetUp(t *testing.T) lrClients {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, lrFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	// A quota left behind would keep every later bridge's reconciler following pods.
	t.Cleanup(func() {
		_ = suite.cluster.Dynamic.Resource(tenantGVR).Delete(context.Background(), lrNS, metav1.DeleteOptions{})
	})
	cfg, err := suite.cluster.ServiceAccountConfig(ctx, "sar-bridge", "sar-bridge", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Two replicas renewing a lease every 200ms: client-go's default 5 QPS would make
	// the rounds wait for the lease traffic.
	cfg.QPS, cfg.Burst = 100, 200
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	var c lrClients
	if c.ctrl, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// lrReplica is one reconciler, as a bridge replica runs it.
type lrReplica struct {
	r      *tenants.Reconciler
	cancel context.CancelFunc
	done   chan struct{}
}

// lrRunningPods is the bridge's live list of the virtual nodes' pods (virtualpods.List),
// what the ledger's first charge counts the pods already running with.
type lrRunningPods struct{ opts virtualpods.Options }

func (r lrRunningPods) VirtualPods(ctx context.Context) ([]*corev1.Pod, error) {
	return virtualpods.List(ctx, r.opts)
}

func lrRunning(t *testing.T, ctx context.Context, c lrClients) lrRunningPods {
	t.Helper()
	nodes := informers.NewSharedInformerFactory(c.kube, 0).Core().V1().Nodes().Informer()
	go nodes.RunWithContext(ctx)
	if _, ok := poll(10*time.Second, 20*time.Millisecond, nodes.HasSynced); !ok {
		t.Fatal("the node informer never synced")
	}
	return lrRunningPods{virtualpods.Options{Client: c.kube, Nodes: nodes,
		IsVirtual: func(n *corev1.Node) bool { return n.Labels["virtual-node.interlink/type"] == "virtual-kubelet" }}}
}

func lrStart(t *testing.T, c lrClients, dir *tenants.Directory, name string) *lrReplica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nodes := informers.NewSharedInformerFactory(c.kube, 0).Core().V1().Nodes().Informer()
	go nodes.RunWithContext(ctx)
	r, err := tenants.NewReconciler(tenants.ReconcilerOptions{
		Client: c.ctrl,
		Pods: func() (tenants.PodSource, error) {
			return virtualpods.New(virtualpods.Options{
				Client: c.kube, Nodes: nodes, Transform: tenants.PodTransform,
				IsVirtual: func(n *corev1.Node) bool { return n.Labels["virtual-node.interlink/type"] == "virtual-kubelet" },
			})
		},
		Directory: dir, TenantOf: func(ns string) string { return ns },
		LeaseClient: c.kube, LeaseNamespace: "sar-bridge", LeaseName: lrLease, Identity: name,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 200 * time.Millisecond,
		PendingTimeout: 6 * time.Second, Interval: 500 * time.Millisecond, Debounce: 50 * time.Millisecond,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rep := &lrReplica{r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rep.done)
		if err := r.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(rep.stop)
	return rep
}

func (rep *lrReplica) stop() {
	rep.cancel()
	<-rep.done
}

// lrPod creates a pod of the tenant bound to the virtual node (it stays Pending: no
// kubelet) and returns it as stored.
func lrPod(t *testing.T, name, cpu string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: lrNS, Name: name},
		Spec: corev1.PodSpec{NodeName: lrVK, Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse(cpu)}}}}},
	}
	stored, err := suite.cluster.Client.CoreV1().Pods(lrNS).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	zero := int64(0)
	t.Cleanup(func() {
		_ = suite.cluster.Client.CoreV1().Pods(lrNS).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return stored
}

func lrCharge(t *testing.T, l *tenants.Ledger, name string, uid types.UID, cpu string) {
	t.Helper()
	err := l.Charge(context.Background(), tenants.Request{Tenant: lrNS, UID: uid, Namespace: lrNS, Name: name, Node: lrVK,
		Amounts: tenants.PodAmounts(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse(cpu)}}}}}})})
	if err != nil {
		t.Fatalf("charging %s: %v", name, err)
	}
}

func lrStatus(t *testing.T, c lrClients) v1alpha1.OffloadTenantStatus {
	t.Helper()
	var o v1alpha1.OffloadTenant
	if err := c.ctrl.Get(context.Background(), client.ObjectKey{Name: lrNS}, &o); err != nil {
		t.Fatal(err)
	}
	return o.Status
}

// lrUsed is "<pods>/<cpu> pending <n>" of the tenant's status.
func lrUsed(t *testing.T, c lrClients) string {
	s := lrStatus(t, c)
	pods, cpu := s.Used["pods"], s.Used["cpu"]
	return fmt.Sprintf("%s/%s pending %d", pods.String(), cpu.String(), len(s.Pending))
}

func lrWaitUsed(t *testing.T, c lrClients, want string) {
	t.Helper()
	if took, ok := poll(20*time.Second, 50*time.Millisecond, func() bool { return lrUsed(t, c) == want }); !ok {
		t.Fatalf("used %q after %v, want %q (status %+v)", lrUsed(t, c), took, want, lrStatus(t, c))
	} else {
		t.Logf("used %s after %v", want, took.Round(time.Millisecond))
	}
}

func TestLedgerReconciler(t *testing.T) {
	c := lrSetUp(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := tenants.NewDirectory(c.dynamic, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	go dir.Run(ctx)
	one, two := lrStart(t, c, dir, "replica-one"), lrStart(t, c, dir, "replica-two")
	leader := func() *lrReplica {
		if one.r.Leading() && two.r.Leading() {
			t.Fatal("two reconcilers lead at once")
		}
		if two.r.Leading() {
			return two
		}
		if one.r.Leading() {
			return one
		}
		return nil
	}
	if _, ok := poll(20*time.Second, 20*time.Millisecond, func() bool { return leader() != nil }); !ok {
		t.Fatal("no reconciler leads")
	}
	first := leader()
	lease, err := suite.cluster.Client.CoordinationV1().Leases("sar-bridge").Get(ctx, lrLease, metav1.GetOptions{})
	if err != nil || *lease.Spec.HolderIdentity != first.r.Identity() {
		t.Fatalf("lease %v, %v: want held by %s", lease, err, first.r.Identity())
	}

	// Two pods charged as the validating webhook charges them (stored, with their
	// UIDs), and a charge whose pod never appears.
	ledger := tenants.NewLedger(c.ctrl, nil, tenants.LedgerOptions{Running: lrRunning(t, ctx, c), TenantOf: func(ns string) string { return ns }})
	a, b := lrPod(t, "job-a", "2"), lrPod(t, "job-b", "3")
	d := lrPod(t, "job-d", "1") // charged later: until then it counts nothing
	lrCharge(t, ledger, "job-a", a.UID, "2")
	lrCharge(t, ledger, "job-b", b.UID, "3")
	lrCharge(t, ledger, "job-ghost", "uid-ghost", "4")

	t.Run("confirmed on the pods", func(t *testing.T) {
		lrWaitUsed(t, c, "3/9 pending 1")
		for _, p := range []struct{ name, amounts string }{{"job-a", "cpu=2,memory=1Mi,pods=1"}, {"job-b", "cpu=3,memory=1Mi,pods=1"}} {
			got, err := suite.cluster.Client.CoreV1().Pods(lrNS).Get(ctx, p.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Labels[tenants.ChargedLabel] != lrNS || got.Annotations[tenants.ChargedAmountsAnnotation] != p.amounts {
				t.Errorf("pod %s: labels %v annotations %v, want charged %s", p.name, got.Labels, got.Annotations, p.amounts)
			}
		}
	})
	t.Run("a charge whose pod never appears is released after the pending timeout", func(t *testing.T) {
		lrWaitUsed(t, c, "2/5 pending 0")
	})
	t.Run("a merge patch naming another UID changes nothing", func(t *testing.T) {
		// What the reconciler's patch relies on: a pod created again under the name is
		// not marked charged.
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": "another-uid", "labels": map[string]string{"probe": "x"}}})
		err := c.ctrl.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: lrNS, Name: "job-a"}}, client.RawPatch(types.MergePatchType, body))
		if err == nil || !(apierrors.IsConflict(err) || apierrors.IsInvalid(err)) {
			t.Fatalf("patch with another UID: %v, want a conflict or invalid", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("a failed pod is released", func(t *testing.T) {
		p, err := suite.cluster.Client.CoreV1().Pods(lrNS).Get(ctx, "job-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodFailed
		if _, err := suite.cluster.Client.CoreV1().Pods(lrNS).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		lrWaitUsed(t, c, "1/2 pending 0")
	})
	t.Run("the lease is handed over", func(t *testing.T) {
		began := time.Now()
		first.stop()
		other := map[*lrReplica]*lrReplica{one: two, two: one}[first]
		if _, ok := poll(10*time.Second, 20*time.Millisecond, other.r.Leading); !ok {
			t.Fatal("the other reconciler did not take over")
		}
		t.Logf("took over in %v", time.Since(began).Round(time.Millisecond))
		// The new leader confirms what is charged next.
		lrCharge(t, ledger, "job-d", d.UID, "1")
		lrWaitUsed(t, c, "2/3 pending 0")
	})
	t.Run("a deleted pod is released", func(t *testing.T) {
		// No kubelet confirms a graceful deletion here: removed at once.
		zero := int64(0)
		if err := suite.cluster.Client.CoreV1().Pods(lrNS).Delete(ctx, "job-a", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		lrWaitUsed(t, c, "1/1 pending 0")
	})
}
