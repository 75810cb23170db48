package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// Case 12: malformed requests get OPA-shaped errors.
func TestRequestErrors(t *testing.T) {
	b := shared(t)
	podJSON, err := json.Marshal(newPod("team-a", "runner", "job-1"))
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	padded := fmt.Sprintf(`{"input":{"operation":"create","pod":%s,"padding":%q}}`, podJSON, strings.Repeat("x", mib+1024))
	for _, tc := range []struct {
		name   string
		method string
		body   string
		status int
		code   string // "" = either OPA code
	}{
		{"malformed JSON", http.MethodPost, `{"input": {"operation": "create", "pod": `, http.StatusBadRequest, "invalid_parameter"},
		{"not JSON at all", http.MethodPost, `operation=create`, http.StatusBadRequest, "invalid_parameter"},
		{"missing input", http.MethodPost, `{}`, http.StatusBadRequest, "invalid_parameter"},
		{"missing pod", http.MethodPost, `{"input": {"operation": "create"}}`, http.StatusBadRequest, "invalid_parameter"},
		{"pod is a string", http.MethodPost, `{"input": {"operation": "create", "pod": "job-1"}}`, http.StatusBadRequest, "invalid_parameter"},
		{"pod is null", http.MethodPost, `{"input": {"operation": "create", "pod": null}}`, http.StatusBadRequest, "invalid_parameter"},
		{"unknown operation", http.MethodPost, fmt.Sprintf(`{"input": {"operation": "exec", "pod": %s}}`, podJSON), http.StatusBadRequest, "invalid_parameter"},
		{"operation not a string", http.MethodPost, fmt.Sprintf(`{"input": {"operation": 3, "pod": %s}}`, podJSON), http.StatusBadRequest, "invalid_parameter"},
		{"GET", http.MethodGet, "", http.StatusMethodNotAllowed, ""},
		{"DELETE", http.MethodDelete, "", http.StatusMethodNotAllowed, ""},
		{"body over 1 MiB", http.MethodPost, padded, http.StatusRequestEntityTooLarge, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r, err := b.Send(tc.method, "application/json", body)
			if err != nil {
				t.Fatal(err)
			}
			checkError(t, r, tc.status, tc.code)
		})
	}
	// The bridge still answers afterwards.
	decide(t, b, input("create", newPod("team-a", "runner", "job-1")), allow(`RoleBinding "offload/team-a"`))
}

// --web.max-body-bytes sets the 413 threshold.
func TestMaxBodyBytesFlag(t *testing.T) {
	b := newBridge(t, "--web.max-body-bytes=4096")
	podJSON, err := json.Marshal(newPod("team-a", "runner", "job-1"))
	if err != nil {
		t.Fatal(err)
	}
	small := fmt.Sprintf(`{"input":{"operation":"create","pod":%s}}`, podJSON)
	if len(small) > 4096 {
		t.Fatalf("test body too large: %d", len(small))
	}
	r, err := b.Post("application/json", []byte(small))
	if err != nil {
		t.Fatal(err)
	}
	checkDecision(t, r, allow(`RoleBinding "offload/team-a"`))
	big := fmt.Sprintf(`{"input":{"operation":"create","pod":%s,"padding":%q}}`, podJSON, strings.Repeat("x", 5000))
	r, err = b.Post("application/json", []byte(big))
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, r, http.StatusRequestEntityTooLarge, "")
}

// Health endpoints and metric names.
func TestEndpoints(t *testing.T) {
	b := shared(t)
	for _, tc := range []struct{ url string }{
		{b.URL + "/health"},
		{b.InternalURL + "/live"},
		{b.InternalURL + "/ready"},
		{b.InternalURL + "/metrics"},
	} {
		code, body, err := b.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK {
			t.Errorf("GET %s: HTTP %d %s", tc.url, code, body)
		}
	}
	// One decision so every series exists.
	decide(t, b, input("create", newPod("team-a", "runner", "job-1")), allow(`RoleBinding "offload/team-a"`))
	s, err := b.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{reviewsTotal, cacheTotal, "sar_bridge_http_requests_total", "sar_bridge_decision_duration_seconds_count"} {
		if !s.Has(name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if got := s.Sum("sar_bridge_http_requests_total", map[string]string{"code": "200"}); got < 1 {
		t.Errorf(`sar_bridge_http_requests_total{code="200"} = %v, want >= 1`, got)
	}
}

// An API server that hangs (instead of refusing connections) costs at most
// --review.timeout, then a 503; never an allow.
func TestAPIServerHangs(t *testing.T) {
	b := newBridge(t, "--cache.denied-ttl=1s", "--cache.allowed-ttl=1s", "--review.timeout=2s")
	decide(t, b, input("delete", newPod("team-a", "runner", "hang-warm")), allow(`RoleBinding "offload/team-a"`))
	thaw, err := suite.cluster.FreezeAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := thaw(); err != nil {
			t.Errorf("resuming kube-apiserver: %v", err)
		}
	}()
	r, err := b.Decide(input("delete", newPod("team-a", "runner", "hang-1")))
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, r, http.StatusServiceUnavailable, "internal_error")
	if !strings.HasPrefix(r.Error.Message, "subject access review failed:") {
		t.Errorf("message %q does not start with %q", r.Error.Message, "subject access review failed:")
	}
	if r.Elapsed > 5*time.Second {
		t.Errorf("answered after %s with --review.timeout=2s, want within 5s", r.Elapsed)
	}
	t.Logf("503 after %s", r.Elapsed.Round(time.Millisecond))
	if err := thaw(); err != nil {
		t.Fatal(err)
	}
	var last *cluster.Response
	took, ok := poll(30*time.Second, 250*time.Millisecond, func() bool {
		r, err := b.Decide(input("delete", newPod("team-a", "runner", "hang-1")))
		if err != nil {
			t.Fatalf("POST decision: %v", err)
		}
		last = r
		return r.Status == http.StatusOK && r.Allowed()
	})
	if !ok {
		t.Fatalf("no recovery %s after kube-apiserver resumed; last %s", took, last)
	}
}

