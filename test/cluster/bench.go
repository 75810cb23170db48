package cluster

// What the benchmark helpers (test/cmd/bench-ledger, test/cmd/bench-scale) share: one
// control plane with the bridge's manifests, the objects a tenant that offloads needs,
// pods created many at a time, and the API server's own counts.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BenchOptions configures StartBench.
type BenchOptions struct {
	// Name is the helper's (bench-ledger): its log lines start with it, and the
	// temporary working directory is sar-bridge-NAME-*.
	Name string
	// Dir is the working directory (logs, kubeconfigs); when empty a temporary one,
	// which Stop removes unless Keep.
	Dir  string
	Keep bool
	// ControlPlane configures the control plane (BinDir is required); its WorkDir is
	// Dir/cluster (attempt n > 1: Dir/cluster-n, so that a failed attempt's log stays).
	ControlPlane Options
	// Attempts is how many times the control plane is started before StartBench gives
	// up (default 1): envtest gives the default namespace 5 s to appear, which a loaded
	// machine can miss.
	Attempts int
}

// Flags registers the flags every benchmark helper takes: --bin-dir
// (ControlPlane.BinDir), --dir and --keep.
func (o *BenchOptions) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.ControlPlane.BinDir, "bin-dir", os.Getenv(EnvControlPlaneBin), "directory with kube-apiserver and etcd")
	fs.StringVar(&o.Dir, "dir", "", "working directory (logs, kubeconfigs); default a temporary one")
	fs.BoolVar(&o.Keep, "keep", false, "keep the working directory")
}

// BenchLogf is a benchmark helper's log: lines on stderr, prefixed with its name, apart
// from the table it prints on stdout.
func BenchLogf(name string) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, name+": "+format+"\n", args...)
	}
}

// Bench is the control plane a benchmark helper runs against, with manifests/base
// applied (the OffloadTenant CRD, the bridge's ServiceAccount and RBAC).
type Bench struct {
	Cluster *Cluster
	// Dir is the working directory.
	Dir string
	// Kubeconfig is the bridge's: its ServiceAccount sar-bridge/sar-bridge.
	Kubeconfig string
	// Client is an admin client without client-side rate limit, for thousands of
	// creates.
	Client kubernetes.Interface

	removeDir bool
}

// StartBench makes the working directory, starts the control plane, applies
// manifests/base (without the Deployment and Service: the helper runs the bridge) and
// writes the bridge's kubeconfig. Stop undoes it.
func StartBench(ctx context.Context, opts BenchOptions) (_ *Bench, err error) {
	logf := BenchLogf(opts.Name)
	b := &Bench{Dir: opts.Dir}
	if b.Dir == "" {
		if b.Dir, err = os.MkdirTemp("", "sar-bridge-"+opts.Name+"-"); err != nil {
			return nil, err
		}
		b.removeDir = !opts.Keep
	}
	defer func() {
		if err != nil {
			b.Stop()
		}
	}()
	repo, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	logf("starting etcd and kube-apiserver (logs in %s)", b.Dir)
	for attempt := 1; attempt <= max(opts.Attempts, 1); attempt++ {
		cp := opts.ControlPlane
		cp.WorkDir = filepath.Join(b.Dir, "cluster")
		if attempt > 1 {
			cp.WorkDir += fmt.Sprintf("-%d", attempt)
		}
		if b.Cluster, err = Start(cp); err == nil {
			break
		}
		if opts.Attempts > 1 {
			logf("control plane start %d failed: %v", attempt, err)
		}
	}
	if err != nil {
		return nil, err
	}
	if _, err := b.Cluster.ApplyDir(ctx, filepath.Join(repo, "manifests", "base"), SkipKinds("Deployment", "Service")); err != nil {
		return nil, err
	}
	b.Kubeconfig = filepath.Join(b.Dir, "sar-bridge.kubeconfig")
	if _, err := b.Cluster.WriteServiceAccountKubeconfig(ctx, b.Kubeconfig, "sar-bridge", "sar-bridge", 24*time.Hour); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(b.Cluster.Admin)
	cfg.QPS, cfg.Burst = -1, 0
	if b.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return b, nil
}

// Stop stops the control plane and removes the working directory StartBench made
// (unless kept).
func (b *Bench) Stop() {
	if b.Cluster != nil {
		_ = b.Cluster.Stop()
	}
	if b.removeDir {
		_ = os.RemoveAll(b.Dir)
	}
}

// APIServerMetrics reads kube-apiserver's /metrics: the requests it served
// (apiserver_request_total), which the benchmarks count before and after.
func (c *Cluster) APIServerMetrics(ctx context.Context) (Samples, error) {
	body, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	s, err := ParseMetrics(string(body))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	return s, nil
}

// VirtualNodeTaint is the NoSchedule taint of interLink's virtual nodes: the pods
// offloaded there tolerate it.
const VirtualNodeTaint = "virtual-node.interlink/no-schedule"

// CreateVirtualNode creates node name as interLink's Virtual Kubelet registers it (its
// type label and VirtualNodeTaint), for pods bound to it by spec.nodeName.
func CreateVirtualNode(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"virtual-node.interlink/type": "virtual-kubelet"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: VirtualNodeTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	return err
}

// CreateRunnerNamespaces creates each namespace with the ServiceAccount "runner" the
// benchmarks' pods run as. In the offloading ones runner may also create pods in
// interlink.io (a RoleBinding to the ClusterRole bench-offloader, created here), so the
// bridge lets their pods offload.
func CreateRunnerNamespaces(ctx context.Context, client kubernetes.Interface, offloading, others []string) error {
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-offloader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"interlink.io"}, Resources: []string{"pods"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i, ns := range append(append([]string{}, offloading...), others...) {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if i >= len(offloading) {
			continue
		}
		if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "offload"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "bench-offloader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner", Namespace: ns}},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// OffloadTenantGVR is the OffloadTenant resource (its CRD is in manifests/base).
var OffloadTenantGVR = schema.GroupVersionResource{Group: "sar-bridge.io", Version: "v1alpha1", Resource: "offloadtenants"}

// NewOffloadTenant is the OffloadTenant of namespace name offloading to group, with the
// hard amounts when hard is not nil.
func NewOffloadTenant(name, group string, hard map[string]any) *unstructured.Unstructured {
	spec := map[string]any{"group": group}
	if hard != nil {
		spec["hard"] = hard
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "sar-bridge.io/v1alpha1", "kind": "OffloadTenant",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

// CreatePods creates pod(i) for every i in [from, from+count), workers at a time.
// stored, when not nil, gets each pod as the API server stored it (with its UID), with
// the TypeMeta a decision's input holds.
func CreatePods(ctx context.Context, client kubernetes.Interface, workers, from, count int, pod func(i int) *corev1.Pod, stored func(i int, p *corev1.Pod)) error {
	return Parallel(workers, from, from+count, func(i int) error {
		p := pod(i)
		created, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if stored != nil {
			created.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			stored(i, created)
		}
		return nil
	})
}

// Parallel calls fn(i) for every i in [from, to), workers at a time, and returns the
// first error: a worker stops at its error, the others go on.
func Parallel(workers, from, to int, fn func(i int) error) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
