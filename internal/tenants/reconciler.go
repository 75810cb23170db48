package tenants

// The reconciler keeps every tenant's ledger exact. One replica runs it at a time (a
// coordination.k8s.io Lease, client-go's leader election); the decision path needs no
// leader, and a term that overlaps another's (a paused process) is harmless: every
// write is resourceVersion-checked and every patch idempotent.
//
// Each round of a tenant, while leading:
//   - confirms each pending charge whose pod is seen running on a virtual node: the pod
//     is labelled ChargedLabel=<tenant> and annotated with the amounts charged
//     (ChargedAmountsAnnotation) in one patch, and the charge leaves status.pending;
//   - releases a pending charge whose pod is seen ended, or — older than the pending
//     timeout, not seen by the informer — whose pod a live GET says does not exist (or
//     has ended); an informer that has not seen a pod never releases its charge
//     (kubernetes#123434), nor does a GET that fails;
//   - recalculates status.used and status.nodesUsed: the labelled pods of the tenant's
//     namespaces that have not ended, plus the charges still pending. A pod deleted or
//     ended drops out: that is the release of a confirmed charge.
//
// and writes the status once, resourceVersion-checked, re-reading it on a conflict with
// the decision path (retry.RetryOnConflict). Rounds follow pod events (debounced per
// tenant) and run every Interval.
//
// What a pod holds is fixed when it is confirmed: a pods/resize that shrinks it later
// frees nothing, since the HPC job keeps the size it was submitted with; a pod counts
// the larger of its charged amounts and its spec's, per resource. A label copied onto
// another tenant's pod, or an annotation written by hand, charges the namespace's own
// tenant, never the label's, and never less than the pod's spec: a tenant can only
// hurt itself.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// TenantSource is the reconciler's view of the OffloadTenants; *Directory is the real one.
type TenantSource interface {
	WithQuota() []string
	Quota(tenant string) (*v1alpha1.OffloadTenant, bool)
	HasSynced() bool
}

var _ TenantSource = (*Directory)(nil)

// Defaults of ReconcilerOptions.
const (
	DefaultLeaseName      = "sar-bridge-ledger"
	DefaultPendingTimeout = 2 * time.Minute
	DefaultInterval       = 30 * time.Second
	DefaultDebounce       = time.Second
	DefaultQuotaPoll      = time.Second
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
	// roundTimeout bounds one round of one tenant (its GETs, patches and write).
	roundTimeout = time.Minute
)

// ReconcilerOptions configures a Reconciler.
type ReconcilerOptions struct {
	// Client reads and writes live (never from a cache): OffloadTenants (get, status
	// update) and pods (get, list, patch). Its scheme must know both.
	Client client.Client
	// Tenants, when set, reads and writes the OffloadTenants instead of Client: a hub's
	// (--tenants.kubeconfig), while the pods stay this cluster's.
	Tenants client.Client
	// Cluster is this member cluster's name when the OffloadTenants live in a hub: the
	// reconciler confirms, releases and recounts only the charges, slices and usage of
	// this cluster (clusters.go). "" without a hub.
	Cluster string
	// Pods returns a new source of the pods of virtual nodes, for one leadership term:
	// a virtualpods.Follower with Transform: PodTransform. It is started when the term
	// begins and stopped when it ends, so replicas that do not lead follow no pods.
	Pods func() (PodSource, error)
	// Directory lists the tenants with a quota.
	Directory TenantSource
	// TenantOf is a namespace's tenant: the OffloadTenant that lists it, else its
	// --tenant.label label, else its name.
	TenantOf func(namespace string) string
	// Namespaces, when set, is the shared namespace informer: a namespace whose labels
	// change may move its pods to another tenant, so every tenant is recalculated.
	Namespaces cache.SharedIndexInformer

	// LeaseClient, LeaseNamespace and LeaseName (DefaultLeaseName) are the Lease the
	// replicas elect the reconciler with; Identity is this replica's (default: the
	// host name, the pod's in a cluster, and a random suffix).
	LeaseClient    kubernetes.Interface
	LeaseNamespace string
	LeaseName      string
	Identity       string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader election
	// timings (defaults 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// PendingTimeout is how old a pending charge must be before its pod, unseen, is
	// asked for and the charge released if it does not exist (DefaultPendingTimeout).
	PendingTimeout time.Duration
	// Interval is how often every tenant is reconciled (DefaultInterval); Debounce
	// gathers a tenant's pod events into one round (DefaultDebounce); QuotaPoll is how
	// often the leader looks whether some tenant has a quota, to start or stop following
	// pods (DefaultQuotaPoll).
	Interval, Debounce, QuotaPoll time.Duration
	// Retry bounds the attempts of one status write (DefaultRetry).
	Retry wait.Backoff
	// Busy says this replica is deciding creates of tenants with a quota (Ledger.Busy):
	// a round's marks wait for a pause (marks.go). nil: never.
	Busy func() bool
	// MaxPending is the ledger's bound on a tenant's pending charges
	// (DefaultMaxPending): marks do not wait once a tenant holds half of it.
	MaxPending int

	Now        func() time.Time
	Logger     log.Logger
	Registerer prometheus.Registerer
}

