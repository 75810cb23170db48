// Command sar-bridge is an OPA-compatible decision service for interLink: Kubernetes RBAC
// (SubjectAccessReviews) decides who may offload pods, and a Rego policy adds resource
// and label rules on top.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	flag "github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"k8s.io/apiserver/pkg/authorization/authorizerfactory"

	"github.com/sar-bridge/sar-bridge/authn"
	"github.com/sar-bridge/sar-bridge/authorizer"
	"github.com/sar-bridge/sar-bridge/kube"
	"github.com/sar-bridge/sar-bridge/mapping"
	"github.com/sar-bridge/sar-bridge/policies"
	"github.com/sar-bridge/sar-bridge/server"
	"github.com/sar-bridge/sar-bridge/tlsserving"
	"github.com/sar-bridge/sar-bridge/version"
)

type config struct {
	kubeconfig     string
	mappingPairs   []string
	mappings       mapping.Mappings
	mappingsFile   string
	reloadInterval time.Duration
	tenantLabel    string
	policyDir      string
	policyData     string
	webListen      string
	internalListen string
	maxBodyBytes   int64
	logLevel       string
	logFormat      string
	allowedTTL     time.Duration
	deniedTTL      time.Duration
	cacheSize      int
	nodeAccess     bool
	reviewTimeout  time.Duration
	kubeQPS        float32
	kubeBurst      int
	resync         time.Duration
	shutdown       time.Duration
	shutdownDelay  time.Duration
	requestTimeout time.Duration
	maxInFlight    int

	memcached             []string
	memcachedExpire       int
	memcachedInterval     int
	memcachedTimeout      time.Duration
	memcachedMaxIdleConns int
	frontTTL              time.Duration
	memcachedSecurity

	openshift       authorizer.OpenShiftConfig
	opaPackage      string
	opaRule         string
	opaMatcher      string
	opaSkipTenants  string
	opaAdminGroups  string
	healthchecksURL string
	debugName       string

	authnMode          string
	authnAudiences     []string
	insecureAnyCaller  bool
	tlsCertFile        string
	tlsKeyFile         string
	tlsInternalCert    string
	tlsInternalKey     string
	tlsInternalCAFile  string
	tlsClientCAFile    string
	tlsMinVersion      string
	tlsCipherSuites    string
	tlsReloadInterval  time.Duration
	callerCacheSuccess time.Duration
	callerCacheFailure time.Duration

	interlink interlinkConfig // --interlink.*: the plugin relay (main_interlink.go)
	admission admissionConfig // --admission.*: the admission webhooks (main_admission.go)

	notFoundTTL time.Duration // --informer.not-found-ttl (main_openshift.go)

	showVersion bool
}

// Names in opa-openshift's own validation: a Rego package and rule.
var (
	opaPackagePattern = regexp.MustCompile(`^[_A-Za-z]\w*(\.[_A-Za-z]\w*)*$`)
	opaRulePattern    = regexp.MustCompile(`^[_A-Za-z]\w*$`)
)

