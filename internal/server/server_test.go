package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// fakeDecider answers by document path and records what it was asked.
type fakeDecider struct {
	path  []string
	input string
}

func (f *fakeDecider) Decide(_ context.Context, r authorizer.Request) (authorizer.Decision, error) {
	if r.FrontDoor != authorizer.FrontDoorDataAPI {
		return authorizer.Decision{}, errors.New("the Data API asked as front door " + string(r.FrontDoor))
	}
	path := r.Path
	f.path, f.input = path, string(r.Input)
	switch strings.Join(path, "/") {
	case "interlink/authz/decision":
		return authorizer.Decision{ID: "id-1", Defined: true, Result: ast.MustInterfaceToValue(map[string]any{"allowed": false, "reason": "no"})}, nil
	case "interlink/authz/allow":
		return authorizer.Decision{ID: "id-2", Defined: true, Result: ast.Boolean(false)}, nil
	case "bad/input":
		return authorizer.Decision{}, authorizer.NewInputError("input.pod is required")
	case "api/down":
		return authorizer.Decision{}, authorizer.NewUnavailableError(errors.New("subject access review failed: connection refused"))
	case "policy/broken":
		return authorizer.Decision{}, errors.New("evaluating policy: conflict")
	}
	return authorizer.Decision{ID: "id-3"}, nil
}

func TestDataAPI(t *testing.T) {
	const pod = `{"input": {"pod": {"metadata": {"namespace": "a"}}}}`
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantBody   string // exact JSON, compared after compaction
		wantCode   string // for errors: the OPA error code
		wantPath   []string
		wantHeader map[string]string
	}{
		{name: "decision", method: "POST", path: "/v1/data/interlink/authz/decision", body: pod, wantStatus: 200,
			wantBody: `{"result":{"allowed":false,"reason":"no"},"decision_id":"id-1"}`, wantPath: []string{"interlink", "authz", "decision"}},
		{name: "allow is a bare bool", method: "POST", path: "/v1/data/interlink/authz/allow", body: pod, wantStatus: 200,
			wantBody: `{"result":false,"decision_id":"id-2"}`},
		{name: "undefined document", method: "POST", path: "/v1/data/nothing/here", body: pod, wantStatus: 200, wantBody: `{}`},
		{name: "trailing slash and escapes", method: "POST", path: "/v1/data/a%20b/c/", body: pod, wantStatus: 200, wantBody: `{}`, wantPath: []string{"a b", "c"}},
		{name: "escaped slash", method: "POST", path: "/v1/data/interlink%2Fauthz/decision", body: pod, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "no document", method: "POST", path: "/v1/data", body: pod, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "empty segment", method: "POST", path: "/v1/data/a//b", body: pod, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "malformed JSON", method: "POST", path: "/v1/data/interlink/authz/decision", body: `{"input": {`, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "trailing data", method: "POST", path: "/v1/data/interlink/authz/decision", body: pod + `{}`, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "no input", method: "POST", path: "/v1/data/interlink/authz/decision", body: `{}`, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "input not an object", method: "POST", path: "/v1/data/interlink/authz/decision", body: `{"input": [1]}`, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "oversized", method: "POST", path: "/v1/data/interlink/authz/decision", body: `{"input": {"x": "` + strings.Repeat("a", 2048) + `"}}`, wantStatus: 413, wantCode: "invalid_parameter"},
		{name: "GET", method: "GET", path: "/v1/data/interlink/authz/decision", wantStatus: 405, wantCode: "invalid_operation", wantHeader: map[string]string{"Allow": "POST"}},
		{name: "PUT", method: "PUT", path: "/v1/data/interlink/authz/decision", body: pod, wantStatus: 405, wantCode: "invalid_operation"},
		{name: "input error", method: "POST", path: "/v1/data/bad/input", body: pod, wantStatus: 400, wantCode: "invalid_parameter"},
		{name: "API unavailable", method: "POST", path: "/v1/data/api/down", body: pod, wantStatus: 503, wantCode: "internal_error", wantHeader: map[string]string{"Retry-After": "1"}},
		{name: "policy error", method: "POST", path: "/v1/data/policy/broken", body: pod, wantStatus: 500, wantCode: "internal_error"},
		{name: "health", method: "GET", path: "/health", wantStatus: 200, wantBody: `{}`},
		{name: "health POST", method: "POST", path: "/health", wantStatus: 405, wantCode: "invalid_operation"},
		{name: "unknown endpoint", method: "GET", path: "/v0/nothing", wantStatus: 404, wantCode: "resource_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := &fakeDecider{}
			h := NewPublic(dec, Options{MaxBodyBytes: 1024})
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.wantStatus, body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if tt.wantBody != "" && strings.TrimSpace(string(body)) != tt.wantBody {
				t.Errorf("body = %s, want %s", body, tt.wantBody)
			}
			if tt.wantCode != "" {
				var e struct{ Code, Message string }
				if err := json.Unmarshal(body, &e); err != nil || e.Code != tt.wantCode || e.Message == "" {
					t.Errorf("error body = %s, want code %q and a message", body, tt.wantCode)
				}
			}
			if tt.wantPath != nil && strings.Join(dec.path, "|") != strings.Join(tt.wantPath, "|") {
				t.Errorf("document path = %q, want %q", dec.path, tt.wantPath)
			}
			for k, v := range tt.wantHeader {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestRequestMetricsUseRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewPublic(&fakeDecider{}, Options{Registerer: reg})
	for _, p := range []string{"/v1/data/a/b", "/v1/data/c/d", "/health"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", p, nil))
	}
	want := `
# HELP sar_bridge_http_requests_total HTTP requests on the public listener, by route and status code.
# TYPE sar_bridge_http_requests_total counter
sar_bridge_http_requests_total{code="200",path="/health"} 1
sar_bridge_http_requests_total{code="405",path="/v1/data"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sar_bridge_http_requests_total"); err != nil {
		t.Error(err)
	}
}

func TestInternal(t *testing.T) {
	var notReady error = errors.New("informers not synced")
	h := NewInternal(nil, func(context.Context) error { return notReady }, prometheus.NewRegistry(), false)
	tests := []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/live", 200, "ok"},
		{"/ready", 503, "not ready: informers not synced"},
		{"/metrics", 200, ""},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
		if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
			t.Errorf("%s = %d %q, want %d %q", tt.path, rec.Code, rec.Body.String(), tt.wantStatus, tt.wantBody)
		}
	}
	notReady = nil
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ready", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/ready when ready = %d", rec.Code)
	}
}

// Profiles disclose memory and cost CPU: the internal listener serves them only when
// asked to, and the probes and metrics either way.
func TestInternalProfiling(t *testing.T) {
	for _, tc := range []struct {
		profiling bool
		want      map[string]int
	}{
		{false, map[string]int{"/debug/pprof/": 404, "/debug/pprof/heap": 404, "/debug/pprof/cmdline": 404,
			"/debug/pprof/profile?seconds=1": 404, "/debug/pprof/symbol": 404, "/debug/pprof/trace?seconds=1": 404,
			"/live": 200, "/ready": 200, "/metrics": 200}},
		{true, map[string]int{"/debug/pprof/": 200, "/debug/pprof/heap": 200, "/debug/pprof/cmdline": 200, "/debug/pprof/symbol": 200,
			"/live": 200, "/ready": 200, "/metrics": 200}},
	} {
		h := NewInternal(nil, nil, prometheus.NewRegistry(), tc.profiling)
		for path, want := range tc.want {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if rec.Code != want {
				t.Errorf("profiling %v: GET %s = %d, want %d", tc.profiling, path, rec.Code, want)
			}
		}
	}
}
