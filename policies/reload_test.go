package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/hotreload/hotreloadtest"
)

// replaceFile writes content to dir/name through a rename, as editors and
// configuration tools do, so that the watch never reads a half-written file.
func replaceFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	tmp := writeFile(t, dir, "."+name+".tmp", content)
	p := filepath.Join(dir, name)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	return p
}

type reloadFixture struct {
	r    *Reloader
	reg  *prometheus.Registry
	logs *hotreloadtest.SyncBuffer
	dir  string
	data string
}

func newReloadFixture(t *testing.T, files map[string]string, data string) *reloadFixture {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		writeFile(t, dir, name, content)
	}
	dataFile := writeFile(t, t.TempDir(), "data.yaml", data)
	ctx, cancel := context.WithCancel(context.Background())
	f := &reloadFixture{reg: prometheus.NewRegistry(), logs: &hotreloadtest.SyncBuffer{}, dir: dir, data: dataFile}
	r, err := NewReloader(ctx, ReloaderOptions{
		Options:  Options{Dir: dir, DataFile: dataFile},
		Interval: 10 * time.Millisecond,
		Logger:   log.NewLogfmtLogger(f.logs), Registerer: f.reg,
	})
	if err != nil {
		cancel()
		t.Fatalf("NewReloader: %v", err)
	}
	// Stop the watch before the temporary directories go.
	t.Cleanup(func() { cancel(); <-r.v.Done() })
	f.r = r
	return f
}

func (f *reloadFixture) eval(t *testing.T, path ...string) any {
	t.Helper()
	v, defined, err := f.r.Eval(context.Background(), path, map[string]any{})
	if err != nil || !defined {
		t.Fatalf("Eval(%v) = %v, %v, %v", path, v, defined, err)
	}
	return v
}

// waitGeneration polls until Generation reaches want.
func (f *reloadFixture) waitGeneration(t *testing.T, want uint64) {
	t.Helper()
	hotreloadtest.WaitFor(t, fmt.Sprintf("generation %d", want), func() bool { return f.r.Generation() >= want }, f.logs)
	if got := f.r.Generation(); got != want {
		t.Fatalf("generation = %d, want %d", got, want)
	}
}

// waitFailures polls until the failure counter reaches want.
func (f *reloadFixture) waitFailures(t *testing.T, want float64) {
	t.Helper()
	hotreloadtest.WaitFor(t, fmt.Sprintf("%v failures", want), func() bool { return hotreloadtest.Failures(f.r.v) >= want }, f.logs)
}

func (f *reloadFixture) metrics(t *testing.T, success, failure, last float64) {
	t.Helper()
	hotreloadtest.CheckMetrics(t, f.r.v, success, failure, last)
}

const sitePolicy = `package site

value := data.cfg.value
`

func TestReloaderDataAndPolicyChanges(t *testing.T) {
	f := newReloadFixture(t, map[string]string{"site.rego": sitePolicy}, "cfg:\n  value: one\n")
	if got := f.eval(t, "site", "value"); got != "one" {
		t.Fatalf("value = %v, want one", got)
	}
	f.metrics(t, 0, 0, 1)

	// Data change.
	replaceFile(t, filepath.Dir(f.data), "data.yaml", "cfg:\n  value: two\n")
	f.waitGeneration(t, 1)
	if got := f.eval(t, "site", "value"); got != "two" {
		t.Fatalf("value after data change = %v, want two", got)
	}
	f.metrics(t, 1, 0, 1)

	// A broken policy is rejected: old behaviour, failure counted, file named.
	broken := replaceFile(t, f.dir, "broken.rego", "package broken\n\nx := \n")
	f.waitFailures(t, 1)
	hotreloadtest.Settle()
	if got := f.r.Generation(); got != 1 {
		t.Fatalf("generation after a broken policy = %d, want 1", got)
	}
	if got := f.eval(t, "site", "value"); got != "two" {
		t.Fatalf("value after a broken policy = %v, want two", got)
	}
	f.metrics(t, 1, 1, 0) // reported once, not every interval
	if logs := f.logs.String(); !strings.Contains(logs, "level=error") || !strings.Contains(logs, broken) {
		t.Errorf("no error line naming %s in logs:\n%s", broken, logs)
	}

	// A compile error (parses, does not compile) is rejected as well.
	replaceFile(t, f.dir, "broken.rego", "package broken\n\nx := y\n")
	f.waitFailures(t, 2)
	hotreloadtest.Settle()
	f.metrics(t, 1, 2, 0)

	// Fixing it reloads.
	replaceFile(t, f.dir, "broken.rego", "package broken\n\nx := 1\n")
	f.waitGeneration(t, 2)
	if got := f.eval(t, "broken", "x"); got != json.Number("1") {
		t.Fatalf("broken.x = %v, want 1", got)
	}
	f.metrics(t, 2, 2, 1)

	// A broken data file is rejected; the old data keeps serving.
	replaceFile(t, filepath.Dir(f.data), "data.yaml", "cfg: [unclosed\n")
	f.waitFailures(t, 3)
	hotreloadtest.Settle()
	if got := f.eval(t, "site", "value"); got != "two" || f.r.Generation() != 2 {
		t.Fatalf("value after broken data = %v (generation %d), want two (2)", got, f.r.Generation())
	}
	if logs := f.logs.String(); !strings.Contains(logs, f.data) {
		t.Errorf("no error line naming %s in logs:\n%s", f.data, logs)
	}
	// Data that is not an object is rejected too.
	replaceFile(t, filepath.Dir(f.data), "data.yaml", "- a\n- b\n")
	f.waitFailures(t, 4)

	// Reverting to the serving content clears the failure without a reload.
	replaceFile(t, filepath.Dir(f.data), "data.yaml", "cfg:\n  value: two\n")
	hotreloadtest.WaitFor(t, "last_reload_success 1 after reverting the data file", func() bool { return hotreloadtest.LastSuccess(f.r.v) == 1 }, f.logs)
	f.metrics(t, 2, 4, 1)
	if f.r.Generation() != 2 {
		t.Errorf("generation = %d after a revert, want 2", f.r.Generation())
	}
}

