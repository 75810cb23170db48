// Command bench-scale is hack/bench-scale.sh's helper (make bench-scale): it measures
// what the size of the cluster costs the bridge. It starts the test control plane
// (kube-apiserver and etcd, no scheduler, admission plugins off so pods are created
// fast), applies manifests/base, creates pods bound to ordinary nodes and to a virtual
// node (each one container with ten short env vars), and starts each bridge binary
// with a quota for the virtual pods' tenant, so they are followed: an OffloadTenant whose
// hard.pods is M, the M pods charged and confirmed (the label and amounts the ledger's
// reconciler leaves on a pod), which the bridge — the only replica, so the elected
// reconciler — follows and counts; a binary from before OffloadTenants (NAME=PATH,
// quotas=data) gets the quota in its policy data (data.interlink.quotas). For every
// phase and binary it reports the time to /ready and, 8 s after /ready, the RSS and the
// peak RSS (from /proc/<pid>/status) and the heap in use (go_memstats_heap_inuse_bytes
// from /metrics), then the heap in use right after a collection (the live heap; the heap
// profile with gc=1 collects), the pod lists and streamed lists the API server served,
// and checks with a decision that the bridge counts the virtual pods (the usage a
// create of one more is refused with).
// It lives in the test module for client-go; it is not a test and passes or fails on no
// figure.
//
//	bench-scale --bridge new=PATH,--web.enable-pprof [--bridge old=PATH,quotas=data] --bin-dir DIR [--ordinary 20000] [--virtual 200] [--virtual-more 1800]
//
// Phases, in one control plane: M virtual pods and no ordinary one; M + virtual-more
// virtual pods (the cost per virtual pod is the difference divided by virtual-more);
// the extra virtual pods deleted and N ordinary pods added.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	virtualNS   = "offload" // its own tenant, mapped to interlink.io, with a quota
	ordinaryNS  = "workers"
	virtualNode = "vk-1"
	extraLabel  = "bench-scale/extra" // the virtual pods added for the cost per pod
	// ordinaryPerNode spreads the ordinary pods over nodes as a cluster would.
	ordinaryPerNode = 100
)

// admissionPlugins are kube-apiserver's default plugins: all turned off, so creating
// tens of thousands of pods is quick and no ServiceAccount must exist first.
var admissionPlugins = []string{
	"NamespaceLifecycle", "LimitRanger", "ServiceAccount", "TaintNodesByCondition", "PodSecurity", "Priority",
	"DefaultTolerationSeconds", "DefaultStorageClass", "StorageObjectInUseProtection", "PersistentVolumeClaimResize",
	"RuntimeClass", "CertificateApproval", "CertificateSigning", "ClusterTrustBundleAttest", "CertificateSubjectRestriction",
	"DefaultIngressClass", "MutatingAdmissionPolicy", "MutatingAdmissionWebhook", "ValidatingAdmissionPolicy",
	"ValidatingAdmissionWebhook", "ResourceQuota", "PodTopologyLabels",
}

type binaries []binary

type binary struct {
	name, path string
	env, args  []string
	// dataQuotas: the binary predates OffloadTenants; its quota is data.interlink.quotas
	// and its tenant mapping a flag.
	dataQuotas bool
}

func (b *binaries) String() string { return fmt.Sprint(*b) }

// Set takes PATH, NAME=PATH or NAME=PATH,ITEM,... where an ITEM is ENV=VALUE (extra
// environment), --flag[=value] (an extra flag) or quotas=data (a binary from before
// OffloadTenants: the quota goes in its policy data).
func (b *binaries) Set(v string) error {
	parts := strings.Split(v, ",")
	name, path, ok := strings.Cut(parts[0], "=")
	if !ok {
		name, path = fmt.Sprintf("bridge-%d", len(*b)+1), parts[0]
	}
	bin := binary{name: name, path: path}
	for _, item := range parts[1:] {
		if item == "quotas=data" {
			bin.dataQuotas = true
			continue
		}
		if strings.HasPrefix(item, "--") {
			bin.args = append(bin.args, item)
		} else {
			bin.env = append(bin.env, item)
		}
	}
	*b = append(*b, bin)
	return nil
}

