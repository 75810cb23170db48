package interlink

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// fakeDecider answers with a fixed decision or error and records its inputs.
type fakeDecider struct {
	mu      sync.Mutex
	inputs  []string
	paths   []string
	fields  [][]any
	charges []authorizer.ChargeMode
	d       authorizer.Decision
	err     error
	wait    time.Duration // honours the context like the real authorizer
}

func (f *fakeDecider) Decide(ctx context.Context, r authorizer.Request) (authorizer.Decision, error) {
	if r.FrontDoor != authorizer.FrontDoorRelay {
		return authorizer.Decision{}, errors.New("the relay asked as front door " + string(r.FrontDoor))
	}
	f.mu.Lock()
	f.inputs = append(f.inputs, string(r.Input))
	f.paths = append(f.paths, strings.Join(r.Path, "/"))
	f.fields = append(f.fields, r.LogFields)
	f.charges = append(f.charges, r.Charge)
	f.mu.Unlock()
	if f.wait > 0 {
		select {
		case <-time.After(f.wait):
		case <-ctx.Done():
			return f.d, ctx.Err()
		}
	}
	return f.d, f.err
}

func allowed(mods map[string]any) authorizer.Decision {
	return authorizer.Decision{ID: "id-1", Defined: true, Result: ast.MustInterfaceToValue(map[string]any{"allowed": true, "reason": "RBAC: allowed", "modifications": mods})}
}

func denied(reason string) authorizer.Decision {
	return authorizer.Decision{ID: "id-2", Defined: true, Result: ast.MustInterfaceToValue(map[string]any{"allowed": false, "reason": reason})}
}

// received is one request the stand-in plugin got.
type received struct {
	method, path, session, contentType string
	body                               []byte
	header                             http.Header
	tunnelled                          bool // read inside a switched (101) connection
}

// plugin is a stand-in interLink plugin that records every request and answers with a
// fixed status, header and body.
type plugin struct {
	mu        sync.Mutex
	got       []received
	srv       *httptest.Server
	logs      func(w http.ResponseWriter, r *http.Request) // /getLogs, when set
	switch101 switchMode
}

// switchMode says when the stand-in plugin answers 101 Switching Protocols and then
// serves HTTP/1.1 inside the switched connection: a raw tunnel, if the relay lets it be.
type switchMode int

const (
	switchNever     switchMode = iota
	switchOnUpgrade            // when the request asks to upgrade, as a naive plugin framework would
	switchAlways               // whatever was asked
)

const pluginAnswer = `{"PodUID":"uid-1","PodJID":"4242"}` + "\n"

func (p *plugin) record(r *http.Request, tunnelled bool) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, received{r.Method, r.URL.Path, r.Header.Get("Interlink-Http-Session"), r.Header.Get("Content-Type"), body, r.Header.Clone(), tunnelled})
}

func (p *plugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.record(r, false)
	if p.switch101 == switchAlways || p.switch101 == switchOnUpgrade && r.Header.Get("Upgrade") != "" {
		p.tunnel(w)
		return
	}
	if r.URL.Path == "/getLogs" && p.logs != nil {
		p.logs(w, r)
		return
	}
	w.Header().Set("X-Plugin", "slurm")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, pluginAnswer)
}

// tunnel answers 101 and then serves every request that arrives on the switched
// connection, answering each like an ordinary one.
func (p *plugin) tunnel(w http.ResponseWriter) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
	_ = brw.Flush()
	for {
		in, err := http.ReadRequest(brw.Reader)
		if err != nil {
			return
		}
		p.record(in, true)
		_, _ = fmt.Fprintf(brw, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(pluginAnswer), pluginAnswer)
		_ = brw.Flush()
	}
}

func (p *plugin) requests() []received {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]received(nil), p.got...)
}

