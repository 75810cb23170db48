package opaplugins

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sar-bridge/sar-bridge/internal/decisionlog"
	"github.com/sar-bridge/sar-bridge/policies"
)

// bundleServer serves one bundle at /bundles/site.tar.gz, with OPA's ETag protocol.
type bundleServer struct {
	mu       sync.Mutex
	body     []byte
	etag     string
	requests int
}

func (s *bundleServer) set(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.etag = body, fmt.Sprintf(`"%d-%d"`, len(body), time.Now().UnixNano())
}

func (s *bundleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if r.URL.Path != "/bundles/site.tar.gz" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("If-None-Match") == s.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", s.etag)
	_, _ = w.Write(s.body)
}

type signer struct {
	keyID, private, public string
}

func newSigner(t *testing.T, keyID string) signer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return signer{
		keyID:   keyID,
		private: string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})),
		public:  string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
	}
}

// buildBundle writes a signed bundle of modules (path → text) and data, owning roots.
func buildBundle(t *testing.T, s signer, revision string, roots []string, modules map[string]string, data map[string]any) []byte {
	t.Helper()
	b := bundle.Bundle{Manifest: bundle.Manifest{Revision: revision, Roots: &roots}, Data: data}
	for path, text := range modules {
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: path, Path: path, Raw: []byte(text)})
	}
	if err := b.GenerateSignature(bundle.NewSigningConfig(s.private, "RS256", ""), s.keyID, false); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// siteBundle is a bundle that extends the embedded policy with package acme.
func siteBundle(t *testing.T, s signer, revision string) []byte {
	return buildBundle(t, s, revision, []string{"acme"},
		map[string]string{"/acme/site.rego": "package acme\n\nrevision := data.acme.rev\n\nembedded_decides if data.interlink.authz.decision\n"},
		map[string]any{"acme": map[string]any{"rev": revision}})
}

