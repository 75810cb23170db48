package e2e

// Issue 42: the decisions a real bridge made, as its decision log plugin uploaded them,
// replayed by the real `sar-bridge replay` with a candidate policy (a --policies
// directory, a bundle file, a bundle URL); the flips are checked pod by pod against a
// second bridge that decides the same pods live with the candidate. And `sar-bridge
// test` on a site's rule, its samples and a Rego test.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// replayRule is the candidate's one new site rule: create no pod in the scavenger
// queue; replayMessage is its message.
const (
	replayMessage = "the scavenger queue is closed: label the pod with another example.org/queue"
	replayRule    = `package interlink.site.queue

violations contains msg if {
	input.operation == "create"
	input.pod.metadata.labels["example.org/queue"] == "scavenger"
	msg := "` + replayMessage + `"
}
`
)

// uploadRecorder keeps every decision log upload's body, as received, in a file of its
// own under dir, and hands it on to the receiver.
type uploadRecorder struct {
	dir      string
	receiver *decisionLogReceiver
	mu       sync.Mutex
	n        int
}

func (u *uploadRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.URL.Path == "/logs" {
		u.mu.Lock()
		u.n++
		name := filepath.Join(u.dir, fmt.Sprintf("upload-%03d.json.gz", u.n))
		u.mu.Unlock()
		if err := os.WriteFile(name, raw, 0o644); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	u.receiver.ServeHTTP(w, r)
}

// replayReport is what `sar-bridge replay -o json` prints, the fields this test checks.
type replayReport struct {
	Events    int `json:"events"`
	Replayed  int `json:"replayed"`
	Unchanged int `json:"unchanged"`
	Flipped   []struct {
		DecisionID string            `json:"decision_id"`
		Tenant     string            `json:"tenant"`
		Namespace  string            `json:"namespace"`
		Pod        string            `json:"pod"`
		Operation  string            `json:"operation"`
		Old        replayAnswer      `json:"old"`
		New        *replayAnswer     `json:"new"`
		Rules      []string          `json:"rules"`
		Masked     []string          `json:"masked"`
		Revisions  map[string]string `json:"revisions"`
	} `json:"flipped"`
	ByRule     map[string]replayCount `json:"by_rule"`
	ByTenant   map[string]replayCount `json:"by_tenant"`
	Masked     []json.RawMessage      `json:"masked"`
	NoDecision []json.RawMessage      `json:"no_decision"`
	Failed     []json.RawMessage      `json:"failed"`
}

type replayAnswer struct {
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
}

type replayCount struct {
	ToDenied  int `json:"allowed_to_denied"`
	ToAllowed int `json:"denied_to_allowed"`
}

// writeTarGz writes files (path → content) as a gzip'd tar: an OPA bundle file.
func writeTarGz(t *testing.T, path string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReplayDecisionLogs: a bridge decides a mix of pods (allowed and denied, three
// tenants, a create and a delete) with its decision log uploaded to a service and
// written on its console; replay of the uploads with a candidate that adds one site
// rule reports exactly the pods a bridge running the candidate refuses live (same
// pods, same reasons), exit 1, but the one whose env value the mask erased, which is
// listed as masked (and flips with --masked.decide); with the unchanged policy nothing
// flips, exit 0; the bridge's console log read with the uploads reports the same, each
// event once; the candidate as a bundle file and as a bundle URL reports the same flips.
func TestReplayDecisionLogs(t *testing.T) {
	dir := testWorkDir(t)
	uploads := filepath.Join(dir, "uploads")
	if err := os.MkdirAll(uploads, 0o755); err != nil {
		t.Fatal(err)
	}
	logs := &decisionLogReceiver{}
	logService := httptest.NewServer(&uploadRecorder{dir: uploads, receiver: logs})
	defer logService.Close()
	cfg, _ := json.Marshal(map[string]any{
		"services":      map[string]any{"logs": map[string]any{"url": logService.URL}},
		"decision_logs": map[string]any{"console": true, "service": "logs", "resource": "/logs", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}},
	})
	configFile := filepath.Join(dir, "opa-config.json")
	writeFile(t, configFile, string(cfg))

	candidate := filepath.Join(dir, "candidate")
	writeFile(t, filepath.Join(candidate, "queue.rego"), replayRule)

	scavenger := withPodLabels(map[string]string{"example.org/queue": "scavenger"})
	big := onlyContainers(corev1.Container{Name: "main", Image: "busybox:1.36", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}}})
	secretEnv := func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", Value: "s3cret-replay-value"}}
	}
	cases := []struct {
		in      map[string]any
		allowed bool // by the embedded policy
		flips   bool // the candidate refuses it
		masked  bool // the log's mask erases part of its input
	}{
		{input("create", newPod("team-a", "runner", "a-plain")), true, false, false},
		{input("create", newPod("team-a", "runner", "a-scavenger", scavenger)), true, true, false},
		{input("create", newPod("team-a", "runner", "a-scavenger-big", scavenger, big)), false, false, false},
		{input("delete", newPod("team-a", "cleaner", "job-1", scavenger)), true, false, false},
		{input("create", newPod("project-b", "runner", "b-plain")), true, false, false},
		{input("create", newPod("project-b", "runner", "b-scavenger", scavenger)), true, true, false},
		{input("create", newPod("project-b", "legacy", "b-legacy-scavenger", scavenger)), false, false, false},
		{input("create", newPod("orphan", "runner", "orphan-scavenger", scavenger)), false, false, false},
		// Refused live by the candidate, but its env value is not in the log: replay
		// lists it as masked rather than re-decide what was not decided.
		{input("create", newPod("team-a", "runner", "a-secret-scavenger", scavenger, secretEnv)), true, true, true},
	}

	// Recorded: the embedded policy decides, the decision log plugin uploads.
	recorded := newBridge(t, "--config-file="+configFile)
	live := newBridge(t, "--policies="+candidate)
	type decided struct {
		pod, tenant, op string
		old, now        *cluster.Response
		masked          bool
	}
	var all []decided
	var ids []string
	for _, c := range cases {
		pod := c.in["pod"].(*corev1.Pod)
		w := deny()
		if c.allowed {
			w = allow()
		}
		old := decide(t, recorded, c.in, w)
		if c.flips {
			w = deny(replayMessage)
		}
		now := decide(t, live, c.in, w)
		ids = append(ids, old.DecisionID)
		all = append(all, decided{pod: pod.Namespace + "/" + pod.Name, op: c.in["operation"].(string), old: old, now: now, masked: c.masked})
	}
	if t.Failed() {
		t.FailNow()
	}
	events := logs.byID(t, ids)
	for _, id := range ids {
		if n := len(events[id]); n != 1 {
			t.Fatalf("decision %s: %d events, want 1", id, n)
		}
	}
	// The tenant each event recorded (replay reports by it).
	for i := range all {
		in, _ := events[all[i].old.DecisionID][0]["input"].(map[string]any)
		all[i].tenant, _ = in["tenant"].(string)
	}
	files, _ := filepath.Glob(filepath.Join(uploads, "upload-*.json.gz"))
	t.Logf("%d decisions uploaded in %d gzip batches", len(ids), len(files))

	// What replay must report: the pods whose live answer differs, pod by pod, with
	// the candidate's reason, but the masked one, which is listed.
	var flipped []decided
	var masked decided
	byTenant := map[string]replayCount{}
	byRule := map[string]replayCount{}
	for _, d := range all {
		if d.old.Allowed() == d.now.Allowed() {
			continue
		}
		if d.masked {
			masked = d
			continue
		}
		flipped = append(flipped, d)
		c := byTenant[d.tenant]
		c.ToDenied++
		byTenant[d.tenant] = c
		c = byRule["site.queue"]
		c.ToDenied++
		byRule["site.queue"] = c
	}
	if len(flipped) != 2 || masked.old == nil {
		t.Fatalf("the candidate bridge changed %d answers and the masked pod's %v, want 2 (a-scavenger and b-scavenger) and true", len(flipped), masked.old != nil)
	}
	maskedSection := fmt.Sprintf(`
masked in the log, not re-decided:
  %s (tenant %s, create, decision %s): erased /input/pod/spec/containers/0/env/0/value
`, masked.pod, masked.tenant, masked.old.DecisionID)
	n := len(cases)
	// The whole report: decisions name their rules (violations), so a flip is counted
	// under the candidate's rule, site.queue.
	var changed strings.Builder
	for _, d := range flipped {
		// The old answer had no violations (its reason is shown); the new one lists its rule's.
		fmt.Fprintf(&changed, "  %s (tenant %s, %s, decision %s): allowed → denied\n    was: %s\n    now: site.queue: %s\n",
			d.pod, d.tenant, d.op, d.old.DecisionID, d.old.Reason(), replayMessage)
	}
	report := fmt.Sprintf(`%d decisions read, %d re-decided: 2 flipped (2 allowed → denied, 0 denied → allowed, 0 other), %d unchanged
not compared: 1 masked, 0 recorded without a decision, 0 failed

RULE        ALLOWED→DENIED  DENIED→ALLOWED
site.queue  2               0

TENANT    ALLOWED→DENIED  DENIED→ALLOWED
team-a    1               0
tenant-b  1               0

changed decisions:
%s%s`, n, n-1, n-3, changed.String(), maskedSection)
	readLine := fmt.Sprintf("read %d decisions (0 lines that are not decision log events skipped, 0 seen twice)\n", n)
	checkText := func(t *testing.T, got cliResult) {
		t.Helper()
		got.check(t, 1, report, readLine)
	}
	checkJSON := func(t *testing.T, got cliResult) {
		t.Helper()
		var r replayReport
		if err := json.Unmarshal([]byte(got.stdout), &r); err != nil || got.code != 1 {
			t.Fatalf("exit %d, %v; want 1 and a JSON report:\n%s\n%s", got.code, err, got.stdout, got.stderr)
		}
		if r.Events != n || r.Replayed != n-1 || r.Unchanged != n-3 ||
			len(r.Masked) != 1 || len(r.NoDecision) != 0 || len(r.Failed) != 0 || len(r.Flipped) != 2 {
			t.Fatalf("report: %s", got.stdout)
		}
		for i, f := range r.Flipped {
			d := flipped[i]
			if f.Namespace+"/"+f.Pod != d.pod || f.DecisionID != d.old.DecisionID || f.Tenant != d.tenant || f.Operation != "create" ||
				f.Old.Outcome != "allowed" || f.Old.Reason != d.old.Reason() ||
				f.New == nil || f.New.Outcome != "denied" || f.New.Reason != d.now.Reason() ||
				len(f.Rules) != 1 || f.Rules[0] != "site.queue" || len(f.Masked) != 0 {
				t.Errorf("flip %d: %+v\nwant %s allowed (%q) → denied (%q)", i, f, d.pod, d.old.Reason(), d.now.Reason())
			}
		}
		if fmt.Sprint(r.ByTenant) != fmt.Sprint(byTenant) || fmt.Sprint(r.ByRule) != fmt.Sprint(byRule) {
			t.Errorf("by tenant %v, by rule %v; want %v, %v", r.ByTenant, r.ByRule, byTenant, byRule)
		}
	}

	data := "--policies.data=" + suite.dataFile
	t.Run("the policy directory", func(t *testing.T) {
		checkText(t, runCLI(t, "", "replay", "--policies="+candidate, data, uploads))
		checkJSON(t, runCLI(t, "", "replay", "--policies="+candidate, data, "-o", "json", uploads))
	})
	t.Run("the unchanged policy", func(t *testing.T) {
		want := fmt.Sprintf("%d decisions read, %d re-decided: 0 flipped (0 allowed → denied, 0 denied → allowed, 0 other), %d unchanged\n"+
			"not compared: 1 masked, 0 recorded without a decision, 0 failed\n%s", n, n-1, n-1, maskedSection)
		runCLI(t, "", "replay", data, uploads).check(t, 0, want, readLine)
	})
	t.Run("the masked decision too", func(t *testing.T) {
		// --masked.decide: every pod the live candidate refuses, in the log's order,
		// the masked one marked.
		got := runCLI(t, "", "replay", "--policies="+candidate, data, "--masked.decide", "-o", "json", uploads)
		var r replayReport
		if err := json.Unmarshal([]byte(got.stdout), &r); err != nil || got.code != 1 || r.Replayed != n || len(r.Flipped) != 3 {
			t.Fatalf("exit %d, %v; want 1 and 3 flips of %d re-decided:\n%s\n%s", got.code, err, n, got.stdout, got.stderr)
		}
		var pods []string
		for _, f := range r.Flipped {
			pods = append(pods, fmt.Sprintf("%s/%s masked=%v now=%q", f.Namespace, f.Pod, len(f.Masked) > 0, f.New.Reason))
		}
		want := []string{
			fmt.Sprintf("team-a/a-scavenger masked=false now=%q", replayMessage),
			fmt.Sprintf("project-b/b-scavenger masked=false now=%q", replayMessage),
			fmt.Sprintf("team-a/a-secret-scavenger masked=true now=%q", replayMessage),
		}
		if strings.Join(pods, "\n") != strings.Join(want, "\n") {
			t.Errorf("flips:\n%s\nwant:\n%s", strings.Join(pods, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("the console log with the uploads", func(t *testing.T) {
		// The bridge's stderr: its own log lines skipped, the console's events the
		// uploads' (each counted once).
		got := runCLI(t, "", "replay", "--policies="+candidate, data, recorded.LogPath, uploads)
		before, after, ok := strings.Cut(got.stderr, " lines that are not decision log events skipped, ")
		if got.code != 1 || got.stdout != report || !ok || before == fmt.Sprintf("read %d decisions (0", n) ||
			!strings.HasPrefix(before, fmt.Sprintf("read %d decisions (", n)) || after != fmt.Sprintf("%d seen twice)\n", n) {
			t.Errorf("exit %d, stderr %q; want 1, the log's other lines skipped and %d seen twice; stdout:\n%s\nwant:\n%s", got.code, got.stderr, n, got.stdout, report)
		}
	})

	// The same rule as a bundle revision, layered over the embedded policy.
	bundleFiles := map[string]string{
		"/queue/queue.rego": replayRule,
		"/.manifest":        `{"revision": "queue-rule-1", "roots": ["interlink/site"]}`,
	}
	bundleFile := filepath.Join(dir, "queue-rule-1.tar.gz")
	tarball := writeTarGz(t, bundleFile, bundleFiles)
	t.Run("a bundle file", func(t *testing.T) {
		checkText(t, runCLI(t, "", "replay", "--bundle="+bundleFile, data, uploads))
		checkJSON(t, runCLI(t, "", "replay", "--bundle="+bundleFile, data, "-o", "json", uploads))
	})
	t.Run("a bundle URL", func(t *testing.T) {
		var served int
		var mu sync.Mutex
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/bundles/queue-rule-1.tar.gz" {
				http.NotFound(w, r)
				return
			}
			mu.Lock()
			served++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/gzip")
			_, _ = w.Write(tarball)
		}))
		defer srv.Close()
		url := srv.URL + "/bundles/queue-rule-1.tar.gz"
		checkText(t, runCLI(t, "", "replay", "--bundle="+url, data, uploads))
		mu.Lock()
		defer mu.Unlock()
		if served != 1 {
			t.Errorf("the bundle was served %d times, want 1", served)
		}
	})
}