type config struct {
	bench       cluster.BenchOptions // --bin-dir, --dir, --keep
	bridges     binaries
	ordinary    int
	virtual     int
	virtualMore int
	workers     int
	settle      time.Duration
	profiles    string
}

func main() {
	// No admission plugin (see admissionPlugins), and a failed start tried again, twice.
	c := config{bench: cluster.BenchOptions{Name: "bench-scale", Attempts: 3,
		ControlPlane: cluster.Options{StartTimeout: 5 * time.Minute, StopTimeout: time.Minute, DisableAdmissionPlugins: admissionPlugins}}}
	c.bench.Flags(flag.CommandLine)
	flag.Var(&c.bridges, "bridge", "a sar-bridge binary to measure: PATH, NAME=PATH, or NAME=PATH,ENV=VALUE|--flag,... (repeatable). Its /debug/pprof/heap must answer, for the live heap: pass --web.enable-pprof to a bridge that serves pprof only on request.")
	flag.IntVar(&c.ordinary, "ordinary", 20000, "N: pods bound to ordinary nodes in the last phase")
	flag.IntVar(&c.virtual, "virtual", 200, "M: pods bound to the virtual node")
	flag.IntVar(&c.virtualMore, "virtual-more", 1800, "virtual pods added for the cost per virtual pod")
	flag.IntVar(&c.workers, "workers", 32, "concurrent creates")
	flag.DurationVar(&c.settle, "settle", 8*time.Second, "wait after /ready before measuring")
	flag.StringVar(&c.profiles, "profiles", "", "directory to write each bridge's heap profile to (<phase>-<bridge>.pprof), taken after the collection")
	flag.Parse()
	if err := run(c); err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}

var logf = cluster.BenchLogf("bench-scale")

// measurement is one bridge's figures in one phase.
type measurement struct {
	phase, bridge      string
	ordinary, virtual  int
	ready              time.Duration
	rss, hwm, heap     float64 // bytes
	live               float64 // heap in use right after a collection
	informers          float64 // pod informers: sar_bridge_ledger_following_pods × the one virtual node, or sar_bridge_pod_informers; -1 when the binary has neither
	podLists, streamed float64 // pod LISTs and streamed lists (WatchList) the API server served meanwhile
	usage              string  // what a decision of the quota tenant says it uses
}

func run(c config) error {
	if len(c.bridges) == 0 || c.bench.ControlPlane.BinDir == "" {
		return errors.New("--bridge and --bin-dir are required")
	}
	ctx := context.Background()
	bench, err := cluster.StartBench(ctx, c.bench)
	if err != nil {
		return err
	}
	defer bench.Stop()
	cl, client := bench.Cluster, bench.Client
	if err := setUp(ctx, client, c); err != nil {
		return err
	}

	var results []measurement
	measureAll := func(phase string, ordinary, virtual int) error {
		data, err := writeData(bench.Dir, virtual)
		if err != nil {
			return err
		}
		if err := setQuota(ctx, cl, virtual); err != nil {
			return err
		}
		for _, b := range c.bridges {
			m, err := measure(c, bench, b, data, virtual, phase)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", phase, b.name, err)
			}
			m.phase, m.ordinary, m.virtual = phase, ordinary, virtual
			logf("%-8s %-12s N=%-6d M=%-5d ready %6s  RSS %s  peak %s  heap %s  live %s  pod informers %s  lists %v/%v streamed  usage %s",
				phase, b.name, ordinary, virtual, m.ready.Round(10*time.Millisecond), mib(m.rss), mib(m.hwm), mib(m.heap), mib(m.live),
				informers(m.informers), m.podLists, m.streamed, m.usage)
			results = append(results, m)
		}
		return nil
	}

	logf("creating %d pods on %s", c.virtual, virtualNode)
	if err := createPods(ctx, client, c.workers, virtualNS, "v", 0, c.virtual, func(int) string { return virtualNode }, charged); err != nil {
		return err
	}
	if err := measureAll("empty", 0, c.virtual); err != nil {
		return err
	}
	logf("creating %d more pods on %s", c.virtualMore, virtualNode)
	if err := createPods(ctx, client, c.workers, virtualNS, "v", c.virtual, c.virtualMore, func(int) string { return virtualNode }, withLabel(charged, extraLabel, "true")); err != nil {
		return err
	}
	if err := measureAll("virtual", 0, c.virtual+c.virtualMore); err != nil {
		return err
	}
	zero := int64(0)
	if err := client.CoreV1().Pods(virtualNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: extraLabel}); err != nil {
		return fmt.Errorf("deleting the extra virtual pods: %w", err)
	}
	logf("creating %d pods on %d ordinary nodes", c.ordinary, (c.ordinary+ordinaryPerNode-1)/ordinaryPerNode)
	start := time.Now()
	if err := createPods(ctx, client, c.workers, ordinaryNS, "o", 0, c.ordinary, func(i int) string { return fmt.Sprintf("worker-%d", i/ordinaryPerNode) }, podMarks{}); err != nil {
		return err
	}
	logf("created in %s", time.Since(start).Round(time.Second))
	if err := measureAll("large", c.ordinary, c.virtual); err != nil {
		return err
	}
	report(c, results)
	return nil
}