// unsupportedFlags are opa-openshift flags sar-bridge refuses rather than ignores.
var unsupportedFlags = map[string]string{
	"debug.token": "a fallback token would let any caller without a token act as its bearer",
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("sar-bridge", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, `sar-bridge answers OPA Data API requests (POST /v1/data/{package}/{rule}) for interLink.
Each pod decision is a Kubernetes SubjectAccessReview for the pod's service account on
"pods" in the API group its tenant maps to, then a Rego policy (caps, protected taints,
tenant isolation, modifications).

Usage: sar-bridge [flags]                serve (the default)
       sar-bridge check -f FILE [flags]   decide pods from a terminal, as the server would
       sar-bridge who-can [flags]         list who may offload where
       sar-bridge discovery --group G     CRDs that make kubectl auth can-i truthful
       sar-bridge helm-postrender [flags] add the bridge to interLink's chart (Helm post-renderer)
       sar-bridge --version
Each command explains itself with --help.

Flags:
%s`, fs.FlagUsages())
	}
	cfg.addDecisionFlags(fs) // shared with `sar-bridge check` and `who-can` (main_admin.go)
	fs.DurationVar(&cfg.reloadInterval, "reload.interval", 5*time.Second, "How often --policies, --policies.data and --openshift.mappings-file are checked for changes.")
	fs.StringVar(&cfg.webListen, "web.listen", ":8080", "Address of the public listener (OPA Data API, /health).")
	fs.StringVar(&cfg.internalListen, "web.internal.listen", ":8081", "Address of the internal listener (/live, /ready, /metrics, /debug/pprof/).")
	fs.Int64Var(&cfg.maxBodyBytes, "web.max-body-bytes", server.DefaultMaxBodyBytes, "Largest request body accepted; larger ones get 413.")
	fs.StringVar(&cfg.logLevel, "log.level", "info", "Log level: debug, info, warn, error.")
	fs.StringVar(&cfg.logFormat, "log.format", "logfmt", "Log format: logfmt or json.")
	fs.DurationVar(&cfg.allowedTTL, "cache.allowed-ttl", 5*time.Minute, "How long an allowing review is reused; a removed RoleBinding is seen within this time.")
	fs.DurationVar(&cfg.deniedTTL, "cache.denied-ttl", 30*time.Second, "How long a denying review is reused; a new RoleBinding is seen within this time.")
	fs.IntVar(&cfg.cacheSize, "cache.size", 10000, "Most reviews kept in the in-process cache (least recently used go first).")
	fs.DurationVar(&cfg.resync, "informer.resync", 10*time.Minute, "Resync period of the namespace and node informers.")
	fs.DurationVar(&cfg.shutdown, "web.shutdown-timeout", 15*time.Second, "How long in-flight requests may take to finish on SIGTERM.")
	fs.DurationVar(&cfg.shutdownDelay, "web.shutdown-delay", 0, "On SIGTERM, how long /ready reports false while still serving, so load balancers stop sending first.")
	fs.DurationVar(&cfg.requestTimeout, "web.request-timeout", 10*time.Second, "Deadline of one decision (reviews and policy); past it the answer is a 503.")
	fs.IntVar(&cfg.maxInFlight, "review.max-in-flight", 64, "Most reviews sent to the Kubernetes API at once; more wait within their deadline, then get a 503. 0: no cap.")
	fs.StringSliceVar(&cfg.memcached, "memcached", nil, "memcached server host:port to share reviews between replicas (repeatable; DNS names are re-resolved every --memcached.interval). Empty: in-process cache only.")
	fs.IntVar(&cfg.memcachedExpire, "memcached.expire", 0, "Seconds an allowing review is kept in memcached; 0 uses --cache.allowed-ttl. Denials stay bounded by --cache.denied-ttl.")
	fs.IntVar(&cfg.memcachedInterval, "memcached.interval", 10, "Seconds between DNS refreshes of the memcached servers; 0 resolves once.")
	fs.DurationVar(&cfg.memcachedTimeout, "memcached.timeout", 500*time.Millisecond, "Longest wait for memcached; past it the review is asked live.")
	fs.IntVar(&cfg.memcachedMaxIdleConns, "memcached.max-idle-conns", 16, "Idle connections kept per memcached server.")
	cfg.memcachedSecurity.register(fs)
	fs.DurationVar(&cfg.frontTTL, "cache.front-ttl", 10*time.Second, "With memcached: how long a replica reuses a review from its in-process tier (never longer than the entry has left).")
	fs.StringVar(&cfg.opaPackage, "opa.package", "", "opa-openshift compatibility: Rego package whose --opa.rule answers opa-openshift's request shape, e.g. lokistack (served at /v1/data/lokistack/allow). Empty: not served.")
	fs.StringVar(&cfg.opaRule, "opa.rule", "allow", "opa-openshift compatibility: the rule of --opa.package.")
	fs.StringVar(&cfg.opaMatcher, "opa.matcher", "", "opa-openshift compatibility: comma-separated label names; read answers then carry a matcher listing the namespaces the subject may read.")
	fs.StringVar(&cfg.openshift.MatcherOp, "opa.matcher-op", "", "opa-openshift compatibility: matcherOp of the answer (and|or); empty leaves it out.")
	fs.StringVar(&cfg.opaSkipTenants, "opa.skip-tenants", "", "opa-openshift compatibility: comma-separated tenants answered without a matcher.")
	fs.StringVar(&cfg.opaAdminGroups, "opa.admin-groups", "", "opa-openshift compatibility: comma-separated groups whose members get no matcher.")
	fs.BoolVar(&cfg.openshift.SSAR, "opa.ssar", false, "opa-openshift compatibility: review with the caller's X-Forwarded-Access-Token (SelfSubjectAccessReview) instead of the body's subject and groups.")
	fs.BoolVar(&cfg.openshift.ViaQToOTelMigration, "opa.viaq-to-otel-migration", false, "opa-openshift compatibility: --opa.matcher names both kubernetes_namespace_name and k8s_namespace_name; each request keeps the one its selectors use.")
	fs.StringVar(&cfg.healthchecksURL, "web.healthchecks.url", "", "URL /live probes (any HTTP answer passes), e.g. http://localhost:8080 to check the public listener. Empty: no probe.")
	fs.StringVar(&cfg.debugName, "debug.name", "", "Name added to every log line (name=...).")
	fs.StringVar(&cfg.authnMode, "authn.mode", "", "How callers of the public listener are authenticated: none (loopback only), token (Bearer token checked by TokenReview) or mtls (client certificate from --tls.client-ca-file). Authenticated callers also need \"create\" on the nonResourceURL of the path they call. Empty: none on a loopback --web.listen, token otherwise.")
	fs.StringSliceVar(&cfg.authnAudiences, "authn.audiences", nil, "Audiences a caller's token must be valid for (TokenReview); empty: the API server's.")
	fs.BoolVar(&cfg.insecureAnyCaller, "authn.insecure-allow-any-caller", false, "Allow --authn.mode=none on a non-loopback --web.listen: anyone who reaches the port learns RBAC answers.")
	fs.DurationVar(&cfg.callerCacheSuccess, "authn.cache-ttl", 2*time.Minute, "How long a caller's accepted token and allowed path are reused.")
	fs.DurationVar(&cfg.callerCacheFailure, "authn.denied-cache-ttl", 10*time.Second, "How long a caller's refused path (and an impersonation refusal) is reused.")
	fs.StringVar(&cfg.tlsCertFile, "tls.server.cert-file", "", "TLS certificate of the public listener (reloaded when it changes). Empty: plain HTTP.")
	fs.StringVar(&cfg.tlsKeyFile, "tls.server.key-file", "", "TLS key of the public listener.")
	fs.StringVar(&cfg.tlsInternalCert, "tls.internal.server.cert-file", "", "TLS certificate of the internal listener. Empty: plain HTTP.")
	fs.StringVar(&cfg.tlsInternalKey, "tls.internal.server.key-file", "", "TLS key of the internal listener.")
	fs.StringVar(&cfg.tlsInternalCAFile, "tls.internal.server.ca-file", "", "CA the --web.healthchecks.url probe trusts; empty: the system's.")
	fs.StringVar(&cfg.tlsClientCAFile, "tls.client-ca-file", "", "CA bundle that signs caller certificates for --authn.mode=mtls (CN = user, O = groups); reloaded when it changes.")
	fs.StringVar(&cfg.tlsMinVersion, "tls.min-version", "VersionTLS13", "Minimum TLS version: VersionTLS12 or VersionTLS13.")
	fs.StringVar(&cfg.tlsCipherSuites, "tls.cipher-suites", "", "Comma-separated TLS 1.2 cipher suites (IANA names); empty: Go's defaults.")
	fs.DurationVar(&cfg.tlsReloadInterval, "tls.reload-interval", 10*time.Second, "How often certificate files are checked for changes.")
	fs.BoolVar(&cfg.showVersion, "version", false, "Print the version, commit and Go version, then exit.")
	cfg.interlink.addFlags(fs)
	cfg.admission.addFlags(fs)
	cfg.addOpenShiftFlags(fs)
	for name, why := range unsupportedFlags {
		fs.String(name, "", "Not supported: "+why+".")
		_ = fs.MarkHidden(name)
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.showVersion {
		return cfg, nil
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for name, why := range unsupportedFlags {
		if fs.Changed(name) {
			return cfg, fmt.Errorf("--%s is not supported by sar-bridge: %s", name, why)
		}
	}
	if err := cfg.parseOpenShift(); err != nil {
		return cfg, err
	}
	if err := cfg.checkCallers(); err != nil {
		return cfg, err
	}
	if err := cfg.checkMemcached(); err != nil {
		return cfg, err
	}
	if err := cfg.interlink.validate(); err != nil {
		return cfg, err
	}
	if err := cfg.admission.validate(); err != nil {
		return cfg, err
	}
	if err := cfg.checkOpenShiftFlags(); err != nil {
		return cfg, err
	}
	var err error
	if cfg.mappings, err = mapping.Parse(cfg.mappingPairs); err != nil {
		return cfg, fmt.Errorf("--openshift.mappings: %w", err)
	}
	switch {
	case cfg.allowedTTL < 0 || cfg.deniedTTL < 0:
		return cfg, errors.New("--cache.allowed-ttl and --cache.denied-ttl must not be negative")
	case cfg.cacheSize < 1:
		return cfg, errors.New("--cache.size must be at least 1")
	case cfg.reloadInterval <= 0:
		return cfg, errors.New("--reload.interval must be positive")
	case cfg.maxInFlight < 0 || cfg.requestTimeout < 0 || cfg.shutdownDelay < 0:
		return cfg, errors.New("--review.max-in-flight, --web.request-timeout and --web.shutdown-delay must not be negative")
	case cfg.reviewTimeout <= 0:
		return cfg, errors.New("--review.timeout must be positive")
	case cfg.maxBodyBytes <= 0:
		return cfg, errors.New("--web.max-body-bytes must be positive")
	case cfg.memcachedExpire < 0 || cfg.memcachedInterval < 0:
		return cfg, errors.New("--memcached.expire and --memcached.interval must not be negative")
	case cfg.memcachedTimeout <= 0:
		return cfg, errors.New("--memcached.timeout must be positive")
	case cfg.frontTTL < 0:
		return cfg, errors.New("--cache.front-ttl must not be negative")
	case cfg.tenantLabel == "":
		return cfg, errors.New("--tenant.label must not be empty")
	}
	return cfg, nil
}

// checkCallers refuses configurations that would answer anyone on the network.
func (cfg *config) checkCallers() error {
	if cfg.authnMode == "" {
		cfg.authnMode = string(authn.ModeToken)
		if authn.IsLoopback(cfg.webListen) {
			cfg.authnMode = string(authn.ModeNone)
		}
	}
	mode, err := authn.ParseMode(cfg.authnMode)
	if err != nil {
		return fmt.Errorf("--authn.mode: %w", err)
	}
	switch {
	case mode == authn.ModeNone && !authn.IsLoopback(cfg.webListen) && !cfg.insecureAnyCaller:
		return fmt.Errorf("--authn.mode=none on --web.listen %q would answer any caller on the network: listen on loopback, choose --authn.mode token or mtls, or pass --authn.insecure-allow-any-caller", cfg.webListen)
	case mode == authn.ModeMTLS && (cfg.tlsCertFile == "" || cfg.tlsClientCAFile == ""):
		return errors.New("--authn.mode=mtls needs --tls.server.cert-file, --tls.server.key-file and --tls.client-ca-file")
	case mode != authn.ModeMTLS && cfg.tlsClientCAFile != "":
		return errors.New("--tls.client-ca-file is only used with --authn.mode=mtls")
	case (cfg.tlsCertFile == "") != (cfg.tlsKeyFile == ""):
		return errors.New("--tls.server.cert-file and --tls.server.key-file go together")
	case (cfg.tlsInternalCert == "") != (cfg.tlsInternalKey == ""):
		return errors.New("--tls.internal.server.cert-file and --tls.internal.server.key-file go together")
	}
	if _, err := tlsserving.ParseVersion(cfg.tlsMinVersion); err != nil {
		return fmt.Errorf("--tls.min-version: %w", err)
	}
	if _, err := tlsserving.ParseCipherSuites(splitList(cfg.tlsCipherSuites)); err != nil {
		return fmt.Errorf("--tls.cipher-suites: %w", err)
	}
	return nil
}

// parseOpenShift turns the opa.* flags into the opa-openshift compatibility settings.
func (cfg *config) parseOpenShift() error {
	switch {
	case cfg.opaPackage != "" && !opaPackagePattern.MatchString(cfg.opaPackage):
		return fmt.Errorf("--opa.package %q is not a Rego package name", cfg.opaPackage)
	case !opaRulePattern.MatchString(cfg.opaRule):
		return fmt.Errorf("--opa.rule %q is not a Rego rule name", cfg.opaRule)
	case cfg.opaPackage == "" && (cfg.opaMatcher != "" || cfg.openshift.SSAR || cfg.opaSkipTenants != "" || cfg.opaAdminGroups != ""):
		return errors.New("--opa.matcher, --opa.ssar, --opa.skip-tenants and --opa.admin-groups need --opa.package")
	}
	if cfg.opaPackage != "" {
		cfg.openshift.Path = append(strings.Split(cfg.opaPackage, "."), cfg.opaRule)
	}
	cfg.openshift.Matchers = splitList(cfg.opaMatcher)
	cfg.openshift.SkipTenants = splitList(cfg.opaSkipTenants)
	cfg.openshift.AdminGroups = splitList(cfg.opaAdminGroups)
	if cfg.openshift.ViaQToOTelMigration && (!slices.Contains(cfg.openshift.Matchers, "kubernetes_namespace_name") || !slices.Contains(cfg.openshift.Matchers, "k8s_namespace_name")) {
		return errors.New("--opa.viaq-to-otel-migration needs --opa.matcher to name both kubernetes_namespace_name and k8s_namespace_name")
	}
	return nil
}

// serverTLS is the TLS configuration of a listener, nil for plain HTTP.
func serverTLS(ctx context.Context, cfg config, certFile, keyFile string, clientCAs func() *x509.CertPool, logger log.Logger) (*tls.Config, error) {
	if certFile == "" {
		return nil, nil
	}
	return tlsserving.New(ctx, tlsserving.Options{
		CertFile: certFile, KeyFile: keyFile, MinVersion: cfg.tlsMinVersion, CipherSuites: splitList(cfg.tlsCipherSuites),
		// Verify a certificate when one is sent; the caller filter answers a missing one
		// with a 401, and probes of /health need none.
		ClientCAs: clientCAs, ReloadInterval: cfg.tlsReloadInterval, Logger: logger,
	})
}

// healthcheckClient is the client of the --web.healthchecks.url probe.
func healthcheckClient(caFile string) (*http.Client, error) {
	client := &http.Client{Timeout: time.Second}
	if caFile == "" {
		return client, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls.internal.server.ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls.internal.server.ca-file %s: no PEM certificate", caFile)
	}
	client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return client, nil
}

// healthcheck probes url for /live when it is set: the listener behind it answers.
func healthcheck(url string, client *http.Client) func(context.Context) error {
	if url == "" {
		return nil
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("health check %s: %w", url, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("health check %s: %w", url, err)
		}
		return resp.Body.Close()
	}
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func newLogger(lvl, format string) (log.Logger, error) {
	var logger log.Logger
	switch format {
	case "logfmt":
		logger = log.NewLogfmtLogger(log.NewSyncWriter(os.Stderr))
	case "json":
		logger = log.NewJSONLogger(log.NewSyncWriter(os.Stderr))
	default:
		return nil, fmt.Errorf("--log.format %q: want logfmt or json", format)
	}
	var opt level.Option
	switch lvl {
	case "debug":
		opt = level.AllowDebug()
	case "info":
		opt = level.AllowInfo()
	case "warn":
		opt = level.AllowWarn()
	case "error":
		opt = level.AllowError()
	default:
		return nil, fmt.Errorf("--log.level %q: want debug, info, warn or error", lvl)
	}
	return log.With(level.NewFilter(logger, opt), "ts", log.DefaultTimestampUTC, "caller", log.DefaultCaller), nil
}

func main() {
	if code, ok := runSubcommand(os.Args[1:]); ok {
		os.Exit(code)
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sar-bridge: %v\n", err)
		os.Exit(2)
	}
	if cfg.showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	logger, err := newLogger(cfg.logLevel, cfg.logFormat)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sar-bridge: %v\n", err)
		os.Exit(2)
	}
	if cfg.kubeconfig == "" {
		cfg.kubeconfig = os.Getenv("KUBECONFIG") // as kubectl and opa-openshift do
	}
	if cfg.debugName != "" {
		logger = log.With(logger, "name", cfg.debugName)
	}
	if err := run(cfg, logger); err != nil {
		level.Error(logger).Log("msg", "exiting", "err", err)
		os.Exit(1)
	}
}

func run(cfg config, logger log.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(version.Get()))

	mappings, err := mapping.NewSource(ctx, cfg.mappings, cfg.mappingsFile, cfg.reloadInterval, logger, registry)
	if err != nil {
		return fmt.Errorf("tenant mappings: %w", err)
	}
	if mappings.Current().Len() == 0 {
		level.Warn(logger).Log("msg", "no tenant mappings: every pod will be denied as unmapped")
	}
	// Policies and their data are reloaded when they change; a broken change is
	// refused and the last good policy keeps serving.
	evaluator, err := policies.NewReloader(ctx, policies.ReloaderOptions{
		Options:  policies.Options{Dir: cfg.policyDir, DataFile: cfg.policyData},
		Interval: cfg.reloadInterval, Logger: logger, Registerer: registry,
	})
	if err != nil {
		return fmt.Errorf("loading policies: %w", err)
	}
	client, restConfig, err := kube.NewClient(kube.ClientOptions{Kubeconfig: cfg.kubeconfig, QPS: cfg.kubeQPS, Burst: cfg.kubeBurst, UserAgent: "sar-bridge"})
	if err != nil {
		return err
	}

	metrics := authorizer.NewMetrics(registry)

	view := kube.NewClusterView(client, cfg.resync, kube.WithNotFoundTTL(cfg.notFoundTTL))
	view.Start(ctx)
	reviewCache, allowedTTL, err := newReviewCache(ctx, cfg, client, registry, logger)
	if err != nil {
		return err
	}
	reviewer := authorizer.NewCachingReviewer(kube.NewSubjectAccessReviewer(client, kube.DefaultRetryBackoff), reviewCache,
		authorizer.CachingReviewerOptions{AllowedTTL: allowedTTL, DeniedTTL: cfg.deniedTTL, Timeout: cfg.reviewTimeout, MaxInFlight: cfg.maxInFlight, Metrics: metrics, Logger: logger})
	authz := authorizer.New(authorizer.Config{
		Mappings: mappings, TenantLabel: cfg.tenantLabel, NodeAccess: cfg.nodeAccess,
	}, reviewer, view, evaluator, metrics, logger)

	if err := enableOpenShift(cfg, authz, view, client, restConfig, evaluator.Documents()); err != nil {
		return err
	}

	callers, err := authn.New(ctx, authn.Options{
		Mode: authn.Mode(cfg.authnMode), Client: client, Audiences: cfg.callerAudiences(), ClientCAFile: cfg.tlsClientCAFile,
		SuccessTTL: cfg.callerCacheSuccess, FailureTTL: cfg.callerCacheFailure, Logger: logger, Registerer: registry,
	})
	if err != nil {
		return fmt.Errorf("caller authentication: %w", err)
	}
	var authenticate func(http.Handler) http.Handler
	if callers.Mode() != authn.ModeNone {
		authenticate = callers.Wrap
		// input.user counts only when the caller may impersonate it; the checks are
		// SubjectAccessReviews, cached like the caller's own.
		impersonation, err := authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: client.AuthorizationV1(),
			AllowCacheTTL:             cfg.callerCacheSuccess,
			DenyCacheTTL:              cfg.callerCacheFailure,
			WebhookRetryBackoff:       &kube.DefaultRetryBackoff,
		}.New()
		if err != nil {
			return fmt.Errorf("impersonation authorizer: %w", err)
		}
		authz.SetImpersonationAuthorizer(impersonation)
	}
	publicTLS, err := serverTLS(ctx, cfg, cfg.tlsCertFile, cfg.tlsKeyFile, callers.ClientCAs(), logger)
	if err != nil {
		return fmt.Errorf("public listener TLS: %w", err)
	}
	internalTLS, err := serverTLS(ctx, cfg, cfg.tlsInternalCert, cfg.tlsInternalKey, nil, logger)
	if err != nil {
		return fmt.Errorf("internal listener TLS: %w", err)
	}
	healthcheckClient, err := healthcheckClient(cfg.tlsInternalCAFile)
	if err != nil {
		return err
	}
	webhooks, err := admissionHandler(cfg, authz, view, client, publicTLS != nil, authenticate, registry, logger)
	if err != nil {
		return fmt.Errorf("admission webhooks: %w", err)
	}

	var shuttingDown atomic.Bool
	ready := func(ctx context.Context) error {
		if shuttingDown.Load() {
			return errors.New("shutting down")
		}
		if !view.Synced() {
			return errors.New("namespace and node informers not synced")
		}
		return kube.CheckReachable(ctx, client, 2*time.Second)
	}
	public := &http.Server{
		Addr: cfg.webListen,
		Handler: server.NewPublic(authz, server.Options{
			MaxBodyBytes: cfg.maxBodyBytes, RequestTimeout: cfg.requestTimeout, Logger: logger, Registerer: registry, Authenticate: authenticate,
			Admission: webhooks,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		TLSConfig:         publicTLS,
	}
	internal := &http.Server{
		Addr:              cfg.internalListen,
		Handler:           server.NewInternal(healthcheck(cfg.healthchecksURL, healthcheckClient), ready, registry),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         internalTLS,
	}

	level.Info(logger).Log("msg", "starting", "version", version.Get().Version, "revision", version.Get().Revision, "public", cfg.webListen, "internal", cfg.internalListen,
		"mappings", mappings.Current().String(), "tenant_label", cfg.tenantLabel, "node_access", cfg.nodeAccess)
	g, gctx := errgroup.WithContext(ctx)
	if err := startInterlink(gctx, g, cfg, authz, registry, logger); err != nil {
		return err
	}
	for _, s := range []*http.Server{public, internal} {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", s.Addr, err)
		}
		g.Go(func() error {
			serve := s.Serve
			if s.TLSConfig != nil {
				serve = func(ln net.Listener) error { return s.ServeTLS(ln, "", "") } // the config holds the reloaded certificate
			}
			if err := serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving %s: %w", s.Addr, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		if view.WaitForSync(gctx) {
			level.Info(logger).Log("msg", "cluster view synced")
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		// Not ready first, so traffic drains elsewhere; then stop accepting and let
		// every accepted request finish.
		shuttingDown.Store(true)
		level.Info(logger).Log("msg", "shutting down", "delay", cfg.shutdownDelay)
		time.Sleep(cfg.shutdownDelay)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.shutdown)
		defer cancel()
		return errors.Join(public.Shutdown(shutdownCtx), internal.Shutdown(shutdownCtx))
	})
	return g.Wait()
}