// Reconciler confirms and releases tenants' charges and recalculates their usage,
// while it holds the lease.
type Reconciler struct {
	opts    ReconcilerOptions
	logger  log.Logger
	metrics reconcilerMetrics
	leading atomic.Bool
	// termMu is held for a whole leadership term, so a term has ended before the next
	// one begins.
	termMu sync.Mutex
	// following is the term whose rounds run now (nil between terms and before the
	// first lists); generations are the OffloadTenant generations TenantChanged saw.
	following   atomic.Pointer[term]
	generations sync.Map // tenant name → specSeen
}

// NewReconciler checks the options and returns a Reconciler that does nothing until Run.
func NewReconciler(opts ReconcilerOptions) (*Reconciler, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("ledger reconciler: no Kubernetes client")
	case opts.Pods == nil:
		return nil, errors.New("ledger reconciler: no pod source")
	case opts.Directory == nil:
		return nil, errors.New("ledger reconciler: no tenant directory")
	case opts.TenantOf == nil:
		return nil, errors.New("ledger reconciler: no namespace-to-tenant mapping")
	case opts.LeaseClient == nil || opts.LeaseNamespace == "":
		return nil, errors.New("ledger reconciler: no lease client or lease namespace")
	}
	if opts.Tenants == nil {
		opts.Tenants = opts.Client
	}
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	r := &Reconciler{opts: opts, logger: log.With(opts.Logger, "component", "ledger-reconciler"), metrics: newReconcilerMetrics(opts.Registerer)}
	if _, err := r.elector(func(context.Context) {}); err != nil { // the timings, checked now rather than at Run
		return nil, err
	}
	return r, nil
}

func (o *ReconcilerOptions) defaults() error {
	setDefault(&o.LeaseName, DefaultLeaseName)
	setDefault(&o.LeaseDuration, DefaultLeaseDuration)
	setDefault(&o.RenewDeadline, DefaultRenewDeadline)
	setDefault(&o.RetryPeriod, DefaultRetryPeriod)
	setDefault(&o.PendingTimeout, DefaultPendingTimeout)
	setDefault(&o.Interval, DefaultInterval)
	setDefault(&o.Debounce, DefaultDebounce)
	setDefault(&o.QuotaPoll, DefaultQuotaPoll)
	setDefault(&o.MaxPending, DefaultMaxPending)
	if o.Retry.Steps == 0 {
		o.Retry = DefaultRetry
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("ledger reconciler: an identity for the lease: %w", err)
		}
		// The suffix tells apart two processes of one host (or a restarted pod whose
		// old self still holds the lease): each must campaign as itself.
		o.Identity = host + "_" + uuid.NewString()
	}
	return nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Identity is the name this replica campaigns with.
func (r *Reconciler) Identity() string { return r.opts.Identity }

// Leading reports whether this replica holds the lease and reconciles.
func (r *Reconciler) Leading() bool { return r.leading.Load() }

// Run campaigns for the lease and reconciles while it holds it, until ctx ends; a
// lease lost is campaigned for again. On return the lease is released, so another
// replica takes over at once rather than after the lease expires.
func (r *Reconciler) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		campaign, abdicate := context.WithCancel(ctx)
		var failed atomic.Bool
		le, err := r.elector(func(lctx context.Context) {
			if err := r.lead(lctx); err != nil {
				level.Error(r.logger).Log("msg", "the ledger reconciler cannot reconcile: handing the lease over", "err", err)
				failed.Store(true)
				abdicate()
			}
		})
		if err != nil {
			abdicate()
			return err
		}
		le.Run(campaign)
		abdicate()
		r.termMu.Lock() // waits for the term's end, if one began
		r.termMu.Unlock()
		if failed.Load() {
			// Give another replica the time to take the lease before campaigning again.
			select {
			case <-ctx.Done():
			case <-time.After(r.opts.LeaseDuration):
			}
		}
	}
	return nil
}