func startPlugin(t *testing.T, unixSocket string) *plugin {
	t.Helper()
	p := &plugin{}
	p.srv = httptest.NewUnstartedServer(p)
	if unixSocket != "" {
		ln, err := net.Listen("unix", unixSocket)
		if err != nil {
			t.Fatal(err)
		}
		p.srv.Listener = ln
	}
	p.srv.Start()
	t.Cleanup(p.srv.Close)
	return p
}

// harness is a relay in front of a stand-in plugin, with its log and metrics.
type harness struct {
	relay   *Relay
	decider *fakeDecider
	plugin  *plugin
	reg     *prometheus.Registry
	logs    *syncBuffer
	url     string
	client  *http.Client
}

func newHarness(t *testing.T, d *fakeDecider, opts Options) *harness {
	t.Helper()
	h := &harness{decider: d, plugin: startPlugin(t, ""), reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	pl, err := ParsePluginURL(h.plugin.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts.Plugin, opts.Registerer = pl, h.reg
	opts.Logger = log.NewLogfmtLogger(log.NewSyncWriter(h.logs))
	if h.relay, err = New(d, opts); err != nil {
		t.Fatal(err)
	}
	// The listener's own server, as main runs it.
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = h.relay.Server(time.Minute)
	srv.Start()
	t.Cleanup(srv.Close)
	h.url, h.client = srv.URL, srv.Client()
	return h
}

// syncBuffer is the relay's log: the handler writes its request line after the answer,
// while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (h *harness) do(t *testing.T, method, path string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, h.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Interlink-Http-Session", "session-7")
	res, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, data
}

func TestCreate(t *testing.T) {
	tests := []struct {
		name        string
		path        string
		body        string
		decider     *fakeDecider
		maxBody     int64
		noJobScript bool // without --interlink.allow-job-script
		wantStatus  int
		wantBody    string // exact; "" with a forwarded create means the plugin's answer
		forwarded   bool
		decided     bool
		outcome     string
	}{
		{name: "allowed", path: "/create", body: createBodyFixture, decider: &fakeDecider{d: allowed(nil)},
			wantStatus: http.StatusCreated, wantBody: pluginAnswer, forwarded: true, decided: true, outcome: outcomeAllowed},
		{name: "denied", path: "/create", body: createBodyFixture,
			decider:    &fakeDecider{d: denied("system:serviceaccount:team-a:x may not create pods.interlink.io in namespace \"team-a\"\nsecond line")},
			wantStatus: http.StatusForbidden, wantBody: `sar-bridge: denied: system:serviceaccount:team-a:x may not create pods.interlink.io in namespace "team-a" second line`,
			decided: true, outcome: outcomeDenied},
		{name: "API unreachable", path: "/create", body: createBodyFixture,
			decider:    &fakeDecider{err: authorizer.NewUnavailableError(errors.New("subject access review failed: connection refused"))},
			wantStatus: http.StatusServiceUnavailable, wantBody: "sar-bridge: unavailable: subject access review failed: connection refused", decided: true, outcome: outcomeUnavailable},
		{name: "decision deadline", path: "/create", body: createBodyFixture, decider: &fakeDecider{d: allowed(nil), wait: time.Minute},
			wantStatus: http.StatusServiceUnavailable, wantBody: "sar-bridge: unavailable: context deadline exceeded", decided: true, outcome: outcomeUnavailable},
		{name: "pod refused by the authorizer", path: "/create", body: createBodyFixture,
			decider:    &fakeDecider{err: authorizer.NewInputError(`input.pod is not a valid Pod: unknown field "spec.bogus"`)},
			wantStatus: http.StatusBadRequest, wantBody: `sar-bridge: bad request: input.pod is not a valid Pod: unknown field "spec.bogus"`, decided: true, outcome: outcomeInvalid},
		{name: "policy failure", path: "/create", body: createBodyFixture, decider: &fakeDecider{err: errors.New("evaluating policy: boom")},
			wantStatus: http.StatusInternalServerError, wantBody: "sar-bridge: error: evaluating policy: boom", decided: true, outcome: outcomeError},
		{name: "undefined document", path: "/create", body: createBodyFixture, decider: &fakeDecider{d: authorizer.Decision{ID: "x"}},
			wantStatus: http.StatusInternalServerError, wantBody: "sar-bridge: error: policy interlink/authz/decision: the policy document is undefined", decided: true, outcome: outcomeError},
		{name: "unusable modifications", path: "/create", body: createBodyFixture,
			decider:    &fakeDecider{d: allowed(map[string]any{"pod_annotations": map[string]any{"a": 1}})},
			wantStatus: http.StatusInternalServerError, wantBody: `sar-bridge: error: policy interlink/authz/decision: modifications: pod_annotations: "a": a json.Number, not a string`, decided: true, outcome: outcomeError},
		{name: "run_as_user not a uid", path: "/create", body: createBodyFixture,
			decider:    &fakeDecider{d: allowed(map[string]any{"run_as_user": "root"})},
			wantStatus: http.StatusInternalServerError, wantBody: `sar-bridge: error: policy interlink/authz/decision: modifications: run_as_user: a string, not a number`, decided: true, outcome: outcomeError},
		{name: "run_as_user negative", path: "/create", body: createBodyFixture,
			decider:    &fakeDecider{d: allowed(map[string]any{"run_as_user": -1})},
			wantStatus: http.StatusInternalServerError, wantBody: `sar-bridge: error: policy interlink/authz/decision: modifications: run_as_user: uid -1: must be between 0 and 2147483647, inclusive`, decided: true, outcome: outcomeError},
		{name: "run_as_user over the pod's own", path: "/create", body: `{"pod": {"metadata": {"name": "p"}, "spec": {"securityContext": {"runAsUser": 0}}}}`,
			decider:    &fakeDecider{d: allowed(map[string]any{"run_as_user": 20001})},
			wantStatus: http.StatusInternalServerError, wantBody: `sar-bridge: error: applying the policy's modifications: pod.spec.securityContext.runAsUser is 0: the policy's 20001 would overwrite it`, decided: true, outcome: outcomeError},
		{name: "malformed body", path: "/create", body: `{"pod": {`, decider: &fakeDecider{d: allowed(nil)},
			wantStatus: http.StatusBadRequest, wantBody: "sar-bridge: bad request: body: value of \"pod\": unexpected EOF", outcome: outcomeInvalid},
		{name: "no pod", path: "/create", body: `{"container": []}`, decider: &fakeDecider{d: allowed(nil)},
			wantStatus: http.StatusBadRequest, wantBody: `sar-bridge: bad request: body: "pod" is required and must be a JSON object`, outcome: outcomeInvalid},
		{name: "jobScript without --interlink.allow-job-script", path: "/create", body: createBodyFixture, noJobScript: true, decider: &fakeDecider{d: allowed(nil)},
			wantStatus: http.StatusForbidden, wantBody: "sar-bridge: denied: jobScript is set: the SLURM plugin writes it to jobScript.sh and runs it on the HPC host as it is (--interlink.allow-job-script lets it through)", outcome: outcomeDenied},
		{name: "a volume map key the plugins would write unquoted", path: "/create", decider: &fakeDecider{d: allowed(nil)},
			body:       `{"pod": {"metadata": {"name": "p"}}, "container": [{"name": "main", "projectedvolumemaps": [{"metadata": {"name": "v"}, "data": {"ok/token": "x", "x$(touch owned)": "y"}}]}]}`,
			wantStatus: http.StatusForbidden, wantBody: `sar-bridge: denied: container[0].projectedvolumemaps[0].data["x$(touch owned)"] contains '$' (byte 1): the SLURM plugin writes it unquoted into the job script; allowed: a relative path of plain segments (letters, digits and _ . -, no . or .. segment)`, outcome: outcomeDenied},
		{name: "a container without an image", path: "/create", decider: &fakeDecider{d: allowed(nil)},
			body:       `{"pod": {"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i", "image": "busybox"}], "containers": [{"name": "c", "command": ["--bind=/:/host", "docker://busybox"]}]}}}`,
			wantStatus: http.StatusForbidden, wantBody: "sar-bridge: denied: pod.spec.containers[0].image is missing: the plugins would write an empty word where the image goes, and the command's first word would take its place", outcome: outcomeDenied},
		{name: "too large", path: "/create", body: createBodyFixture, maxBody: 64, decider: &fakeDecider{d: allowed(nil)},
			wantStatus: http.StatusRequestEntityTooLarge, wantBody: "sar-bridge: bad request: body larger than 64 bytes (--interlink.max-body-bytes)", outcome: outcomeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.decider, Options{MaxBodyBytes: tt.maxBody, DecisionTimeout: 200 * time.Millisecond, AllowJobScript: !tt.noJobScript})
			res, body := h.do(t, http.MethodPost, tt.path, []byte(tt.body))
			if res.StatusCode != tt.wantStatus || string(body) != tt.wantBody {
				t.Fatalf("got %d %q, want %d %q", res.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			got := h.plugin.requests()
			if tt.forwarded != (len(got) == 1) || len(got) > 1 {
				t.Fatalf("forwarded=%v, the plugin got %d requests", tt.forwarded, len(got))
			}
			if !tt.forwarded {
				if ct := res.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
			}
			if tt.decided != (len(tt.decider.inputs) == 1) {
				t.Errorf("decided=%v, the decider was called %d times", tt.decided, len(tt.decider.inputs))
			}
			if n := testutil.ToFloat64(h.relay.creates.WithLabelValues(tt.outcome)); n != 1 {
				t.Errorf("creates_total{outcome=%q} = %v, want 1", tt.outcome, n)
			}
		})
	}
}

// An allowed create reaches the plugin with the modifications applied, the rest of the
// body and the headers as sent, and the plugin's answer comes back unchanged.
func TestCreateForwardsModifiedBody(t *testing.T) {
	d := &fakeDecider{d: allowed(map[string]any{
		"pod_annotations": map[string]any{"b": "p-7"},
		"resource_limits": map[string]any{"main": map[string]any{"cpu": "1", "memory": "1Gi"}},
	})}
	h := newHarness(t, d, Options{AllowJobScript: true})
	res, body := h.do(t, http.MethodPost, "/create", []byte(createBodyFixture))
	if res.StatusCode != http.StatusCreated || string(body) != pluginAnswer || res.Header.Get("X-Plugin") != "slurm" {
		t.Fatalf("answer %d %q %v", res.StatusCode, body, res.Header)
	}
	got := h.plugin.requests()
	if len(got) != 1 {
		t.Fatalf("plugin got %d requests", len(got))
	}
	r := got[0]
	if r.method != http.MethodPost || r.path != "/create" || r.session != "session-7" || r.contentType != "application/json" {
		t.Errorf("forwarded %s %s session %q type %q", r.method, r.path, r.session, r.contentType)
	}
	checkForwarded(t, r.body, map[string]any{
		"annotations": map[string]any{"keep": "me", "b": "p-7"},
		"limits": map[string]any{"main": map[string]any{"cpu": "1", "memory": "1Gi"}, "capped": map[string]any{"cpu": "500m"},
			"empty": map[string]any{}, "init": nil},
	})
	if want := `{"operation":"create","pod":`; !strings.HasPrefix(d.inputs[0], want) {
		t.Errorf("decision input %s", d.inputs[0])
	}
	if d.paths[0] != "interlink/authz/decision" {
		t.Errorf("decision path %s", d.paths[0])
	}
	if d.charges[0] != authorizer.ChargeStored {
		t.Errorf("charge mode %v, want ChargeStored: interLink creates stored pods", d.charges[0])
	}
	if fmt.Sprint(d.fields[0]) != "[route create]" {
		t.Errorf("decision log fields %v", d.fields[0])
	}
}

// The policy's uid reaches the plugin in the pod's securityContext, beside the members
// the pod set; the rest of the body goes out byte for byte.
func TestCreateForwardsRunAsUser(t *testing.T) {
	d := &fakeDecider{d: allowed(map[string]any{"pod_annotations": map[string]any{}, "resource_limits": map[string]any{}, "run_as_user": 20001})}
	h := newHarness(t, d, Options{})
	in := `{"pod": {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"securityContext": {"fsGroup": 7}, "containers": [{"name": "main", "image": "busybox"}]}},
 "container": [{"name": "main", "secrets": [{"data": {"token": "czNjcjN0PiY="}}]}], "jobConfig": {"x": "<&>"}}`
	res, body := h.do(t, http.MethodPost, "/create", []byte(in))
	if res.StatusCode != http.StatusCreated || string(body) != pluginAnswer {
		t.Fatalf("answer %d %q", res.StatusCode, body)
	}
	got := h.plugin.requests()
	if len(got) != 1 {
		t.Fatalf("plugin got %d requests", len(got))
	}
	want := `{"pod":{"metadata":{"name": "p", "namespace": "team-a"},"spec":{"securityContext":{"fsGroup":7,"runAsUser":20001},"containers":[{"name": "main", "image": "busybox"}]}},` +
		`"container":[{"name": "main", "secrets": [{"data": {"token": "czNjcjN0PiY="}}]}],"jobConfig":{"x": "<&>"}}`
	if string(got[0].body) != want {
		t.Fatalf("forwarded\n  %s\nwant\n  %s", got[0].body, want)
	}
}

func TestCreateMethodNotAllowed(t *testing.T) {
	d := &fakeDecider{d: allowed(nil)}
	h := newHarness(t, d, Options{})
	res, body := h.do(t, http.MethodGet, "/create", []byte(createBodyFixture))
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "POST" || string(body) != "sar-bridge: bad request: method GET not allowed on /create" {
		t.Fatalf("got %d %q %v", res.StatusCode, body, res.Header)
	}
	if len(h.plugin.requests()) != 0 || len(d.inputs) != 0 {
		t.Fatal("a GET /create was decided or forwarded")
	}
}

// interLink's other plugin calls are relayed as they came, the Kubernetes API never
// asked; so is the SLURM plugin's /system-info.
func TestRelayUnchanged(t *testing.T) {
	tests := []struct {
		method, path, body, route string
	}{
		{http.MethodPost, "/delete", `{"metadata":{"name":"p","namespace":"team-a","uid":"u"}}`, "delete"},
		{http.MethodGet, "/status", `[{"metadata":{"name":"p"}}]`, "status"},
		{http.MethodGet, "/status", `[]`, "status"},
		{http.MethodGet, "/getLogs", `{"Namespace":"team-a","PodUID":"u","PodName":"p","ContainerName":"main","Opts":{"Tail":0}}`, "getLogs"},
		{http.MethodGet, "/system-info", ``, "system-info"},
	}
	d := &fakeDecider{err: errors.New("must not be called")}
	h := newHarness(t, d, Options{})
	for i, tt := range tests {
		res, body := h.do(t, tt.method, tt.path, []byte(tt.body))
		if res.StatusCode != http.StatusCreated || string(body) != pluginAnswer || res.Header.Get("X-Plugin") != "slurm" {
			t.Fatalf("%s %s: answer %d %q", tt.method, tt.path, res.StatusCode, body)
		}
		got := h.plugin.requests()[i]
		if got.method != tt.method || got.path != tt.path || string(got.body) != tt.body || got.session != "session-7" {
			t.Errorf("%s %s: plugin got %s %s %q session %q", tt.method, tt.path, got.method, got.path, got.body, got.session)
		}
	}
	if len(d.inputs) != 0 {
		t.Errorf("relayed routes were decided: %v", d.inputs)
	}
	for route, want := range map[string]float64{"delete": 1, "status": 2, "getLogs": 1, "system-info": 1} {
		if n := eventualRequestCount(t, h.reg, route, "201", want); n != want {
			t.Errorf("requests_total{route=%q,code=201} = %v, want %v", route, n, want)
		}
	}
}

// eventualRequestCount waits (up to 2s) for requestCount to reach want and returns the
// last count: the counter moves when the handler returns, which may be just after the
// client has read the whole answer.
func eventualRequestCount(t *testing.T, reg *prometheus.Registry, route, code string, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := requestCount(t, reg, route, code)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requestCount reads sar_bridge_interlink_requests_total{route,code}.
func requestCount(t *testing.T, reg *prometheus.Registry, route, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sar_bridge_interlink_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// /getLogs streams: the first line reaches the client while the plugin still writes,
// and a client that goes away cancels the plugin's request.
func TestGetLogsStreams(t *testing.T) {
	h := newHarness(t, &fakeDecider{}, Options{})
	release := make(chan struct{})
	cancelled := make(chan struct{})
	h.plugin.logs = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "line 1\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			_, _ = io.WriteString(w, "line 2\n")
		case <-r.Context().Done():
			close(cancelled)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/getLogs", strings.NewReader(`{"PodName":"p","Opts":{"Follow":true}}`))
	res, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "line 1\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel() // interLink goes away while the plugin still follows the log
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("the plugin's request was not cancelled when the client went away")
	}
}

func TestPluginUnreachable(t *testing.T) {
	h := newHarness(t, &fakeDecider{d: allowed(nil)}, Options{AllowJobScript: true})
	h.plugin.srv.Close()
	for path, method := range map[string]string{"/create": http.MethodPost, "/status": http.MethodGet} {
		res, body := h.do(t, method, path, []byte(createBodyFixture))
		if res.StatusCode != http.StatusBadGateway || !strings.HasPrefix(string(body), "sar-bridge: plugin unreachable: ") {
			t.Errorf("%s: got %d %q", path, res.StatusCode, body)
		}
	}
}

// No log line carries a body: creates hold Secret contents.
func TestLogsHoldNoBodies(t *testing.T) {
	const secret = "czNjcjN0PiY="
	for _, d := range []*fakeDecider{
		{d: allowed(map[string]any{"pod_annotations": map[string]any{"b": "p"}})},
		{d: denied("no")},
		{err: authorizer.NewUnavailableError(errors.New("down"))},
	} {
		h := newHarness(t, d, Options{})
		h.do(t, http.MethodPost, "/create", []byte(createBodyFixture))
		h.do(t, http.MethodPost, "/create", []byte(`{"pod": {}, "container": [{"secrets": [{"data": {"k": "`+secret+`"}}]}], "x": `))
		h.do(t, http.MethodGet, "/status", []byte(createBodyFixture))
		// The request lines are written once the answers are out: wait for all three.
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(h.logs.String(), `msg="interlink request"`) < 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		logText := h.logs.String()
		if strings.Contains(logText, secret) {
			t.Fatalf("a Secret's value is in the log:\n%s", logText)
		}
		if strings.Count(logText, `msg="interlink request" route=create method=POST code=`) != 2 {
			t.Errorf("want two create request lines in the log:\n%s", logText)
		}
	}
}

// interLink and the plugin on unix sockets, as in the sidecar layout.
func TestUnixSockets(t *testing.T) {
	dir := t.TempDir()
	p := startPlugin(t, filepath.Join(dir, "plugin.sock"))
	pl, err := ParsePluginURL("unix://" + filepath.Join(dir, "plugin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDecider{d: allowed(nil)}
	relay, err := New(d, Options{Plugin: pl, AllowJobScript: true})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := ParseListenAddress("unix://" + filepath.Join(dir, "bridge.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := relay.Server(time.Minute)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", addr.Address)
	}}}
	for _, path := range []string{"/create", "/delete"} {
		res, err := client.Post("http://interlink"+path, "application/json", strings.NewReader(createBodyFixture))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusCreated || string(body) != pluginAnswer {
			t.Fatalf("%s: %d %q", path, res.StatusCode, body)
		}
	}
	if got := p.requests(); len(got) != 2 || string(got[0].body) != createBodyFixture {
		t.Fatalf("plugin got %+v", got)
	}
}
