// Package authn authenticates and authorizes callers of the public listener.
//
// Authentication is delegated to the Kubernetes API (TokenReview) or done
// locally against a client CA bundle (mTLS); authorization is always a
// SubjectAccessReview for the non-resource URL the caller requested, so
// admins grant access with a ClusterRole naming only the documents a caller
// needs, such as
//
//	rules:
//	- nonResourceURLs: ["/v1/data/interlink/authz/*"]  # interLink: pod decisions
//	  verbs: ["create"]
//
// and, for an opa-openshift gateway, its own route only (e.g.
// "/v1/data/lokistack/allow"). Never grant "/v1/data/*": a caller allowed the
// opa-openshift route names the subject it asks about.
//
// Both steps use k8s.io/apiserver's delegating authenticator/authorizer, which
// bring caching, retries and request coalescing.
package authn

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// Mode selects how callers prove who they are. Exactly one mode is active:
// token mode ignores client certificates and mtls mode ignores bearer tokens,
// so a caller can never pick the weaker of two configured mechanisms.
type Mode string

const (
	// ModeNone disables caller authentication and authorization. Only safe on
	// a loopback listener (see IsLoopback); enforcing that is up to main.
	ModeNone Mode = "none"
	// ModeToken authenticates "Authorization: Bearer <token>" with a TokenReview.
	ModeToken Mode = "token"
	// ModeMTLS authenticates the verified client certificate: CN is the user
	// name, O entries are the groups.
	ModeMTLS Mode = "mtls"
)

// Defaults for Options.SuccessTTL and Options.FailureTTL.
const (
	DefaultSuccessTTL = 2 * time.Minute
	DefaultFailureTTL = 10 * time.Second
)

// VerbCreate is the SubjectAccessReview verb checked for every request: a
// decision query is a POST, i.e. "create" in Kubernetes terms.
const VerbCreate = "create"

const (
	// tokenReviewTimeout bounds one TokenReview call; the request context
	// bounds the SubjectAccessReview.
	tokenReviewTimeout = 10 * time.Second

	resultOK              = "ok"
	resultUnauthenticated = "unauthenticated"
	resultForbidden       = "forbidden"
	resultError           = "error"
)

// webhookBackoff is short on purpose: callers wait for the answer, and a
// long retry chain against a struggling API server only adds load.
var webhookBackoff = wait.Backoff{
	Duration: 100 * time.Millisecond,
	Factor:   2,
	Jitter:   0.1,
	Steps:    3,
}

// ParseMode validates a --authn.mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeNone, ModeToken, ModeMTLS:
		return m, nil
	default:
		return "", fmt.Errorf("unknown authn mode %q (want %q, %q or %q)", s, ModeNone, ModeToken, ModeMTLS)
	}
}

// Options configures New.
type Options struct {
	Mode Mode
	// Client performs TokenReviews and SubjectAccessReviews. Required unless
	// Mode is none.
	Client kubernetes.Interface
	// Audiences are requested in TokenReviews (token mode only). Empty means
	// the API server's default audience.
	Audiences []string
	// ClientCAFile is the PEM bundle that signs caller certificates (mtls
	// mode only). It is reloaded when it changes.
	ClientCAFile string
	// SuccessTTL caches successful TokenReviews and allowed SARs; FailureTTL
	// caches denied SARs. Zero means the default. Errors are never cached.
	//
	// The delegating token authenticator has a single TTL, so rejected
	// tokens are cached for SuccessTTL as well.
	SuccessTTL, FailureTTL time.Duration
	Logger                 log.Logger
	// Registerer, if set, receives sar_bridge_caller_authn_total.
	Registerer prometheus.Registerer
}

// Filter is the caller authentication/authorization middleware.
type Filter struct {
	mode      Mode
	audiences authenticator.Audiences
	authn     authenticator.Request
	authz     authorizer.Authorizer
	clientCA  *dynamiccertificates.DynamicFileCAContent
	logger    log.Logger
	total     *prometheus.CounterVec
}

