package app

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/policies"
)

const sampleData = "../../policies/rules/samples/base_data.json"

// replayEvent is an event of the embedded policy's decision of the sample pod with
// containers, as the decision log writes it.
func replayEvent(t *testing.T, id, containers string) []byte {
	t.Helper()
	raw, err := os.ReadFile("../../policies/rules/samples/base_input.json")
	if err != nil {
		t.Fatal(err)
	}
	in := ast.MustParseTerm(string(raw)).Value.(ast.Object)
	pod := in.Get(ast.StringTerm("pod")).Value.(ast.Object)
	pod.Get(ast.StringTerm("spec")).Value.(ast.Object).Insert(ast.StringTerm("containers"), ast.MustParseTerm(containers))
	for _, m := range policies.DeriveFromPod(pod).Members() {
		in.Insert(m[0], m[1])
	}
	in.Insert(ast.StringTerm("hpc"), ast.NewTerm(policies.PodHPC(pod)))
	e, err := policies.New(context.Background(), policies.Options{DataFile: sampleData})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.EvalValue(context.Background(), []string{"interlink", "authz", "decision"}, in, policies.Memo{})
	if err != nil {
		t.Fatal(err)
	}
	input, _ := ast.JSON(in)
	result, _ := ast.JSON(res.Value)
	line, err := json.Marshal(map[string]any{"decision_id": id, "path": "interlink/authz/decision", "input": input, "result": result,
		"level": "info", "msg": "Decision Log", "type": "openpolicyagent.org/decision_logs"})
	if err != nil {
		t.Fatal(err)
	}
	return append(line, '\n')
}

// TestReplayCommand: replay's exit status says whether the candidate flips a decision,
// whether the candidate comes as --policies or as a bundle directory.
func TestReplayCommand(t *testing.T) {
	const gpuPod = `[{"name": "main", "image": "ghcr.io/example/trainer:1.4", "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]`
	const plainPod = `[{"name": "main", "image": "ghcr.io/example/trainer:1.4", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]`
	dir := t.TempDir()
	logs := filepath.Join(dir, "decisions.log")
	content := append([]byte("ts=2026-01-01T00:00:00Z level=info msg=\"serving\"\n"), replayEvent(t, "gpu", gpuPod)...)
	content = append(content, replayEvent(t, "plain", plainPod)...)
	if err := os.WriteFile(logs, content, 0o600); err != nil {
		t.Fatal(err)
	}
	plainOnly := filepath.Join(dir, "plain.log")
	if err := os.WriteFile(plainOnly, replayEvent(t, "plain", plainPod), 0o600); err != nil {
		t.Fatal(err)
	}
	site := "../../policies/examples/site-extension"
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout []string
	}{
		{"a flip", []string{"--policies", site, "--policies.data", sampleData, logs}, "", 1, []string{
			"2 decisions read, 2 re-decided: 1 flipped (1 allowed → denied, 0 denied → allowed, 0 other), 1 unchanged",
			"team-a/job-7f9c (tenant tenant-a, create, decision gpu): allowed → denied",
			`now: site.gpu: container "main" asks for GPUs: label the pod with example.org/project`}},
		{"no flip", []string{"--policies", site, "--policies.data", sampleData, plainOnly}, "", 0, []string{"1 decisions read, 1 re-decided: 0 flipped"}},
		{"the embedded policy flips nothing", []string{"--policies.data", sampleData, logs}, "", 0, []string{"0 flipped"}},
		{"a bundle directory", []string{"--bundle", site, "--policies.data", sampleData, "-o", "json", "-"}, string(content), 1, []string{`"allowed_to_denied": 1`}},
		{"an unreadable log", []string{filepath.Join(dir, "missing.log")}, "", 2, nil},
		{"an unknown output", []string{"-o", "yaml", logs}, "", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Replay(tc.args, strings.NewReader(tc.stdin), &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
		})
	}
}