// setUp creates the namespaces, ServiceAccounts, nodes and the RBAC that lets the
// virtual pods' ServiceAccount offload.
func setUp(ctx context.Context, client kubernetes.Interface, c config) error {
	if err := cluster.CreateRunnerNamespaces(ctx, client, []string{virtualNS}, []string{ordinaryNS}); err != nil {
		return err
	}
	if err := cluster.CreateVirtualNode(ctx, client, virtualNode); err != nil {
		return err
	}
	for i := 0; i*ordinaryPerNode < c.ordinary; i++ {
		name := fmt.Sprintf("worker-%d", i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// podMarks are a pod's labels and annotations.
type podMarks struct{ labels, annotations map[string]string }

// charged are the marks the ledger's reconciler leaves on a pod it confirmed charged to
// the virtual pods' tenant (tenants.ChargedLabel, tenants.ChargedAmountsAnnotation), with
// what benchPod holds.
var charged = podMarks{
	labels:      map[string]string{"sar-bridge.io/charged": virtualNS},
	annotations: map[string]string{"sar-bridge.io/charged-amounts": "cpu=100m,memory=128Mi,pods=1"},
}

// withLabel is m with one more label.
func withLabel(m podMarks, key, value string) podMarks {
	labels := map[string]string{key: value}
	for k, v := range m.labels {
		labels[k] = v
	}
	return podMarks{labels: labels, annotations: m.annotations}
}

// benchPod is one container with ten short env vars, as in issue 35.
func benchPod(ns, name, node string, marks podMarks) *corev1.Pod {
	env := make([]corev1.EnvVar, 10)
	for i := range env {
		env[i] = corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", i), Value: fmt.Sprintf("value-%d", i)}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: marks.labels, Annotations: marks.annotations},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: "runner",
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.example.org/team/app:1.0", Command: []string{"/bin/app", "--serve"}, Env: env,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
				}},
			}},
		},
	}
}

// createPods creates count pods named prefix-<from..from+count> with workers concurrent
// creates.
func createPods(ctx context.Context, client kubernetes.Interface, workers int, ns, prefix string, from, count int, node func(int) string, marks podMarks) error {
	return cluster.CreatePods(ctx, client, workers, from, count, func(i int) *corev1.Pod {
		return benchPod(ns, fmt.Sprintf("%s-%06d", prefix, i), node(i), marks)
	}, nil)
}

// writeData is the policy data of a binary from before OffloadTenants (quotas=data):
// the virtual pods' tenant has a quota of exactly the pods it has, so a create is denied
// with a reason naming the usage the bridge sees.
func writeData(dir string, virtual int) (string, error) {
	data := map[string]any{"interlink": map[string]any{"quotas": map[string]any{virtualNS: map[string]any{"pods": virtual}}}}
	b, err := json.Marshal(data)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("data-%d.json", virtual))
	return path, os.WriteFile(path, b, 0o644)
}

