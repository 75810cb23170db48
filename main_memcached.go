package main

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

	"github.com/sar-bridge/sar-bridge/authorizer"
	"github.com/sar-bridge/sar-bridge/cache"
)

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
func (cfg *config) checkMemcached() error {
	m := cfg.memcachedSecurity
	switch {
	case len(cfg.memcached) == 0 && (m.hmacKeyFile != "" || m.insecureUnsigned || m.clusterID != ""):
		return errors.New("--memcached.hmac-key-file, --memcached.insecure-unsigned and --memcached.cluster-id need --memcached")
	case m.hmacKeyFile != "" && m.insecureUnsigned:
		return errors.New("--memcached.hmac-key-file and --memcached.insecure-unsigned exclude each other")
	case len(cfg.memcached) > 0 && m.hmacKeyFile == "" && !m.insecureUnsigned:
		return errors.New("--memcached needs --memcached.hmac-key-file: memcached has no authentication, so without a key anyone who can reach it " +
			"could store an \"allowed\" review and offload as anyone. Create a key (openssl rand -hex 32 > hmac.key; in Kubernetes: " +
			"kubectl -n sar-bridge create secret generic sar-bridge-memcached-hmac --from-literal=hmac.key=$(openssl rand -hex 32)), " +
			"mount it in every replica and pass its path, or accept forgeable answers with --memcached.insecure-unsigned")
	}
	return nil
}

// newReviewCache returns the in-process cache, or memcached behind a short in-process
// tier when servers are configured, with the TTL of allowing reviews. memcached values
// are signed, scoped to this cluster, and never kept past this replica's own TTLs.
func newReviewCache(ctx context.Context, cfg config, client kubernetes.Interface, reg prometheus.Registerer, logger log.Logger) (cache.Cache, time.Duration, error) {
	if len(cfg.memcached) == 0 {
		return cache.NewMemory(cfg.cacheSize), cfg.allowedTTL, nil
	}
	allowedTTL := cfg.allowedTTL
	if cfg.memcachedExpire > 0 {
		allowedTTL = time.Duration(cfg.memcachedExpire) * time.Second
	}
	opts := cache.MemcachedOptions{
		Servers:          cfg.memcached,
		Timeout:          cfg.memcachedTimeout,
		MaxIdleConns:     cfg.memcachedMaxIdleConns,
		RefreshInterval:  time.Duration(cfg.memcachedInterval) * time.Second,
		Logger:           logger,
		Metrics:          cache.NewMetrics(reg),
		InsecureUnsigned: cfg.memcachedSecurity.insecureUnsigned,
		MaxAge:           authorizer.CachedReviewMaxAge(allowedTTL, cfg.deniedTTL),
	}
	if cfg.memcachedSecurity.hmacKeyFile != "" {
		keys, err := cache.LoadKeyFile(ctx, cache.KeyFileOptions{
			Path: cfg.memcachedSecurity.hmacKeyFile, Interval: cfg.reloadInterval, Logger: logger, Registerer: reg,
		})
		if err != nil {
			return nil, 0, fmt.Errorf("--memcached.hmac-key-file: %w", err)
		}
		opts.Keys = keys
	} else {
		level.Warn(logger).Log("msg", "memcached values are not signed (--memcached.insecure-unsigned): anyone who can write to memcached can forge reviews")
	}
	var err error
	if opts.ClusterID, err = clusterIdentity(ctx, client, cfg.memcachedSecurity.clusterID, logger); err != nil {
		return nil, 0, err
	}
	mc, err := cache.NewMemcached(ctx, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("--memcached: %w", err)
	}
	level.Info(logger).Log("msg", "sharing reviews through memcached", "servers", fmt.Sprint(cfg.memcached),
		"signed", opts.Keys != nil, "cluster_id", opts.ClusterID)
	return cache.NewTiered(cache.NewMemory(cfg.cacheSize), cfg.frontTTL, mc, opts.Metrics), allowedTTL, nil
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
