// Package tenants keeps tenants' offload quotas exact across any number of bridges:
// the OffloadTenant objects (v1alpha1) hold the quota, and their status is the ledger
// every bridge charges, the way ResourceQuota admission charges a ResourceQuota's
// status: a resourceVersion-checked update, concurrent charges of one tenant batched
// into one write, a conflict re-read and retried a bounded number of times, and a
// charge that cannot be written is no allow. etcd is the only coordinator.
//
// The reconciler (reconciler.go) confirms pending charges against the pods and
// recalculates usage from the pods it confirmed, never dropping a charge it has not
// seen resolved.
package tenants

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// Request is one charge: a pod a decision allowed.
type Request struct {
	Tenant string
	// UID identifies the pod when the decision knew it; else Namespace and Name.
	UID             types.UID
	Namespace, Name string
	// Node is the virtual node the pod is decided for, when known.
	Node    string
	Amounts corev1.ResourceList
	// Exists says the pod is already stored (the relay, a binding): it may carry the
	// reconciler's confirmation of an earlier charge, so the ledger asks the API.
	Exists bool
	// Marked says the decided pod, as the caller sent it, carries the reconciler's
	// confirmation for the tenant. With slices on, only such a claim is read back from
	// the API (a stored pod sent without the mark it has since gained is charged again,
	// and the reconciler drops the extra charge when it sees the mark): a pod read per
	// create would cost the decision path an API round trip under the client's QPS.
	Marked bool
	// Generation is the spec generation of the OffloadTenant the decision read: a
	// slice granted under another charges nothing (escrow.go).
	Generation int64
}

// Refusal is a charge over the tenant's quota: the create is denied with its message.
type Refusal struct{ Message string }

func (r *Refusal) Error() string { return r.Message }

// ChargedPods says whether a stored pod carries the reconciler's confirmation that it
// was charged (the label ChargedLabel); kube.PodReader is the real one.
type ChargedPods interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// ChargedLabel marks a pod the reconciler confirmed charged; its value is the tenant.
const ChargedLabel = "sar-bridge.io/charged"

// LedgerOptions configures a Ledger.
type LedgerOptions struct {
	// MaxPending bounds the unconfirmed charges a tenant's status holds (each a few
	// hundred bytes of an object etcd caps at 1.5 MiB); DefaultMaxPending when zero.
	MaxPending int
	// Retry bounds the attempts of one write; DefaultRetry when zero.
	Retry wait.Backoff
	// WriteTimeout bounds one batch's write, retries included; DefaultWriteTimeout when zero.
	WriteTimeout time.Duration
	// Running and TenantOf are what the first charge of a tenant's spec generation
	// counts the pods already running with (adopt.go): the live pods of the virtual
	// nodes, and a namespace's tenant. Without them such a charge fails, never allowed.
	Running    RunningPods
	TenantOf   func(namespace string) string
	Now        func() time.Time
	Registerer prometheus.Registerer
	// Slices turns the escrow on (escrow.go): creates charged in memory against a
	// slice of the quota this bridge holds.
	Slices SliceOptions
	// Cluster is the member cluster this bridge charges for when the OffloadTenants
	// live in a hub (clusters.go); "" without a hub.
	Cluster string
	// Hub names the hub in the errors of writes that fail ("" without a hub): a create
	// that cannot be charged says where the ledger it could not reach is.
	Hub string
}

// Defaults of LedgerOptions.
const (
	DefaultMaxPending   = 2000
	DefaultWriteTimeout = 8 * time.Second
)

// maxConcurrentPodReads bounds the stored pods one batch reads at once.
const maxConcurrentPodReads = 16

// DefaultRetry is retry.DefaultRetry's shape with more steps and full jitter: a busy
// tenant's batches conflict with the reconciler's writes and other bridges', which write
// in the same rhythm. (make bench-ledger, three replicas deciding a 1,000-pod array job:
// with 8 steps and 0.2 jitter about 3 % of the creates ran out of attempts and got 503;
// with these, none.) At most about 1.7 s of backoff, or twice that with the jitter.
var DefaultRetry = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 1}