// TestPolicyTestCommand: `sar-bridge test` on a site's rule with a Rego test and two
// samples: a wrong expected message fails with the diff and exit 1, a wrong expected
// answer and a failing Rego test with theirs, the corrected directory passes, exit 0.
func TestPolicyTestCommand(t *testing.T) {
	const (
		wrongMessage = "the scavenger queue is closed: use another queue"
		message      = "the scavenger queue is closed: label the pod with another example.org/queue"
		regoTest     = `package interlink.site.queue_test

import data.interlink.site.queue

test_scavenger_refused if {
	count(queue.violations) == 1 with input as {"operation": "create", "pod": {"metadata": {"labels": {"example.org/queue": "scavenger"}}}}
}

test_delete_not_refused if {
	count(queue.violations) == %d with input as {"operation": "delete", "pod": {"metadata": {"labels": {"example.org/queue": "scavenger"}}}}
}
`
		sample = `description: a team-a pod in the %s queue
pod:
  apiVersion: v1
  kind: Pod
  metadata: {name: train, namespace: team-a, labels: {example.org/queue: %[1]s}}
  spec:
    serviceAccountName: runner
    containers:
      - {name: main, image: busybox}
want:
  allowed: %t
  violations: %s
`
	)
	// site writes a site directory: the rule, rule.json, the Rego test (deleteWant: the
	// count of violations it expects of a delete) and the samples' expectations.
	site := func(name string, deleteWant int, scavengerWant string, batchAllowed bool) string {
		dir := filepath.Join(testWorkDir(t), name)
		writeFile(t, filepath.Join(dir, "queue.rego"), replayRule)
		writeFile(t, filepath.Join(dir, "queue_test.rego"), fmt.Sprintf(regoTest, deleteWant))
		writeFile(t, filepath.Join(dir, "rule.json"), `{"violations": "data.interlink.site.queue.violations"}`)
		writeFile(t, filepath.Join(dir, "samples", "deny-scavenger.yaml"), fmt.Sprintf(sample, "scavenger", false, "['"+scavengerWant+"']"))
		writeFile(t, filepath.Join(dir, "samples", "allow-batch.yaml"), fmt.Sprintf(sample, "batch", batchAllowed, "[]"))
		return dir
	}
	const batchReason = `"RBAC: allowed by RoleBinding \"team-a/runner\" of ClusterRole \"interlink-pods\""`
	for _, c := range []struct {
		name          string
		deleteWant    int
		scavengerWant string
		batchAllowed  bool
		code          int
		stdout        string // %[1]s: the directory
	}{
		{"a wrong message", 0, wrongMessage, true, 1, `--- FAIL: samples/deny-scavenger.yaml (a team-a pod in the scavenger queue)
    violations of data.interlink.site.queue.violations (- want, + got):
    - "` + wrongMessage + `"
    + "` + message + `"
FAIL	%[1]s	Rego tests: 2 passed of 2; samples: 1 passed of 2
`},
		{"a wrong answer and a failing Rego test", 1, message, false, 1, `--- FAIL: data.interlink.site.queue_test.test_delete_not_refused (%[1]s/queue_test.rego:9)
--- FAIL: samples/allow-batch.yaml (a team-a pod in the batch queue)
    allowed: got true, want false
    reason: ` + batchReason + `
FAIL	%[1]s	Rego tests: 1 passed of 2; samples: 1 passed of 2
`},
		{"corrected", 0, message, true, 0, "ok\t%[1]s\tRego tests: 2 passed of 2; samples: 2 passed of 2\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := site(strings.ReplaceAll(c.name, " ", "-"), c.deleteWant, c.scavengerWant, c.batchAllowed)
			runCLI(t, "", "test", dir).check(t, c.code, fmt.Sprintf(c.stdout, dir), "")
		})
	}
}
