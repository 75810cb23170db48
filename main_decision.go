package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sar-bridge/sar-bridge/authorizer"
	"github.com/sar-bridge/sar-bridge/kube"
	"github.com/sar-bridge/sar-bridge/mapping"
	"github.com/sar-bridge/sar-bridge/opaplugins"
	"github.com/sar-bridge/sar-bridge/policies"
)

// decisionOptions are the flags that shape a decision. The server and the admin commands
// register them from here, so `check` and `who-can` decide with exactly the server's
// options and cannot drift from it.
type decisionOptions struct {
	kubeconfig    string
	mappingPairs  []string
	mappingsFile  string
	tenantLabel   string
	policyDir     string
	policyData    string
	nodeAccess    bool
	reviewTimeout time.Duration
	kubeQPS       float32
	kubeBurst     int

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
	fs.BoolVar(&o.nodeAccess, "review.node-access", false, "Also require \"use\" on \"nodes\" in the tenant's group, named after the target virtual node.")
	fs.DurationVar(&o.reviewTimeout, "review.timeout", 5*time.Second, "Longest wait for one SubjectAccessReview; past it the decision is a 503, never an allow.")
	fs.Float32Var(&o.kubeQPS, "kube.qps", 50, "Queries per second to the Kubernetes API.")
	fs.IntVar(&o.kubeBurst, "kube.burst", 100, "Burst of queries to the Kubernetes API.")
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

// authorizerConfig is the decision's configuration over mappings.
func (o *decisionOptions) authorizerConfig(mappings authorizer.TenantGroups) authorizer.Config {
	return authorizer.Config{Mappings: mappings, TenantLabel: o.tenantLabel, NodeAccess: o.nodeAccess}
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

// decisionCore is the server's decision pipeline and the cluster it reads: what every
// front door (Data API, opa-openshift, interLink relay, admission webhooks) decides with.
type decisionCore struct {
	mappings   *mapping.Source
	authz      *authorizer.Authorizer
	view       *kube.ClusterView
	client     kubernetes.Interface
	restConfig *rest.Config
	cluster    *clusterData        // --cluster.resources (main_cluster.go); nil: none
	quotas     quotaParts          // main_quota.go
	opa        *opaplugins.Plugins // --config-file (main_opaplugins.go); nil: none
}

// newDecisionCore builds the mappings, policies, client, informers, review cache and
// authorizer of the server, in that order, and enables opa-openshift requests.
func newDecisionCore(ctx context.Context, o serveOptions, reg prometheus.Registerer, logger log.Logger) (*decisionCore, error) {
	mappings, err := newMappingSource(ctx, o, reg, logger)
	if err != nil {
		return nil, err
	}
	cluster, err := o.cluster.start(ctx, func() (*rest.Config, error) { _, c, err := o.decision.newClient("sar-bridge"); return c, err }, logger)
	if err != nil {
		return nil, err
	}
	// Policies and their data are reloaded when they change; a broken change is
	// refused and the last good policy keeps serving.
	evaluator, err := policies.NewReloader(ctx, policies.ReloaderOptions{
		Options:  policies.Options{Dir: o.decision.policyDir, DataFile: o.decision.policyData, Cluster: cluster.policyReader()},
		Interval: o.reloadInterval, Logger: logger, Registerer: reg,
	})
	if err != nil {
		return nil, fmt.Errorf("loading policies: %w", err)
	}
	opa, err := o.opa.start(ctx, evaluator, reg, logger)
	if err != nil {
		return nil, err
	}
	client, restConfig, err := o.decision.newClient("sar-bridge")
	if err != nil {
		return nil, err
	}
	metrics := authorizer.NewMetrics(reg)
	view := o.informer.newClusterView(ctx, client)
	reviewer, err := newReviewer(ctx, o, client, metrics, reg, logger)
	if err != nil {
		return nil, err
	}
	cfg := o.decision.authorizerConfig(mappings)
	cfg.LivePods, cfg.VKFieldManagers = kube.NewPodReader(client, kube.DefaultRetryBackoff), o.interlink.vkManagers
	cfg.DecisionLog = opa.DecisionLog()
	quotas, err := o.quota.start(ctx, restConfig, client, view, mappings, o.admission.targets, o.decision.tenantLabel, o.informer.resync, logger, reg)
	if err != nil {
		return nil, err
	}
	quotas.authorizerConfig(&cfg)
	// Tenants may be OffloadTenant objects: only without them (the CRD not installed)
	// does an empty mapping deny every pod.
	if mappings.Current().Len() == 0 && quotas.directory == nil {
		level.Warn(logger).Log("msg", "no tenant mappings and no OffloadTenant objects (their CRD is not installed): every pod will be denied as unmapped")
	}
	authz := authorizer.New(cfg, reviewer, view, evaluator, metrics, logger)
	if err := enableOpenShift(o, authz, view, client, restConfig, evaluator.Documents()); err != nil {
		return nil, err
	}
	return &decisionCore{mappings: mappings, authz: authz, view: view, client: client, restConfig: restConfig, cluster: cluster, quotas: quotas, opa: opa}, nil
}

// newMappingSource is the tenant mappings of the flags and the reloaded mappings file.
func newMappingSource(ctx context.Context, o serveOptions, reg prometheus.Registerer, logger log.Logger) (*mapping.Source, error) {
	mappings, err := mapping.NewSource(ctx, o.decision.mappings, o.decision.mappingsFile, o.reloadInterval, logger, reg)
	if err != nil {
		return nil, fmt.Errorf("tenant mappings: %w", err)
	}
	return mappings, nil
}
