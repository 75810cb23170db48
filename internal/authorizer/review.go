package authorizer

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/sar-bridge/sar-bridge/internal/cache"
)

// Reviewer answers SubjectAccessReviews; kube.SubjectAccessReviewer is the real one.
type Reviewer interface {
	Review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
}

// ReviewResult is the outcome of one review as decisions and the cache see it.
type ReviewResult struct {
	Allowed bool
	Denied  bool
	Reason  string
	// EvaluationError is the API's note that it could not evaluate every rule; such
	// an outcome is used once and never cached.
	EvaluationError string
}

// cacheKeyVersion changes whenever the key derivation or the value encoding does, so
// replicas of different versions sharing one cache never read each other's entries.
const cacheKeyVersion = "sarb2"

// ReviewKey is a fixed-length key for a review spec: the hash of its canonical form, in
// which group and extra order do not matter and every attribute does. Fields are hashed
// as they are, length-prefixed, with no intermediate encoding: this runs per decision.
func ReviewKey(spec authorizationv1.SubjectAccessReviewSpec) (string, error) {
	var k keyEncoder
	k.str(spec.User)
	k.str(spec.UID)
	k.sortedStrs(spec.Groups)
	extraKeys := make([]string, 0, len(spec.Extra))
	for key := range spec.Extra {
		extraKeys = append(extraKeys, key)
	}
	sort.Strings(extraKeys)
	k.count(len(extraKeys))
	for _, key := range extraKeys {
		k.str(key)
		k.sortedStrs(spec.Extra[key])
	}
	if err := k.resourceAttributes(spec.ResourceAttributes); err != nil {
		return "", err
	}
	if n := spec.NonResourceAttributes; n != nil {
		k.count(1)
		k.str(n.Path)
		k.str(n.Verb)
	} else {
		k.count(0)
	}
	sum := sha256.Sum256(k.b)
	return cacheKeyVersion + "-" + hex.EncodeToString(sum[:]), nil
}

// keyEncoder appends length-prefixed fields, so no two different specs encode alike.
type keyEncoder struct{ b []byte }

func (k *keyEncoder) count(n int) { k.b = binary.AppendUvarint(k.b, uint64(n)) }

func (k *keyEncoder) str(s string) {
	k.count(len(s))
	k.b = append(k.b, s...)
}

func (k *keyEncoder) sortedStrs(v []string) {
	v = canonical(v)
	k.count(len(v))
	for _, s := range v {
		k.str(s)
	}
}

func (k *keyEncoder) resourceAttributes(a *authorizationv1.ResourceAttributes) error {
	if a == nil {
		k.count(0)
		return nil
	}
	k.count(1)
	for _, s := range []string{a.Namespace, a.Verb, a.Group, a.Version, a.Resource, a.Subresource, a.Name} {
		k.str(s)
	}
	// Selectors are never set by the bridge's own reviews; when a caller's are, their
	// structure is hashed through its JSON form.
	if a.FieldSelector == nil && a.LabelSelector == nil {
		k.count(0)
		return nil
	}
	k.count(1)
	b, err := json.Marshal([]any{a.FieldSelector, a.LabelSelector})
	if err != nil {
		return fmt.Errorf("encoding review selectors for the cache key: %w", err)
	}
	k.str(string(b))
	return nil
}

// cachedReview is the versioned encoding of a ReviewResult in the cache.
type cachedReview struct {
	Version int    `json:"v"`
	Allowed bool   `json:"a"`
	Denied  bool   `json:"d,omitempty"`
	Reason  string `json:"r,omitempty"`
}

const cachedReviewVersion = 1

func encodeReview(r ReviewResult) []byte {
	b, _ := json.Marshal(cachedReview{Version: cachedReviewVersion, Allowed: r.Allowed, Denied: r.Denied, Reason: r.Reason})
	return b
}

