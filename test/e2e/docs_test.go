package e2e

// The docs cannot drift: every fenced block of README.md and docs/ runs here, against
// the suite's cluster, with the real binary, kubectl, helm and opa (test/docs parses and
// classifies them; a block it cannot classify fails there and here).
//
//   - ```sh: run with bash -euo pipefail in the page's directory; it must succeed.
//   - ```console: each `$ ` line runs; the lines after it are its exact output (stdout
//     and stderr), a line ending in " …" matching any line that starts with the rest.
//   - ```yaml of Kubernetes objects: applied as a server-side dry run.
//   - policy data (```yaml or ```json whose key is interlink): loaded by
//     `sar-bridge check --policies.data`; ```rego: loaded by `sar-bridge check --policies`.
//   - file=NAME blocks are written to the page's directory for its later commands.
//
// The docs speak to a cluster of their own: `kubectl create namespace sar-bridge`,
// `kubectl apply -k manifests/base`. On the shared cluster every kubectl command that
// writes runs as a server-side dry run (a create of a named object as its client-side
// rendering applied as one, so that an object the suite already has is validated
// rather than refused), and `helm install`/`upgrade` is `helm template` applied the
// same way: the API server validates and admits every object, nothing changes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/test/cluster"
	"github.com/sar-bridge/sar-bridge/test/docs"
)

// kubectlWrapper turns the docs' writes into server-side dry runs (see above).
const kubectlWrapper = `#!/bin/bash
set -euo pipefail
real=%q
args=("$@")
i=0
verb=""
while [ "$i" -lt "${#args[@]}" ]; do
  case "${args[$i]}" in
    -n|--namespace|--context|--kubeconfig|--as|--as-group) i=$((i+2)) ;;
    -*) i=$((i+1)) ;;
    *) verb=${args[$i]}; break ;;
  esac
done
sub=${args[$((i+1))]:-}
case "$verb" in
  create)
    case "$sub" in
      token) echo "docs test: kubectl create token would need a ServiceAccount the docs create only as a dry run" >&2; exit 1 ;;
      -f|--filename|--filename=*|-k|--kustomize|--kustomize=*) exec "$real" "$@" --dry-run=server ;;
    esac
    if [ -n "${DOCS_TEST_CONSOLE:-}" ]; then exec "$real" "$@" --dry-run=server; fi
    "$real" "$@" --dry-run=client -o yaml | "$real" apply --dry-run=server -f -
    ;;
  apply|delete|patch|label|annotate|replace|scale|set|taint|edit)
    exec "$real" "$@" --dry-run=server ;;
  *) exec "$real" "$@" ;;
esac
`

// helmWrapper renders what `helm install`/`upgrade` would install and applies it as a
// server-side dry run.
const helmWrapper = `#!/bin/bash
set -euo pipefail
real=%q
case "${1:-}" in
  install|upgrade)
    shift
    args=()
    for a in "$@"; do
      case "$a" in --create-namespace|--install|--wait|--atomic) ;; *) args+=("$a") ;; esac
    done
    "$real" template "${args[@]}" | kubectl apply -f -
    ;;
  *) exec "$real" "$@" ;;
esac
`

// docsPod is the pod policy data and Rego blocks are checked against.
const docsPod = `apiVersion: v1
kind: Pod
metadata: {name: docs-check, namespace: team-a}
spec:
  serviceAccountName: runner
  containers:
    - {name: main, image: busybox, resources: {limits: {cpu: "1", memory: 1Gi}}}
`

func TestDocs(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pages, err := docs.ParseAll(suite.root)
	if err != nil {
		t.Fatal(err)
	}

	tools := t.TempDir()
	kubectl, err := cluster.KubectlBinary(ctx, suite.root)
	if err != nil {
		t.Fatal(err)
	}
	helm, err := cluster.HelmBinary(ctx, suite.root)
	if err != nil {
		t.Fatal(err)
	}
	opa, err := cluster.OPABinary(ctx, suite.root)
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"kubectl": fmt.Sprintf(kubectlWrapper, kubectl),
		"helm":    fmt.Sprintf(helmWrapper, helm),
	} {
		if err := os.WriteFile(filepath.Join(tools, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"sar-bridge": suite.binary, "opa": opa} {
		if err := os.Symlink(target, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(tools, "admin.kubeconfig")
	if err := suite.cluster.WriteAdminKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + tools + ":/usr/local/bin:/usr/bin:/bin",
		"KUBECONFIG=" + kubeconfig,
		"LANG=C.UTF-8",
	}

	files := make([]string, 0, len(pages))
	for f := range pages {
		files = append(files, f)
	}
	var ran, skipped int
	sort.Strings(files)
	for _, f := range files {
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
			dir := pageDir(t, suite.root)
			penv := append(env, "HOME="+dir)
			for _, b := range pages[f] {
				kind, err := docs.Classify(b)
				if err != nil {
					t.Error(err)
					continue
				}
				switch kind {
				case docs.Skipped:
					skipped++
					t.Logf("%s: skipped: %s", b.Where(), b.Skip)
					continue
				case docs.Text, docs.JSON:
					continue // Classify parsed them; nothing to run
				}
				ran++
				if err := runBlock(ctx, b, kind, dir, penv); err != nil {
					t.Errorf("%s (```%s): %v", b.Where(), b.Lang, err)
				}
			}
		})
	}
	t.Logf("docs: %d blocks run or applied, %d marked skipped, in %s", ran, skipped, time.Since(start).Round(time.Millisecond))
}

