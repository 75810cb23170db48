package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
	"github.com/sar-bridge/sar-bridge/internal/tenants"
	"github.com/sar-bridge/sar-bridge/internal/virtualpods"
)

// quotaOptions configures the tenants' offload quotas (--quota.*): the OffloadTenant
// objects every replica follows, the ledger decisions charge, and the one reconciler the
// replicas elect (tenants/).
type quotaOptions struct {
	enabled        bool
	pendingTimeout time.Duration
	leaseNamespace string
	interval       time.Duration
	maxPending     int
	slices         bool
	reservationTTL time.Duration // deprecated: no effect
	hub            hubOptions    // --tenants.*: the OffloadTenants of a hub (hub.go)
}

func (o *quotaOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "quota.enabled", true, "Enforce the offload quotas of OffloadTenant objects (spec.hard): an allowed create of a tenant with a quota is charged to the object's status with a resourceVersion-checked write, and one replica, elected through a Lease, confirms and releases the charges, following the pods of virtual nodes while some tenant has a quota. Off: a create of a tenant with a quota is refused (503), never allowed unchecked.")
	fs.DurationVar(&o.pendingTimeout, "quota.pending-timeout", tenants.DefaultPendingTimeout, "How old a charge whose pod was never seen must be before the reconciler asks the API for the pod and releases the charge if it does not exist (a create refused later in admission, a client that gave up).")
	fs.StringVar(&o.leaseNamespace, "quota.lease-namespace", "sar-bridge", "Namespace of the Lease sar-bridge-ledger through which every replica and sidecar elects the one reconciler (the bridge needs get, create and update on leases there).")
	fs.DurationVar(&o.interval, "quota.reconcile-interval", tenants.DefaultInterval, "How often the reconciler recalculates every tenant's ledger, besides on pod events.")
	fs.IntVar(&o.maxPending, "quota.max-pending", tenants.DefaultMaxPending, "Most unconfirmed charges a tenant's ledger may hold (a few hundred bytes each in an object etcd caps at 1.5 MiB); past it, creates of the tenant get 503 until the reconciler confirms some.")
	fs.BoolVar(&o.slices, "quota.slices", true, "Charge creates in memory against a slice of a tenant's remaining quota that this replica holds (status.slices, renewed like a Lease, reported and refilled in batched writes: a few writes per hundred creates). Off: every create is charged with a status write of its own batch, as before slices; slower, and free of the slices' assumption that the replicas' clocks agree within about 4s.")
	fs.DurationVar(&o.reservationTTL, "quota.reservation-ttl", 0, "No effect: usage is the OffloadTenant ledger now.")
	_ = fs.MarkDeprecated("quota.reservation-ttl", "usage is the OffloadTenant ledger now (docs/tenants.md, \"Tenant offload quotas\"); the flag has no effect")
	o.hub.addFlags(fs)
}

// sliceOptions turns quota slices on for this replica (its identity as their holder)
// unless --quota.slices=false.
func (o *quotaOptions) sliceOptions(identity string) tenants.SliceOptions {
	if !o.slices {
		return tenants.SliceOptions{}
	}
	return tenants.SliceOptions{Holder: identity}
}

func (o *quotaOptions) validate() error {
	switch {
	case o.pendingTimeout <= 0:
		return errors.New("--quota.pending-timeout must be positive")
	case o.interval <= 0:
		return errors.New("--quota.reconcile-interval must be positive")
	case o.maxPending <= 0:
		return errors.New("--quota.max-pending must be positive")
	case o.leaseNamespace == "":
		return errors.New("--quota.lease-namespace must name a namespace")
	}
	return o.hub.validate()
}

// quotaParts is what the decisions read and charge.
type quotaParts struct {
	directory *tenants.Directory
	ledger    *tenants.Ledger // nil: --quota.enabled=false
	// stopped is closed once the reconciler has stopped, its lease released; nil when
	// none runs.
	stopped <-chan struct{}
}

// ledgerReleaseTimeout bounds the wait at shutdown for the reconciler to release its
// lease: released, another replica takes over at once rather than after the lease
// expires (15s).
const ledgerReleaseTimeout = 5 * time.Second

