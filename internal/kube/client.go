// Package kube connects to the Kubernetes API: client set-up, SubjectAccessReviews and an
// informer-backed view of the namespaces and nodes that decisions read.
package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
)

// ClientOptions configures the connection to the Kubernetes API.
type ClientOptions struct {
	Kubeconfig string // empty: in-cluster configuration
	QPS        float32
	Burst      int
	UserAgent  string
}

// NewClient builds a clientset from a kubeconfig file, or from the in-cluster service
// account when no file is given, and returns the configuration it was built from.
func NewClient(opts ClientOptions) (kubernetes.Interface, *rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if opts.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("loading Kubernetes client configuration (kubeconfig %q): %w", opts.Kubeconfig, err)
	}
	if opts.QPS > 0 {
		cfg.QPS = opts.QPS
	}
	if opts.Burst > 0 {
		cfg.Burst = opts.Burst
	}
	if opts.UserAgent != "" {
		cfg.UserAgent = opts.UserAgent
	}
	cfg.RateLimiter = sharedRateLimiter(cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	return client, cfg, nil
}

// sharedRateLimiter is one token bucket for every client built from cfg (the bridge's
// clientset and its SelfSubjectAccessReview client), so --kube.qps/--kube.burst bound
// all of the bridge's traffic. A negative QPS keeps client-go's "no limit".
func sharedRateLimiter(cfg *rest.Config) flowcontrol.RateLimiter {
	if cfg.RateLimiter != nil || cfg.QPS < 0 {
		return cfg.RateLimiter
	}
	qps, burst := cfg.QPS, cfg.Burst
	if qps == 0 {
		qps = rest.DefaultQPS
	}
	if burst == 0 {
		burst = rest.DefaultBurst
	}
	return flowcontrol.NewTokenBucketRateLimiter(qps, burst)
}

// SubjectAccessReviewer asks the Kubernetes API whether a subject may do something.
type SubjectAccessReviewer struct {
	client  kubernetes.Interface
	backoff wait.Backoff
}

// DefaultRetryBackoff retries a transient failure a few times within well under a second,
// so a blip (an API server restarting behind a Service) does not fail a decision while a
// real outage still answers quickly.
var DefaultRetryBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4, Cap: time.Second}

// NewSubjectAccessReviewer returns a reviewer that sends SubjectAccessReviews with client,
// retrying transient failures with backoff.
func NewSubjectAccessReviewer(client kubernetes.Interface, backoff wait.Backoff) *SubjectAccessReviewer {
	return &SubjectAccessReviewer{client: client, backoff: backoff}
}

// Review sends a SubjectAccessReview and returns the API's verdict. Transient failures
// are retried while ctx allows; the last error is returned.
func (r *SubjectAccessReviewer) Review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: spec}
	return withRetries(ctx, r.backoff, func(ctx context.Context) (authorizationv1.SubjectAccessReviewStatus, error) {
		got, err := r.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return authorizationv1.SubjectAccessReviewStatus{}, err
		}
		return got.Status, nil
	})
}

// withRetries calls review until it succeeds, fails for good, or backoff or ctx run out;
// then the last error is returned.
func withRetries[T any](ctx context.Context, backoff wait.Backoff, review func(context.Context) (T, error)) (T, error) {
	var (
		status  T
		lastErr error
	)
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		got, err := review(ctx)
		switch {
		case err == nil:
			status = got
			return true, nil
		case transient(err):
			lastErr = err
			return false, nil
		default:
			return false, err
		}
	})
	if err != nil {
		if lastErr != nil && (wait.Interrupted(err) || ctx.Err() != nil) {
			return status, lastErr
		}
		return status, err
	}
	return status, nil
}

// transient reports whether a retry may succeed: the API was unreachable, overloaded or
// timed out. Anything else (forbidden, invalid) will fail the same way again.
func transient(err error) bool {
	if apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

// CheckReachable asks the API server's /readyz, which every authenticated client may
// read, so readiness reflects whether reviews can be answered.
func CheckReachable(ctx context.Context, client kubernetes.Interface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("kubernetes API /readyz: %w (%s)", err, truncate(string(body), 200))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// SelfSubjectAccessReviewer asks the Kubernetes API what the bearer of a token may do,
// with that token as the only credential (opa-openshift's --opa.ssar). One serves the
// whole bridge: the token travels in each request's context (WithBearerToken), so every
// review shares one connection pool and the bridge's rate limiter.
type SelfSubjectAccessReviewer struct {
	client  authorizationv1client.SelfSubjectAccessReviewInterface
	backoff wait.Backoff
}

// NewSelfSubjectAccessReviewer returns the reviewer. base provides the server address,
// CA and rate limiter only; the bridge's own credentials are dropped, and a request
// without a token in its context is never sent.
func NewSelfSubjectAccessReviewer(base *rest.Config, backoff wait.Backoff) (*SelfSubjectAccessReviewer, error) {
	cfg := rest.AnonymousClientConfig(base) // keeps base.RateLimiter: the shared bucket
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &contextBearer{next: rt} })
	client, err := authorizationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the SelfSubjectAccessReview client: %w", err)
	}
	return &SelfSubjectAccessReviewer{client: client.SelfSubjectAccessReviews(), backoff: backoff}, nil
}

// Review sends a SelfSubjectAccessReview with the spec's attributes as the bearer of the
// token in ctx; the spec's user, groups and extra are ignored, since the token is the
// identity.
func (r *SelfSubjectAccessReviewer) Review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	if BearerTokenFrom(ctx) == "" {
		return authorizationv1.SubjectAccessReviewStatus{}, ErrNoBearerToken
	}
	ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: spec.ResourceAttributes, NonResourceAttributes: spec.NonResourceAttributes,
	}}
	return withRetries(ctx, r.backoff, func(ctx context.Context) (authorizationv1.SubjectAccessReviewStatus, error) {
		got, err := r.client.Create(ctx, ssar, metav1.CreateOptions{})
		if err != nil {
			return authorizationv1.SubjectAccessReviewStatus{}, err
		}
		return got.Status, nil
	})
}

// ErrNoBearerToken is a SelfSubjectAccessReview asked without a token: it would be
// answered for system:anonymous, so it is refused instead.
var ErrNoBearerToken = errors.New("no bearer token in the request context")

type bearerTokenKey struct{}

// WithBearerToken makes token the credential of the SelfSubjectAccessReviews sent with ctx.
func WithBearerToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, bearerTokenKey{}, token)
}

// BearerTokenFrom returns the token WithBearerToken stored, or "".
func BearerTokenFrom(ctx context.Context) string {
	token, _ := ctx.Value(bearerTokenKey{}).(string)
	return token
}

// contextBearer authenticates each request with the token of its context.
type contextBearer struct{ next http.RoundTripper }

func (t *contextBearer) RoundTrip(req *http.Request) (*http.Response, error) {
	token := BearerTokenFrom(req.Context())
	if token == "" {
		return nil, ErrNoBearerToken
	}
	req = req.Clone(req.Context()) // a RoundTripper must not modify its request
	req.Header.Set("Authorization", "Bearer "+token)
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go's debugging and cancellation helpers see through.
func (t *contextBearer) WrappedRoundTripper() http.RoundTripper { return t.next }
