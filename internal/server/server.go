// Package server serves the OPA Data API over HTTP on the public listener, and health,
// readiness, metrics and profiles on the internal one.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"net/url"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// Decider is the decision pipeline: *authorizer.Authorizer, or a fake in tests.
type Decider = authorizer.Decider

// OPA's error codes, as its clients parse them.
const (
	codeInvalidParameter = "invalid_parameter"
	codeInvalidOperation = "invalid_operation"
	codeNotFound         = "resource_not_found"
	codeInternal         = "internal_error"
	codeUnauthorized     = "unauthorized"
)

// forwardedTokenHeader carries the end user's token from observatorium's gateway, for
// opa-openshift's --opa.ssar mode.
const forwardedTokenHeader = "X-Forwarded-Access-Token"

// DefaultMaxBodyBytes bounds a request body: a pod is a few KiB, so 1 MiB is generous.
const DefaultMaxBodyBytes = 1 << 20

// Options configures the public handler.
type Options struct {
	MaxBodyBytes int64
	// RequestTimeout bounds one decision, reviews and policy together; 0 means none.
	RequestTimeout time.Duration
	Logger         log.Logger
	Registerer     prometheus.Registerer
	// Authenticate wraps the Data API (not /health) with caller authentication and
	// authorization; nil serves every caller.
	Authenticate func(http.Handler) http.Handler
	// Admission serves /admission/* (the admission webhooks) as given: the caller wraps
	// it with authentication. nil: not served (404).
	Admission http.Handler
}

const dataPrefix = "/v1/data/"

// NewPublic returns the handler of the public listener: the OPA Data API and /health.
func NewPublic(decider Decider, opts Options) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sar_bridge_http_requests_total",
		Help: "HTTP requests on the public listener, by route and status code.",
	}, []string{"path", "code"})
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(requests)
	}
	// Routes, not raw paths, label the metric: callers choose paths, and an unbounded
	// label set would grow without end.
	instrument := func(route string, h http.Handler) http.Handler {
		return promhttp.InstrumentHandlerCounter(requests.MustCurryWith(prometheus.Labels{"path": route}), h)
	}
	data := &dataHandler{decider: decider, maxBody: opts.MaxBodyBytes, timeout: opts.RequestTimeout, logger: opts.Logger}
	var dataAPI http.Handler = data
	if opts.Authenticate != nil {
		dataAPI = opts.Authenticate(dataAPI)
	}
	dataRoute := instrument("/v1/data", dataAPI)
	healthRoute := instrument("/health", http.HandlerFunc(health))
	var admissionRoute http.Handler
	if opts.Admission != nil {
		admissionRoute = instrument("/admission", opts.Admission)
	}
	notFound := instrument("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("no such endpoint: %s", r.URL.Path))
	}))
	// Routed by hand rather than by http.ServeMux, which answers unclean paths such as
	// /v1/data/a//b with a redirect: a policy path is either valid or a 400.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/v1/data" || strings.HasPrefix(p, dataPrefix):
			dataRoute.ServeHTTP(w, r)
		case p == "/health":
			healthRoute.ServeHTTP(w, r)
		case admissionRoute != nil && strings.HasPrefix(p, "/admission/"):
			admissionRoute.ServeHTTP(w, r)
		default:
			notFound.ServeHTTP(w, r)
		}
	})
}

// health is OPA's liveness answer on the public port.
func health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, codeInvalidOperation, fmt.Sprintf("method %s not allowed on /health", r.Method))
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

type dataHandler struct {
	decider Decider
	maxBody int64
	timeout time.Duration
	logger  log.Logger
}