func decodeReview(b []byte) (ReviewResult, bool) {
	var c cachedReview
	if err := json.Unmarshal(b, &c); err != nil || c.Version != cachedReviewVersion {
		return ReviewResult{}, false
	}
	return ReviewResult{Allowed: c.Allowed, Denied: c.Denied, Reason: c.Reason}, true
}

// decodedReviews keeps reviews decoded from the cache by their encoded bytes: a hit is
// the common case, and the same few values are read again and again. Equal bytes decode
// alike, so an entry is never stale; the map starts over when full.
type decodedReviews struct {
	mu      sync.RWMutex
	byValue map[string]ReviewResult
}

const decodedReviewsSize = 1024

func (d *decodedReviews) decode(b []byte) (ReviewResult, bool) {
	d.mu.RLock()
	r, ok := d.byValue[string(b)]
	d.mu.RUnlock()
	if ok {
		return r, true
	}
	if r, ok = decodeReview(b); !ok {
		return r, false
	}
	d.mu.Lock()
	if d.byValue == nil || len(d.byValue) >= decodedReviewsSize {
		d.byValue = make(map[string]ReviewResult, decodedReviewsSize)
	}
	d.byValue[string(b)] = r
	d.mu.Unlock()
	return r, true
}

// CachedReviewMaxAge returns how long a replica with these TTLs keeps a cached review:
// allowedTTL for an allow, deniedTTL otherwise, 0 (a miss) for a value it cannot
// decode. A shared cache caps every hit with it, whatever expiry its writer stamped.
func CachedReviewMaxAge(allowedTTL, deniedTTL time.Duration) func(value []byte) time.Duration {
	return func(value []byte) time.Duration {
		r, ok := decodeReview(value)
		switch {
		case !ok:
			return 0
		case r.Allowed:
			return allowedTTL
		}
		return deniedTTL
	}
}

// CachingReviewer puts a cache and request merging in front of a Reviewer.
type CachingReviewer struct {
	reviewer   Reviewer
	cache      cache.Cache
	allowedTTL time.Duration
	deniedTTL  time.Duration
	timeout    time.Duration
	inflight   singleflight.Group
	inFlight   *semaphore.Weighted
	metrics    *Metrics
	logger     log.Logger
	decoded    decodedReviews
}

// ttl is how long the cache keeps r: 0 for an outcome it never keeps.
func (c *CachingReviewer) ttl(r ReviewResult) time.Duration {
	switch {
	case r.Allowed:
		return c.allowedTTL
	case r.EvaluationError != "":
		return 0
	}
	return c.deniedTTL
}

// minReviewTime is the least time left in which a review is still worth sending.
const minReviewTime = 10 * time.Millisecond

// CachingReviewerOptions configures a CachingReviewer.
type CachingReviewerOptions struct {
	AllowedTTL time.Duration
	DeniedTTL  time.Duration
	// Timeout bounds one call to the Kubernetes API, whoever waits for it.
	Timeout time.Duration
	// MaxInFlight caps the reviews sent to the API at once; more wait for a slot
	// within their deadline. 0 means no cap.
	MaxInFlight int
	Metrics     *Metrics
	Logger      log.Logger
}

// NewCachingReviewer wraps reviewer with c.
func NewCachingReviewer(reviewer Reviewer, c cache.Cache, opts CachingReviewerOptions) *CachingReviewer {
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	var inFlight *semaphore.Weighted
	if opts.MaxInFlight > 0 {
		inFlight = semaphore.NewWeighted(int64(opts.MaxInFlight))
	}
	return &CachingReviewer{
		reviewer: reviewer, cache: c, inFlight: inFlight,
		allowedTTL: opts.AllowedTTL, deniedTTL: opts.DeniedTTL, timeout: opts.Timeout,
		metrics: opts.Metrics, logger: opts.Logger,
	}
}

// Review answers from the cache when it can; otherwise one API call serves every
// concurrent caller with the same spec. hit reports whether the cache answered.
func (c *CachingReviewer) Review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (result ReviewResult, hit bool, err error) {
	return c.ReviewWith(ctx, c.reviewer, spec)
}

