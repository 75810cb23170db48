package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/server"
	"github.com/sar-bridge/sar-bridge/internal/version"
)

// webOptions configure the public and internal listeners (--web.*).
type webOptions struct {
	listen          string
	internalListen  string
	enablePprof     bool
	maxBodyBytes    int64
	requestTimeout  time.Duration
	shutdown        time.Duration
	shutdownDelay   time.Duration
	healthchecksURL string
}

func (o *webOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "web.listen", ":8080", "Address of the public listener (OPA Data API, /health).")
	fs.StringVar(&o.internalListen, "web.internal.listen", ":8081", "Address of the internal listener (/live, /ready, /metrics; /debug/pprof/ with --web.enable-pprof). Kubelet httpGet probes reach it on the pod's IP.")
	fs.BoolVar(&o.enablePprof, "web.enable-pprof", false, "Serve Go's profiles at /debug/pprof/ on the internal listener. Whoever reaches that listener can then read the command line, goroutine stacks and heap profiles, and keep a CPU profile or trace running: turn it on only while profiling, with the listener on loopback or firewalled.")
	fs.Int64Var(&o.maxBodyBytes, "web.max-body-bytes", server.DefaultMaxBodyBytes, "Largest request body accepted; larger ones get 413.")
	fs.DurationVar(&o.shutdown, "web.shutdown-timeout", 15*time.Second, "How long in-flight requests may take to finish on SIGTERM.")
	fs.DurationVar(&o.shutdownDelay, "web.shutdown-delay", 0, "On SIGTERM, how long /ready reports false while still serving, so load balancers stop sending first.")
	fs.DurationVar(&o.requestTimeout, "web.request-timeout", 10*time.Second, "Deadline of one decision (reviews and policy); past it the answer is a 503.")
	fs.StringVar(&o.healthchecksURL, "web.healthchecks.url", "", "URL /live probes (any HTTP answer passes), e.g. http://localhost:8080 to check the public listener. Empty: no probe.")
}

func (o *webOptions) validate() error {
	switch {
	case o.requestTimeout < 0 || o.shutdownDelay < 0:
		return errNegativeLimits
	case o.maxBodyBytes <= 0:
		return errors.New("--web.max-body-bytes must be positive")
	}
	return nil
}

// listeners are the public and internal servers, and the flag that turns /ready false
// on shutdown.
type listeners struct {
	public, internal *http.Server
	shuttingDown     *atomic.Bool
}

// newListeners builds the public listener (Data API, opa-openshift, admission webhooks
// behind caller authentication) and the internal one (probes, metrics).
func newListeners(ctx context.Context, o serveOptions, core *decisionCore, reg *prometheus.Registry, logger log.Logger) (*listeners, error) {
	callers, authenticate, err := newCallers(ctx, o, core, reg, logger)
	if err != nil {
		return nil, err
	}
	publicTLS, err := o.tls.serverTLS(ctx, o.tls.certFile, o.tls.keyFile, callers.ClientCAs(), logger)
	if err != nil {
		return nil, fmt.Errorf("public listener TLS: %w", err)
	}
	internalTLS, err := o.tls.serverTLS(ctx, o.tls.internalCertFile, o.tls.internalKeyFile, nil, logger)
	if err != nil {
		return nil, fmt.Errorf("internal listener TLS: %w", err)
	}
	healthcheckClient, err := healthcheckClient(o.tls.internalCAFile)
	if err != nil {
		return nil, err
	}
	webhooks, err := admissionHandler(o, core.authz, core.view, core.client, publicTLS != nil, authenticate, reg, logger)
	if err != nil {
		return nil, fmt.Errorf("admission webhooks: %w", err)
	}
	l := &listeners{shuttingDown: new(atomic.Bool)}
	l.public = &http.Server{
		Addr: o.web.listen,
		Handler: server.NewPublic(core.authz, server.Options{
			MaxBodyBytes: o.web.maxBodyBytes, RequestTimeout: o.web.requestTimeout, Logger: logger, Registerer: reg, Authenticate: authenticate,
			Admission: webhooks,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		TLSConfig:         publicTLS,
	}
	l.internal = &http.Server{
		Addr:              o.web.internalListen,
		Handler:           o.web.internalHandler(healthcheck(o.web.healthchecksURL, healthcheckClient), l.ready(core), reg),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         internalTLS,
	}
	return l, nil
}

// internalHandler serves the internal listener: probes and metrics, and profiles only
// with --web.enable-pprof.
func (o webOptions) internalHandler(live, ready func(context.Context) error, reg prometheus.Gatherer) http.Handler {
	return server.NewInternal(live, ready, reg, o.enablePprof)
}

// ready is /ready: not while shutting down, nor before the informers synced, nor when
// the Kubernetes API does not answer.
func (l *listeners) ready(core *decisionCore) func(context.Context) error {
	return func(ctx context.Context) error {
		if l.shuttingDown.Load() {
			return errors.New("shutting down")
		}
		if !core.view.Synced() {
			return errors.New("namespace and node informers not synced")
		}
		if err := core.cluster.ready(); err != nil {
			return err
		}
		return kube.CheckReachable(ctx, core.client, 2*time.Second)
	}
}

// serve runs the interLink relay and both listeners until ctx is done, then shuts them
// down.
func serve(ctx context.Context, o serveOptions, core *decisionCore, l *listeners, reg prometheus.Registerer, logger log.Logger) error {
	level.Info(logger).Log("msg", "starting", "version", version.Get().Version, "revision", version.Get().Revision, "public", o.web.listen, "internal", o.web.internalListen, "pprof", o.web.enablePprof,
		"mappings", core.mappings.Current().String(), "tenant_label", o.decision.tenantLabel, "node_access", o.decision.nodeAccess)
	g, gctx := errgroup.WithContext(ctx)
	if err := startInterlink(gctx, g, o, core.authz, reg, logger); err != nil {
		return err
	}
	for _, s := range []*http.Server{l.public, l.internal} {
		if err := listenAndServe(g, s); err != nil {
			return err
		}
	}
	g.Go(func() error {
		if core.view.WaitForSync(gctx) {
			level.Info(logger).Log("msg", "cluster view synced")
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		return l.shutdown(o.web, logger)
	})
	return g.Wait()
}

// listenAndServe listens on s.Addr and serves s in g.
func listenAndServe(g *errgroup.Group, s *http.Server) error {
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
	return nil
}

// shutdown turns /ready false first, so traffic drains elsewhere; then it stops
// accepting and lets every accepted request finish.
func (l *listeners) shutdown(o webOptions, logger log.Logger) error {
	l.shuttingDown.Store(true)
	level.Info(logger).Log("msg", "shutting down", "delay", o.shutdownDelay)
	time.Sleep(o.shutdownDelay)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdown)
	defer cancel()
	return errors.Join(l.public.Shutdown(shutdownCtx), l.internal.Shutdown(shutdownCtx))
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
