// Command bench-ledger is hack/bench-ledger.sh's helper (make bench-ledger): what the
// quota ledger (issue 33) costs. It starts the test control plane (kube-apiserver and
// etcd), applies manifests/base (the OffloadTenant CRD, the bridge's RBAC), and starts
// three bridge replicas that share the ledger and elect one reconciler. An array job of
// --pods pods (one spec; each pod its own name, UID and completion index) is stored in
// the API server, bound to a virtual node as interLink's Virtual Kubelet has its pods, and
// decided through the Data API (operation create, the stored pod), --workers at a time,
// spread round-robin over the replicas: once for a tenant without hard amounts (nothing
// is charged), once for a tenant whose hard.pods admits the whole job (every allow is
// charged), once for a tenant whose hard.pods is exactly the job's size (all of it must
// be admitted: no over-deny) and once for one whose hard.pods is half of it (exactly
// that many admitted), in the same run and control plane. It reports, for each, the decision
// latency (p50, p99, max) and rate, and for the charged job the ledger's writes
// (sar_bridge_ledger_writes_total of the three replicas) per admitted pod, the
// conflicts, the batch sizes, and the status writes the API server served (the
// reconciler's included). It lives in the test module for client-go; it is not a test
// and passes or fails on no figure, only on a decision that is not the one expected.
//
//	bench-ledger --bridge PATH --bin-dir DIR [--pods 1000] [--workers 32] [--replicas 3] [--rounds 1]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	quotaNS     = "job-quota" // tenant with hard.pods: every allow is charged
	freeNS      = "job-free"  // tenant without hard amounts: nothing is charged
	exactNS     = "job-exact" // hard.pods = the job's size: all admitted, none over
	halfNS      = "job-half"  // hard.pods = half the job: exactly that many admitted
	virtualNode = "vk-1"
	jobName     = "array"
)

type config struct {
	bench    cluster.BenchOptions // --bin-dir, --dir, --keep
	bridge   string
	pods     int
	workers  int
	replicas int
	rounds   int
	args     stringList
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	c := config{bench: cluster.BenchOptions{Name: "bench-ledger", ControlPlane: cluster.Options{StartTimeout: 5 * time.Minute}}}
	c.bench.Flags(flag.CommandLine)
	flag.StringVar(&c.bridge, "bridge", "", "the sar-bridge binary")
	flag.IntVar(&c.pods, "pods", 1000, "pods of the array job")
	flag.IntVar(&c.workers, "workers", 32, "decisions in flight at once")
	flag.IntVar(&c.replicas, "replicas", 3, "bridge replicas sharing the ledger")
	flag.IntVar(&c.rounds, "rounds", 1, "times the pair (without, with charging) is run, each with a job of its own")
	flag.Var(&c.args, "bridge-arg", "an extra flag for every replica (repeatable)")
	flag.Parse()
	if err := run(c); err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}

var logf = cluster.BenchLogf("bench-ledger")

