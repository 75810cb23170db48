package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sar-bridge/sar-bridge/internal/admission"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
	"github.com/sar-bridge/sar-bridge/internal/opaplugins"
	"github.com/sar-bridge/sar-bridge/policies"
)

// decisionOptions are every flag that changes a decision: who the tenants are, the
// policies and what they read, the reviews, the quotas, the OPA plugins. The server and
// the admin commands register all of them from here and build their decision core from
// them with newDecisionCore, so `check` and `who-can` decide with exactly the server's
// options and a new flag that changes decisions exists for every command at once.
type decisionOptions struct {
	kubeconfig     string
	mappingPairs   []string
	mappingsFile   string
	tenantLabel    string
	policyDir      string
	policyData     string
	relaxSafety    bool
	nodeAccess     bool
	reviewTimeout  time.Duration
	kubeQPS        float32
	kubeBurst      int
	reloadInterval time.Duration
	vkManagers     []string

	informer informerOptions  // --informer.*: the namespace and node informers
	cluster  clusterConfig    // --cluster.*: what k8s.get and k8s.list read (cluster.go)
	quota    quotaOptions     // --quota.*: tenant offload quotas (quota.go)
	opa      opaPluginOptions // --config-file, --bundles.*: OPA's plugins (opaplugins.go)

	// Parsed by validate.
	mappings mapping.Mappings
}

func (o *decisionOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig file; empty uses $KUBECONFIG, else the in-cluster service account.")
	fs.StringVar(&o.kubeconfig, "openshift.kubeconfig", "", "Alias of --kubeconfig (opa-openshift's name).")
	fs.StringSliceVar(&o.mappingPairs, "openshift.mappings", nil, "Tenant to API group mapping, tenant=group (repeatable or comma-separated); tenant \"*\" is the fallback for unmapped tenants.")
	fs.StringVar(&o.mappingsFile, "openshift.mappings-file", "", "File of tenant=group lines (# comments allowed), merged with --openshift.mappings and reloaded when it changes; a broken file is rejected and the last good mappings kept.")
	fs.StringVar(&o.tenantLabel, "tenant.label", "interlink.io/tenant", "Namespace (and node) label naming the tenant; a namespace without it is its own tenant.")
	fs.StringVar(&o.policyDir, "policies", "", "Directory of .rego files that extend the embedded policy; a file named like an embedded one replaces it.")
	fs.StringVar(&o.policyData, "policies.data", "", "JSON or YAML file whose object becomes the policy's data (the default policy reads limits, protected_taints, default_limits, restricted_annotations, image_registries and quotas under \"interlink\"; see docs/policies.md).")
	fs.BoolVar(&o.relaxSafety, "policies.allow-relaxing-safety-rules", false, "Let policy data (data.interlink.enforcement, from --policies.data or a bundle) set the safety rules, review (RBAC) and hpc, to warn or audit; without it such data is refused at load. See docs/policies.md, \"Enforcement actions\".")
	fs.BoolVar(&o.nodeAccess, "review.node-access", false, "Also require \"use\" on \"nodes\" in the tenant's group, named after the target virtual node.")
	fs.DurationVar(&o.reviewTimeout, "review.timeout", 5*time.Second, "Longest wait for one SubjectAccessReview; past it the decision is a 503, never an allow.")
	fs.Float32Var(&o.kubeQPS, "kube.qps", 50, "Queries per second to the Kubernetes API.")
	fs.IntVar(&o.kubeBurst, "kube.burst", 100, "Burst of queries to the Kubernetes API.")
	fs.DurationVar(&o.reloadInterval, "reload.interval", 5*time.Second, "How often --policies, --policies.data and --openshift.mappings-file are checked for changes.")
	fs.StringSliceVar(&o.vkManagers, "interlink.vk-field-managers", []string{"vk", "virtual-kubelet"},
		"Field managers (repeatable or comma-separated) under which interLink's Virtual Kubelet writes slurm-job.vk.io/pre-exec and interlink.eu/wstunnel-client-commands into pods. "+
			"It names none, so the API server takes its binary's name: vk in interLink's image, virtual-kubelet in its release archives. "+
			"A create (relay or Data API) that sets one of them reads the pod from the API server: the annotation is the VK's (input.hpc.writers[key] == \"vk\", which the default policy lets through) "+
			"when the live pod holds the same value, last written under one of these names. "+
			"A field manager is a name the writer chooses, not an identity: anyone who may create, update or patch pods in a namespace can write under these names, so on the relay alone this trusts them all not to (docs/install/README.md, \"interLink's mesh networking\"). Empty: nothing is the VK's.")
	o.informer.addFlags(fs)
	o.cluster.addFlags(fs)
	o.quota.addFlags(fs)
	o.opa.addFlags(fs)
}