func (r *Reconciler) elector(lead func(context.Context)) (*leaderelection.LeaderElector, error) {
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: r.opts.LeaseNamespace, Name: r.opts.LeaseName},
			Client:     r.opts.LeaseClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: r.opts.Identity},
		},
		Name:            r.opts.LeaseName,
		LeaseDuration:   r.opts.LeaseDuration,
		RenewDeadline:   r.opts.RenewDeadline,
		RetryPeriod:     r.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				level.Info(r.logger).Log("msg", "ledger reconciler elected", "leader", identity, "self", identity == r.opts.Identity)
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ledger reconciler: leader election: %w", err)
	}
	return le, nil
}

// lead is one leadership term: it reconciles until ctx (cancelled when the lease is
// lost or Run ends) is done. An error says the term could not begin.
func (r *Reconciler) lead(ctx context.Context) error {
	r.termMu.Lock()
	defer r.termMu.Unlock()
	if ctx.Err() != nil {
		return nil // the term ended before it began
	}
	r.leading.Store(true)
	r.metrics.leader.Set(1)
	defer func() {
		r.leading.Store(false)
		r.metrics.leader.Set(0)
	}()
	level.Info(r.logger).Log("msg", "reconciling the tenants' ledgers", "identity", r.opts.Identity)
	return r.runTerm(ctx)
}

// term is one leadership term's state.
type term struct {
	r     *Reconciler
	view  *podView
	queue workqueue.TypedRateLimitingInterface[string]
	// warned: tenants of a hub this reconciler, without a cluster name, was warned about;
	// deferred: tenants it left to another election's reconciler (rounds run one at a
	// time: no lock).
	warned, deferred map[string]bool
}

func (r *Reconciler) newTerm() *term {
	tm := &term{r: r, queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()), warned: map[string]bool{}, deferred: map[string]bool{}}
	tm.view = newPodView(tm.namespaceChanged, func(reason string) { r.metrics.released.WithLabelValues(reason).Inc() })
	return tm
}

// runTerm reconciles until ctx ends, following the pods of virtual nodes only while some
// tenant has a quota: a cluster without quotas costs no pod informer at all.
func (r *Reconciler) runTerm(ctx context.Context) error {
	for {
		if !waitUntil(ctx, r.opts.QuotaPoll, r.hasQuotas) {
			return nil
		}
		following, stop := context.WithCancel(ctx)
		go func() {
			waitUntil(following, r.opts.QuotaPoll, func() bool { return !r.hasQuotas() })
			stop()
		}()
		r.metrics.following.Set(1)
		err := r.follow(following)
		r.metrics.following.Set(0)
		stop()
		if err != nil || ctx.Err() != nil {
			return err
		}
		level.Info(r.logger).Log("msg", "no tenant has a quota: no longer following the pods of virtual nodes")
	}
}

// hasQuotas says whether some OffloadTenant sets hard amounts.
func (r *Reconciler) hasQuotas() bool {
	return r.opts.Directory.HasSynced() && len(r.opts.Directory.WithQuota()) > 0
}

// waitUntil polls cond every interval until it holds (true) or ctx ends (false).
func waitUntil(ctx context.Context, interval time.Duration, cond func() bool) bool {
	err := wait.PollUntilContextCancel(ctx, interval, true, func(context.Context) (bool, error) { return cond(), nil })
	return err == nil
}

// follow follows the pods, waits for the first lists, and reconciles until ctx ends.
func (r *Reconciler) follow(ctx context.Context) error {
	tm := r.newTerm()
	defer tm.queue.ShutDown()
	src, err := r.opts.Pods()
	if err != nil {
		return fmt.Errorf("following the pods of virtual nodes: %w", err)
	}
	if err := src.AddEventHandler(tm.view); err != nil {
		return fmt.Errorf("following the pods of virtual nodes: %w", err)
	}
	if err := src.Start(ctx); err != nil {
		return fmt.Errorf("following the pods of virtual nodes: %w", err)
	}
	defer src.Stop()
	stopNamespaces, err := tm.followNamespaces()
	if err != nil {
		return err
	}
	defer stopNamespaces()
	// No round before the first lists: an empty view would release nothing (charges
	// are only released after a GET) but would drop every confirmed pod from usage.
	if !cache.WaitForCacheSync(ctx.Done(), src.HasSynced, r.opts.Directory.HasSynced) {
		return nil
	}
	tm.enqueueAll()
	r.following.Store(tm)
	defer r.following.CompareAndSwap(tm, nil)
	go tm.tick(ctx)
	go func() {
		<-ctx.Done()
		tm.queue.ShutDown()
	}()
	for tm.next(ctx) {
	}
	return nil
}

// namespaceChanged schedules a round of the namespace's tenant, gathering the events
// of the next Debounce into it.
func (tm *term) namespaceChanged(namespace string) {
	tm.queue.AddAfter(tm.r.opts.TenantOf(namespace), tm.r.opts.Debounce)
}

