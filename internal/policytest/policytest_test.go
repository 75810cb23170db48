package policytest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A site rule that reads the cluster through k8s.list: at most two running pods per
// app label in a namespace.
const busyRule = `package interlink.site.busy

violations contains msg if {
	app := input.pod.metadata.labels.app
	running := k8s.list("pods", input.pod.metadata.namespace, sprintf("app=%s", [app]))
	count(running) >= 2
	msg := sprintf("app %q already runs %d pods in %s", [app, count(running), input.pod.metadata.namespace])
}
`

const busyTest = `package interlink.site.busy_test

import data.interlink.site.busy

test_two_running if {
	count(busy.violations) == 1 with input as {"pod": {"metadata": {"namespace": "team-a", "labels": {"app": "trainer"}}}}
}

test_other_namespace if {
	count(busy.violations) == 0 with input as {"pod": {"metadata": {"namespace": "team-b", "labels": {"app": "trainer"}}}}
}
`

const snapshot = `pods:
  - {metadata: {name: a, namespace: team-a, labels: {app: trainer}}}
  - {metadata: {name: b, namespace: team-a, labels: {app: trainer}}}
  - {metadata: {name: c, namespace: team-b, labels: {app: trainer}}}
configmaps:
  apiVersion: v1
  kind: List
  items: []
`

// The base input's pod is team-a's, labelled app: trainer.
const busySample = `description: a third trainer pod in team-a
want:
  allowed: false
  violations: ['app "trainer" already runs 2 pods in team-a']
`

const quietSample = `description: the pod in team-b, where one trainer runs
input_patch:
  pod: {metadata: {namespace: team-b}}
  namespace: {name: team-b}
want:
  allowed: true
  violations: []
`

func run(t *testing.T, dir, snapshotFile string) (Summary, string, error) {
	t.Helper()
	snap, err := ReadSnapshot(snapshotFile)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s, err := Run(context.Background(), Options{Dir: dir, Snapshot: snap, Verbose: true, Out: &out})
	return s, out.String(), err
}

// TestRun: a site directory's Rego tests and samples with k8s.list over a snapshot, and
// a wrong expectation shown as a diff.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"busy.rego":                         busyRule,
		"busy_test.rego":                    busyTest,
		"rule.json":                         `{"violations": "data.interlink.site.busy.violations"}`,
		"samples/deny-third-trainer.yaml":   busySample,
		"samples/allow-other-namespace.yml": quietSample,
	})
	snap := filepath.Join(t.TempDir(), "cluster.yaml")
	write(t, filepath.Dir(snap), map[string]string{"cluster.yaml": snapshot})

	s, out, err := run(t, dir, snap)
	if err != nil || s.Failed() || s.Tests != 2 || s.Samples != 2 {
		t.Fatalf("summary %+v, err %v:\n%s", s, err, out)
	}
	for _, want := range []string{"--- PASS: data.interlink.site.busy_test.test_two_running\n", "--- PASS: samples/deny-third-trainer.yaml\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// Without the snapshot the built-in fails: the tests and the denying sample fail,
	// never pass by accident.
	s, out, err = run(t, dir, "")
	if err != nil || s.TestsFailed != 2 || s.SamplesFailed != 2 {
		t.Fatalf("without a snapshot: summary %+v, err %v:\n%s", s, err, out)
	}
	if !strings.Contains(out, `resource \"pods\" is not in the cluster snapshot`) && !strings.Contains(out, `resource "pods" is not in the cluster snapshot`) {
		t.Errorf("the failure does not say the snapshot lacks pods:\n%s", out)
	}

	// A wrong expected answer: the diff names both sides.
	write(t, dir, map[string]string{"samples/deny-third-trainer.yaml": strings.Replace(busySample, "runs 2 pods", "runs 3 pods", 1)})
	s, out, err = run(t, dir, snap)
	if err != nil || s.SamplesFailed != 1 {
		t.Fatalf("a wrong expectation: summary %+v, err %v:\n%s", s, err, out)
	}
	for _, want := range []string{
		"--- FAIL: samples/deny-third-trainer.yaml (a third trainer pod in team-a)\n",
		"    violations of data.interlink.site.busy.violations (- want, + got):\n",
		`    - "app \"trainer\" already runs 3 pods in team-a"` + "\n",
		`    + "app \"trainer\" already runs 2 pods in team-a"` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// A misspelt member is an error, not a sample that checks nothing.
	write(t, dir, map[string]string{"samples/deny-third-trainer.yaml": strings.Replace(busySample, "want:", "wants:", 1)})
	if _, _, err := run(t, dir, snap); err == nil || !strings.Contains(err.Error(), "wants") {
		t.Errorf("a misspelt member: err %v", err)
	}
}

// TestBuiltinSamples: the built-in rules' samples and the site examples of docs/policies.md
// pass as the bridge decides them.
func TestBuiltinSamples(t *testing.T) {
	for _, dir := range []string{"../../policies/rules", "../../policies/examples/site-extension", "../../policies/examples/site-own-package", "../../policies/examples/replace-authz"} {
		s, out, err := run(t, dir, "")
		if err != nil || s.Failed() || s.Samples == 0 {
			t.Errorf("%s: summary %+v, err %v:\n%s", dir, s, err, out)
		}
	}
}

// TestEachRuleDirectoryAlone: a built-in rule's directory runs its own Rego tests and
// samples, its tests' shared fixtures loaded from the embedded suite (whose own tests
// are not run again).
func TestEachRuleDirectoryAlone(t *testing.T) {
	entries, err := os.ReadDir("../../policies/rules")
	if err != nil {
		t.Fatal(err)
	}
	dirs := 0
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "samples" {
			continue
		}
		dirs++
		dir := filepath.Join("../../policies/rules", e.Name())
		s, out, err := run(t, dir, "")
		if err != nil || s.Failed() || s.Tests == 0 || s.Samples == 0 {
			t.Errorf("%s: summary %+v, err %v:\n%s", dir, s, err, out)
		}
	}
	if dirs < 9 {
		t.Errorf("%d rule directories, want the 9 built-in rules at least", dirs)
	}
}
