package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/decisionlog"
	"github.com/sar-bridge/sar-bridge/internal/opaplugins"
	"github.com/sar-bridge/sar-bridge/policies"
)

const samples = "../../policies/rules/samples"

// recorded is a decision as the bridge logged it.
type recorded struct {
	id    string
	input ast.Value
	err   error // the decision failed: no result
}

// podInput is the sample base input with the pod's namespace, name and containers
// replaced and what the bridge derives from the pod added (input.resources,
// input.tolerations, input.hpc).
func podInput(t *testing.T, name string, containers string, labels string, reviewAllowed bool) ast.Value {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(samples, "base_input.json"))
	if err != nil {
		t.Fatal(err)
	}
	in := ast.MustParseTerm(string(raw)).Value.(ast.Object)
	pod := in.Get(ast.StringTerm("pod")).Value.(ast.Object)
	meta := pod.Get(ast.StringTerm("metadata")).Value.(ast.Object)
	meta.Insert(ast.StringTerm("name"), ast.StringTerm(name))
	meta.Insert(ast.StringTerm("labels"), ast.MustParseTerm(labels))
	spec := pod.Get(ast.StringTerm("spec")).Value.(ast.Object)
	spec.Insert(ast.StringTerm("containers"), ast.MustParseTerm(containers))
	if !reviewAllowed {
		in.Insert(ast.StringTerm("review"), ast.MustParseTerm(`{"allowed": false, "denied": false, "reason": "system:serviceaccount:team-a:runner may not create pods.interlink.io in namespace \"team-a\"", "attributes": []}`))
	}
	for _, m := range policies.DeriveFromPod(pod).Members() {
		in.Insert(m[0], m[1])
	}
	in.Insert(ast.StringTerm("hpc"), ast.NewTerm(policies.PodHPC(pod)))
	return in
}