// Ledger charges allowed creates to their tenant's OffloadTenant status. It is safe for
// concurrent use.
type Ledger struct {
	client  client.Client // live reads and status writes (a slice's write retried after a conflict may read the view: viewed.go)
	pods    ChargedPods
	opts    LedgerOptions
	metrics ledgerMetrics

	mu     sync.Mutex
	queues map[string]*queue // by tenant
	slices map[string]*slice // by tenant: this bridge's slices (escrow.go)
	// holders: by tenant, the other bridges seen holding a slice, and when (escrow.go).
	holders map[string]map[string]time.Time
	viewed  map[string]*viewed // by tenant: the view's last object (viewed.go)
	// lastAsked is when a decision last asked about a create of a tenant with a quota
	// (Prior, which every decision calls before it charges), in UnixNano: Busy.
	lastAsked atomic.Int64
}

// busyWithin: a ledger asked about a create this recently is Busy.
const busyWithin = 250 * time.Millisecond

// Busy says a decision of this bridge asked about a create of a tenant with a quota
// (allowed or not) within busyWithin: the reconciler's marks wait meanwhile (marks.go).
func (l *Ledger) Busy() bool {
	return time.Since(time.Unix(0, l.lastAsked.Load())) < busyWithin
}

func (l *Ledger) asked() { l.lastAsked.Store(time.Now().UnixNano()) }

// queue holds a tenant's charges waiting for the next write; writing is true while a
// batch of it is being written (the next batch gathers meanwhile).
type queue struct {
	waiting []*waiter
	writing bool
	flush   bool // a slice's write is wanted (report, refill, return) without a waiter
	// others is set while creates wait for other bridges' slices; wake is signalled when
	// the tenant's status changes meanwhile (Observe: a slice used or returned), so they
	// are asked again then rather than at the next poll.
	others bool
	wake   chan struct{}
}

type waiter struct {
	req   Request
	done  chan error // buffered: the writer never blocks on a caller that left
	since time.Time  // first queued: how long it may wait for others' slices
}

// NewLedger returns a Ledger writing through c.
func NewLedger(c client.Client, pods ChargedPods, opts LedgerOptions) *Ledger {
	if opts.MaxPending <= 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.Retry.Steps == 0 {
		opts.Retry = DefaultRetry
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Slices.defaults()
	return &Ledger{client: c, pods: pods, opts: opts, metrics: newLedgerMetrics(opts.Registerer), queues: map[string]*queue{}, slices: map[string]*slice{},
		holders: map[string]map[string]time.Time{}, viewed: map[string]*viewed{}}
}

// Charge charges req to its tenant and returns nil once it is written (or was written
// before, by any bridge or front door), a *Refusal when it does not fit the quota, and
// another error when the ledger could not be written: no allow either way. Charges of
// one tenant that arrive while a write is in flight go in one write after it, so a
// burst costs a few writes, not one a pod.
func (l *Ledger) Charge(ctx context.Context, req Request) error {
	l.mu.Lock()
	if l.opts.Slices.Holder != "" && l.client != nil {
		now := l.opts.Now()
		l.sliceOf(req.Tenant).noteDemand(now, 1)
		if l.chargeFromSlice(req, now) {
			l.mu.Unlock()
			l.metrics.charges.WithLabelValues("slice").Inc()
			l.metrics.waits.Observe(0)
			return nil
		}
	}
	start := time.Now()
	w := &waiter{req: req, done: make(chan error, 1), since: l.opts.Now()}
	q := l.queues[req.Tenant]
	if q == nil {
		q = &queue{}
		l.queues[req.Tenant] = q
	}
	q.waiting = append(q.waiting, w)
	drain := !q.writing
	q.writing = true
	l.mu.Unlock()
	if drain {
		go l.drain(req.Tenant, q)
	}
	select {
	case err := <-w.done:
		l.metrics.waits.Observe(time.Since(start).Seconds())
		return err
	case <-ctx.Done():
		// The charge may still be written: it then holds quota until the reconciler
		// finds its pod missing (the pending timeout). Over, never under.
		return fmt.Errorf("waiting for the ledger of tenant %q: %w", req.Tenant, ctx.Err())
	}
}

// drain writes the tenant's waiting charges, a batch at a time, until none is left.
func (l *Ledger) drain(tenant string, q *queue) {
	for {
		l.mu.Lock()
		batch := l.fromSlice(q.waiting)
		q.waiting = nil
		flush := q.flush
		q.flush = false
		if len(batch) == 0 && !flush {
			q.writing = false
			delete(l.queues, tenant)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.WriteTimeout)
		var results []error
		if l.opts.Slices.Holder != "" {
			results = l.writeSliced(ctx, tenant, batch)
		} else {
			results = l.write(ctx, tenant, batch)
		}
		cancel()
		if l.answer(tenant, q, batch, results) {
			l.awaitOthers(q)
		}
	}
}

// fromSlice answers the waiters the slice covers now (a write that landed meanwhile
// refilled it) and returns the others: a create that queued behind a refill is charged
// from it, not in one more write. Called with l.mu held.
func (l *Ledger) fromSlice(waiting []*waiter) []*waiter {
	if l.opts.Slices.Holder == "" || len(waiting) == 0 {
		return waiting
	}
	now := l.opts.Now()
	rest := waiting[:0:0]
	for _, w := range waiting {
		if l.chargeFromSlice(w.req, now) {
			l.metrics.charges.WithLabelValues("slice").Inc()
			w.done <- nil
			continue
		}
		rest = append(rest, w)
	}
	return rest
}

// awaitOthers waits until the tenant's status changes (another bridge's write: a slice
// used or returned) or a tenth of Report has passed, whichever is first: the poll is for
// a view that lags or misses an event.
func (l *Ledger) awaitOthers(q *queue) {
	l.mu.Lock()
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	q.others = true
	wake := q.wake
	l.mu.Unlock()
	t := time.NewTimer(l.opts.Slices.Report / 10)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	}
	l.mu.Lock()
	q.others = false
	l.mu.Unlock()
}