func TestReloaderDefaultPolicyDecisionFollowsData(t *testing.T) {
	limits := func(cpu string) string {
		return "interlink:\n  limits:\n    system:serviceaccounts:team-a:\n      cpu: \"" + cpu + "\"\n"
	}
	f := newReloadFixture(t, nil, limits("4"))
	path := []string{"interlink", "authz", "decision"}
	in := testInput(t, setContainerCPU("2"))
	decide := func() any {
		t.Helper()
		v, _, err := f.r.Eval(context.Background(), path, in)
		if err != nil {
			t.Fatal(err)
		}
		return v.(map[string]any)["allowed"]
	}
	if decide() != true {
		t.Fatal("cpu 2 under a cap of 4 denied")
	}
	replaceFile(t, filepath.Dir(f.data), "data.yaml", limits("1"))
	f.waitGeneration(t, 1)
	if decide() != false {
		t.Fatal("cpu 2 over a reloaded cap of 1 allowed")
	}
}

func TestReloaderRejectsLosingTheDecision(t *testing.T) {
	f := newReloadFixture(t, nil, "{}")
	// Replacing the embedded authz.rego by a package without decision compiles,
	// but would leave every caller with an undefined document.
	replaceFile(t, f.dir, "authz.rego", "package interlink.authz\n\nsomething_else := true\n")
	f.waitFailures(t, 1)
	hotreloadtest.Settle()
	if f.r.Generation() != 0 {
		t.Fatal("a policy without decision was swapped in")
	}
	if v := f.eval(t, "interlink", "authz", "decision"); v.(map[string]any)["allowed"] != false {
		t.Errorf("decision = %v", v)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "no longer defines data.interlink.authz.decision") {
		t.Errorf("logs do not say why:\n%s", logs)
	}
	// A replacement that still defines both documents is accepted.
	replaceFile(t, f.dir, "authz.rego", "package interlink.authz\n\ndefault allow := false\n\ndecision := {\"allowed\": allow, \"site\": true}\n")
	f.waitGeneration(t, 1)
	if v := f.eval(t, "interlink", "authz", "decision"); v.(map[string]any)["site"] != true {
		t.Errorf("decision = %v", v)
	}
}

func TestReloaderConfigMapSwap(t *testing.T) {
	root := t.TempDir()
	version := func(name, value string) {
		t.Helper()
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, d, "site.rego", sitePolicy)
		writeFile(t, d, "data.yaml", "cfg:\n  value: "+value+"\n")
	}
	swap := func(target string) {
		t.Helper()
		tmp := filepath.Join(root, "..data_tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(root, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "one")
	swap("..v1")
	for _, name := range []string{"site.rego", "data.yaml"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := NewReloader(ctx, ReloaderOptions{Options: Options{Dir: root, DataFile: filepath.Join(root, "data.yaml")}, Interval: 10 * time.Millisecond})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-r.v.Done() })
	f := &reloadFixture{r: r, logs: &hotreloadtest.SyncBuffer{}}
	if got := f.eval(t, "site", "value"); got != "one" {
		t.Fatalf("value = %v", got)
	}
	version("..v2", "two")
	swap("..v2")
	f.waitGeneration(t, 1)
	if got := f.eval(t, "site", "value"); got != "two" {
		t.Fatalf("value after swap = %v", got)
	}
}

func TestNewReloaderInitialErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "bad.rego", "package bad\n\nx := \n")
	_, err := NewReloader(context.Background(), ReloaderOptions{Options: Options{Dir: dir}})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "bad.rego")) {
		t.Errorf("broken policy: err = %v, want one naming the file", err)
	}
	_, err = NewReloader(context.Background(), ReloaderOptions{Options: Options{DataFile: filepath.Join(dir, "missing.json")}})
	if err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing data: err = %v", err)
	}
}

func TestReloaderEmbeddedOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	r, err := NewReloader(context.Background(), ReloaderOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	<-r.v.Done() // nothing to watch: no goroutine is left behind
	v, defined, err := r.Eval(context.Background(), []string{"interlink", "authz", "allow"}, map[string]any{})
	if err != nil || !defined || v != false {
		t.Fatalf("allow = %v %v %v", v, defined, err)
	}
	want := `
# HELP sar_bridge_policy_last_reload_success 1 when the policy files last seen were loaded, 0 when they were rejected and an older policy is serving.
# TYPE sar_bridge_policy_last_reload_success gauge
sar_bridge_policy_last_reload_success 1
# HELP sar_bridge_policy_reloads_total Policy reloads after a change of the policy files or an OPA bundle, by result (success, failure).
# TYPE sar_bridge_policy_reloads_total counter
sar_bridge_policy_reloads_total{result="failure"} 0
sar_bridge_policy_reloads_total{result="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
