package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestCommand: sar-bridge test passes on the built-in rules' samples and the site
// examples, and fails with the diff and exit 1 on a wrong expected answer.
func TestTestCommand(t *testing.T) {
	wrong := t.TempDir()
	for _, f := range []string{"gpu.rego", "rule.json"} {
		b, err := os.ReadFile(filepath.Join("../../policies/examples/site-extension", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wrong, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(wrong, "samples"), 0o700); err != nil {
		t.Fatal(err)
	}
	sample := `{"description": "a GPU pod without its project, expected through",
  "input_patch": {"pod": {"spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
  "want": {"allowed": true}}`
	if err := os.WriteFile(filepath.Join(wrong, "samples", "allow-gpu.json"), []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout []string
	}{
		{"built-in samples", []string{"../../policies/rules"}, 0, []string{"ok\t../../policies/rules\tRego tests: 0 passed of 0; samples: "}},
		{"site examples", []string{"../../policies/examples/site-extension", "../../policies/examples/site-own-package"}, 0,
			[]string{"ok\t../../policies/examples/site-extension\tRego tests: 2 passed of 2; samples: 3 passed of 3"}},
		{"a wrong expectation", []string{wrong}, 1, []string{
			"--- FAIL: samples/allow-gpu.json (a GPU pod without its project, expected through)\n",
			"    allowed: got false, want true\n",
			`    reason: "container \"main\" asks for GPUs: label the pod with example.org/project"` + "\n",
			"FAIL\t" + wrong + "\tRego tests: 0 passed of 0; samples: 0 passed of 1\n"}},
		{"no directory", nil, 2, nil},
		{"a missing directory", []string{filepath.Join(wrong, "missing")}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Test(tc.args, nil, &stdout, &stderr)
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