// waitStopped waits, at most timeout, for the reconciler to stop after the context it
// was started with ended.
func (p quotaParts) waitStopped(timeout time.Duration) {
	if p.stopped == nil {
		return
	}
	select {
	case <-p.stopped:
	case <-time.After(timeout):
	}
}

// start follows the OffloadTenants (every replica and admin command: groups, namespaces,
// quotas) and, with --quota.enabled, reads their ledgers; a server also charges
// decisions to them and campaigns for the reconciler.
func (o *quotaOptions) start(ctx context.Context, restConfig *rest.Config, kubeClient kubernetes.Interface, view *kube.ClusterView,
	mappings *mapping.Source, use coreUse, tenantLabel string, resync time.Duration, logger log.Logger, reg prometheus.Registerer) (quotaParts, error) {
	// The OffloadTenants (directory, ledger writes, the reconciler's status writes) are
	// the hub's; pods, their marks and the Lease stay this cluster's.
	hubc, err := o.hub.connect(restConfig, kubeClient)
	if err != nil {
		return quotaParts{}, err
	}
	served, err := tenantsServed(hubc.client)
	if err != nil {
		if hubc.where != "" {
			err = fmt.Errorf("%s: %w", hubc.where, err)
		}
		return quotaParts{}, err
	}
	if !served {
		level.Warn(logger).Log("msg", "the OffloadTenant CRD (offloadtenants.sar-bridge.io) is not installed: tenants are those of the flags and mapping file, none has a quota; install it (manifests/crds) and restart", "hub", hubc.where)
		return quotaParts{}, nil
	}
	dyn, err := dynamic.NewForConfig(hubc.config)
	if err != nil {
		return quotaParts{}, fmt.Errorf("OffloadTenants: %w", err)
	}
	dir, err := tenants.NewDirectory(dyn, resync, mappings)
	if err != nil {
		return quotaParts{}, err
	}
	go dir.Run(ctx)
	if !o.enabled {
		level.Warn(logger).Log("msg", "--quota.enabled=false: creates of tenants with a quota are refused")
		return quotaParts{directory: dir}, nil
	}
	if !use.serving() {
		// Decided against the ledger's usage, charged nothing (no client to write with).
		return quotaParts{directory: dir, ledger: tenants.NewLedger(nil, kube.NewPodReader(kubeClient, kube.DefaultRetryBackoff), tenants.LedgerOptions{Cluster: o.hub.cluster})}, nil
	}
	targets := use.targets
	if err := o.hub.claim(ctx, hubc, kubeClient, restConfig.Host, o.leaseNamespace); err != nil {
		return quotaParts{}, err
	}
	c, err := ledgerClient(restConfig)
	if err != nil {
		return quotaParts{}, err
	}
	tc, err := ledgerClient(hubc.config)
	if err != nil {
		return quotaParts{}, err
	}
	pods := kube.NewPodReader(kubeClient, kube.DefaultRetryBackoff)
	// One identity for the reconciler's Lease and this replica's quota slices.
	host, err := os.Hostname()
	if err != nil {
		return quotaParts{}, fmt.Errorf("--quota.enabled: an identity for the ledger: %w", err)
	}
	identity := host + "_" + uuid.NewString()
	// The decisions' ledger writes (a few per hundred creates with slices) get a token
	// bucket of their own, of --kube.qps's size: behind the reconciler's pod patches (one
	// a confirmed pod) they would wait seconds in a burst, and the creates with them.
	decisionsConfig := rest.CopyConfig(hubc.config)
	if hubc.config.QPS > 0 {
		decisionsConfig.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(hubc.config.QPS, hubc.config.Burst)
	}
	lc, err := ledgerClient(decisionsConfig)
	if err != nil {
		return quotaParts{}, err
	}
	shared := view.Informers().Core().V1()
	tenantOf := func(namespace string) string {
		if t, ok, _ := dir.Tenant(namespace); ok {
			return t
		}
		ns, err := shared.Namespaces().Lister().Get(namespace)
		if err != nil {
			return namespace
		}
		return mapping.Tenant(ns.Name, ns.Labels, tenantLabel)
	}
	running := runningPods{
		list:   virtualpods.Options{Client: kubeClient, Nodes: shared.Nodes().Informer(), IsVirtual: targets.IsVirtual},
		synced: []cache.InformerSynced{dir.HasSynced, shared.Namespaces().Informer().HasSynced},
	}
	ledger := tenants.NewLedger(lc, pods, tenants.LedgerOptions{MaxPending: o.maxPending, Registerer: reg,
		Running: running, TenantOf: tenantOf, // the reconciler's mapping: both count the same pods
		Slices: o.sliceOptions(identity), Cluster: o.hub.cluster, Hub: hubc.where})
	// A tenant given a quota has its running pods counted at once, not in the path of
	// its first create.
	if err := dir.OnChange(ledger.Observe); err != nil {
		return quotaParts{}, err
	}
	r, err := tenants.NewReconciler(tenants.ReconcilerOptions{
		Client: c, Tenants: tc, Cluster: o.hub.cluster,
		Pods: func() (tenants.PodSource, error) {
			return virtualpods.New(virtualpods.Options{Client: kubeClient, Nodes: shared.Nodes().Informer(),
				IsVirtual: targets.IsVirtual, Resync: resync, Transform: tenants.PodTransform})
		},
		Directory: dir, TenantOf: tenantOf, Namespaces: shared.Namespaces().Informer(),
		LeaseClient: kubeClient, LeaseNamespace: o.leaseNamespace, Identity: identity,
		PendingTimeout: o.pendingTimeout, Interval: o.interval, Logger: logger, Registerer: reg,
		Busy: ledger.Busy, MaxPending: o.maxPending,
	})
	if err != nil {
		return quotaParts{}, fmt.Errorf("--quota.enabled: %w", err)
	}
	// A quota set, or a tenant the view shows late, is reconciled within a second.
	if err := dir.OnChange(r.TenantChanged); err != nil {
		return quotaParts{}, err
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := r.Run(ctx); err != nil {
			level.Error(logger).Log("msg", "ledger reconciler stopped", "err", err)
		}
	}()
	level.Info(logger).Log("msg", "offload quotas: charging OffloadTenant ledgers; campaigning for the reconciler", "lease", o.leaseNamespace+"/"+tenants.DefaultLeaseName, "identity", r.Identity(),
		"hub", hubc.where, "cluster", o.hub.cluster)
	return quotaParts{directory: dir, ledger: ledger, stopped: stopped}, nil
}