// wakeLocked tells a tenant's creates waiting for others' slices that its status
// changed: not this bridge's own last write or read coming back through the view.
// Called with l.mu held.
func (l *Ledger) wakeLocked(t *v1alpha1.OffloadTenant) {
	if st := l.slices[t.Name]; st != nil && st.rv == t.ResourceVersion {
		return
	}
	if q := l.queues[t.Name]; q != nil && q.others {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// answer sends each waiter its result; a create waiting for others' slices is queued
// again (again: true) until othersWait has passed, then refused.
func (l *Ledger) answer(tenant string, q *queue, batch []*waiter, results []error) (again bool) {
	now := l.opts.Now()
	for i, w := range batch {
		var wo *waitingOthers
		if errors.As(results[i], &wo) {
			if now.Sub(w.since) < othersWait {
				l.mu.Lock()
				q.waiting = append(q.waiting, w)
				l.mu.Unlock()
				again = true
				continue
			}
			l.metrics.charges.WithLabelValues("refused").Inc()
			results[i] = wo.refusal
		}
		w.done <- results[i]
	}
	return again
}

// write charges a batch with a resourceVersion-checked update of the tenant's status,
// re-reading and re-deciding every charge of the batch on a conflict.
func (l *Ledger) write(ctx context.Context, tenant string, batch []*waiter) []error {
	defer l.timeRound(time.Now())
	results := make([]error, len(batch))
	confirmed := make([]bool, len(batch)) // the pod already carries the confirmation
	readErrs := make([]error, len(batch))
	// At once, not one round trip after another: a batch of stored pods (a relay's
	// burst) would otherwise cost its size in round trips before its write.
	var reads errgroup.Group
	reads.SetLimit(maxConcurrentPodReads)
	for i, w := range batch {
		reads.Go(func() error {
			confirmed[i], readErrs[i] = l.alreadyConfirmed(ctx, w.req)
			return nil
		})
	}
	_ = reads.Wait() // each read's error is its charge's

	written := 0                        // charges in the write that landed; 0: none was needed
	wrote := false                      // a write landed (charges, an adoption or both)
	adoptedPods := 0                    // pods the write that landed adopted
	already := make([]bool, len(batch)) // charged before, by any bridge or front door
	err := RetryOnConflict(l.opts.Retry, func() error {
		written, wrote, adoptedPods = 0, false, 0
		copy(results, readErrs) // nothing decided by an earlier attempt stands
		var t v1alpha1.OffloadTenant
		if err := l.client.Get(ctx, client.ObjectKey{Name: tenant}, &t); err != nil {
			return err
		}
		adopted, err := l.adopt(ctx, &t)
		if err != nil {
			return err
		}
		changed := 0
		for i, w := range batch {
			results[i], already[i] = readErrs[i], false // an unreadable pod is answered with its error
			if results[i] != nil {
				continue
			}
			switch {
			case confirmed[i] || pendingIndex(t.Status.Pending, l.opts.Cluster, w.req) >= 0:
				already[i] = true
			case len(t.Status.Pending) >= l.opts.MaxPending:
				results[i] = fmt.Errorf("the ledger of tenant %q holds %d unconfirmed charges (is the reconciler running?)", tenant, len(t.Status.Pending))
			default:
				if refusal := fits(&t, w.req); refusal != nil {
					results[i] = refusal
					continue
				}
				charge(&t, l.opts.Cluster, w.req, l.opts.Now())
				changed++
			}
		}
		if changed == 0 && !adopted {
			return nil
		}
		if adoptedPods, err = l.updateStatus(ctx, &t, adopted); err == nil {
			written, wrote = changed, true
		}
		return err
	})
	if err != nil {
		l.metrics.writes.WithLabelValues("error").Inc()
		for i := range results {
			if results[i] == nil { // would have been charged: no allow without the write
				results[i] = l.chargeError(tenant, err)
			}
		}
		return results
	}
	if wrote {
		// A batch whose charges were all refused or made before, with nothing to adopt,
		// writes nothing.
		l.metrics.writes.WithLabelValues("success").Inc()
		if written > 0 {
			l.metrics.batch.Observe(float64(written))
		}
		l.metrics.adopted.Add(float64(adoptedPods))
	}
	// Counted once the outcome is final: a conflict re-decides every charge.
	for i, r := range results {
		switch {
		case already[i]:
			l.metrics.charges.WithLabelValues("already").Inc()
		case r == nil:
			l.metrics.charges.WithLabelValues("charged").Inc()
		case isRefusal(r):
			l.metrics.charges.WithLabelValues("refused").Inc()
		default:
			l.metrics.charges.WithLabelValues("error").Inc()
		}
	}
	return results
}

// timeRound records how long a round of the ledger that began at start took (real
// time, whatever opts.Now says).
func (l *Ledger) timeRound(start time.Time) {
	l.metrics.roundTimes.Observe(time.Since(start).Seconds())
}

// chargeError is a failed write's error, naming the hub when there is one.
func (l *Ledger) chargeError(tenant string, err error) error {
	if l.opts.Hub != "" {
		return fmt.Errorf("charging tenant %q in its ledger on %s: %w", tenant, l.opts.Hub, err)
	}
	return fmt.Errorf("charging tenant %q: %w", tenant, err)
}

// alreadyConfirmed reads a stored pod's confirmation label: a relay's create of a pod the
// validating webhook charged comes after the reconciler may have confirmed it.
func (l *Ledger) alreadyConfirmed(ctx context.Context, req Request) (bool, error) {
	if !l.readsPod(req) {
		return false, nil
	}
	p, err := l.pods.Pod(ctx, req.Namespace, req.Name)
	if err != nil {
		return false, fmt.Errorf("reading pod %s/%s for the ledger: %w", req.Namespace, req.Name, err)
	}
	return p != nil && (req.UID == "" || p.UID == req.UID) && p.Labels[ChargedLabel] == req.Tenant, nil
}

// Prior is what req's pod is already charged to t, nil when it is not: a pending charge
// of it, or the reconciler's confirmation on the stored pod (req.Exists). The pod decided
// is never part of its own usage, so a decision subtracts it from what it checks.
func (l *Ledger) Prior(ctx context.Context, t *v1alpha1.OffloadTenant, req Request) (corev1.ResourceList, error) {
	l.asked()
	if i := pendingIndex(t.Status.Pending, l.opts.Cluster, req); i >= 0 {
		return t.Status.Pending[i].Amounts, nil
	}
	if !l.readsPod(req) {
		return nil, nil
	}
	p, err := l.pods.Pod(ctx, req.Namespace, req.Name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading pod %s/%s for the ledger: %w", req.Namespace, req.Name, err)
	case p == nil || req.UID != "" && p.UID != req.UID || p.Labels[ChargedLabel] != req.Tenant:
		return nil, nil
	}
	amounts, err := DecodeAmounts(p.Annotations[ChargedAmountsAnnotation])
	if err != nil || len(amounts) == 0 {
		return req.Amounts, nil // confirmed, its record unreadable: it holds what it asks
	}
	return amounts, nil
}

// readsPod says whether the ledger asks the API whether req's stored pod is confirmed.
func (l *Ledger) readsPod(req Request) bool {
	return req.Exists && req.Name != "" && l.pods != nil && (req.Marked || l.opts.Slices.Holder == "")
}

// Sub returns a - b as a new list, never below zero.
func Sub(a, b corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(a))
	for name, q := range a {
		d := q.DeepCopy()
		if s, ok := b[name]; ok {
			d.Sub(s)
		}
		if d.Sign() < 0 {
			d = resource.Quantity{}
		}
		out[name] = d
	}
	return out
}

func isRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}