func config(t *testing.T, url string, s signer, persistDir string) []byte {
	t.Helper()
	cfg := map[string]any{
		"services": map[string]any{"site": map[string]any{"url": url}},
		"bundles": map[string]any{"site": map[string]any{
			"service": "site", "resource": "bundles/site.tar.gz", "persist": persistDir != "",
			"polling": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1},
			"signing": map[string]any{"keyid": s.keyID},
		}},
		"keys": map[string]any{s.keyID: map[string]any{"key": s.public, "algorithm": "RS256"}},
	}
	if persistDir != "" {
		cfg["persistence_directory"] = persistDir
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func newReloader(t *testing.T) *policies.Reloader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := policies.NewReloader(ctx, policies.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func start(t *testing.T, raw []byte, target Target, logs *testWriter) *Plugins {
	t.Helper()
	p, err := Start(context.Background(), Options{Config: raw, Target: target, Logger: log.NewLogfmtLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	return p
}

func eval(t *testing.T, r *policies.Reloader, path ...string) any {
	t.Helper()
	v, defined, err := r.Eval(context.Background(), path, map[string]any{})
	if err != nil {
		t.Fatalf("data.%s: %v", strings.Join(path, "."), err)
	}
	if !defined {
		return nil
	}
	return v
}

// waitRevision waits until the policy's acme.revision is want.
func waitRevision(t *testing.T, r *policies.Reloader, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for eval(t, r, "acme", "revision") != want {
		if time.Now().After(deadline) {
			t.Fatalf("acme.revision is %v, want %q", eval(t, r, "acme", "revision"), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A bundle extends the embedded policy, a new revision replaces it, and a bundle
// that is not signed by the configured key, that drops interlink.authz.decision,
// or that does not compile is refused while the last good one keeps deciding.
func TestBundleActivation(t *testing.T) {
	good, other := newSigner(t, "site-key"), newSigner(t, "site-key")
	srv := &bundleServer{}
	srv.set(siteBundle(t, good, "r1"))
	hs := httptest.NewServer(srv)
	defer hs.Close()
	r := newReloader(t)
	logs := &testWriter{}
	p := start(t, config(t, hs.URL, good, ""), r, logs)
	if err := p.WaitReady(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, r, "r1")
	if eval(t, r, "acme", "embedded_decides") != true {
		t.Fatal("the bundle's module does not see the embedded policy's decision")
	}

	srv.set(siteBundle(t, good, "r2"))
	waitRevision(t, r, "r2")

	refused := []struct {
		name   string
		bundle []byte
		log    []string // what the refusal's log line holds
	}{
		{"signed by another key", siteBundle(t, other, "r3-forged"),
			[]string{"Bundle load failed: failed to verify JWT signature"}},
		{"drops the decision", buildBundle(t, good, "r3-nodecision", []string{""},
			map[string]string{"/authz.rego": "package interlink.authz\n\nallow := false\n", "/acme/site.rego": "package acme\n\nrevision := \"r3-nodecision\"\n"},
			map[string]any{"acme": map[string]any{"rev": "r3-nodecision"}}),
			[]string{"bundle refused", "site=r3-nodecision", "new policy no longer defines data.interlink.authz.decision"}},
		{"does not compile", buildBundle(t, good, "r3-broken", []string{"acme"},
			map[string]string{"/acme/site.rego": "package acme\n\nrevision := data.acme.rev\n\nx := undefined_function(1)\n"}, map[string]any{"acme": map[string]any{"rev": "r3-broken"}}),
			[]string{"bundle refused", "site=r3-broken", "undefined function undefined_function"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, n := logs.since(0)
			srv.set(tc.bundle)
			logs.waitLog(t, n, tc.log...)
			if got := eval(t, r, "acme", "revision"); got != "r2" {
				t.Fatalf("acme.revision %v after a bundle that %s; want the last good r2", got, tc.name)
			}
			if eval(t, r, "interlink", "authz", "decision") == nil {
				t.Fatal("the decision is undefined")
			}
		})
	}
	srv.set(siteBundle(t, good, "r4"))
	waitRevision(t, r, "r4")
}

// testWriter keeps the plugins' log lines for the test to search.
type testWriter struct {
	mu    sync.Mutex
	lines []string
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, strings.TrimSpace(string(p)))
	return len(p), nil
}

// since returns the lines logged after the first n, and how many there are now.
func (w *testWriter) since(n int) ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines[n:]...), len(w.lines)
}

// waitLog waits for a line after the first n that holds every one of want.
func (w *testWriter) waitLog(t *testing.T, n int, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines, _ := w.since(n)
		for _, l := range lines {
			found := true
			for _, s := range want {
				found = found && strings.Contains(l, s)
			}
			if found {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q among:\n%s", want, strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A bundle persisted by one bridge is what the next decides by when the bundle
// server is down; with nothing persisted, start-up waits and then fails.
func TestBundlePersisted(t *testing.T) {
	key := newSigner(t, "site-key")
	srv := &bundleServer{}
	srv.set(siteBundle(t, key, "r1"))
	hs := httptest.NewServer(srv)
	dir := t.TempDir()
	raw := config(t, hs.URL, key, dir)

	first := newReloader(t)
	p, err := Start(context.Background(), Options{Config: raw, Target: first})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitRevision(t, first, "r1")
	p.Stop(context.Background())
	hs.Close()

	restarted := newReloader(t)
	if eval(t, restarted, "acme", "revision") != nil {
		t.Fatal("a new bridge decides by a bundle before any is activated")
	}
	start(t, raw, restarted, &testWriter{})
	waitRevision(t, restarted, "r1")

	fresh := newReloader(t)
	p = start(t, config(t, hs.URL, key, t.TempDir()), fresh, &testWriter{})
	err = p.WaitReady(context.Background(), time.Second)
	if err == nil || !strings.Contains(err.Error(), "no bundle activated within 1s: waiting for [site]") {
		t.Fatalf("WaitReady: %v, want the bundle named as not activated", err)
	}
}

// logReceiver is a decision log service: it keeps the events of every gzip batch.
type logReceiver struct {
	mu     sync.Mutex
	events []map[string]any
	errs   []string
}

func (l *logReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.URL.Path != "/logs" || r.Header.Get("Content-Encoding") != "gzip" {
		l.errs = append(l.errs, fmt.Sprintf("%s %s encoding %q", r.Method, r.URL.Path, r.Header.Get("Content-Encoding")))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		l.errs = append(l.errs, err.Error())
		return
	}
	var batch []map[string]any
	if err := json.NewDecoder(zr).Decode(&batch); err != nil {
		l.errs = append(l.errs, err.Error())
		return
	}
	l.events = append(l.events, batch...)
}

func (l *logReceiver) wait(t *testing.T, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l.mu.Lock()
		events, errs := append([]map[string]any(nil), l.events...), l.errs
		l.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("bad uploads: %v", errs)
		}
		if len(events) >= n {
			return events
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events, want %d", len(events), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A decision goes to the decision log service in OPA's event format, in a gzip
// batch, its env values removed and kubectl's copy of the pod masked by the default mask.
func TestDecisionLogs(t *testing.T) {
	recv := &logReceiver{}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	raw, err := json.Marshal(map[string]any{
		"labels":        map[string]any{"cluster": "test"},
		"services":      map[string]any{"logs": map[string]any{"url": hs.URL}},
		"decision_logs": map[string]any{"service": "logs", "resource": "/logs", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, raw, newReloader(t), &testWriter{})
	dl := p.DecisionLog()
	if dl == nil {
		t.Fatal("no decision log with decision_logs configured")
	}
	if limit := p.logs.Config().Reporting.BufferSizeLimitBytes; limit == nil || *limit != DefaultDecisionLogBufferBytes {
		t.Errorf("the decision log buffer is bounded at %v bytes, want %d", limit, DefaultDecisionLogBufferBytes)
	}
	input := ast.MustParseTerm(`{"operation": "create", "pod": {"metadata": {"name": "p", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"env\": \"secret\"}"}},
		"spec": {"containers": [{"name": "c", "env": [{"name": "TOKEN", "value": "s3cret"}, {"name": "REF", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}],
		"initContainers": [{"name": "i", "env": [{"name": "PASSWORD", "value": "hunter2"}]}]}}}`).Value
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	dl.LogDecision(context.Background(), decisionlog.Event{ID: "d-1", Path: "interlink/authz/decision", Input: input,
		Result: ast.MustParseTerm(`{"allowed": true}`).Value, Timestamp: at, Duration: 1500 * time.Microsecond, RequestedBy: "relay"})
	dl.LogDecision(context.Background(), decisionlog.Event{ID: "d-2", Path: "interlink/authz/decision", Input: input,
		Err: errors.New("quota ledger unavailable"), Timestamp: at})

	events := recv.wait(t, 2)
	got, _ := json.Marshal(events[0])
	for _, secret := range []string{"s3cret", "hunter2", `\"env\": \"secret\"`} {
		if strings.Contains(string(got), secret) {
			t.Errorf("the event holds %q: %s", secret, got)
		}
	}
	e := events[0]
	pod := e["input"].(map[string]any)["pod"].(map[string]any)
	if a := pod["metadata"].(map[string]any)["annotations"]; fmt.Sprint(a) != "map[kubectl.kubernetes.io/last-applied-configuration:**masked**]" {
		t.Errorf("annotations %v, want kubectl's copy of the pod masked", a)
	}
	env := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["env"].([]any)
	if first := env[0].(map[string]any); first["name"] != "TOKEN" || first["value"] != nil {
		t.Errorf("env[0] = %v, want the name kept and the value removed", first)
	}
	if e["decision_id"] != "d-1" || e["path"] != "interlink/authz/decision" || e["requested_by"] != "relay" ||
		e["timestamp"] != "2026-11-25T12:00:00Z" || fmt.Sprint(e["result"]) != "map[allowed:true]" ||
		fmt.Sprint(e["labels"].(map[string]any)["cluster"]) != "test" ||
		fmt.Sprint(e["metrics"].(map[string]any)["timer_server_handler_ns"]) != "1.5e+06" {
		t.Errorf("event %s", got)
	}
	if e2 := events[1]; e2["decision_id"] != "d-2" || e2["result"] != nil || !strings.Contains(fmt.Sprint(e2["error"]), "quota ledger unavailable") {
		t.Errorf("error event %v", e2)
	}
}

// status: the bundle's state and revision go to the status service and, with
// prometheus: true, to the bridge's registry.
func TestStatus(t *testing.T) {
	key := newSigner(t, "site-key")
	srv := &bundleServer{}
	srv.set(siteBundle(t, key, "r1"))
	var mu sync.Mutex
	var reports []map[string]any
	mux := http.NewServeMux()
	mux.Handle("/bundles/", srv)
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		var report map[string]any
		if err := json.NewDecoder(r.Body).Decode(&report); err == nil {
			mu.Lock()
			reports = append(reports, report)
			mu.Unlock()
		}
	})
	hs := httptest.NewServer(mux)
	defer hs.Close()
	var cfg map[string]any
	if err := json.Unmarshal(config(t, hs.URL, key, ""), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["status"] = map[string]any{"service": "site", "prometheus": true}
	raw, _ := json.Marshal(cfg)
	reg := prometheus.NewRegistry()
	p, err := Start(context.Background(), Options{Config: raw, Target: newReloader(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	if err := p.WaitReady(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		var revision any
		for _, r := range reports {
			bundles, _ := r["bundles"].(map[string]any)
			if b, ok := bundles["site"].(map[string]any); ok {
				revision = b["active_revision"]
			}
		}
		mu.Unlock()
		if revision == "r1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status report with the site bundle's revision r1: %v", reports)
		}
		time.Sleep(50 * time.Millisecond)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "bundle_loaded_counter") || !strings.Contains(got, "plugin_status_gauge") {
		t.Errorf("metrics %s, want OPA's status metrics", got)
	}
}

// A bundle's module may call the cluster built-ins: both the bridge's compiler and
// OPA's own activation know them.
func TestBundleCallsClusterBuiltins(t *testing.T) {
	key := newSigner(t, "site-key")
	srv := &bundleServer{}
	srv.set(buildBundle(t, key, "r1", []string{"acme"},
		map[string]string{"/acme/site.rego": "package acme\n\nrevision := data.acme.rev\n\nconfig := k8s.get(\"configmaps\", \"team-a\", \"site\")\n"},
		map[string]any{"acme": map[string]any{"rev": "r1"}}))
	hs := httptest.NewServer(srv)
	defer hs.Close()
	r := newReloader(t)
	logs := &testWriter{}
	p := start(t, config(t, hs.URL, key, ""), r, logs)
	if err := p.WaitReady(context.Background(), 30*time.Second); err != nil {
		lines, _ := logs.since(0)
		t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
	}
	waitRevision(t, r, "r1")
}

// OPA's decision log buffer is unbounded by default; the bridge bounds it unless the
// configuration bounds it itself.
func TestBoundDecisionLogBuffer(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"service": "logs"}`, `{"reporting":{"buffer_size_limit_bytes":16777216},"service":"logs"}`},
		{`{"console": true, "reporting": {"min_delay_seconds": 5}}`, `{"console":true,"reporting":{"buffer_size_limit_bytes":16777216,"min_delay_seconds":5}}`},
		{`{"reporting": {"buffer_size_limit_bytes": 1000}}`, `{"reporting": {"buffer_size_limit_bytes": 1000}}`},
		{`{"reporting": {"max_decisions_per_second": 10}}`, `{"reporting": {"max_decisions_per_second": 10}}`},
		{`{"reporting": {"buffer_type": "event"}}`, `{"reporting": {"buffer_type": "event"}}`},
		{``, ``},
	} {
		got, err := boundDecisionLogBuffer([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := boundDecisionLogBuffer([]byte(`[1]`)); err == nil {
		t.Error("a decision_logs that is not an object was taken")
	}
}

// PrivateCopy starts from a copy of the persistence directory: a bundle persisted there
// activates (with its server down), and nothing is written where the server writes.
func TestPrivateCopy(t *testing.T) {
	key := newSigner(t, "site-key")
	srv := &bundleServer{}
	srv.set(siteBundle(t, key, "r1"))
	hs := httptest.NewServer(srv)
	dir := t.TempDir()
	raw := config(t, hs.URL, key, dir)
	first := newReloader(t)
	p := start(t, raw, first, &testWriter{})
	waitRevision(t, first, "r1")
	p.Stop(context.Background())
	hs.Close()
	before := dirListing(t, dir)

	oneShot := newReloader(t)
	p, err := Start(context.Background(), Options{Config: raw, Target: oneShot, PrivateCopy: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(context.Background(), 30*time.Second); err != nil {
		t.Fatalf("the persisted bundle did not activate from the copy: %v", err)
	}
	waitRevision(t, oneShot, "r1")
	private := p.privateDir
	p.Stop(context.Background())
	if after := dirListing(t, dir); after != before {
		t.Errorf("the persistence directory changed:\n%s\nthen\n%s", before, after)
	}
	if _, err := os.Stat(private); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the private copy %s is left after Stop (%v)", private, err)
	}
}

// A broken copy in the persistence directory (OPA's OCI store with an empty index, as
// a write cut short leaves it) is an error of Start, never a panic.
func TestBrokenOCIStoreIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "oci"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci", "index.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	raw := []byte(fmt.Sprintf(`{"services": {"reg": {"url": "http://127.0.0.1:1", "type": "oci"}},
		"bundles": {"site": {"service": "reg", "resource": "127.0.0.1:1/site:v1", "persist": true}},
		"persistence_directory": %q}`, dir))
	_, err := Start(context.Background(), Options{Config: raw, Target: newReloader(t)})
	if err == nil || !strings.Contains(err.Error(), "starting OPA's plugins: panic: ") || !strings.Contains(err.Error(), "persisted copy") {
		t.Fatalf("Start = %v, want an error naming the panic", err)
	}
}

// dirListing is every path under dir with its size, one a line.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d\n", path, info.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