// validate checks the flags and parses the mappings.
func (o *decisionOptions) validate() error {
	var err error
	if o.mappings, err = mapping.Parse(o.mappingPairs); err != nil {
		return fmt.Errorf("--openshift.mappings: %w", err)
	}
	switch {
	case o.tenantLabel == "":
		return errors.New("--tenant.label must not be empty")
	case o.reviewTimeout <= 0:
		return errors.New("--review.timeout must be positive")
	case o.reloadInterval <= 0:
		return errors.New("--reload.interval must be positive")
	case slices.ContainsFunc(o.vkManagers, func(m string) bool { return strings.TrimSpace(m) == "" }):
		return errors.New("--interlink.vk-field-managers: empty field manager name")
	}
	for _, check := range []func() error{o.informer.validate, o.cluster.validate, o.quota.validate} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// complete takes the kubeconfig from $KUBECONFIG when no flag names one, as kubectl and
// opa-openshift do.
func (o *decisionOptions) complete() {
	if o.kubeconfig == "" {
		o.kubeconfig = os.Getenv("KUBECONFIG")
	}
}

// newClient connects to the Kubernetes API as the kubeconfig's user.
func (o *decisionOptions) newClient(userAgent string) (kubernetes.Interface, *rest.Config, error) {
	return kube.NewClient(kube.ClientOptions{Kubeconfig: o.kubeconfig, QPS: o.kubeQPS, Burst: o.kubeBurst, UserAgent: userAgent})
}

// informerOptions configure the namespace and node informers (--informer.*).
type informerOptions struct {
	resync      time.Duration
	notFoundTTL time.Duration
}

func (o *informerOptions) addFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.resync, "informer.resync", 10*time.Minute, "Resync period of the namespace and node informers.")
	fs.DurationVar(&o.notFoundTTL, "informer.not-found-ttl", kube.DefaultNotFoundTTL,
		"How long a namespace the Kubernetes API reported missing is answered as missing without asking again (forgotten at once when the informer sees it created). 0: ask every time.")
}

func (o *informerOptions) validate() error {
	if o.notFoundTTL < 0 {
		return errors.New("--informer.not-found-ttl must not be negative")
	}
	return nil
}

// newClusterView returns the informers' view of the cluster, started.
func (o *informerOptions) newClusterView(ctx context.Context, client kubernetes.Interface) *kube.ClusterView {
	view := kube.NewClusterView(client, o.resync, kube.WithNotFoundTTL(o.notFoundTTL))
	view.Start(ctx)
	return view
}

// coreUse is what a decision core is built for. The server caches reviews, charges
// allowed creates to the tenants' ledgers and campaigns for the ledger's reconciler; an
// admin command (check, who-can) asks every review live, charges nothing, and waits for
// the cluster's first lists before its first decision.
type coreUse struct {
	// reviews builds the server's caching reviewer; nil: an admin command, every review
	// live.
	reviews func(ctx context.Context, client kubernetes.Interface, metrics *authorizer.Metrics) (*authorizer.CachingReviewer, error)
	// targets say which nodes are virtual (the reconciler follows their pods); server only.
	targets admission.Targets
}

func (u coreUse) serving() bool { return u.reviews != nil }

// decisionCore is the decision pipeline and the cluster it reads: what every front door
// (Data API, opa-openshift, interLink relay, admission webhooks) and every admin
// command decides with.
type decisionCore struct {
	mappings   *mapping.Source
	authz      *authorizer.Authorizer
	evaluator  *policies.Reloader
	view       *kube.ClusterView
	client     kubernetes.Interface
	restConfig *rest.Config
	cluster    *clusterData        // --cluster.resources (cluster.go); nil: none
	quotas     quotaParts          // quota.go
	opa        *opaplugins.Plugins // --config-file (opaplugins.go); nil: none
}

