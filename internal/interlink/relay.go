// Package interlink is the interLink plugin front door: sar-bridge listens where
// interLink expects its plugin (SidecarURL:SidecarPort), decides every POST /create with
// one call of the authorizer, forwards what is allowed (modifications applied) to the
// real plugin, relays interLink's other plugin calls unchanged and refuses anything else.
package interlink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// Decider is the decision pipeline: *authorizer.Authorizer, or a fake in tests.
type Decider = authorizer.Decider

// Defaults of Options.
const (
	// DefaultMaxBodyBytes fits a create that carries the pod's ConfigMaps and Secrets
	// (up to 1 MiB each in Kubernetes).
	DefaultMaxBodyBytes   = 32 << 20
	DefaultDecisionPath   = decisionapi.Path
	defaultDecisionTime   = 10 * time.Second
	defaultPluginTimeout  = 2 * time.Minute
	defaultPluginDialTime = 5 * time.Second
)

// Options configures the relay.
type Options struct {
	Plugin Plugin
	// DecisionPath is the policy document asked for a create (default
	// interlink/authz/decision).
	DecisionPath []string
	// MaxBodyBytes bounds a /create body; larger ones get 413.
	MaxBodyBytes int64
	// DecisionTimeout bounds one decision; past it the create gets 503.
	DecisionTimeout time.Duration
	// PluginTimeout bounds the wait for the plugin's response headers (not the body:
	// /getLogs may follow a log for hours).
	PluginTimeout time.Duration
	// PluginDialTimeout bounds connecting to the plugin.
	PluginDialTimeout time.Duration
	// AllowJobScript forwards creates whose body carries a jobScript (interLink's
	// JobScriptBuilderURL or template), which the SLURM plugin runs on the host.
	AllowJobScript bool
	Logger         log.Logger
	Registerer     prometheus.Registerer
}

// Relay is the http.Handler of the interLink listener.
type Relay struct {
	decider   Decider
	opts      Options
	proxy     *httputil.ReverseProxy
	transport *http.Transport
	logger    log.Logger
	creates   *prometheus.CounterVec
	refusals  *prometheus.CounterVec  // requests_total{route="refused"}, by code
	routes    map[string]http.Handler // by request target
}

// Outcomes of a create, the label of sar_bridge_interlink_creates_total.
const (
	outcomeAllowed     = "allowed" // forwarded to the plugin
	outcomeDenied      = "denied"
	outcomeInvalid     = "invalid"     // malformed body, 400/405/413
	outcomeUnavailable = "unavailable" // no decision could be made, 503
	outcomeError       = "error"       // the policy's answer could not be used, 500
)

// route is one call of the plugin API the relay serves.
type route struct {
	label  string // of sar_bridge_interlink_requests_total
	method string // the one interLink sends
}

// routes are the plugin calls interLink makes, the same four with the same methods in
// every release from 0.3 to 0.7 (and its plugin OpenAPI), plus the SLURM plugin's
// read-only /system-info for monitoring. The key is the raw request target: interLink
// builds it as SidecarEndpoint+"/create", never with a query, an escape or another
// slash, so any other spelling is refused rather than left to the plugin's router.
var routes = map[string]route{
	"/create":      {"create", http.MethodPost},
	"/delete":      {"delete", http.MethodPost},
	"/status":      {"status", http.MethodGet},
	"/getLogs":     {"getLogs", http.MethodGet},
	"/system-info": {"system-info", http.MethodGet},
}

// routeRefused labels requests refused before any route: a fixed value, so callers
// cannot grow the label set.
const routeRefused = "refused"

// New returns the relay.
func New(decider Decider, opts Options) (*Relay, error) {
	if opts.Plugin.URL == nil {
		return nil, errors.New("interlink: no plugin URL")
	}
	setDefaults(&opts)
	r := &Relay{decider: decider, opts: opts, logger: opts.Logger,
		transport: opts.Plugin.transport(opts.PluginDialTimeout, opts.PluginTimeout)}
	r.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Method, headers (Interlink-Http-Session included) and body as sent; only
			// hop-by-hop and X-Forwarded-* headers are dropped.
			pr.SetURL(opts.Plugin.URL)
			// ReverseProxy puts these back for an upgrade and reads them again when the
			// plugin answers 101: without them no switch can be agreed, even if an
			// upgrade ever got past screen.
			pr.Out.Header.Del("Connection")
			pr.Out.Header.Del("Upgrade")
		},
		ModifyResponse: refuseSwitch,
		Transport:      r.transport,
		FlushInterval:  -1, // /getLogs: every write reaches interLink at once
		ErrorHandler:   r.pluginError,
		ErrorLog:       stdlog.New(log.NewStdlibAdapter(level.Warn(opts.Logger)), "", 0),
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sar_bridge_interlink_requests_total",
		Help: "Requests on the interLink listener, by route (create, delete, status, getLogs, system-info, refused) and status code.",
	}, []string{"route", "code"})
	r.creates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sar_bridge_interlink_creates_total",
		Help: "interLink creates, by outcome (allowed = forwarded, denied, invalid, unavailable, error).",
	}, []string{"outcome"})
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(requests, r.creates)
	}
	r.refusals = requests.MustCurryWith(prometheus.Labels{"route": routeRefused})
	r.routes = make(map[string]http.Handler, len(routes))
	for target, rt := range routes {
		h := r.relayed(target, rt.method)
		if rt.label == "create" {
			h = http.HandlerFunc(r.create)
		}
		r.routes[target] = promhttp.InstrumentHandlerCounter(requests.MustCurryWith(prometheus.Labels{"route": rt.label}), r.logged(rt.label, h))
	}
	return r, nil
}