// pageDir is a fresh directory for one page's commands, holding copies of what they
// name relative to a clone (manifests/, charts/, policies/rego/, policies/rules/).
func pageDir(t *testing.T, root string) string {
	dir := t.TempDir()
	for _, p := range []string{"manifests", "charts", "policies/rego", "policies/rules", "deploy"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", filepath.Join(root, p), filepath.Join(dir, p)).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v\n%s", p, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".docs-pod.yaml"), []byte(docsPod), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runBlock(ctx context.Context, b docs.Block, kind docs.Kind, dir string, env []string) error {
	switch kind {
	case docs.File:
		p := filepath.Join(dir, b.Attrs["file"])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(b.Text), 0o644)
	case docs.Manifest:
		f, err := writeTemp(dir, "manifest-*.yaml", b.Text)
		if err != nil {
			return err
		}
		_, err = runScript(ctx, dir, env, "kubectl apply -f "+f)
		return err
	case docs.PolicyData:
		ext := ".yaml"
		if b.Lang == "json" {
			ext = ".json"
		}
		f, err := writeTemp(dir, "data-*"+ext, b.Text)
		if err != nil {
			return err
		}
		return checkLoads(ctx, dir, env, "--policies.data "+f)
	case docs.Rego:
		pdir, err := os.MkdirTemp(dir, "rego-")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(pdir, "block.rego"), []byte(b.Text), 0o644); err != nil {
			return err
		}
		return checkLoads(ctx, dir, env, "--policies "+pdir)
	case docs.Commands:
		if b.Lang == "console" {
			return runConsole(ctx, b.Text, dir, env)
		}
		_, err := runScript(ctx, dir, env, b.Text)
		return err
	}
	return fmt.Errorf("no way to run a %s block", kind)
}

// checkLoads decides the docs pod with sar-bridge check and the flags: a decision
// either way (exit 0 or 1) means the policy or data loaded; 2 is an error.
func checkLoads(ctx context.Context, dir string, env []string, flags string) error {
	out, err := runScript(ctx, dir, env, "sar-bridge check --openshift.mappings team-a=interlink.io "+flags+" -f .docs-pod.yaml")
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		return fmt.Errorf("sar-bridge check did not load it: %v\n%s", err, out)
	}
	return nil
}

// runConsole runs each `$ ` line and compares what it prints with the lines shown
// after it. The exit status is not checked: a console block shows refusals too.
func runConsole(ctx context.Context, text, dir string, env []string) error {
	type step struct {
		cmd  string
		want []string
	}
	var steps []step
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, step{cmd: c})
			continue
		}
		steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
	}
	for _, s := range steps {
		out, err := runScript(ctx, dir, append(env, "DOCS_TEST_CONSOLE=1"), s.cmd)
		if err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				return err
			}
		}
		got := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if out == "" {
			got = nil
		}
		if !linesMatch(got, s.want) {
			return fmt.Errorf("$ %s\nprinted:\n%s\nthe docs show:\n%s", s.cmd, strings.Join(got, "\n"), strings.Join(s.want, "\n"))
		}
	}
	return nil
}

// linesMatch: equal lines, except that a wanted line ending in " …" matches any line
// that starts with the rest.
func linesMatch(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if prefix, ok := strings.CutSuffix(want[i], " …"); ok {
			if !strings.HasPrefix(got[i], prefix) {
				return false
			}
		} else if got[i] != want[i] {
			return false
		}
	}
	return true
}

// runScript runs script with bash in dir and returns stdout and stderr together.
func runScript(ctx context.Context, dir string, env []string, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", err, ctx.Err())
	}
	if err != nil {
		return out.String(), fmt.Errorf("%w\n%s", err, out.String())
	}
	return out.String(), nil
}

func writeTemp(dir, pattern, text string) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}