// ReviewWith is Review with another reviewer behind the cache, e.g. one that holds a
// caller's token. The spec must then say whose review it is (the token's hash in Extra),
// since the key is derived from the spec alone.
func (c *CachingReviewer) ReviewWith(ctx context.Context, reviewer Reviewer, spec authorizationv1.SubjectAccessReviewSpec) (result ReviewResult, hit bool, err error) {
	if reviewer == nil {
		reviewer = c.reviewer
	}
	key, err := ReviewKey(spec)
	if err != nil {
		return ReviewResult{}, false, err
	}
	if r, ok := c.lookup(ctx, key); ok {
		c.metrics.cacheRequests.WithLabelValues("hit").Inc()
		return r, true, nil
	}
	c.metrics.cacheRequests.WithLabelValues("miss").Inc()

	ch := c.inflight.DoChan(key, func() (any, error) {
		// The shared call outlives any one waiter that gives up, but not the timeout.
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		defer cancel()
		return c.reviewAndStore(callCtx, reviewer, key, spec)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return ReviewResult{}, false, res.Err
		}
		return res.Val.(ReviewResult), false, nil
	case <-ctx.Done():
		return ReviewResult{}, false, fmt.Errorf("waiting for subject access review: %w", ctx.Err())
	}
}

func (c *CachingReviewer) lookup(ctx context.Context, key string) (ReviewResult, bool) {
	b, ok, err := c.cache.Get(ctx, key)
	if err != nil {
		// A cache that cannot answer is bypassed: the review is asked live. The cache
		// logs its own failures, rate-limited; one line per request would flood.
		c.metrics.cacheErrors.WithLabelValues("get").Inc()
		level.Debug(c.logger).Log("msg", "review cache read failed; asking the API", "err", err)
		return ReviewResult{}, false
	}
	if !ok {
		return ReviewResult{}, false
	}
	return c.decoded.decode(b)
}

func (c *CachingReviewer) reviewAndStore(ctx context.Context, reviewer Reviewer, key string, spec authorizationv1.SubjectAccessReviewSpec) (ReviewResult, error) {
	if c.inFlight != nil {
		// Excess reviews wait here rather than pile onto an API server that is
		// already slow; one that cannot get a slot in time is an error (a 503).
		if err := c.inFlight.Acquire(ctx, 1); err != nil {
			c.metrics.reviews.WithLabelValues("error").Inc()
			return ReviewResult{}, fmt.Errorf("too many reviews in flight to the Kubernetes API: %w", err)
		}
		defer c.inFlight.Release(1)
		// A slot freed just as the deadline passes is no use: say why, rather than
		// failing inside the client a moment later.
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < minReviewTime {
			c.metrics.reviews.WithLabelValues("error").Inc()
			return ReviewResult{}, fmt.Errorf("too many reviews in flight to the Kubernetes API: %w", context.DeadlineExceeded)
		}
	}
	start := time.Now()
	status, err := reviewer.Review(ctx, spec)
	c.metrics.reviewDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		c.metrics.reviews.WithLabelValues("error").Inc()
		return ReviewResult{}, err
	}
	r := ReviewResult{Allowed: status.Allowed, Denied: status.Denied, Reason: status.Reason, EvaluationError: status.EvaluationError}
	ttl := c.deniedTTL
	if r.Allowed {
		ttl = c.allowedTTL
		c.metrics.reviews.WithLabelValues("allowed").Inc()
	} else {
		c.metrics.reviews.WithLabelValues("denied").Inc()
	}
	if r.EvaluationError != "" && !r.Allowed {
		return r, nil // a partial evaluation is an error of sorts: never cached
	}
	if err := c.cache.Set(ctx, key, encodeReview(r), ttl); err != nil {
		c.metrics.cacheErrors.WithLabelValues("set").Inc()
		level.Debug(c.logger).Log("msg", "review cache write failed", "err", err)
	}
	return r, nil
}