func setDefaults(opts *Options) {
	if len(opts.DecisionPath) == 0 {
		opts.DecisionPath = strings.Split(DefaultDecisionPath, "/")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.DecisionTimeout <= 0 {
		opts.DecisionTimeout = defaultDecisionTime
	}
	if opts.PluginTimeout <= 0 {
		opts.PluginTimeout = defaultPluginTimeout
	}
	if opts.PluginDialTimeout <= 0 {
		opts.PluginDialTimeout = defaultPluginDialTime
	}
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
}

// CloseIdleConnections closes idle connections to the plugin.
func (r *Relay) CloseIdleConnections() { r.transport.CloseIdleConnections() }

// Server is the http.Server of the interLink listener. It speaks HTTP/1.1 only, as
// interLink does to its plugin: Go's default on a listener without TLS, which serves
// HTTP/2 neither by upgrade nor by prior knowledge (the preface reaches screen, which
// refuses it). http.Protocols is left unset on purpose: with it set, Go 1.26 reads the
// next request while a full-duplex handler's body is still being read ("invalid
// concurrent Body.Read call"). No answer of its own to "OPTIONS *" either, so every
// request meets screen.
func (r *Relay) Server(readTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           r,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       readTimeout,
		// No WriteTimeout: /getLogs with Follow streams for as long as interLink reads.
		IdleTimeout:                  2 * time.Minute,
		MaxHeaderBytes:               64 << 10,
		DisableGeneralOptionsHandler: true,
	}
}

func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if ref := screen(req); ref != nil {
		r.refuseRequest(w, req, ref)
		return
	}
	r.routes[req.RequestURI].ServeHTTP(w, req)
}

// relayed forwards a route when it comes with the method interLink uses on it: a plugin
// framework routing by path alone would run the handler for any other.
func (r *Relay) relayed(target, method string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != method {
			methodNotAllowed(w, req.Method, target, method)
			return
		}
		r.relay(w, req)
	})
}

func methodNotAllowed(w http.ResponseWriter, method, target, allowed string) {
	w.Header().Set("Allow", allowed)
	writeLine(w, http.StatusMethodNotAllowed, fmt.Sprintf("bad request: method %s not allowed on %s", method, target))
}

// relay forwards a request unchanged: cleanup and monitoring of admitted pods must not
// depend on the Kubernetes API.
//
// The plugin may answer (/getLogs: start streaming) before the transport has finished
// with the request body: having sent its declared length, the transport reads once more
// to check there is no more. By default the HTTP/1 server closes the request body when
// the answer's headers are written, that read then fails and the transport drops the
// connection to the plugin, cutting the stream short (golang/go#40747). Full duplex
// keeps the body open while the answer is written.
func (r *Relay) relay(w http.ResponseWriter, req *http.Request) {
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
		level.Debug(r.logger).Log("msg", "full duplex not supported by the connection", "err", err)
	}
	r.proxy.ServeHTTP(w, req)
}

// create decides a /create and forwards it only when allowed.
func (r *Relay) create(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		r.creates.WithLabelValues(outcomeInvalid).Inc()
		methodNotAllowed(w, req.Method, "/create", http.MethodPost)
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			r.refuse(w, http.StatusRequestEntityTooLarge, outcomeInvalid, fmt.Sprintf("bad request: body larger than %d bytes (--interlink.max-body-bytes)", r.opts.MaxBodyBytes))
			return
		}
		r.refuse(w, http.StatusBadRequest, outcomeInvalid, "bad request: reading the body: "+err.Error())
		return
	}
	body, err := parseCreate(raw)
	if err != nil {
		r.refuse(w, http.StatusBadRequest, outcomeInvalid, "bad request: "+err.Error())
		return
	}
	// Before the decision, so that a refused body charges no quota.
	if msg := screenBody(raw, r.opts.AllowJobScript); msg != "" {
		r.refuse(w, http.StatusForbidden, outcomeDenied, "denied: "+msg)
		return
	}
	v, status, outcome, err := r.decide(req.Context(), body)
	if err != nil {
		r.refuse(w, status, outcome, err.Error())
		return
	}
	if !v.Allowed {
		r.refuse(w, http.StatusForbidden, outcomeDenied, "denied: "+v.Reason)
		return
	}
	forward, err := body.apply(v.Modifications)
	if err != nil {
		level.Error(r.logger).Log("msg", "applying modifications failed", "err", err)
		r.refuse(w, http.StatusInternalServerError, outcomeError, "error: applying the policy's modifications: "+err.Error())
		return
	}
	r.creates.WithLabelValues(outcomeAllowed).Inc()
	req.Body = io.NopCloser(bytes.NewReader(forward))
	req.ContentLength = int64(len(forward))
	req.TransferEncoding = nil
	r.proxy.ServeHTTP(w, req)
}