// quotaArgs are the flags that give the binary its quota: none for OffloadTenants (the
// tenant's object names its group), the mapping and the data file for a binary from
// before them.
func quotaArgs(b binary, data string) []string {
	if b.dataQuotas {
		return []string{"--openshift.mappings=" + virtualNS + "=interlink.io", "--policies.data=" + data}
	}
	return nil
}

// setQuota creates or updates the virtual pods' OffloadTenant with hard.pods = virtual
// (the CRD manifests/base installs may take a moment to be served).
func setQuota(ctx context.Context, cl *cluster.Cluster, virtual int) error {
	tenants := cl.Dynamic.Resource(cluster.OffloadTenantGVR)
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := tenants.Get(ctx, virtualNS, metav1.GetOptions{})
		switch {
		case err == nil:
			err = unstructured.SetNestedField(cur.Object, strconv.Itoa(virtual), "spec", "hard", "pods")
			if err == nil {
				_, err = tenants.Update(ctx, cur, metav1.UpdateOptions{})
			}
		case apierrors.IsNotFound(err):
			tenant := cluster.NewOffloadTenant(virtualNS, "interlink.io", map[string]any{"pods": strconv.Itoa(virtual)})
			_, err = tenants.Create(ctx, tenant, metav1.CreateOptions{})
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the OffloadTenant %s: %w", virtualNS, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// measure starts the bridge, waits for /ready, lets it settle, reads its memory, then
// the heap right after a collection, and asks one decision of the quota tenant.
func measure(c config, bench *cluster.Bench, b binary, data string, virtual int, phase string) (measurement, error) {
	m := measurement{bridge: b.name, informers: -1}
	listsBefore, streamedBefore, err := podLists(bench.Cluster)
	if err != nil {
		return m, err
	}
	start := time.Now()
	br, err := cluster.StartBridge(cluster.BridgeOptions{
		Binary: b.path, Kubeconfig: bench.Kubeconfig, Env: b.env, ReadyTimeout: 5 * time.Minute,
		LogPath: filepath.Join(bench.Dir, fmt.Sprintf("%s-%d.log", b.name, time.Now().UnixNano())),
		Args:    append(quotaArgs(b, data), b.args...),
	})
	if err != nil {
		return m, err
	}
	defer br.Stop()
	m.ready = time.Since(start)
	time.Sleep(c.settle)
	status, err := procStatus(br.PID())
	if err != nil {
		return m, err
	}
	m.rss, m.hwm = status["VmRSS"], status["VmHWM"]
	samples, err := br.Metrics()
	if err != nil {
		return m, err
	}
	m.heap = samples.Sum("go_memstats_heap_inuse_bytes", nil)
	switch {
	case samples.Has("sar_bridge_ledger_following_pods"):
		m.informers = samples.Sum("sar_bridge_ledger_following_pods", nil) // one virtual node: one informer
	case samples.Has("sar_bridge_pod_informers"):
		m.informers = samples.Sum("sar_bridge_pod_informers", nil)
	}
	// The heap profile with gc=1 collects first: what is left is what the bridge keeps.
	code, profile, err := br.Get(br.InternalURL + "/debug/pprof/heap?gc=1")
	if err != nil || code != 200 {
		return m, fmt.Errorf("/debug/pprof/heap?gc=1: %d %v (an old binary serves it; a new one needs --web.enable-pprof)", code, err)
	}
	if c.profiles != "" {
		if err := os.WriteFile(filepath.Join(c.profiles, phase+"-"+b.name+".pprof"), profile, 0o644); err != nil {
			return m, err
		}
	}
	if samples, err = br.Metrics(); err != nil {
		return m, err
	}
	m.live = samples.Sum("go_memstats_heap_inuse_bytes", nil)
	m.usage = decideUsage(br, virtual)
	lists, streamed, err := podLists(bench.Cluster)
	m.podLists, m.streamed = lists-listsBefore, streamed-streamedBefore
	return m, err
}

// podLists is how many pod LISTs, and how many streamed lists of pods (WatchList), the
// API server has served.
func podLists(cl *cluster.Cluster) (lists, streamed float64, err error) {
	samples, err := cl.APIServerMetrics(context.Background())
	if err != nil {
		return 0, 0, err
	}
	pods := map[string]string{"resource": "pods", "verb": "LIST"}
	return samples.Sum("apiserver_request_total", pods),
		samples.Sum("apiserver_watch_list_duration_seconds_count", map[string]string{"resource": "pods"}), nil
}

// decideUsage asks for the create of one more pod of the quota tenant on the virtual
// node: denied, its reason names the pods the bridge counts.
func decideUsage(br *cluster.Bridge, virtual int) string {
	p := benchPod(virtualNS, "one-more", "", podMarks{})
	p.UID = "0b5e3c9a-1111-4a2b-9c3d-000000000001"
	r, err := br.Decide(map[string]any{"operation": "create", "pod": p, "node": map[string]any{"name": virtualNode}})
	if err != nil {
		return "error: " + err.Error()
	}
	reason := r.Reason()
	if i := strings.Index(reason, "("); i >= 0 && strings.Contains(reason, " in use") {
		return strings.TrimSuffix(reason[i+1:strings.Index(reason, " in use")], " pods") + " in use"
	}
	if r.Allowed() {
		return "allowed: the pods are not counted"
	}
	return "?" + reason
}

// procStatus reads the kB figures of /proc/<pid>/status, in bytes.
func procStatus(pid int) (map[string]float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		fields := strings.Fields(v)
		if !ok || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		n, err := strconv.ParseFloat(fields[0], 64)
		if err == nil {
			out[k] = n * 1024
		}
	}
	return out, s.Err()
}

func mib(b float64) string { return fmt.Sprintf("%6.1f MiB", b/(1<<20)) }

func informers(v float64) string {
	if v < 0 {
		return "-"
	}
	return strconv.Itoa(int(v))
}

// report prints the table and, per bridge, the growth with N and the cost per virtual
// pod.
func report(c config, results []measurement) {
	fmt.Println()
	fmt.Printf("make bench-scale: %d ordinary pods on %d nodes, %d (then %d) on virtual node %s; figures %s after /ready, live heap right after a collection\n\n",
		c.ordinary, (c.ordinary+ordinaryPerNode-1)/ordinaryPerNode, c.virtual, c.virtual+c.virtualMore, virtualNode, c.settle)
	fmt.Println("| bridge | ordinary pods (N) | virtual pods (M) | start-up to /ready | RSS | peak RSS | heap in use | live heap | pod informers | pod lists / streamed | usage seen |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	byName := map[string]map[string]measurement{}
	for _, m := range results {
		fmt.Printf("| %s | %d | %d | %.2f s | %s | %s | %s | %s | %s | %v / %v | %s |\n", m.bridge, m.ordinary, m.virtual, m.ready.Seconds(),
			strings.TrimSpace(mib(m.rss)), strings.TrimSpace(mib(m.hwm)), strings.TrimSpace(mib(m.heap)), strings.TrimSpace(mib(m.live)),
			informers(m.informers), m.podLists, m.streamed, m.usage)
		if byName[m.bridge] == nil {
			byName[m.bridge] = map[string]measurement{}
		}
		byName[m.bridge][m.phase] = m
	}
	fmt.Println()
	pct := func(a, b float64) float64 { return 100 * (b - a) / a }
	perPod := func(a, b float64) float64 { return (b - a) / float64(c.virtualMore) / 1024 }
	for _, b := range c.bridges {
		p := byName[b.name]
		empty, large, more := p["empty"], p["large"], p["virtual"]
		fmt.Printf("%s: growth with N=%d: RSS %+.1f %%, peak RSS %+.1f %%, heap in use %+.1f %%, live heap %+.1f %% (bound: 10 %%); per virtual pod: RSS %.1f KiB, heap in use %.1f KiB, live heap %.1f KiB\n",
			b.name, c.ordinary, pct(empty.rss, large.rss), pct(empty.hwm, large.hwm), pct(empty.heap, large.heap), pct(empty.live, large.live),
			perPod(empty.rss, more.rss), perPod(empty.heap, more.heap), perPod(empty.live, more.live))
	}
}