// New builds a Filter. In mtls mode it starts watching ClientCAFile until ctx
// is done.
func New(ctx context.Context, opts Options) (*Filter, error) {
	mode, err := ParseMode(string(opts.Mode))
	if err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = log.NewNopLogger()
	}
	f := &Filter{mode: mode, logger: logger}

	// Reject settings the chosen mode would silently ignore: an operator who
	// sets a client CA in token mode believes certificates are checked.
	if opts.ClientCAFile != "" && mode != ModeMTLS {
		return nil, fmt.Errorf("authn: a client CA file is only used in %q mode, not %q", ModeMTLS, mode)
	}
	if len(opts.Audiences) > 0 && mode != ModeToken {
		return nil, fmt.Errorf("authn: audiences are only used in %q mode, not %q", ModeToken, mode)
	}
	if mode == ModeNone {
		return f, nil
	}
	if opts.Client == nil {
		return nil, fmt.Errorf("authn: mode %q needs a Kubernetes client", mode)
	}
	successTTL, failureTTL := opts.SuccessTTL, opts.FailureTTL
	if successTTL < 0 || failureTTL < 0 {
		return nil, fmt.Errorf("authn: cache TTLs must not be negative (success %s, failure %s)", successTTL, failureTTL)
	}
	if successTTL == 0 {
		successTTL = DefaultSuccessTTL
	}
	if failureTTL == 0 {
		failureTTL = DefaultFailureTTL
	}

	backoff := webhookBackoff
	authnCfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:           &apiserver.AnonymousAuthConfig{Enabled: false},
		WebhookRetryBackoff: &backoff,
		CacheTTL:            successTTL,
	}
	switch mode {
	case ModeToken:
		f.audiences = authenticator.Audiences(opts.Audiences)
		authnCfg.TokenAccessReviewClient = opts.Client.AuthenticationV1()
		authnCfg.TokenAccessReviewTimeout = tokenReviewTimeout
		authnCfg.APIAudiences = f.audiences
	case ModeMTLS:
		if opts.ClientCAFile == "" {
			return nil, fmt.Errorf("authn: mode %q needs a client CA file", mode)
		}
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", opts.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("authn: loading client CA file %q: %w", opts.ClientCAFile, err)
		}
		f.clientCA = ca
		authnCfg.ClientCertificateCAContentProvider = ca
	}
	f.authn, _, err = authnCfg.New()
	if err != nil {
		return nil, fmt.Errorf("authn: building %s authenticator: %w", mode, err)
	}

	authzBackoff := webhookBackoff
	f.authz, err = authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: opts.Client.AuthorizationV1(),
		AllowCacheTTL:             successTTL,
		DenyCacheTTL:              failureTTL,
		WebhookRetryBackoff:       &authzBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("authn: building SubjectAccessReview authorizer: %w", err)
	}

	if opts.Registerer != nil {
		total, err := registerCounter(opts.Registerer)
		if err != nil {
			return nil, err
		}
		f.total = total
	}
	if f.clientCA != nil {
		go f.clientCA.Run(ctx, 1)
	}
	level.Info(logger).Log("msg", "caller authentication enabled", "mode", mode,
		"audiences", strings.Join(opts.Audiences, ","), "success_ttl", successTTL, "failure_ttl", failureTTL)
	return f, nil
}

func registerCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sar_bridge_caller_authn_total",
		Help: "Requests to the public listener by caller authentication mode and result (ok, unauthenticated, forbidden, error).",
	}, []string{"mode", "result"})
	if err := reg.Register(c); err != nil {
		// A second Filter on the same registry shares the counter.
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("authn: registering metrics: %w", err)
	}
	return c, nil
}

// Mode returns the active mode.
func (f *Filter) Mode() Mode { return f.mode }

// ClientCAs returns the current client CA pool for the TLS server (pass it
// as tlsserving.Options.ClientCAs), or nil unless the mode is mtls. The pool
// follows reloads of ClientCAFile. It never returns a nil pool in mtls mode:
// crypto/tls would then verify client certificates against the system roots.
func (f *Filter) ClientCAs() func() *x509.CertPool {
	if f == nil || f.clientCA == nil {
		return nil
	}
	ca := f.clientCA
	return func() *x509.CertPool {
		if opts, ok := ca.VerifyOptions(); ok && opts.Roots != nil {
			return opts.Roots
		}
		return x509.NewCertPool()
	}
}