func (h *dataHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, codeInvalidOperation, fmt.Sprintf("method %s not allowed: decisions are POST /v1/data/{path}", r.Method))
		return
	}
	path, err := documentPath(r.URL)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalidParameter, err.Error())
		return
	}
	input, status, err := readInput(w, r, h.maxBody)
	if err != nil {
		writeError(w, status, codeInvalidParameter, err.Error())
		return
	}
	ctx := r.Context()
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	decision, err := h.decider.Decide(ctx, authorizer.Request{Path: path, Input: input, InputValid: true, AccessToken: r.Header.Get(forwardedTokenHeader), FrontDoor: authorizer.FrontDoorDataAPI})
	var (
		inputErr        *authorizer.InputError
		unauthenticated *authorizer.UnauthenticatedError
		forbidden       *authorizer.ForbiddenError
		unavailable     *authorizer.UnavailableError
	)
	switch {
	case errors.As(err, &inputErr):
		writeError(w, http.StatusBadRequest, codeInvalidParameter, err.Error())
	case errors.As(err, &unauthenticated):
		writeError(w, http.StatusUnauthorized, codeUnauthorized, err.Error())
	case errors.As(err, &forbidden):
		writeError(w, http.StatusForbidden, codeUnauthorized, err.Error())
	case errors.As(err, &unavailable) || err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Never an allow: the caller gets an error it must treat as a refusal.
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeInternal, err.Error())
	case err != nil:
		level.Error(h.logger).Log("msg", "decision failed", "err", err)
		writeError(w, http.StatusInternalServerError, codeInternal, err.Error())
	case !decision.Defined:
		// OPA's answer for an undefined document: 200 with no result.
		writeJSON(w, http.StatusOK, struct{}{})
	default:
		writeDecision(w, decision)
	}
}

// writeDecision answers a defined document as OPA does, {"result": …, "decision_id": …},
// encoding the policy's value straight from Rego's value form (issue 19: once).
func writeDecision(w http.ResponseWriter, d authorizer.Decision) {
	b, err := astjson.AppendJSON(append(make([]byte, 0, 512), `{"result":`...), d.Result)
	if err == nil && d.ID != "" {
		b, err = astjson.AppendJSON(append(b, `,"decision_id":`...), ast.String(d.ID))
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, codeInternal, "encoding response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '}', '\n'))
}

// documentPath turns /v1/data/a/b/c into [a b c]. An escaped slash is refused: callers
// are authorized on the unescaped path, so a segment may not hide a slash.
func documentPath(u *url.URL) ([]string, error) {
	rest := strings.TrimPrefix(u.EscapedPath(), "/v1/data")
	rest = strings.Trim(rest, "/")
	if rest == "" {
		return nil, errors.New("a document path is required: POST /v1/data/{package}/{rule}")
	}
	parts := strings.Split(rest, "/")
	for i, p := range parts {
		seg, err := url.PathUnescape(p)
		if err != nil || seg == "" || strings.Contains(seg, "/") {
			return nil, fmt.Errorf("invalid document path %q", u.Path)
		}
		parts[i] = seg
	}
	return parts, nil
}

// readInput reads {"input": {...}} from a bounded body. The input it returns is valid
// JSON (astjson.Members checked the body), which the decision does not check again.
func readInput(w http.ResponseWriter, r *http.Request, maxBody int64) (json.RawMessage, int, error) {
	// Read into a buffer of the announced size (bounded), not one grown by doubling.
	body := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 0), maxBody)+bytes.MinRead))
	_, err := body.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", maxBody)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading request body: %w", err)
	}
	// Only input is decoded, later and once; the envelope is checked, not decoded.
	members, err := astjson.Members(body.Bytes())
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("body is not valid JSON of the form {\"input\": {...}}: %w", err)
	}
	input := members["input"]
	if len(input) == 0 || input[0] != '{' {
		return nil, http.StatusBadRequest, errors.New("input is required and must be a JSON object")
	}
	return input, http.StatusOK, nil
}

type errorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorResponse{Code: code, Message: message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorResponse{Code: codeInternal, Message: "encoding response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// NewInternal returns the handler of the internal listener: /live, /ready, /metrics and,
// with profiling, /debug/pprof/. live and ready return why the service is not alive or
// cannot decide yet, or nil.
func NewInternal(live, ready func(context.Context) error, gatherer prometheus.Gatherer, profiling bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/live", probe("not alive", live))
	mux.HandleFunc("/ready", probe("not ready", ready))
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	// Off unless asked for: the listener answers kubelet probes on the pod's IP, where
	// anyone could read the command line, goroutine stacks and heap profiles, or keep a
	// CPU profile or trace running for as long as they ask.
	if !profiling {
		return mux
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func probe(failure string, check func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if check != nil {
			if err := check(r.Context()); err != nil {
				http.Error(w, failure+": "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	}
}