// pendingIndex finds req's charge among the pending ones of the cluster: by UID when
// both know it, else by namespace and name. Another cluster's pod of the same name is
// another pod.
func pendingIndex(pending []v1alpha1.Charge, cluster string, req Request) int {
	for i, c := range pending {
		if c.Cluster != cluster {
			continue
		}
		if req.UID != "" && c.UID != "" {
			if c.UID == req.UID {
				return i
			}
			continue
		}
		if req.Name != "" && c.Namespace == req.Namespace && c.Name == req.Name {
			return i
		}
	}
	return -1
}

// fits says why req does not fit the tenant's hard amounts, in total and on its node;
// nil when it fits. Only resources the pod holds are checked, as a ResourceQuota does.
// What bridges' slices hold counts as in use (escrow.go).
func fits(t *v1alpha1.OffloadTenant, req Request) *Refusal {
	if r := over(t.Name, t.Spec.Hard, add(t.Status.Used, slicesSum(t, "")), req.Amounts, "on virtual nodes", "its quota"); r != nil {
		return r
	}
	if hard, ok := t.Spec.Nodes[req.Node]; ok && req.Node != "" {
		return over(t.Name, hard, t.Status.NodesUsed[req.Node], req.Amounts, fmt.Sprintf("on virtual node %q", req.Node), "its quota there")
	}
	return nil
}