// newDecisionCore is the one assembly of the decision pipeline: the mappings, the
// cluster built-ins' informers, the policies (reloaded, layered with OPA's bundles), the
// client and informers, the reviews, the OffloadTenants and their ledgers, and the
// authorizer over them, in that order.
func newDecisionCore(ctx context.Context, o decisionOptions, use coreUse, reg prometheus.Registerer, logger log.Logger) (_ *decisionCore, err error) {
	client, restConfig, err := o.newClient(userAgent(use))
	if err != nil {
		return nil, err
	}
	if !use.serving() {
		// Fail fast on an API that cannot answer, rather than waiting out the informers.
		if err := kube.CheckReachable(ctx, client, o.reviewTimeout); err != nil {
			return nil, err
		}
	}
	mappings, err := mapping.NewSource(ctx, o.mappings, o.mappingsFile, o.reloadInterval, logger, reg)
	if err != nil {
		return nil, fmt.Errorf("tenant mappings: %w", err)
	}
	cluster, err := o.cluster.start(ctx, restConfig, logger)
	if err != nil {
		return nil, err
	}
	// Policies and their data are reloaded when they change; a broken change is
	// refused and the last good policy keeps serving.
	evaluator, err := policies.NewReloader(ctx, policies.ReloaderOptions{
		Options:  policies.Options{Dir: o.policyDir, DataFile: o.policyData, Cluster: cluster.policyReader(), AllowRelaxingSafetyRules: o.relaxSafety},
		Interval: o.reloadInterval, Logger: logger, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("loading policies: %w", err)
	}
	// A one-shot command works in a copy of the server's persistence directory.
	opa, err := o.opa.start(ctx, evaluator, !use.serving(), reg, logger)
	if err != nil {
		return nil, err
	}
	core := &decisionCore{mappings: mappings, evaluator: evaluator, client: client, restConfig: restConfig, cluster: cluster, opa: opa}
	defer func() {
		if err != nil {
			core.stop() // the plugins' decision logs and the reconciler's lease
		}
	}()
	metrics := authorizer.NewMetrics(reg)
	core.view = o.informer.newClusterView(ctx, client)
	reviewer := authorizer.NewCachingReviewer(kube.NewSubjectAccessReviewer(client, kube.DefaultRetryBackoff), noCache{},
		authorizer.CachingReviewerOptions{Timeout: o.reviewTimeout})
	if use.serving() {
		if reviewer, err = use.reviews(ctx, client, metrics); err != nil {
			return nil, err
		}
	}
	cfg := authorizer.Config{Mappings: mappings, TenantLabel: o.tenantLabel, NodeAccess: o.nodeAccess,
		LivePods: kube.NewPodReader(client, kube.DefaultRetryBackoff), VKFieldManagers: o.vkManagers, DecisionLog: opa.DecisionLog()}
	if core.quotas, err = o.quota.start(ctx, restConfig, client, core.view, mappings, use, o.tenantLabel, o.informer.resync, logger, reg); err != nil {
		return nil, err
	}
	core.quotas.authorizerConfig(&cfg)
	// Tenants may be OffloadTenant objects: only without them (the CRD not installed)
	// does an empty mapping deny every pod.
	if mappings.Current().Len() == 0 && core.quotas.directory == nil {
		level.Warn(logger).Log("msg", "no tenant mappings and no OffloadTenant objects (their CRD is not installed): every pod will be denied as unmapped")
	}
	core.authz = authorizer.New(cfg, reviewer, core.view, evaluator, metrics, logger)
	if !use.serving() {
		if err := core.waitForSync(ctx); err != nil {
			return nil, err
		}
	}
	return core, nil
}

func userAgent(use coreUse) string {
	if use.serving() {
		return "sar-bridge"
	}
	return "sar-bridge-admin"
}

// adminSyncTimeout bounds an admin command's wait for the first lists of the cluster.
const adminSyncTimeout = 30 * time.Second

// waitForSync waits for the first lists of namespaces, nodes, OffloadTenants and
// --cluster.resources, so an admin command's first decision sees the whole cluster.
func (c *decisionCore) waitForSync(ctx context.Context) error {
	syncCtx, cancel := context.WithTimeout(ctx, adminSyncTimeout)
	defer cancel()
	if !c.view.WaitForSync(syncCtx) {
		return fmt.Errorf("listing namespaces and nodes: not done within %s (may the kubeconfig's user list and watch them?)", adminSyncTimeout)
	}
	if d := c.quotas.directory; d != nil && !cache.WaitForCacheSync(syncCtx.Done(), d.HasSynced) {
		return fmt.Errorf("listing OffloadTenants: not done within %s (may the kubeconfig's user list and watch offloadtenants.sar-bridge.io?)", adminSyncTimeout)
	}
	if c.cluster != nil && !c.cluster.reader.WaitForSync(syncCtx) {
		return fmt.Errorf("listing --cluster.resources: not done within %s (may the kubeconfig's user list and watch them?)", adminSyncTimeout)
	}
	return nil
}

// stop ends what outlives a decision: OPA's plugins send their last decision logs and
// status, and the reconciler releases its lease so another replica takes over at once.
func (c *decisionCore) stop() {
	if c.opa != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.opa.Stop(stopCtx)
		cancel()
	}
	c.quotas.waitStopped(ledgerReleaseTimeout)
}

// noCache is a review cache that never holds anything: every review of an admin
// command is live.
type noCache struct{}

func (noCache) Get(context.Context, string) ([]byte, bool, error)        { return nil, false, nil }
func (noCache) Set(context.Context, string, []byte, time.Duration) error { return nil }