// TenantChanged schedules a round of tenant t when its spec generation is new to this
// reconciler (a quota set or changed, a tenant its view of the OffloadTenants had not
// shown yet, as after an API server restart, when informers re-list up to a minute
// later), so that its pods are confirmed and counted within Debounce rather than at
// the next Interval. Status writes, which leave the generation alone, schedule nothing:
// pod events and the ledger's own rounds cover those.
func (r *Reconciler) TenantChanged(t *v1alpha1.OffloadTenant) {
	now := specSeen{uid: t.UID, generation: t.Generation}
	if old, seen := r.generations.Swap(t.Name, now); seen && old.(specSeen) == now {
		return
	}
	if tm := r.following.Load(); tm != nil {
		tm.queue.AddAfter(t.Name, r.opts.Debounce)
	}
}

// specSeen is an OffloadTenant's spec as TenantChanged last saw it: a tenant deleted
// and made again under its name starts its generations anew.
type specSeen struct {
	uid        types.UID
	generation int64
}

func (tm *term) enqueueAll() {
	for _, t := range tm.r.opts.Directory.WithQuota() {
		tm.queue.Add(t)
	}
}

func (tm *term) tick(ctx context.Context) {
	t := time.NewTicker(tm.r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tm.enqueueAll()
		}
	}
}

// followNamespaces recalculates every tenant, debounced, when a namespace's labels
// change: its pods may belong to another tenant now.
func (tm *term) followNamespaces() (stop func(), err error) {
	if tm.r.opts.Namespaces == nil {
		return func() {}, nil
	}
	reg, err := tm.r.opts.Namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			old, ok1 := oldObj.(*corev1.Namespace)
			ns, ok2 := obj.(*corev1.Namespace)
			if ok1 && ok2 && !equalLabels(old.Labels, ns.Labels) {
				for _, t := range tm.r.opts.Directory.WithQuota() {
					tm.queue.AddAfter(t, tm.r.opts.Debounce)
				}
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("following namespaces for the ledger: %w", err)
	}
	return func() { _ = tm.r.opts.Namespaces.RemoveEventHandler(reg) }, nil
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// next runs the round of the next tenant due; false once the queue is shut down. A
// round that fails is retried with backoff.
func (tm *term) next(ctx context.Context) bool {
	tenant, shutdown := tm.queue.Get()
	if shutdown {
		return false
	}
	defer tm.queue.Done(tenant)
	rctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	if err := tm.reconcile(rctx, tenant); err != nil {
		if ctx.Err() == nil {
			level.Warn(tm.r.logger).Log("msg", "reconciling a tenant's ledger", "tenant", tenant, "err", err)
			tm.queue.AddRateLimited(tenant)
		}
		return true
	}
	tm.queue.Forget(tenant)
	return true
}

type reconcilerMetrics struct {
	reconciles, released *prometheus.CounterVec
	confirmed, conflicts prometheus.Counter
	leader, following    prometheus.Gauge
}

func newReconcilerMetrics(reg prometheus.Registerer) reconcilerMetrics {
	m := reconcilerMetrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_reconciles_total",
			Help: "Rounds of the ledger reconciler, one tenant each, by result: written (the status changed), unchanged, error (retried with backoff), deferred (another election's reconciler reconciles the tenant: the replicas name different --quota.lease-namespace).",
		}, []string{"result"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_released_total",
			Help: "Charges released by the ledger reconciler, by reason: ended (the pod succeeded or failed), deleted, missing (the charged pod never appeared, past the pending timeout).",
		}, []string{"reason"}),
		confirmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_confirmed_total",
			Help: "Pods the ledger reconciler marked charged (label sar-bridge.io/charged and the amounts annotation).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sar_bridge_ledger_reconcile_conflicts_total",
			Help: "Status writes of the ledger reconciler that met a concurrent write (a decision's charge) and were re-read and recomputed.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sar_bridge_ledger_leader",
			Help: "1 while this replica holds the lease sar-bridge-ledger and runs the ledger reconciler, else 0.",
		}),
		following: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sar_bridge_ledger_following_pods",
			Help: "1 while the ledger reconciler follows the pods of virtual nodes (it leads and some tenant has a quota), else 0.",
		}),
	}
	for _, r := range []string{reconcileWritten, reconcileUnchanged, reconcileError, reconcileDeferred} {
		m.reconciles.WithLabelValues(r)
	}
	for _, r := range []string{releaseEnded, releaseDeleted, releaseMissing} {
		m.released.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.reconciles, m.released, m.confirmed, m.conflicts, m.leader, m.following)
	}
	return m
}