// Wrap returns next guarded by caller authentication and authorization. In
// none mode it returns next unchanged. On success the caller's user.Info is
// in the request context (request.UserFrom) and the Authorization header has
// been removed.
func (f *Filter) Wrap(next http.Handler) http.Handler {
	if f != nil && f.mode == ModeNone {
		return next
	}
	if f == nil || f.authn == nil || f.authz == nil {
		// A Filter not built by New must not let traffic through.
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusServiceUnavailable, "internal_error", "caller authentication is not configured")
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if len(f.audiences) > 0 {
			// The token authenticator reads the wanted audiences from the
			// context, as in kube-apiserver's authentication filter.
			ctx = authenticator.WithAudiences(ctx, f.audiences)
			r = r.WithContext(ctx)
		}

		resp, ok, err := f.authn.AuthenticateRequest(r)
		switch {
		case err != nil && f.mode == ModeToken && isUnavailable(err):
			level.Error(f.logger).Log("msg", "caller authentication failed: TokenReview not answered", "path", r.URL.Path, "err", err)
			f.count(resultError)
			writeError(w, http.StatusServiceUnavailable, "internal_error", "caller authentication is unavailable")
			return
		case err != nil || !ok || resp == nil || resp.User == nil:
			msg := f.unauthenticatedMessage(r)
			level.Debug(f.logger).Log("msg", "caller not authenticated", "path", r.URL.Path, "reason", msg, "err", err)
			f.count(resultUnauthenticated)
			if f.mode == ModeToken {
				w.Header().Set("WWW-Authenticate", "Bearer")
			}
			writeError(w, http.StatusUnauthorized, "unauthorized", msg)
			return
		}
		u := resp.User
		forbidden := fmt.Sprintf("caller %q may not create %s", u.GetName(), r.URL.Path)

		// nonResourceURLs rules match by prefix ("/v1/data/*"), so a path with
		// dot segments could be granted for one prefix and resolve to another.
		if !isCleanPath(r.URL.Path) {
			level.Debug(f.logger).Log("msg", "caller denied: path is not canonical", "user", u.GetName(), "path", r.URL.Path)
			f.count(resultForbidden)
			writeError(w, http.StatusForbidden, "unauthorized", forbidden+": path is not canonical")
			return
		}

		decision, reason, err := f.authz.Authorize(ctx, authorizer.AttributesRecord{
			User:            u,
			Verb:            VerbCreate,
			Path:            r.URL.Path,
			ResourceRequest: false,
		})
		if err != nil {
			// Never fail open: an unanswered SAR is a 503, not a pass.
			level.Error(f.logger).Log("msg", "caller authorization failed: SubjectAccessReview not answered", "user", u.GetName(), "path", r.URL.Path, "err", err)
			f.count(resultError)
			writeError(w, http.StatusServiceUnavailable, "internal_error", "caller authorization is unavailable")
			return
		}
		if decision != authorizer.DecisionAllow {
			level.Debug(f.logger).Log("msg", "caller denied", "user", u.GetName(), "path", r.URL.Path, "reason", reason)
			f.count(resultForbidden)
			writeError(w, http.StatusForbidden, "unauthorized", forbidden)
			return
		}

		f.count(resultOK)
		r = r.WithContext(request.WithUser(ctx, u))
		// The caller's credential is not for downstream code to reuse.
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

func (f *Filter) unauthenticatedMessage(r *http.Request) string {
	if f.mode == ModeMTLS {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return "missing client certificate"
		}
		return "client certificate not accepted"
	}
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return "missing bearer token"
	}
	return "invalid bearer token"
}

func (f *Filter) count(result string) {
	if f.total != nil {
		f.total.WithLabelValues(string(f.mode), result).Inc()
	}
}

// isUnavailable reports whether a token authentication error means the
// TokenReview could not be answered (API server error, transport failure,
// timeout) rather than the token being rejected. Rejections surface as plain
// errors (e.g. "invalid bearer token" or the TokenReview's status.error).
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		for _, e := range agg.Errors() {
			if isUnavailable(e) {
				return true
			}
		}
		return false
	}
	var status apierrors.APIStatus
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case errors.As(err, &status), errors.As(err, &netErr), errors.As(err, &urlErr),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return true
	}
	// util/webhook.WithExponentialBackoff flattens its own errors to text.
	return strings.HasPrefix(err.Error(), "webhook call failed")
}

// isCleanPath reports whether p has no empty, "." or ".." segments (a
// trailing slash is allowed).
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// errorBody mirrors OPA's error response.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Code: code, Message: msg})
}