func run(c config) error {
	if c.bridge == "" || c.bench.ControlPlane.BinDir == "" {
		return errors.New("--bridge and --bin-dir are required")
	}
	ctx := context.Background()
	bench, err := cluster.StartBench(ctx, c.bench)
	if err != nil {
		return err
	}
	defer bench.Stop()
	cl, client := bench.Cluster, bench.Client
	if err := setUp(ctx, cl, client, c.rounds*c.pods); err != nil {
		return err
	}

	var bridges []*cluster.Bridge
	defer func() {
		for _, b := range bridges {
			b.Stop()
		}
	}()
	for i := range c.replicas {
		// Room for every round's pending charges: nothing confirms a pod here faster
		// than the job is decided.
		args := append([]string{"--log.level=warn", fmt.Sprintf("--quota.max-pending=%d", (c.rounds+1)*c.pods+100)}, c.args...)
		b, err := cluster.StartBridge(cluster.BridgeOptions{Binary: c.bridge, Kubeconfig: bench.Kubeconfig, Args: args, ReadyTimeout: 2 * time.Minute,
			LogPath: filepath.Join(bench.Dir, fmt.Sprintf("replica-%d.log", i))})
		if b != nil {
			bridges = append(bridges, b)
		}
		if err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
	}
	// One create of each tenant per replica first: the reviews are cached and the
	// OffloadTenants listed before anything is timed.
	for i, b := range bridges {
		for _, ns := range []string{freeNS, quotaNS} {
			p := arrayPod(ns, fmt.Sprintf("warm-up-%d", i), -1)
			p.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
			if err := decideUntilAllowed(b, p); err != nil {
				return fmt.Errorf("warm-up of replica %d: %w", i, err)
			}
		}
	}

	var results []phaseResult
	for round := range c.rounds {
		for _, ph := range []struct{ name, ns string }{{"without charging", freeNS}, {"with charging", quotaNS},
			{"hard = job size", exactNS}, {"hard = half", halfNS}} {
			prefix := fmt.Sprintf("%s-r%d", jobName, round)
			logf("round %d, %s: storing %d pods of %s/%s on %s", round+1, ph.name, c.pods, ph.ns, prefix, virtualNode)
			pods, err := storeJob(ctx, client, c.workers, ph.ns, prefix, c.pods)
			if err != nil {
				return err
			}
			r, err := decideJob(cl, bridges, pods, c.workers)
			if err != nil {
				return fmt.Errorf("%s: %w", ph.name, err)
			}
			r.name, r.round = ph.name, round+1
			logf("%-17s %d decisions in %v: p50 %v p99 %v; %v ledger writes, %v conflicts", ph.name, r.decisions, r.elapsed.Round(time.Millisecond),
				r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.writes, r.conflicts)
			results = append(results, r)
		}
	}
	status, used, pending, err := tenantStatus(ctx, cl)
	if err != nil {
		return err
	}
	report(c, results, status, used, pending)
	return nil
}

// setUp creates the two tenants (namespaces, ServiceAccounts, OffloadTenants), the
// virtual node, and the RBAC that lets their runners offload.
func setUp(ctx context.Context, cl *cluster.Cluster, client kubernetes.Interface, total int) error {
	if err := cluster.CreateVirtualNode(ctx, client, virtualNode); err != nil {
		return err
	}
	if err := cluster.CreateRunnerNamespaces(ctx, client, []string{freeNS, quotaNS, exactNS, halfNS}, nil); err != nil {
		return err
	}
	for _, ns := range []string{freeNS, quotaNS, exactNS, halfNS} {
		var hard map[string]any
		switch ns {
		case quotaNS:
			hard = map[string]any{"pods": "100000"}
		case exactNS:
			hard = map[string]any{"pods": strconv.Itoa(total)}
		case halfNS:
			hard = map[string]any{"pods": strconv.Itoa(total / 2)}
		}
		if _, err := cl.Dynamic.Resource(cluster.OffloadTenantGVR).Create(ctx, cluster.NewOffloadTenant(ns, "interlink.io", hard), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("OffloadTenant %s: %w", ns, err)
		}
	}
	return nil
}

