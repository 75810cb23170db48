package e2e

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// siteBundleSource writes a bundle that extends the embedded policy the way a site
// does (package interlink.site.acme, so the fast path stays on): a pod labelled
// acme.example/forbidden is refused with a reason naming the bundle's revision, read
// from the bundle's data. dropDecision replaces the embedded authz.rego with a module
// that has no decision.
func siteBundleSource(t *testing.T, dir, rev string, dropDecision bool) string {
	t.Helper()
	src := filepath.Join(dir, "site-src-"+rev)
	files := map[string]string{
		"site.rego": `package interlink.site.acme

violations contains msg if {
	input.pod.metadata.labels["acme.example/forbidden"]
	msg := sprintf("forbidden by the site bundle %s", [data.acme.revision])
}
`,
		"acme/data.json": fmt.Sprintf(`{"revision": %q}`, rev),
		".manifest":      `{"roots": ["interlink/site/acme", "acme"]}`,
	}
	if dropDecision {
		files["authz.rego"] = "package interlink.authz\n\nallow := false\n"
		files[".manifest"] = `{"roots": [""]}`
	}
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// decisionLogReceiver is a decision log and status service: the events of every gzip
// batch at /logs, the status reports at /status.
type decisionLogReceiver struct {
	mu      sync.Mutex
	events  []map[string]any
	batches int
	status  []map[string]any
	bad     []string
}

func (l *decisionLogReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Method == http.MethodPost && r.URL.Path == "/status" {
		var report map[string]any
		if err := json.NewDecoder(r.Body).Decode(&report); err != nil {
			l.bad = append(l.bad, "status: "+err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		l.status = append(l.status, report)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/logs" || r.Header.Get("Content-Encoding") != "gzip" {
		l.bad = append(l.bad, fmt.Sprintf("%s %s (Content-Encoding %q)", r.Method, r.URL.Path, r.Header.Get("Content-Encoding")))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	zr, err := gzip.NewReader(r.Body)
	if err == nil {
		var batch []map[string]any
		if err = json.NewDecoder(zr).Decode(&batch); err == nil {
			l.events = append(l.events, batch...)
			l.batches++
			return
		}
	}
	l.bad = append(l.bad, err.Error())
	w.WriteHeader(http.StatusBadRequest)
}

// bundleStatus returns what the last status report says of bundle name: its active
// revision and the messages of its last error.
func (l *decisionLogReceiver) bundleStatus(name string) (active string, errs string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, report := range l.status {
		bundles, _ := report["bundles"].(map[string]any)
		if b, ok := bundles[name].(map[string]any); ok {
			active, _ = b["active_revision"].(string)
			errs = fmt.Sprint(b["message"], " ", b["errors"])
		}
	}
	return active, errs
}

// byID waits until every id has an event and returns the events by decision_id.
func (l *decisionLogReceiver) byID(t *testing.T, ids []string) map[string][]map[string]any {
	t.Helper()
	var got map[string][]map[string]any
	var bad []string
	missing := 0
	poll(30*time.Second, 100*time.Millisecond, func() bool {
		l.mu.Lock()
		got = map[string][]map[string]any{}
		for _, e := range l.events {
			id, _ := e["decision_id"].(string)
			got[id] = append(got[id], e)
		}
		bad = l.bad
		l.mu.Unlock()
		missing = 0
		for _, id := range ids {
			if len(got[id]) == 0 {
				missing++
			}
		}
		return len(bad) > 0 || missing == 0
	})
	if len(bad) > 0 {
		t.Fatalf("bad decision log uploads: %v", bad)
	}
	if missing > 0 {
		t.Fatalf("%d of %d decisions have no decision log event", missing, len(ids))
	}
	return got
}

// TestBundlesAndDecisionLogs: the real bridge pulls a signed OPA bundle, built by the
// real opa build, from a real OCI registry and decides by it; follows new revisions;
// refuses a bundle with a bad signature and one that drops the decision; after a
// restart with the registry down decides from the persisted bundle. Every decision is
// in the decision log service's gzip batches once, masked.
func TestBundlesAndDecisionLogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := testWorkDir(t)
	opaBundleTools(t)
	reg := startRegistry(t, filepath.Join(dir, "registry"))
	k1, err := cluster.GenerateSigningKey(dir, "k1", "RS256")
	if err != nil {
		t.Fatal(err)
	}
	other, err := cluster.GenerateSigningKey(dir, "other", "RS256")
	if err != nil {
		t.Fatal(err)
	}
	const repo, tag = "sar-bridge/site", "v1"
	push := func(rev string, key *cluster.SigningKey, dropDecision bool) time.Time {
		t.Helper()
		tarball := buildBundle(t, dir, siteBundleSource(t, dir, rev, dropDecision), rev, signedBy(key))
		if _, err := cluster.PushBundle(ctx, reg.Host, repo, tag, tarball); err != nil {
			t.Fatalf("pushing %s: %v", rev, err)
		}
		return time.Now()
	}
	push("r1", k1, false)

	logs := &decisionLogReceiver{}
	logService := httptest.NewServer(logs)
	defer logService.Close()
	persist := filepath.Join(dir, "persist")
	base, err := cluster.OCIBundleConfig{RegistryHost: reg.Host, Repository: repo, Tag: tag, Bundle: "site",
		Key: k1, Persist: true, PersistenceDirectory: persist, MinDelaySeconds: 1, MaxDelaySeconds: 1}.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(base, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["services"].(map[string]any)["logs"] = map[string]any{"url": logService.URL}
	cfg["decision_logs"] = map[string]any{"service": "logs", "resource": "/logs", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}}
	cfg["labels"] = map[string]any{"cluster": "e2e"}
	cfg["status"] = map[string]any{"service": "logs"}
	configFile := filepath.Join(dir, "opa-config.json")
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(configFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	b := newBridge(t, "--config-file="+configFile)
	forbidden := func(name string) map[string]any {
		return input("create", newPod("team-a", "runner", name, withPodLabels(map[string]string{"acme.example/forbidden": "yes"})))
	}
	withSecretEnv := func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", Value: "s3cret-e2e-value"}}
	}
	type logged struct {
		id, revision string
		allowed      bool
	}
	var decisions []logged
	record := func(r *cluster.Response, revision string) {
		decisions = append(decisions, logged{r.DecisionID, revision, r.Allowed()})
	}
	record(decide(t, b, input("create", newPod("team-a", "runner", "plain", withSecretEnv)), allow(`RoleBinding "offload/team-a"`)), "r1")
	record(decide(t, b, forbidden("f1"), deny("forbidden by the site bundle r1")), "r1")

	// awaitReason polls until a forbidden pod's reason names rev.
	awaitReason := func(rev string, since time.Time) {
		t.Helper()
		var r *cluster.Response
		var err error
		if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool {
			r, err = b.Decide(forbidden("poll"))
			return err == nil && strings.Contains(r.Reason(), "forbidden by the site bundle "+rev)
		}); !ok {
			t.Fatalf("not deciding by %s 30s after its push (last answer %v, %v)", rev, r, err)
		}
		t.Logf("deciding by %s %v after its push", rev, time.Since(since).Round(10*time.Millisecond))
	}
	awaitReason("r2", push("r2", k1, false))
	record(decide(t, b, forbidden("f2"), deny("forbidden by the site bundle r2")), "r2")

	// awaitLog waits for a bridge log line holding every one of want.
	awaitLog := func(br *cluster.Bridge, want ...string) {
		t.Helper()
		var seen string
		if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool {
			for _, line := range strings.Split(br.Log(), "\n") {
				found := true
				for _, w := range want {
					found = found && strings.Contains(line, w)
				}
				if found {
					seen = line
					return true
				}
			}
			return false
		}); !ok {
			t.Fatalf("no log line with %q", want)
		}
		t.Logf("refused: %s", seen)
	}
	push("r3-forged", other, false)
	awaitLog(b, "Bundle load failed", "failed to verify JWT signature")
	record(decide(t, b, forbidden("f3"), deny("forbidden by the site bundle r2")), "r2")
	push("r4-nodecision", k1, true)
	awaitLog(b, "bundle refused", "site=r4-nodecision", "new policy no longer defines data.interlink.authz.decision")
	// The status service hears of it: r2 active, the refusal as the bundle's error.
	var active, errs string
	if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool {
		active, errs = logs.bundleStatus("site")
		return active == "r2" && strings.Contains(errs, "new policy no longer defines data.interlink.authz.decision")
	}); !ok {
		t.Fatalf("status reports: active %q, errors %q; want r2 and the refusal", active, errs)
	}
	t.Logf("status: active %s, error %s", active, errs)
	record(decide(t, b, forbidden("f4"), deny("forbidden by the site bundle r2")), "r2")
	record(decide(t, b, input("create", newPod("team-a", "runner", "plain-2")), allow()), "r2")

	// sar-bridge check decides by the bundle too, and logs its decision: the JSON's
	// decision_id is the event's.
	podFile := filepath.Join(dir, "checked-pod.yaml")
	if err := os.WriteFile(podFile, []byte(`apiVersion: v1
kind: Pod
metadata: {name: checked, namespace: team-a, labels: {acme.example/forbidden: "yes"}}
spec: {serviceAccountName: runner, containers: [{name: main, image: busybox:1.36}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runCLI(t, "", adminArgs("check", adminKubeconfig(t), "-f", podFile, "-o", "json", "--config-file="+configFile)...)
	var checked struct {
		Items []struct {
			Result     map[string]any `json:"result"`
			DecisionID string         `json:"decision_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(got.stdout), &checked); err != nil || got.code != 1 || len(checked.Items) != 1 ||
		!strings.Contains(fmt.Sprint(checked.Items[0].Result["reason"]), "forbidden by the site bundle r2") {
		t.Fatalf("check: exit %d, %v\nstdout %s\nstderr %s", got.code, err, got.stdout, got.stderr)
	}
	decisions = append(decisions, logged{checked.Items[0].DecisionID, "r2", false})

	// One event per decision, OPA's format, the bundle's revision at the time, masked.
	var ids []string
	for _, d := range decisions {
		ids = append(ids, d.id)
	}
	events := logs.byID(t, ids)
	for _, d := range decisions {
		if n := len(events[d.id]); n != 1 {
			t.Errorf("decision %s: %d events, want 1", d.id, n)
			continue
		}
		e := events[d.id][0]
		js, _ := json.Marshal(e)
		result, _ := e["result"].(map[string]any)
		bundles, _ := e["bundles"].(map[string]any)
		site, _ := bundles["site"].(map[string]any)
		labels, _ := e["labels"].(map[string]any)
		if e["path"] != "interlink/authz/decision" || result["allowed"] != d.allowed || site["revision"] != d.revision ||
			labels["cluster"] != "e2e" || e["timestamp"] == nil {
			t.Errorf("decision %s (allowed %v by %s): event %s", d.id, d.allowed, d.revision, js)
		}
		if strings.Contains(string(js), "s3cret-e2e-value") {
			t.Errorf("the env value is in the decision log: %s", js)
		}
	}
	first := events[decisions[0].id][0]
	env := first["input"].(map[string]any)["pod"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["env"].([]any)
	if e := env[0].(map[string]any); e["name"] != "TOKEN" || e["value"] != nil {
		t.Errorf("env[0] in the event: %v, want its name and no value", e)
	}
	t.Logf("%d decisions, %d events in %d gzip batches", len(decisions), len(logs.events), logs.batches)

	// Restarted with the registry down: the persisted r2 decides at once.
	b.Stop()
	reg.Stop()
	restarted := newBridge(t, "--config-file="+configFile)
	decide(t, restarted, forbidden("f5"), deny("forbidden by the site bundle r2"))

	// Nothing persisted and the registry down: start-up fails, nothing is decided.
	empty := filepath.Join(dir, "persist-empty")
	cfg["persistence_directory"] = empty
	raw, _ = json.Marshal(cfg)
	fresh := filepath.Join(dir, "opa-config-fresh.json")
	if err := os.WriteFile(fresh, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	nb, err := startBridge("no-bundle", baseArgs("--config-file="+fresh, "--bundles.wait=3s")...)
	stopAtCleanup(t, nb)
	if err == nil {
		t.Fatal("a bridge started with no bundle to decide by")
	}
	if nb != nil && !strings.Contains(nb.Log(), "no bundle activated within 3s: waiting for [site]") {
		t.Errorf("start-up failed, but not saying why: %v\n%s", err, tail(nb.Log(), 20))
	}
}