// decide asks the authorizer about the create's pod. A failure returns the status and
// outcome to answer with; it is never an allow.
func (r *Relay) decide(ctx context.Context, body createBody) (authorizer.Verdict, int, string, error) {
	input, err := body.decisionInput()
	if err != nil {
		return authorizer.Verdict{}, http.StatusBadRequest, outcomeInvalid, fmt.Errorf("bad request: %w", err)
	}
	// The pod interLink creates is stored: a webhook may have charged it already.
	ctx, cancel := context.WithTimeout(ctx, r.opts.DecisionTimeout)
	defer cancel()
	d, err := r.decider.Decide(ctx, authorizer.Request{Path: r.opts.DecisionPath, Input: input, Charge: authorizer.ChargeStored, LogFields: []any{"route", "create"}, FrontDoor: authorizer.FrontDoorRelay})
	var (
		inputErr    *authorizer.InputError
		unavailable *authorizer.UnavailableError
	)
	switch {
	case errors.As(err, &inputErr):
		return authorizer.Verdict{}, http.StatusBadRequest, outcomeInvalid, fmt.Errorf("bad request: %w", err)
	case errors.As(err, &unavailable) || err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return authorizer.Verdict{}, http.StatusServiceUnavailable, outcomeUnavailable, fmt.Errorf("unavailable: %w", err)
	case err != nil:
		return authorizer.Verdict{}, http.StatusInternalServerError, outcomeError, fmt.Errorf("error: %w", err)
	}
	v, err := authorizer.ReadVerdict(d)
	if err != nil {
		level.Error(r.logger).Log("msg", "unusable policy answer", "decision_id", d.ID, "err", err)
		return authorizer.Verdict{}, http.StatusInternalServerError, outcomeError, fmt.Errorf("error: policy %s: %w", strings.Join(r.opts.DecisionPath, "/"), err)
	}
	return v, 0, "", nil
}

// refuse answers a create that is not forwarded with one plain-text line, which
// interLink shows the user as the pod's ProviderFailed message.
func (r *Relay) refuse(w http.ResponseWriter, status int, outcome, msg string) {
	r.creates.WithLabelValues(outcome).Inc()
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeLine(w, status, msg)
}

// errSwitch is a plugin answering 101 Switching Protocols. Relayed, the answer would
// turn interLink's connection into a raw tunnel to the plugin in which no create is
// decided.
var errSwitch = errors.New("the plugin answered 101 Switching Protocols, which the relay never relays")

// refuseSwitch is the proxy's ModifyResponse: ReverseProxy calls it before it would
// switch, and on an error closes the plugin's connection and calls pluginError.
func refuseSwitch(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		return errSwitch
	}
	return nil
}

// pluginError answers when the plugin could not be reached, broke off or tried to
// switch protocols.
func (r *Relay) pluginError(w http.ResponseWriter, req *http.Request, err error) {
	label := routes[req.RequestURI].label
	if req.Context().Err() != nil {
		// interLink went away first; nobody reads this answer.
		level.Debug(r.logger).Log("msg", "client went away", "route", label, "err", err)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	if errors.Is(err, errSwitch) {
		level.Warn(r.logger).Log("msg", "plugin tried to switch protocols", "plugin", r.opts.Plugin.String(), "route", label)
		writeLine(w, http.StatusBadGateway, "bad gateway: "+err.Error())
		return
	}
	// The transport may still be reading the request body (full duplex, see relay): the
	// server must not read the next request from this connection meanwhile.
	w.Header().Set("Connection", "close")
	level.Warn(r.logger).Log("msg", "plugin unreachable", "plugin", r.opts.Plugin.String(), "route", label, "err", err)
	writeLine(w, http.StatusBadGateway, "plugin unreachable: "+err.Error())
}

func writeLine(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "sar-bridge: "+oneLine(msg))
}

// oneLine keeps a message on one line: it becomes a pod's status message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.NewReplacer("\r", " ", "\n", " ").Replace(s)), " ")
}

// logged writes one line per request (info for creates, debug for the rest): route,
// method, code, duration. Never a body: creates carry Secret contents.
func (r *Relay) logged(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, req)
		lvl := level.Debug // /status is polled all the time
		if route == "create" {
			lvl = level.Info
		}
		lvl(r.logger).Log("msg", "interlink request", "route", route, "method", req.Method,
			"code", rec.status, "duration", time.Since(start))
	})
}

// statusRecorder remembers the status code; Unwrap keeps flushing (streamed logs)
// working through http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.status, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