func over(tenant string, hard, used, amounts corev1.ResourceList, where, quota string) *Refusal {
	var msgs []string
	for _, name := range sortedNames(hard) {
		want, ok := amounts[name]
		if !ok || want.IsZero() {
			continue
		}
		total := used[name].DeepCopy()
		total.Add(want)
		if limit := hard[name]; total.Cmp(limit) > 0 {
			inUse := used[name]
			msgs = append(msgs, fmt.Sprintf("tenant %q would use %s %s %s, over %s of %s (%s in use, this pod holds %s)",
				tenant, total.String(), name, where, quota, limit.String(), inUse.String(), want.String()))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return &Refusal{Message: strings.Join(msgs, "; ")}
}

// charge adds req to the tenant's pending charges and usage, the cluster's included.
func charge(t *v1alpha1.OffloadTenant, cluster string, req Request, now time.Time) {
	t.Status.Pending = append(t.Status.Pending, v1alpha1.Charge{
		UID: req.UID, Namespace: req.Namespace, Name: req.Name, Node: req.Node,
		Amounts: req.Amounts.DeepCopy(), Time: metav1.NewTime(now), Cluster: cluster,
	})
	chargeCluster(t, cluster, req)
	t.Status.PendingCount = int32(len(t.Status.Pending))
	t.Status.Used = add(t.Status.Used, req.Amounts)
	if _, capped := t.Spec.Nodes[req.Node]; capped && req.Node != "" {
		if t.Status.NodesUsed == nil {
			t.Status.NodesUsed = map[string]corev1.ResourceList{}
		}
		t.Status.NodesUsed[req.Node] = add(t.Status.NodesUsed[req.Node], req.Amounts)
	}
}

// add returns a + b as a new list.
func add(a, b corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(a)+len(b))
	for name, q := range a {
		out[name] = q.DeepCopy()
	}
	for name, q := range b {
		sum := out[name]
		sum.Add(q)
		out[name] = sum
	}
	return out
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}

// updateStatus writes t's status, resourceVersion-checked, counting a conflict; when it
// lands, adoptedPods is how many pods it adopted (adopted: the write carries a count).
func (l *Ledger) updateStatus(ctx context.Context, t *v1alpha1.OffloadTenant, adopted bool) (adoptedPods int, err error) {
	err = UpdateStatus(ctx, l.client, t)
	if apierrors.IsConflict(err) {
		l.metrics.writes.WithLabelValues("conflict").Inc()
	}
	if err == nil && adopted {
		adoptedPods = int(adoption(&t.Status, l.opts.Cluster).Pods)
		l.metrics.counts.Inc()
	}
	return adoptedPods, err
}

// UpdateStatus writes t's status, resourceVersion-checked, and checks that the write
// kept every pending charge: an OffloadTenant CRD older than the bridge prunes the pods
// an entry groups (v1alpha1.PendingCharges), and a charge it dropped would let the quota
// overshoot. Every status write of a ledger goes through it. t becomes what the API
// server answered.
func UpdateStatus(ctx context.Context, c client.Client, t *v1alpha1.OffloadTenant) error {
	written := len(t.Status.Pending)
	if err := c.Status().Update(ctx, t); err != nil {
		return err
	}
	if len(t.Status.Pending) != written {
		return fmt.Errorf("the API server kept %d of the %d pending charges written to tenant %q: its OffloadTenant CRD is older than this bridge (apply manifests/crds)",
			len(t.Status.Pending), written, t.Name)
	}
	return nil
}

type ledgerMetrics struct {
	writes, charges   *prometheus.CounterVec
	batch, roundTimes prometheus.Histogram
	waits             prometheus.Histogram
	adopted, counts   prometheus.Counter
}

func newLedgerMetrics(reg prometheus.Registerer) ledgerMetrics {
	m := ledgerMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_writes_total",
			Help: "Writes of tenants' ledgers (OffloadTenant status) by the decision path, by result: success, conflict (re-read and retried), error (no charge).",
		}, []string{"result"}),
		charges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_charges_total",
			Help: "Charges of allowed creates, by result: charged, slice (charged in memory against this bridge's slice, reported later), already (charged before, by any bridge or front door), refused (over the quota), error.",
		}, []string{"result"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sar_bridge_ledger_batch_size",
			Help:    "Charges written in one write of a tenant's ledger.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
		// A create that does not fit its bridge's slice waits for such a round: near a
		// quota's end every create does (make bench-ledger, docs/tenants.md).
		roundTimes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sar_bridge_ledger_write_seconds",
			Help:    "How long one round of a tenant's ledger by the decision path took: the reads of the tenant (and of stored pods), the resourceVersion-checked status write and its retries on conflict; rounds that found nothing to write included.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		// What the ledger adds to a decision: 0 for a create its bridge's slice covered.
		waits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sar_bridge_ledger_wait_seconds",
			Help:    "How long a create waited for its tenant's ledger (a round, others' slices) before it was charged or refused; a create charged from this bridge's slice at once waits 0 (the first bucket).",
			Buckets: []float64{0.0001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		adopted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_adopted_total",
			Help: "Running pods of virtual nodes that no charge covered (they ran before their tenant's quota, or its spec changed) which this bridge counted and added to the ledger as pending charges.",
		}),
		counts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_counts_total",
			Help: "Writes of tenants' ledgers that recorded a count of the pods already running (status.adopted: a quota set, or its spec changed), with or without charges; part of sar_bridge_ledger_writes_total.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.charges, m.batch, m.roundTimes, m.waits, m.adopted, m.counts)
	}
	return m
}
