package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/internal/kube"
)

// cacheOptions configure how reviews are cached and shared between replicas, and how
// many go to the Kubernetes API at once (--cache.*, --memcached.*, --review.max-in-flight).
type cacheOptions struct {
	allowedTTL  time.Duration
	deniedTTL   time.Duration
	size        int
	frontTTL    time.Duration
	maxInFlight int

	memcached             []string
	memcachedExpire       int
	memcachedInterval     int
	memcachedTimeout      time.Duration
	memcachedMaxIdleConns int
	memcachedSecurity
}

func (o *cacheOptions) addFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.allowedTTL, "cache.allowed-ttl", 5*time.Minute, "How long an allowing review is reused; a removed RoleBinding is seen within this time.")
	fs.DurationVar(&o.deniedTTL, "cache.denied-ttl", 30*time.Second, "How long a denying review is reused; a new RoleBinding is seen within this time.")
	fs.IntVar(&o.size, "cache.size", 10000, "Most reviews kept in the in-process cache (least recently used go first).")
	fs.IntVar(&o.maxInFlight, "review.max-in-flight", 64, "Most reviews sent to the Kubernetes API at once; more wait within their deadline, then get a 503. 0: no cap.")
	fs.StringSliceVar(&o.memcached, "memcached", nil, "memcached server host:port to share reviews between replicas (repeatable; DNS names are re-resolved every --memcached.interval). Empty: in-process cache only.")
	fs.IntVar(&o.memcachedExpire, "memcached.expire", 0, "Seconds an allowing review is kept in memcached; 0 uses --cache.allowed-ttl. Denials stay bounded by --cache.denied-ttl.")
	fs.IntVar(&o.memcachedInterval, "memcached.interval", 10, "Seconds between DNS refreshes of the memcached servers; 0 resolves once.")
	fs.DurationVar(&o.memcachedTimeout, "memcached.timeout", 500*time.Millisecond, "Longest wait for memcached; past it the review is asked live.")
	fs.IntVar(&o.memcachedMaxIdleConns, "memcached.max-idle-conns", 16, "Idle connections kept per memcached server.")
	o.memcachedSecurity.register(fs)
	fs.DurationVar(&o.frontTTL, "cache.front-ttl", 10*time.Second, "With memcached: how long a replica reuses a review from its in-process tier (never longer than the entry has left).")
}

// errNegativeLimits is the error of a negative --review.max-in-flight (cacheOptions) or
// --web.request-timeout or --web.shutdown-delay (webOptions).
var errNegativeLimits = errors.New("--review.max-in-flight, --web.request-timeout and --web.shutdown-delay must not be negative")

// validate checks the flags, memcached's security first.
func (o *cacheOptions) validate() error {
	if err := o.checkMemcached(); err != nil {
		return err
	}
	switch {
	case o.allowedTTL < 0 || o.deniedTTL < 0:
		return errors.New("--cache.allowed-ttl and --cache.denied-ttl must not be negative")
	case o.size < 1:
		return errors.New("--cache.size must be at least 1")
	case o.maxInFlight < 0:
		return errNegativeLimits
	case o.memcachedExpire < 0 || o.memcachedInterval < 0:
		return errors.New("--memcached.expire and --memcached.interval must not be negative")
	case o.memcachedTimeout <= 0:
		return errors.New("--memcached.timeout must be positive")
	case o.frontTTL < 0:
		return errors.New("--cache.front-ttl must not be negative")
	}
	return nil
}

// memcachedSecurity are the flags that keep shared reviews honest: who may write them
// (the HMAC keys) and which cluster they belong to.
type memcachedSecurity struct {
	hmacKeyFile      string
	insecureUnsigned bool
	clusterID        string
}

func (m *memcachedSecurity) register(fs *flag.FlagSet) {
	fs.StringVar(&m.hmacKeyFile, "memcached.hmac-key-file", "", "File of HMAC-SHA256 keys (one hex or base64 key of at least 32 bytes per line, # comments) that sign and verify every memcached value: the first signs, all verify. Re-read every --reload.interval. Required with --memcached.")
	fs.BoolVar(&m.insecureUnsigned, "memcached.insecure-unsigned", false, "UNSAFE: use --memcached without --memcached.hmac-key-file; anyone who can write to memcached can then forge \"allowed\" reviews.")
	fs.StringVar(&m.clusterID, "memcached.cluster-id", "", "Identity of this cluster in memcached keys and seals, so clusters sharing a memcached never read each other's reviews. Empty: the UID of the kube-system namespace.")
}

// checkMemcached refuses a memcached whose answers anyone could forge, unless insisted.
func (o *cacheOptions) checkMemcached() error {
	m := o.memcachedSecurity
	switch {
	case len(o.memcached) == 0 && (m.hmacKeyFile != "" || m.insecureUnsigned || m.clusterID != ""):
		return errors.New("--memcached.hmac-key-file, --memcached.insecure-unsigned and --memcached.cluster-id need --memcached")
	case m.hmacKeyFile != "" && m.insecureUnsigned:
		return errors.New("--memcached.hmac-key-file and --memcached.insecure-unsigned exclude each other")
	case len(o.memcached) > 0 && m.hmacKeyFile == "" && !m.insecureUnsigned:
		return errors.New("--memcached needs --memcached.hmac-key-file: memcached has no authentication, so without a key anyone who can reach it " +
			"could store an \"allowed\" review and offload as anyone. Create a key (openssl rand -hex 32 > hmac.key; in Kubernetes: " +
			"kubectl -n sar-bridge create secret generic sar-bridge-memcached-hmac --from-literal=hmac.key=$(openssl rand -hex 32)), " +
			"mount it in every replica and pass its path, or accept forgeable answers with --memcached.insecure-unsigned")
	}
	return nil
}