func newEvaluator(t *testing.T, dir string, data string) *policies.Evaluator {
	t.Helper()
	file := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := policies.New(context.Background(), policies.Options{Dir: dir, DataFile: file})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func baseData(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(samples, "base_data.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// uploads receives the decision log plugin's uploads, gzip'd JSON arrays, as sent.
type uploads struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (u *uploads) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil || r.Header.Get("Content-Encoding") != "gzip" {
		http.Error(w, "want a gzip'd body", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.bodies = append(u.bodies, b)
	u.mu.Unlock()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// logDecisions decides each input with the running policy and logs it through OPA's
// decision log plugin as the bridge does (mask included), to the console (amid the
// bridge's own logfmt lines, as in its stderr) and to a log service; it returns the
// console's text and the service's uploads.
func logDecisions(t *testing.T, running *policies.Evaluator, decisions []recorded) (console []byte, uploaded [][]byte) {
	t.Helper()
	recv := &uploads{}
	hs := httptest.NewServer(recv)
	defer hs.Close()
	cfg, _ := json.Marshal(map[string]any{
		"services":      map[string]any{"logs": map[string]any{"url": hs.URL}},
		"decision_logs": map[string]any{"service": "logs", "console": true, "reporting": map[string]any{"min_delay_seconds": 60, "max_delay_seconds": 120}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target, err := policies.NewReloader(ctx, policies.ReloaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	logger := log.NewLogfmtLogger(out)
	p, err := opaplugins.Start(ctx, opaplugins.Options{Config: cfg, ID: "replay-test", Target: target, Logger: logger, Console: out})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range decisions {
		e := decisionlog.Event{ID: d.id, Path: "interlink/authz/decision", Input: d.input, Timestamp: time.Now(), RequestedBy: "test", Err: d.err}
		if d.err == nil {
			res, err := running.EvalValue(ctx, []string{"interlink", "authz", "decision"}, d.input, policies.Memo{})
			if err != nil {
				t.Fatal(err)
			}
			e.Result = res.Value
		}
		_ = logger.Log("level", "info", "msg", "decided", "decision_id", d.id)
		p.DecisionLog().LogDecision(ctx, e)
	}
	stopCtx, stop := context.WithTimeout(ctx, 30*time.Second) // with a deadline, Stop uploads what is buffered
	defer stop()
	p.Stop(stopCtx)
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.bodies) == 0 {
		t.Fatal("nothing uploaded")
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	return append([]byte(nil), out.b.Bytes()...), recv.bodies
}

const (
	plain    = `[{"name": "main", "image": "ghcr.io/example/trainer:1.4", "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}]`
	gpu      = `[{"name": "main", "image": "ghcr.io/example/trainer:1.4", "resources": {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}}}]`
	big      = `[{"name": "main", "image": "ghcr.io/example/trainer:1.4", "resources": {"limits": {"cpu": "16", "memory": "4Gi"}}}]`
	withEnv  = `[{"name": "main", "image": "ghcr.io/example/trainer:1.4", "env": [{"name": "EPOCHS", "value": "10"}], "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}]`
	noLabels = `{}`
	project  = `{"example.org/project": "p1"}`
)

// TestReplay records decisions with the default policy through OPA's decision log
// plugin, then replays the console's lines and the uploads with a candidate that adds
// the GPU site rule (docs' site extension) and raises team-a's cpu cap: exactly the
// GPU pod without a project flips to denied, the 16-cpu pod to allowed, the masked
// event and the failed decision are reported and not re-decided.
func TestReplay(t *testing.T) {
	base := baseData(t)
	running := newEvaluator(t, "", base)
	decisions := []recorded{
		{id: "d-plain", input: podInput(t, "plain", plain, noLabels, true)},
		{id: "d-gpu", input: podInput(t, "gpu-no-project", gpu, noLabels, true)},
		{id: "d-gpu-project", input: podInput(t, "gpu-project", gpu, project, true)},
		{id: "d-big", input: podInput(t, "big", big, noLabels, true)},
		{id: "d-gpu-unreviewed", input: podInput(t, "gpu-unreviewed", gpu, noLabels, false)},
		{id: "d-env", input: podInput(t, "gpu-env", strings.Replace(withEnv, `"cpu": "2"`, `"nvidia.com/gpu": "1", "cpu": "2"`, 1), noLabels, true)},
		{id: "d-failed", input: podInput(t, "failed", plain, noLabels, true), err: context.DeadlineExceeded},
	}
	console, uploaded := logDecisions(t, running, decisions)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	consoleFile := write("console.log", console)
	uploadsDir := filepath.Join(dir, "uploads")
	if err := os.Mkdir(uploadsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, b := range uploaded {
		if err := os.WriteFile(filepath.Join(uploadsDir, "upload-"+string(rune('a'+i))+".json.gz"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	candidateData := strings.Replace(base, `"system:serviceaccounts:team-a": {"cpu": "8"`, `"system:serviceaccounts:team-a": {"cpu": "32"`, 1)
	if candidateData == base {
		t.Fatal("the sample data no longer caps team-a's cpu at 8")
	}
	candidate := newEvaluator(t, "../../policies/examples/site-extension", candidateData)

	for _, source := range []struct {
		name  string
		paths []string
		stdin []byte
	}{
		{"console file", []string{consoleFile}, nil},
		{"uploads directory", []string{uploadsDir}, nil},
		{"console on stdin and the uploads", []string{"-", uploadsDir}, console},
	} {
		t.Run(source.name, func(t *testing.T) {
			l, err := ReadPaths(source.paths, bytes.NewReader(source.stdin))
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Events) != len(decisions) {
				t.Fatalf("read %d events, want %d (skipped %d, duplicates %d)", len(l.Events), len(decisions), l.Skipped, l.Duplicates)
			}
			if strings.Contains(source.name, "console") && l.Skipped < len(decisions) {
				t.Errorf("skipped %d lines, want at least the %d log lines", l.Skipped, len(decisions))
			}
			if len(source.paths) == 2 && l.Duplicates != len(decisions) {
				t.Errorf("duplicates %d, want %d (each decision is on the console and uploaded)", l.Duplicates, len(decisions))
			}
			r := Run(context.Background(), l.Events, candidate, Options{})
			checkReport(t, r)
		})
	}
}

func checkReport(t *testing.T, r Report) {
	t.Helper()
	flips := map[string]string{}
	for _, d := range r.Flipped {
		flips[d.Pod] = d.Old.Outcome + "→" + d.New.Outcome
	}
	if want := map[string]string{"gpu-no-project": "allowed→denied", "big": "denied→allowed"}; !reflect.DeepEqual(flips, want) {
		t.Fatalf("flips %v, want %v", flips, want)
	}
	if r.Replayed != 5 || r.Unchanged != 3 {
		t.Errorf("replayed %d, unchanged %d; want 5 and 3", r.Replayed, r.Unchanged)
	}
	if len(r.Masked) != 1 || r.Masked[0].Pod != "gpu-env" || r.Masked[0].New != nil ||
		!reflect.DeepEqual(r.Masked[0].Masked, []string{"erased /input/pod/spec/containers/0/env/0/value"}) {
		t.Errorf("masked %+v, want gpu-env's env value erased, not re-decided", r.Masked)
	}
	if len(r.NoDecision) != 1 || r.NoDecision[0].Pod != "failed" || !strings.Contains(r.NoDecision[0].Old.Error, "deadline") {
		t.Errorf("no decision %+v, want the failed one", r.NoDecision)
	}
	if len(r.Failed) != 0 {
		t.Errorf("failed %+v", r.Failed)
	}
	for _, d := range r.Flipped {
		denying := *d.New
		if d.New.Outcome == "allowed" {
			denying = d.Old
		}
		want := []string{"reason: " + denying.Reason} // a policy whose violations name no rule
		if len(denying.Violations) > 0 {
			want = nil
			for _, v := range denying.Violations {
				want = append(want, v.Rule)
			}
		}
		if !reflect.DeepEqual(d.Rules, want) {
			t.Errorf("%s: rules %q, want %q", d.Pod, d.Rules, want)
		}
		if d.Tenant != "tenant-a" || d.Namespace != "team-a" {
			t.Errorf("%s: tenant %q namespace %q", d.Pod, d.Tenant, d.Namespace)
		}
	}
	gpuFlip := r.Flipped[0]
	if gpuFlip.Pod != "gpu-no-project" {
		gpuFlip = r.Flipped[1]
	}
	if !strings.Contains(gpuFlip.New.Reason, `container "main" asks for GPUs`) {
		t.Errorf("the GPU pod's new reason %q", gpuFlip.New.Reason)
	}
	if c := r.ByTenant["tenant-a"]; c != (Count{ToDenied: 1, ToAllowed: 1}) {
		t.Errorf("by tenant %+v", r.ByTenant)
	}

	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("the report:\n%s", text.String())
	for _, want := range []string{
		"7 decisions read, 5 re-decided: 2 flipped (1 allowed → denied, 1 denied → allowed, 0 other), 3 unchanged\n",
		"not compared: 1 masked, 1 recorded without a decision, 0 failed\n",
		"team-a/gpu-no-project (tenant tenant-a, create, decision d-gpu): allowed → denied\n",
		"team-a/big (tenant tenant-a, create, decision d-big): denied → allowed\n",
		"team-a/gpu-env (tenant tenant-a, create, decision d-env): erased /input/pod/spec/containers/0/env/0/value\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Flipped) != 2 {
		t.Errorf("the JSON report does not read back: %v\n%s", err, js.String())
	}
}

// TestMaskedDecide: --masked.decide re-decides a masked event and marks it.
func TestMaskedDecide(t *testing.T) {
	in := podInput(t, "gpu-env", strings.Replace(withEnv, `"cpu": "2"`, `"nvidia.com/gpu": "1", "cpu": "2"`, 1), noLabels, true)
	raw, err := ast.JSON(in)
	if err != nil {
		t.Fatal(err)
	}
	inJSON, _ := json.Marshal(raw)
	ev := Event{DecisionID: "x", Path: "interlink/authz/decision", Input: inJSON, Result: json.RawMessage(`{"allowed": true, "reason": ""}`),
		Masked: []string{"/input/pod/metadata/annotations"}}
	candidate := newEvaluator(t, "../../policies/examples/site-extension", baseData(t))
	r := Run(context.Background(), []Event{ev}, candidate, Options{})
	if r.Replayed != 0 || len(r.Masked) != 1 || len(r.Flipped) != 0 {
		t.Fatalf("without --masked.decide: %+v", r)
	}
	r = Run(context.Background(), []Event{ev}, candidate, Options{DecideMasked: true})
	if r.Replayed != 1 || len(r.Masked) != 1 || len(r.Flipped) != 1 || len(r.Flipped[0].Masked) != 1 {
		t.Fatalf("with --masked.decide: %+v", r)
	}
	// The marker alone (the lists dropped on the way) still marks an event.
	ev.Masked = nil
	ev.Input = bytes.Replace(inJSON, []byte(`"EPOCHS"`), []byte(`"**masked**"`), 1)
	if r := Run(context.Background(), []Event{ev}, candidate, Options{}); len(r.Masked) != 1 || r.Masked[0].Masked[0] != "a value holds **masked**" {
		t.Fatalf("a **masked** value: %+v", r.Masked)
	}
}

// TestRead: what is not an event is skipped or refused, never read as one.
func TestRead(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`[{"decision_id": "a", "path": "p", "input": {}}, {"decision_id": "b", "path": "p", "input": {}}]`))
	_ = zw.Close()
	for _, tc := range []struct {
		name    string
		in      []byte
		ids     []string
		skipped int
		err     bool
	}{
		{"gzip'd upload", gz.Bytes(), []string{"a", "b"}, 0, false},
		{"two arrays", []byte(`[{"decision_id": "a"}] [{"decision_id": "b"}]`), []string{"a", "b"}, 0, false},
		{"lines", []byte("ts=1 level=info msg=x\n{\"decision_id\": \"a\"}\n{\"msg\": \"a JSON log line\"}\n\n{\"decision_id\": \"a\"}\n"), []string{"a"}, 2, false},
		{"a log line with a brace", []byte("{not json\n{\"decision_id\": \"a\"}\n"), []string{"a"}, 1, false},
		{"a broken array", []byte(`[{"decision_id": "a"}`), nil, 0, true},
		{"an event of the wrong shape", []byte(`{"decision_id": 7}`), nil, 0, true},
		{"empty", nil, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ReadPaths([]string{"-"}, bytes.NewReader(tc.in))
			if tc.err {
				if err == nil {
					t.Fatalf("no error; read %+v", l)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range l.Events {
				ids = append(ids, e.DecisionID)
			}
			if !reflect.DeepEqual(ids, tc.ids) || l.Skipped != tc.skipped {
				t.Errorf("ids %v skipped %d, want %v and %d", ids, l.Skipped, tc.ids, tc.skipped)
			}
		})
	}
}

// fixed answers every evaluation with one result.
type fixed struct{ result ast.Value }

func (f fixed) EvalValue(context.Context, []string, ast.Value, policies.Memo) (policies.Result, error) {
	return policies.Result{Value: f.result, Defined: true}, nil
}

// TestBlameByRule: a result whose violations name their rules (issue 42's decision
// document) is counted by rule, deny-action ones only; warn and audit do not deny.
func TestBlameByRule(t *testing.T) {
	input := json.RawMessage(`{"operation": "create", "tenant": "t1", "pod": {"metadata": {"namespace": "ns", "name": "p"}}}`)
	allowedWarned := `{"allowed": true, "reason": "ok", "violations": [{"rule": "site.gpu", "message": "label it", "action": "warn"}]}`
	denied := ast.MustParseTerm(`{"allowed": false, "reason": "label it; too big", "violations": [
		{"rule": "site.gpu", "message": "label it", "action": "deny"},
		{"rule": "caps", "message": "too big", "action": "deny"},
		{"rule": "images", "message": "unpinned", "action": "audit"}]}`).Value
	ev := Event{DecisionID: "x", Path: "interlink/authz/decision", Input: input, Result: json.RawMessage(allowedWarned)}
	r := Run(context.Background(), []Event{ev}, fixed{denied}, Options{})
	if len(r.Flipped) != 1 || !reflect.DeepEqual(r.Flipped[0].Rules, []string{"caps", "site.gpu"}) {
		t.Fatalf("flipped %+v", r.Flipped)
	}
	want := map[string]Count{"caps": {ToDenied: 1}, "site.gpu": {ToDenied: 1}}
	if !reflect.DeepEqual(r.ByRule, want) || r.ByTenant["t1"] != (Count{ToDenied: 1}) {
		t.Errorf("by rule %v, by tenant %v", r.ByRule, r.ByTenant)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"    was: site.gpu (warn): label it\n", "    now: caps: too big\n", "    now: images (audit): unpinned\n", "ns/p (tenant t1, create, decision x): allowed → denied\n"} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("the report lacks %q:\n%s", line, text.String())
		}
	}
	// The same answer again is no flip.
	ev.Result = json.RawMessage(`{"allowed": false, "reason": "other words", "violations": []}`)
	if r := Run(context.Background(), []Event{ev}, fixed{denied}, Options{}); len(r.Flipped) != 0 || r.Unchanged != 1 {
		t.Errorf("denied → denied: %+v", r)
	}
}
