package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/internal/authn"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/tlsserving"
)

// authnOptions configure how callers of the public listener are authenticated (--authn.*).
type authnOptions struct {
	mode              string
	audiences         []string
	insecureAnyCaller bool
	cacheSuccess      time.Duration
	cacheFailure      time.Duration
}

func (o *authnOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.mode, "authn.mode", "", "How callers of the public listener are authenticated: none (loopback only), token (Bearer token checked by TokenReview) or mtls (client certificate from --tls.client-ca-file). Authenticated callers also need \"create\" on the nonResourceURL of the path they call. Empty: none on a loopback --web.listen, token otherwise.")
	fs.StringSliceVar(&o.audiences, "authn.audiences", nil, "Audiences a caller's token must be valid for (TokenReview); empty: the API server's.")
	fs.BoolVar(&o.insecureAnyCaller, "authn.insecure-allow-any-caller", false, "Allow --authn.mode=none on a non-loopback --web.listen: anyone who reaches the port learns RBAC answers.")
	fs.DurationVar(&o.cacheSuccess, "authn.cache-ttl", 2*time.Minute, "How long a caller's accepted token and allowed path are reused.")
	fs.DurationVar(&o.cacheFailure, "authn.denied-cache-ttl", 10*time.Second, "How long a caller's refused path (and an impersonation refusal) is reused.")
}

// validate completes an empty --authn.mode from webListen (none on loopback, token
// otherwise) and refuses configurations that would answer anyone on the network.
func (o *authnOptions) validate(webListen string, t tlsOptions) error {
	if o.mode == "" {
		o.mode = string(authn.ModeToken)
		if authn.IsLoopback(webListen) {
			o.mode = string(authn.ModeNone)
		}
	}
	mode, err := authn.ParseMode(o.mode)
	if err != nil {
		return fmt.Errorf("--authn.mode: %w", err)
	}
	switch {
	case mode == authn.ModeNone && !authn.IsLoopback(webListen) && !o.insecureAnyCaller:
		return fmt.Errorf("--authn.mode=none on --web.listen %q would answer any caller on the network: listen on loopback, choose --authn.mode token or mtls, or pass --authn.insecure-allow-any-caller", webListen)
	case mode == authn.ModeMTLS && (t.certFile == "" || t.clientCAFile == ""):
		return errors.New("--authn.mode=mtls needs --tls.server.cert-file, --tls.server.key-file and --tls.client-ca-file")
	case mode != authn.ModeMTLS && t.clientCAFile != "":
		return errors.New("--tls.client-ca-file is only used with --authn.mode=mtls")
	}
	return nil
}

// tlsOptions configure the listeners' TLS (--tls.*).
type tlsOptions struct {
	certFile         string
	keyFile          string
	internalCertFile string
	internalKeyFile  string
	internalCAFile   string
	clientCAFile     string
	minVersion       string
	cipherSuites     string
	reloadInterval   time.Duration
}

func (o *tlsOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.certFile, "tls.server.cert-file", "", "TLS certificate of the public listener (reloaded when it changes). Empty: plain HTTP.")
	fs.StringVar(&o.keyFile, "tls.server.key-file", "", "TLS key of the public listener.")
	fs.StringVar(&o.internalCertFile, "tls.internal.server.cert-file", "", "TLS certificate of the internal listener. Empty: plain HTTP.")
	fs.StringVar(&o.internalKeyFile, "tls.internal.server.key-file", "", "TLS key of the internal listener.")
	fs.StringVar(&o.internalCAFile, "tls.internal.server.ca-file", "", "CA the --web.healthchecks.url probe trusts; empty: the system's.")
	fs.StringVar(&o.clientCAFile, "tls.client-ca-file", "", "CA bundle that signs caller certificates for --authn.mode=mtls (CN = user, O = groups); reloaded when it changes.")
	fs.StringVar(&o.minVersion, "tls.min-version", "VersionTLS13", "Minimum TLS version: VersionTLS12 or VersionTLS13.")
	fs.StringVar(&o.cipherSuites, "tls.cipher-suites", "", "Comma-separated TLS 1.2 cipher suites (IANA names); empty: Go's defaults.")
	fs.DurationVar(&o.reloadInterval, "tls.reload-interval", 10*time.Second, "How often certificate files are checked for changes.")
}