// runningPods lists the pods of the virtual nodes live for the ledger's adoption, once
// the views that say which nodes are virtual and which tenant a namespace belongs to
// have synced: before that a count could miss pods, so the charge fails instead.
type runningPods struct {
	list   virtualpods.Options
	synced []cache.InformerSynced
}

func (r runningPods) VirtualPods(ctx context.Context) ([]*corev1.Pod, error) {
	for _, synced := range r.synced {
		if !synced() {
			return nil, errors.New("the bridge's view of the OffloadTenants and namespaces has not synced yet: which pods are the tenant's is unknown")
		}
	}
	return virtualpods.List(ctx, r.list)
}

// tenantsServed says whether the API server serves offloadtenants.sar-bridge.io (the CRD
// is installed).
func tenantsServed(client kubernetes.Interface) (bool, error) {
	resources, err := client.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("asking the API server for %s: %w", v1alpha1.GroupVersion, err)
	}
	for _, r := range resources.APIResources {
		if r.Name == v1alpha1.Resource.Resource {
			return true, nil
		}
	}
	return false, nil
}

// ledgerClient is a live controller-runtime client of OffloadTenants and pods, through
// the bridge's shared rate limiter.
func ledgerClient(restConfig *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("the OffloadTenant client: %w", err)
	}
	return c, nil
}

// authorizerConfig hands the parts to the authorizer: the directory answers tenants'
// groups (merged with the flags and mapping file) and quotas.
func (p quotaParts) authorizerConfig(cfg *authorizer.Config) {
	if p.directory == nil {
		return
	}
	cfg.Mappings = p.directory
	cfg.Tenants = p.directory
	if p.ledger != nil {
		cfg.Ledger = p.ledger
	}
}