// Case 11: with the API server down the bridge answers 503 internal_error quickly and
// never allows; it recovers by itself when the API server is back.
func TestAPIServerOutage(t *testing.T) {
	b := newBridge(t, "--cache.denied-ttl=1s", "--cache.allowed-ttl=1s", "--review.timeout=2s")
	c := suite.cluster
	// A warm-up decision proves the bridge works before the outage.
	decide(t, b, input("delete", newPod("team-a", "runner", "outage-warm")), allow(`RoleBinding "offload/team-a"`))

	stopStart := time.Now()
	if err := c.StopAPIServer(2 * time.Second); err != nil {
		t.Fatalf("stopping kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver stopped in %s", time.Since(stopStart).Round(time.Millisecond))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := c.StartAPIServer(); err != nil {
				t.Errorf("restarting kube-apiserver: %v", err)
			}
		}
	})
	time.Sleep(1100 * time.Millisecond) // let the warm-up entry expire

	// runner may delete any pod in team-a, so anything but an error would be an allow
	// made without asking the API server.
	for i, in := range []map[string]any{
		input("delete", newPod("team-a", "runner", "outage-1")),
		input("delete", newPod("team-a", "runner", "outage-warm")),
		input("create", newPod("team-a", "runner", "outage-2")),
		input("status", newPod("project-b", "runner", "outage-3")),
	} {
		r, err := b.Decide(in)
		if err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
		if r.Allowed() {
			t.Errorf("decision %d: allowed while the API server is down: %s", i, r)
		}
		checkError(t, r, http.StatusServiceUnavailable, "internal_error")
		if !strings.HasPrefix(r.Error.Message, "subject access review failed:") {
			t.Errorf("decision %d: message %q does not start with %q", i, r.Error.Message, "subject access review failed:")
		}
		if r.Elapsed > 5*time.Second {
			t.Errorf("decision %d: answered after %s, want within 5s", i, r.Elapsed)
		}
	}
	if code, _, err := b.Get(b.InternalURL + "/ready"); err == nil {
		t.Logf("/ready during the outage: HTTP %d", code)
	}
	if code, _, err := b.Get(b.InternalURL + "/live"); err != nil || code != http.StatusOK {
		t.Errorf("/live during the outage: %d %v", code, err)
	}

	start := time.Now()
	if err := c.StartAPIServer(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	restarted = true
	t.Logf("kube-apiserver restarted in %s", time.Since(start).Round(time.Millisecond))

	in := input("delete", newPod("team-a", "runner", "outage-1"))
	var last *cluster.Response
	took, ok := poll(45*time.Second, 250*time.Millisecond, func() bool {
		r, err := b.Decide(in)
		if err != nil {
			t.Fatalf("POST decision: %v", err)
		}
		last = r
		if r.Status != http.StatusOK && r.Status != http.StatusServiceUnavailable {
			t.Errorf("unexpected answer while recovering: %s", r)
		}
		return r.Status == http.StatusOK && r.Allowed()
	})
	if !ok {
		t.Fatalf("no recovery %s after the API server came back; last %s", took, last)
	}
	t.Logf("decisions recovered %s after the API server was healthy", took.Round(time.Millisecond))
	checkDecision(t, last, allow(`RoleBinding "offload/team-a"`))
	if err := b.WaitReady(30 * time.Second); err != nil {
		t.Errorf("/ready after recovery: %v", err)
	}
}