func (o *tlsOptions) validate() error {
	switch {
	case (o.certFile == "") != (o.keyFile == ""):
		return errors.New("--tls.server.cert-file and --tls.server.key-file go together")
	case (o.internalCertFile == "") != (o.internalKeyFile == ""):
		return errors.New("--tls.internal.server.cert-file and --tls.internal.server.key-file go together")
	}
	if _, err := tlsserving.ParseVersion(o.minVersion); err != nil {
		return fmt.Errorf("--tls.min-version: %w", err)
	}
	if _, err := tlsserving.ParseCipherSuites(splitList(o.cipherSuites)); err != nil {
		return fmt.Errorf("--tls.cipher-suites: %w", err)
	}
	return nil
}

// serverTLS is the TLS configuration of a listener, nil for plain HTTP.
func (o *tlsOptions) serverTLS(ctx context.Context, certFile, keyFile string, clientCAs func() *x509.CertPool, logger log.Logger) (*tls.Config, error) {
	if certFile == "" {
		return nil, nil
	}
	return tlsserving.New(ctx, tlsserving.Options{
		CertFile: certFile, KeyFile: keyFile, MinVersion: o.minVersion, CipherSuites: splitList(o.cipherSuites),
		// Verify a certificate when one is sent; the caller filter answers a missing one
		// with a 401, and probes of /health need none.
		ClientCAs: clientCAs, ReloadInterval: o.reloadInterval, Logger: logger,
	})
}

// callerAudiences are the audiences of callers' own tokens. Under --opa.ssar the
// forwarded tokens use --authn.audiences too, so the flag is legitimate without
// --authn.mode=token; the caller filter then gets none.
func (o *serveOptions) callerAudiences() []string {
	if o.openshift.config.SSAR && o.authn.mode != string(authn.ModeToken) {
		return nil
	}
	return o.authn.audiences
}

// newCallers is the caller filter of the public listener and the wrapper that applies
// it, nil under --authn.mode=none. With callers authenticated, authz checks that a
// caller may impersonate the input.user it names.
func newCallers(ctx context.Context, o serveOptions, core *decisionCore, reg prometheus.Registerer, logger log.Logger) (*authn.Filter, func(http.Handler) http.Handler, error) {
	callers, err := authn.New(ctx, authn.Options{
		Mode: authn.Mode(o.authn.mode), Client: core.client, Audiences: o.callerAudiences(), ClientCAFile: o.tls.clientCAFile,
		SuccessTTL: o.authn.cacheSuccess, FailureTTL: o.authn.cacheFailure, Logger: logger, Registerer: reg,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("caller authentication: %w", err)
	}
	if callers.Mode() == authn.ModeNone {
		return callers, nil, nil
	}
	// input.user counts only when the caller may impersonate it; the checks are
	// SubjectAccessReviews, cached like the caller's own.
	if err := setImpersonation(core.authz, core.client, o.authn.cacheSuccess, o.authn.cacheFailure); err != nil {
		return nil, nil, err
	}
	return callers, callers.Wrap, nil
}

// setImpersonation makes authz check, by SubjectAccessReviews cached for allowTTL and
// denyTTL (0: not cached), that a decision's caller may impersonate the user it names.
func setImpersonation(authz *authorizer.Authorizer, client kubernetes.Interface, allowTTL, denyTTL time.Duration) error {
	impersonation, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             allowTTL,
		DenyCacheTTL:              denyTTL,
		WebhookRetryBackoff:       &kube.DefaultRetryBackoff,
	}.New()
	if err != nil {
		return fmt.Errorf("impersonation authorizer: %w", err)
	}
	authz.SetImpersonationAuthorizer(impersonation)
	return nil
}