// reviews builds the server's reviewer: every SubjectAccessReview through the review
// cache (in process, or memcached behind a short in-process tier).
func (o serveOptions) reviews(reg prometheus.Registerer, logger log.Logger) func(context.Context, kubernetes.Interface, *authorizer.Metrics) (*authorizer.CachingReviewer, error) {
	return func(ctx context.Context, client kubernetes.Interface, metrics *authorizer.Metrics) (*authorizer.CachingReviewer, error) {
		reviewCache, allowedTTL, err := newReviewCache(ctx, o, client, reg, logger)
		if err != nil {
			return nil, err
		}
		return authorizer.NewCachingReviewer(kube.NewSubjectAccessReviewer(client, kube.DefaultRetryBackoff), reviewCache, authorizer.CachingReviewerOptions{
			AllowedTTL: allowedTTL, DeniedTTL: o.cache.deniedTTL, Timeout: o.decision.reviewTimeout, MaxInFlight: o.cache.maxInFlight, Metrics: metrics, Logger: logger,
		}), nil
	}
}

// newReviewCache returns the in-process cache, or memcached behind a short in-process
// tier when servers are configured, with the TTL of allowing reviews. memcached values
// are signed, scoped to this cluster, and never kept past this replica's own TTLs.
func newReviewCache(ctx context.Context, so serveOptions, client kubernetes.Interface, reg prometheus.Registerer, logger log.Logger) (cache.Cache, time.Duration, error) {
	o := so.cache
	if len(o.memcached) == 0 {
		return cache.NewMemory(o.size), o.allowedTTL, nil
	}
	allowedTTL := o.allowedTTL
	if o.memcachedExpire > 0 {
		allowedTTL = time.Duration(o.memcachedExpire) * time.Second
	}
	opts := cache.MemcachedOptions{
		Servers:          o.memcached,
		Timeout:          o.memcachedTimeout,
		MaxIdleConns:     o.memcachedMaxIdleConns,
		RefreshInterval:  time.Duration(o.memcachedInterval) * time.Second,
		Logger:           logger,
		Metrics:          cache.NewMetrics(reg),
		InsecureUnsigned: o.insecureUnsigned,
		MaxAge:           authorizer.CachedReviewMaxAge(allowedTTL, o.deniedTTL),
	}
	var err error
	if opts.Keys, err = o.loadKeys(ctx, so.decision.reloadInterval, reg, logger); err != nil {
		return nil, 0, err
	}
	if opts.ClusterID, err = clusterIdentity(ctx, client, o.clusterID, logger); err != nil {
		return nil, 0, err
	}
	mc, err := cache.NewMemcached(ctx, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("--memcached: %w", err)
	}
	level.Info(logger).Log("msg", "sharing reviews through memcached", "servers", fmt.Sprint(o.memcached),
		"signed", opts.Keys != nil, "cluster_id", opts.ClusterID)
	return cache.NewTiered(cache.NewMemory(o.size), o.frontTTL, mc, opts.Metrics), allowedTTL, nil
}

// clusterIDTimeout bounds the start-up wait for the kube-system namespace.
const clusterIDTimeout = time.Minute

// clusterIdentity is override, or else the UID of the kube-system namespace: stable for
// the life of a cluster and different in every other. A slow API is retried for a
// while; a refusal (the ClusterRole lacks get on namespaces) stops start-up at once.
func clusterIdentity(ctx context.Context, client kubernetes.Interface, override string, logger log.Logger) (string, error) {
	if override != "" {
		return override, nil
	}
	ctx, cancel := context.WithTimeout(ctx, clusterIDTimeout)
	defer cancel()
	backoff := 200 * time.Millisecond
	for {
		ns, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		switch {
		case err == nil && ns.UID != "":
			return string(ns.UID), nil
		case err == nil:
			return "", errors.New("cluster identity for memcached keys: the kube-system namespace has no UID; pass --memcached.cluster-id")
		case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err):
			return "", fmt.Errorf("cluster identity for memcached keys: reading namespace kube-system (the bridge needs get on namespaces, or pass --memcached.cluster-id): %w", err)
		}
		level.Warn(logger).Log("msg", "reading the cluster identity for memcached keys; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("cluster identity for memcached keys: reading namespace kube-system: %w", errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// loadKeys loads the HMAC keys, re-read every interval; none (a nil KeySource) under
// --memcached.insecure-unsigned.
func (m *memcachedSecurity) loadKeys(ctx context.Context, interval time.Duration, reg prometheus.Registerer, logger log.Logger) (cache.KeySource, error) {
	if m.hmacKeyFile == "" {
		level.Warn(logger).Log("msg", "memcached values are not signed (--memcached.insecure-unsigned): anyone who can write to memcached can forge reviews")
		return nil, nil
	}
	keys, err := cache.LoadKeyFile(ctx, cache.KeyFileOptions{Path: m.hmacKeyFile, Interval: interval, Logger: logger, Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("--memcached.hmac-key-file: %w", err)
	}
	return keys, nil
}