// arrayPod is pod index of the array job in ns (index < 0: a pod of no job): one
// container with requests and limits, as a Job's pod template makes them.
func arrayPod(ns, name string, index int) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName: virtualNode, ServiceAccountName: "runner", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.example.org/team/solver:2.1", Command: []string{"/bin/solver", "--part=$(JOB_COMPLETION_INDEX)"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
				},
			}},
			Tolerations: []corev1.Toleration{{Key: cluster.VirtualNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
	if index >= 0 {
		p.Labels = map[string]string{"batch.kubernetes.io/job-name": jobName, "batch.kubernetes.io/job-completion-index": strconv.Itoa(index)}
		p.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": strconv.Itoa(index)}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: jobName, UID: "3f1d4b0e-0000-4000-8000-000000000001", Controller: ptr(true)}}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "JOB_COMPLETION_INDEX", Value: strconv.Itoa(index)}}
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// storeJob creates the job's pods in the API server, bound to the virtual node, workers
// at a time, and returns them as stored (each with the UID the API server gave it).
func storeJob(ctx context.Context, client kubernetes.Interface, workers int, ns, prefix string, count int) ([]*corev1.Pod, error) {
	out := make([]*corev1.Pod, count)
	err := cluster.CreatePods(ctx, client, workers, 0, count, func(i int) *corev1.Pod { return arrayPod(ns, fmt.Sprintf("%s-%d", prefix, i), i) },
		func(i int, p *corev1.Pod) { out[i] = p })
	return out, err
}

func decideInput(p *corev1.Pod) map[string]any {
	return map[string]any{"operation": "create", "pod": p, "node": map[string]any{"name": virtualNode}}
}

// decideUntilAllowed asks until the create is allowed (a replica's first decisions may
// come before it has listed the OffloadTenants created just before it).
func decideUntilAllowed(b *cluster.Bridge, p *corev1.Pod) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := b.Decide(decideInput(p))
		if err == nil && r.Status == 200 && r.Allowed() {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("not allowed: %s", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ledgerCounters are the three replicas' ledger metrics, summed.
type ledgerCounters struct {
	writes, conflicts, writeErrors float64
	charged, already, refused      float64
	batchCount, batchSum           float64
	buckets                        map[string]float64 // cumulative, by le
	// The decision path's ledger rounds (sar_bridge_ledger_write_seconds): a create
	// that does not fit its bridge's slice waits for one; and how long each create
	// waited for the ledger (sar_bridge_ledger_wait_seconds, 0 for one its slice covered).
	rounds, waits timeHistogram
	// The reconciler's status writes and their conflicts with the decisions' (the
	// leader's).
	reconcileWrites, reconcileConflicts float64
	// apiStatusWrites are the writes of OffloadTenant status the API server served (the
	// decisions' and the reconciler's).
	apiStatusWrites float64
	// CPU seconds the API server and the replicas used (process_cpu_seconds_total),
	// and the replicas' policy memo outcomes: where a phase's time went.
	apiCPU, bridgesCPU float64
	// requests the API server served, by "verb resource[/subresource]", and the
	// seconds it took to serve them (apiserver_request_duration_seconds_sum)
	apiRequests, apiSeconds map[string]float64
	memoHit, memoMiss       float64
}

// readCounters reads the replicas' ledger metrics and the API server's status writes.
func readCounters(cl *cluster.Cluster, bridges []*cluster.Bridge) (ledgerCounters, error) {
	c := ledgerCounters{buckets: map[string]float64{}, rounds: newTimeHistogram(), waits: newTimeHistogram()}
	for _, b := range bridges {
		s, err := b.Metrics()
		if err != nil {
			return c, err
		}
		c.writes += s.Sum("sar_bridge_ledger_writes_total", map[string]string{"result": "success"})
		c.conflicts += s.Sum("sar_bridge_ledger_writes_total", map[string]string{"result": "conflict"})
		c.writeErrors += s.Sum("sar_bridge_ledger_writes_total", map[string]string{"result": "error"})
		c.charged += s.Sum("sar_bridge_ledger_charges_total", map[string]string{"result": "charged"})
		c.already += s.Sum("sar_bridge_ledger_charges_total", map[string]string{"result": "already"})
		c.refused += s.Sum("sar_bridge_ledger_charges_total", map[string]string{"result": "refused"})
		c.batchCount += s.Sum("sar_bridge_ledger_batch_size_count", nil)
		c.batchSum += s.Sum("sar_bridge_ledger_batch_size_sum", nil)
		c.reconcileWrites += s.Sum("sar_bridge_ledger_reconciles_total", map[string]string{"result": "written"})
		c.reconcileConflicts += s.Sum("sar_bridge_ledger_reconcile_conflicts_total", nil)
		c.rounds.add(s, "sar_bridge_ledger_write_seconds")
		c.waits.add(s, "sar_bridge_ledger_wait_seconds")
		c.bridgesCPU += s.Sum("process_cpu_seconds_total", nil)
		c.memoHit += s.Sum("sar_bridge_decision_memo_total", map[string]string{"result": "hit"})
		c.memoMiss += s.Sum("sar_bridge_decision_memo_total", map[string]string{"result": "miss"})
		for _, x := range s {
			switch x.Name {
			case "sar_bridge_ledger_batch_size_bucket":
				c.buckets[x.Labels["le"]] += x.Value
			}
		}
	}
	api, err := cl.APIServerMetrics(context.Background())
	if err != nil {
		return c, err
	}
	c.apiCPU = api.Sum("process_cpu_seconds_total", nil)
	c.apiRequests, c.apiSeconds = map[string]float64{}, map[string]float64{}
	for _, x := range api {
		key := x.Labels["verb"] + " " + x.Labels["resource"]
		if sub := x.Labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		switch x.Name {
		case "apiserver_request_total":
			c.apiRequests[key] += x.Value
		case "apiserver_request_duration_seconds_sum":
			c.apiSeconds[key] += x.Value
		}
	}
	for _, verb := range []string{"PUT", "PATCH"} {
		c.apiStatusWrites += api.Sum("apiserver_request_total", map[string]string{"resource": "offloadtenants", "subresource": "status", "verb": verb, "code": "200"})
	}
	return c, nil
}

func (c ledgerCounters) minus(o ledgerCounters) ledgerCounters {
	d := ledgerCounters{
		writes: c.writes - o.writes, conflicts: c.conflicts - o.conflicts, writeErrors: c.writeErrors - o.writeErrors,
		charged: c.charged - o.charged, already: c.already - o.already, refused: c.refused - o.refused,
		batchCount: c.batchCount - o.batchCount, batchSum: c.batchSum - o.batchSum, buckets: map[string]float64{},
		rounds: c.rounds.minus(o.rounds), waits: c.waits.minus(o.waits),
		reconcileWrites: c.reconcileWrites - o.reconcileWrites, reconcileConflicts: c.reconcileConflicts - o.reconcileConflicts,
		apiStatusWrites: c.apiStatusWrites - o.apiStatusWrites,
		apiCPU:          c.apiCPU - o.apiCPU, bridgesCPU: c.bridgesCPU - o.bridgesCPU,
		memoHit: c.memoHit - o.memoHit, memoMiss: c.memoMiss - o.memoMiss,
		apiRequests: map[string]float64{}, apiSeconds: map[string]float64{},
	}
	for k, v := range c.apiRequests {
		if n := v - o.apiRequests[k]; n > 0 {
			d.apiRequests[k] = n
			d.apiSeconds[k] = c.apiSeconds[k] - o.apiSeconds[k]
		}
	}
	for le, v := range c.buckets {
		d.buckets[le] = v - o.buckets[le]
	}
	return d
}

type phaseResult struct {
	name                         string
	round                        int
	decisions, admitted, refused int
	errors                       int
	firstError                   string
	elapsed                      time.Duration
	p50, p90, p99, max           time.Duration
	counters                     ledgerCounters
	writes, conflicts            float64
	apiWritesIncludingReconciler float64
	writesPerAdmitted, meanBatch float64
	histogram                    string
	reconcileWrites              float64
	reconcileConflicts           float64
	// Each create as decided (by pod index): when it started after the burst's
	// start, how long it took, and whether it was allowed (timeline).
	starts, took []time.Duration
	allowed      []bool
}

// decideJob decides every pod, workers at a time, pod i through replica i mod n.
func decideJob(cl *cluster.Cluster, bridges []*cluster.Bridge, pods []*corev1.Pod, workers int) (phaseResult, error) {
	var r phaseResult
	before, err := readCounters(cl, bridges)
	if err != nil {
		return r, err
	}
	latencies := make([]time.Duration, len(pods))
	allowed := make([]bool, len(pods))
	failures := make([]string, len(pods))
	start := time.Now()
	starts := make([]time.Duration, len(pods))
	_ = cluster.Parallel(workers, 0, len(pods), func(i int) error {
		t0 := time.Now()
		starts[i] = t0.Sub(start)
		res, err := bridges[i%len(bridges)].Decide(decideInput(pods[i]))
		latencies[i] = time.Since(t0)
		switch {
		case err != nil:
			failures[i] = err.Error()
		case res.Status != 200:
			failures[i] = res.String()
		default:
			allowed[i] = res.Allowed()
			if !allowed[i] {
				failures[i] = "denied: " + res.Reason()
			}
		}
		return nil // each failure is counted
	})
	r.elapsed = time.Since(start)
	r.decisions = len(pods)
	for i := range pods {
		switch {
		case allowed[i]:
			r.admitted++
		case strings.HasPrefix(failures[i], "denied: "):
			r.refused++
		default:
			r.errors++
		}
		if failures[i] != "" && r.firstError == "" {
			r.firstError = failures[i]
		}
	}
	r.starts, r.took, r.allowed = starts, append([]time.Duration(nil), latencies...), allowed
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	q := func(f float64) time.Duration { return latencies[int(math.Ceil(f*float64(len(latencies))))-1] }
	r.p50, r.p90, r.p99, r.max = q(0.50), q(0.90), q(0.99), latencies[len(latencies)-1]
	// The counters are read once the last write's metrics are in (a write's metrics
	// are counted as its waiters are answered).
	time.Sleep(200 * time.Millisecond)
	after, err := readCounters(cl, bridges)
	if err != nil {
		return r, err
	}
	r.counters = after.minus(before)
	r.writes, r.conflicts, r.apiWritesIncludingReconciler = r.counters.writes, r.counters.conflicts, r.counters.apiStatusWrites
	if r.admitted > 0 {
		r.writesPerAdmitted = r.writes / float64(r.admitted)
	}
	if r.counters.batchCount > 0 {
		r.meanBatch = r.counters.batchSum / r.counters.batchCount
	}
	r.histogram = histogram(r.counters.buckets)
	r.reconcileWrites, r.reconcileConflicts = r.counters.reconcileWrites, r.counters.reconcileConflicts
	if r.errors > 0 || r.refused > 0 {
		logf("%d of %d creates not allowed (%d refused, %d errors), first: %s", r.errors+r.refused, r.decisions, r.refused, r.errors, r.firstError)
	}
	return r, nil
}

// timeHistogram is a Prometheus histogram of seconds summed over the replicas.
type timeHistogram struct {
	count, sum float64
	buckets    map[string]float64 // cumulative, by le
}

func newTimeHistogram() timeHistogram { return timeHistogram{buckets: map[string]float64{}} }

// add adds the replica's samples s of the histogram name.
func (h *timeHistogram) add(s cluster.Samples, name string) {
	h.count += s.Sum(name+"_count", nil)
	h.sum += s.Sum(name+"_sum", nil)
	for _, x := range s {
		if x.Name == name+"_bucket" {
			h.buckets[x.Labels["le"]] += x.Value
		}
	}
}

func (h timeHistogram) minus(o timeHistogram) timeHistogram {
	d := timeHistogram{count: h.count - o.count, sum: h.sum - o.sum, buckets: map[string]float64{}}
	for le, v := range h.buckets {
		d.buckets[le] = v - o.buckets[le]
	}
	return d
}

// String sums the histogram up: how many, their mean, and the bucket bounds their p50
// and p99 fall under.
func (h timeHistogram) String() string {
	if h.count == 0 {
		return "none"
	}
	return fmt.Sprintf("%g, mean %.0f ms, p50 %s, p99 %s", h.count, 1000*h.sum/h.count, h.under(0.5), h.under(0.99))
}

// under is the smallest bucket bound at least q of the observations fall under.
func (h timeHistogram) under(q float64) string {
	type b struct{ le, n float64 }
	var bs []b
	for le, n := range h.buckets {
		v, err := strconv.ParseFloat(le, 64)
		if err != nil {
			v = math.Inf(1)
		}
		bs = append(bs, b{v, n})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	for _, x := range bs {
		if x.n >= q*h.count {
			if math.IsInf(x.le, 1) {
				break
			}
			return fmt.Sprintf("≤ %g s", x.le)
		}
	}
	return fmt.Sprintf("> %g s", bs[len(bs)-2].le)
}

// waited says how many creates waited for the ledger (over the first bucket, 0.1 ms),
// and the bucket bound the p99 of all creates' waits falls under.
func (h timeHistogram) waited() string {
	if h.count == 0 {
		return "none asked"
	}
	return fmt.Sprintf("%g of %g, p99 of all %s", h.count-h.buckets["0.0001"], h.count, h.under(0.99))
}

// histogram turns cumulative buckets into "≤1: n, 2: n, 3–4: n, …" of the batches.
func histogram(buckets map[string]float64) string {
	type b struct {
		le float64
		n  float64
	}
	var bs []b
	for le, n := range buckets {
		v, err := strconv.ParseFloat(le, 64)
		if err != nil {
			v = math.Inf(1)
		}
		bs = append(bs, b{v, n})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	var parts []string
	prev, prevLe := 0.0, 0.0
	for _, x := range bs {
		if n := x.n - prev; n > 0 {
			lo := prevLe + 1
			switch {
			case math.IsInf(x.le, 1):
				parts = append(parts, fmt.Sprintf(">%g: %g", prevLe, n))
			case lo >= x.le:
				parts = append(parts, fmt.Sprintf("%g: %g", x.le, n))
			default:
				parts = append(parts, fmt.Sprintf("%g–%g: %g", lo, x.le, n))
			}
		}
		prev, prevLe = x.n, x.le
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// tenantStatus is the charged tenant's status: its size as stored (JSON), used pods
// and pending charges.
func tenantStatus(ctx context.Context, cl *cluster.Cluster) (size int, used string, pending int, err error) {
	u, err := cl.Dynamic.Resource(cluster.OffloadTenantGVR).Get(ctx, quotaNS, metav1.GetOptions{})
	if err != nil {
		return 0, "", 0, err
	}
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	b, err := json.Marshal(status)
	if err != nil {
		return 0, "", 0, err
	}
	used, _, _ = unstructured.NestedString(u.Object, "status", "used", "pods")
	// Stored, an entry lists the further pods of its batch in pods (v1alpha1.PendingCharges).
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "pending")
	for _, e := range list {
		pods, _, _ := unstructured.NestedStringSlice(e.(map[string]any), "pods")
		pending += 1 + len(pods)
	}
	return len(b), used, pending, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func report(c config, results []phaseResult, statusBytes int, used string, pending int) {
	fmt.Println()
	fmt.Printf("make bench-ledger: an array job of %d pods (stored, bound to %s) decided through the Data API by %d replicas, %d in flight, round-robin; hard.pods 100000 for the charged tenant, then %d (the job's size over all rounds) and %d (half)\n\n",
		c.pods, virtualNode, c.replicas, c.workers, c.rounds*c.pods, c.rounds*c.pods/2)
	fmt.Println("| round | tenant | allowed | refused | 503 | decisions/s | p50 | p90 | p99 | max | ledger writes (success) | writes per admitted pod | conflicts | charges per write (mean) | reconciler writes (conflicts) | status writes the API server served |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		perPod, mean := "-", "-"
		if r.writes > 0 {
			perPod, mean = fmt.Sprintf("%.3f", r.writesPerAdmitted), fmt.Sprintf("%.1f", r.meanBatch)
		}
		fmt.Printf("| %d | %s | %d / %d | %d | %d | %.0f | %s | %s | %s | %s | %v | %s | %v | %s | %v (%v) | %v |\n", r.round, r.name, r.admitted, r.decisions, r.refused, r.errors,
			float64(r.decisions)/r.elapsed.Seconds(), ms(r.p50), ms(r.p90), ms(r.p99), ms(r.max), r.writes, perPod, r.conflicts, mean,
			r.reconcileWrites, r.reconcileConflicts, r.apiWritesIncludingReconciler)
	}
	fmt.Println()
	for _, r := range results {
		if r.writes > 0 {
			fmt.Printf("round %d, %s: charges per write (batches): %s; charges: %v charged, %v already, %v refused; write errors %v; ledger rounds of the decision path (a create that misses its slice waits for one): %v; creates that waited for the ledger: %s\n",
				r.round, r.name, r.histogram, r.counters.charged, r.counters.already, r.counters.refused, r.counters.writeErrors, r.counters.rounds, r.counters.waits.waited())
		}
	}
	eachCharged(results, func(with, without phaseResult) {
		fmt.Printf("round %d, %s: decisions/s ×%.2f of the uncharged; p50 %+.1f ms (×%.2f), p99 %+.1f ms (×%.2f); %.3f ledger writes per admitted pod\n", with.round, with.name,
			without.elapsed.Seconds()/with.elapsed.Seconds(),
			float64(with.p50-without.p50)/1e6, float64(with.p50)/float64(without.p50), float64(with.p99-without.p99)/1e6, float64(with.p99)/float64(without.p99), with.writesPerAdmitted)
	})
	for _, r := range results {
		fmt.Printf("round %d, %s: CPU seconds: API server %.2f, replicas %.2f (%.1f ms a decision together); policy memo %v hits, %v misses\n", r.round, r.name,
			r.counters.apiCPU, r.counters.bridgesCPU, 1000*(r.counters.apiCPU+r.counters.bridgesCPU)/float64(r.decisions), r.counters.memoHit, r.counters.memoMiss)
		keys := make([]string, 0, len(r.counters.apiRequests))
		for k := range r.counters.apiRequests {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return r.counters.apiSeconds[keys[i]] > r.counters.apiSeconds[keys[j]] })
		var parts []string
		for _, k := range keys[:min(len(keys), 6)] {
			parts = append(parts, fmt.Sprintf("%s %v (%.2f s)", k, r.counters.apiRequests[k], r.counters.apiSeconds[k]))
		}
		fmt.Printf("round %d, %s: API server requests (seconds serving them): %s\n", r.round, r.name, strings.Join(parts, ", "))
	}
	eachCharged(results, func(with, without phaseResult) {
		fmt.Println(timeline(with, without.p99+20*time.Millisecond))
	})
	fmt.Printf("the charged tenant's status at the end: used pods %s, %d charges still pending (the reconciler moves each onto its pod once it sees it), %d bytes of JSON\n", used, pending, statusBytes)
}

// timelineStep is the width of timeline's windows of the burst.
const timelineStep = 250 * time.Millisecond

// eachCharged calls f with every charged phase and the uncharged phase of its round.
func eachCharged(results []phaseResult, f func(with, without phaseResult)) {
	for i, without := range results {
		if without.name != "without charging" {
			continue
		}
		for _, with := range results[i+1:] {
			if with.round != without.round {
				break
			}
			f(with, without)
		}
	}
}

// timeline says when the creates slower than limit (the uncharged p99 + 20 ms) started,
// in windows of the burst by start time, allowed and refused apart: the first creates
// waiting for the first slices, those waiting for refills, or the last ones at the
// quota's end.
func timeline(r phaseResult, limit time.Duration) string {
	type window struct {
		started, slowAllowed, slowRefused int
		max                               time.Duration
	}
	var ws []window
	slow := 0
	for i, s := range r.starts {
		k := int(s / timelineStep)
		for len(ws) <= k {
			ws = append(ws, window{})
		}
		w := &ws[k]
		w.started++
		if r.took[i] > limit {
			slow++
			if r.allowed[i] {
				w.slowAllowed++
			} else {
				w.slowRefused++
			}
		}
		w.max = max(w.max, r.took[i])
	}
	var parts []string
	for k, w := range ws {
		parts = append(parts, fmt.Sprintf("%.2f s: %d started, %d+%d slow, max %s", float64(k)*timelineStep.Seconds(), w.started, w.slowAllowed, w.slowRefused, ms(w.max)))
	}
	return fmt.Sprintf("round %d, %s: %d creates over the uncharged p99 + 20 ms (%s); by start, every %v (slow: allowed+refused): %s", r.round, r.name, slow, ms(limit), timelineStep, strings.Join(parts, "; "))
}
