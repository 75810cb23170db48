package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/open-policy-agent/opa/v1/ast"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

const reviewReason = `RBAC: allowed by RoleBinding "team-a/runner"`

// testInput mirrors what the HTTP layer passes: decoded JSON.
func testInput(t testing.TB, mutate func(map[string]any)) map[string]any {
	t.Helper()
	const raw = `{
	  "operation": "create",
	  "pod": {"apiVersion": "v1", "kind": "Pod",
	          "metadata": {"name": "p", "namespace": "team-a"},
	          "spec": {"containers": [{"name": "main", "image": "busybox",
	                   "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}]}},
	  "subject": {"username": "system:serviceaccount:team-a:runner", "uid": "",
	              "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"], "extra": {}},
	  "tenant": "tenant-a",
	  "tenant_label": "interlink.io/tenant",
	  "group": "interlink.io",
	  "namespace": {"name": "team-a", "labels": {"interlink.io/billing-project": "proj-1"}, "annotations": {}},
	  "node": {"name": "vk-a", "found": true, "labels": {"interlink.io/tenant": "tenant-a"}, "taints": [],
	           "allocatable": {"cpu": "8", "memory": "32Gi"}},
	  "review": {"allowed": true, "denied": false, "reason": "RBAC: allowed by RoleBinding \"team-a/runner\"",
	             "attributes": [{"namespace": "team-a", "verb": "create", "group": "interlink.io", "resource": "pods", "name": ""}]}
	}`
	var in map[string]any
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(in)
	}
	if _, set := in["hpc"]; !set {
		in["hpc"] = hpcOf(t, in["pod"])
	}
	return in
}

// hpcOf is input.hpc of a decoded pod, as the bridge adds it.
func hpcOf(t testing.TB, pod any) any {
	t.Helper()
	v, err := ast.InterfaceToValue(pod)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ast.JSON(PodHPC(v))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func setContainerCPU(cpu string) func(map[string]any) {
	return func(in map[string]any) {
		c := in["pod"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		c["resources"].(map[string]any)["limits"].(map[string]any)["cpu"] = cpu
	}
}

func newEvaluator(t testing.TB, opts Options) *Evaluator {
	t.Helper()
	e, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultModules(t *testing.T) {
	mods := DefaultModules()
	if _, ok := mods["authz.rego"]; !ok {
		t.Fatalf("authz.rego missing from %v", keys(mods))
	}
	for name := range mods {
		if strings.HasSuffix(name, "_test.rego") {
			t.Errorf("test file %s served as default module", name)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestEvalDefaultPolicy(t *testing.T) {
	e := newEvaluator(t, Options{})
	tests := []struct {
		name        string
		path        []string
		input       map[string]any
		wantDefined bool
		want        any // compared with reflect.DeepEqual when non-nil
		check       func(t *testing.T, got any)
	}{
		{
			name:        "decision allowed",
			path:        []string{"interlink", "authz", "decision"},
			input:       testInput(t, nil),
			wantDefined: true,
			check: func(t *testing.T, got any) {
				d := got.(map[string]any)
				if d["allowed"] != true || d["reason"] != reviewReason {
					t.Errorf("decision = %v", d)
				}
				mods := d["modifications"].(map[string]any)
				want := map[string]any{"interlink.io/billing-project": "proj-1"}
				if !reflect.DeepEqual(mods["pod_annotations"], want) {
					t.Errorf("pod_annotations = %v", mods["pod_annotations"])
				}
				if _, ok := d["review"].(map[string]any); !ok {
					t.Errorf("review = %#v", d["review"])
				}
			},
		},
		{
			name:        "allow true",
			path:        []string{"interlink", "authz", "allow"},
			input:       testInput(t, nil),
			wantDefined: true,
			want:        true,
		},
		{
			name: "allow false is defined",
			path: []string{"interlink", "authz", "allow"},
			input: testInput(t, func(in map[string]any) {
				in["review"] = map[string]any{"allowed": false, "reason": "RBAC: denied"}
			}),
			wantDefined: true,
			want:        false,
		},
		{
			name: "decision denied by tenant isolation",
			path: []string{"interlink", "authz", "decision"},
			input: testInput(t, func(in map[string]any) {
				in["node"].(map[string]any)["labels"] = map[string]any{"interlink.io/tenant": "tenant-b"}
			}),
			wantDefined: true,
			check: func(t *testing.T, got any) {
				d := got.(map[string]any)
				if d["allowed"] != false || !strings.Contains(d["reason"].(string), `tenant "tenant-b"`) {
					t.Errorf("decision = %v", d)
				}
			},
		},
		{
			name:        "nil input",
			path:        []string{"interlink", "authz", "decision"},
			wantDefined: true,
			check: func(t *testing.T, got any) {
				if got.(map[string]any)["allowed"] != false {
					t.Errorf("decision = %v", got)
				}
			},
		},
		{
			name:        "deny set becomes a JSON array",
			path:        []string{"interlink", "authz", "deny"},
			input:       testInput(t, func(in map[string]any) { in["review"] = map[string]any{"allowed": false, "reason": "no"} }),
			wantDefined: true,
			want:        []any{"no"},
		},
		{name: "unknown rule", path: []string{"interlink", "authz", "nope"}, input: testInput(t, nil)},
		{name: "unknown root", path: []string{"nope"}, input: testInput(t, nil)},
		// Statically undefined refs fail type checking; they must still be
		// plain "undefined" (twice: the second hit comes from the cache).
		{name: "below a value", path: []string{"interlink", "authz", "allow", "x"}, input: testInput(t, nil)},
		{name: "below a value cached", path: []string{"interlink", "authz", "allow", "x"}, input: testInput(t, nil)},
		{name: "unknown decision key", path: []string{"interlink", "authz", "decision", "nope"}, input: testInput(t, nil)},
		{name: "below a string", path: []string{"interlink", "authz", "decision", "reason", "x"}, input: testInput(t, nil)},
		// Segments are string terms, never parsed: these are just names.
		{name: "dotted segment", path: []string{"interlink.authz", "allow"}, input: testInput(t, nil)},
		{name: "dotted tail", path: []string{"interlink", "authz.allow"}, input: testInput(t, nil)},
		{name: "bracket segment", path: []string{"interlink", "authz", `allow]`}, input: testInput(t, nil)},
		{name: "quote injection", path: []string{"interlink", "authz", `allow"]; true; x := data["`}, input: testInput(t, nil)},
		{name: "rule injection", path: []string{"interlink", "authz", "allow\nallow := true"}, input: testInput(t, nil)},
		{name: "wildcard segment", path: []string{"interlink", "authz", "_"}, input: testInput(t, nil)},
		{name: "var-like segment", path: []string{"interlink", "authz", "x", "[_]"}, input: testInput(t, nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, defined, err := e.Eval(context.Background(), tc.path, tc.input)
			if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			if defined != tc.wantDefined {
				t.Fatalf("defined = %v, want %v (result %v)", defined, tc.wantDefined, got)
			}
			if !defined && got != nil {
				t.Errorf("undefined result carries value %v", got)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("result = %#v, want %#v", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			if _, err := json.Marshal(got); err != nil {
				t.Errorf("result not JSON-marshalable: %v", err)
			}
		})
	}
}

func TestEvalPathErrors(t *testing.T) {
	e := newEvaluator(t, Options{})
	for _, path := range [][]string{nil, {}, {""}, {"interlink", ""}, {"interlink", "", "allow"}} {
		if _, _, err := e.Eval(context.Background(), path, nil); err == nil {
			t.Errorf("Eval(%q): want error", path)
		}
	}
}

func TestEvalWholePackage(t *testing.T) {
	e := newEvaluator(t, Options{})
	got, defined, err := e.Eval(context.Background(), []string{"interlink", "authz"}, testInput(t, nil))
	if err != nil || !defined {
		t.Fatalf("Eval = %v, %v, %v", got, defined, err)
	}
	if got.(map[string]any)["allow"] != true {
		t.Errorf("package allow = %v", got.(map[string]any)["allow"])
	}
}

func TestOptionsDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "authz.rego", `package interlink.authz

default allow := true

decision := {"allowed": allow, "custom": true}
`)
	writeFile(t, dir, "extra.rego", `package custom

hello := sprintf("hello %s", [input.name])
`)
	// Ignored: tests and non-Rego files must not be served or even parsed.
	writeFile(t, dir, "broken_test.rego", "package broken\n this is not rego")
	writeFile(t, dir, "notes.txt", "not rego")
	if err := os.Mkdir(filepath.Join(dir, "sub.rego"), 0o700); err != nil {
		t.Fatal(err)
	}

	e := newEvaluator(t, Options{Dir: dir})
	ctx := context.Background()

	got, defined, err := e.Eval(ctx, []string{"interlink", "authz", "decision"}, map[string]any{})
	if err != nil || !defined {
		t.Fatalf("decision: %v %v %v", got, defined, err)
	}
	if want := map[string]any{"allowed": true, "custom": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("replaced decision = %v, want %v", got, want)
	}
	// The embedded rules of the replaced file are gone.
	if _, defined, _ := e.Eval(ctx, []string{"interlink", "authz", "deny"}, nil); defined {
		t.Error("embedded deny still defined after replacing authz.rego")
	}
	got, defined, err = e.Eval(ctx, []string{"custom", "hello"}, map[string]any{"name": "bob"})
	if err != nil || !defined || got != "hello bob" {
		t.Errorf("custom.hello = %v %v %v", got, defined, err)
	}
}

func TestEvalRuntimeErrorReturned(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "conflict.rego", `package conflict

x := 1 if input.a
x := 2 if input.b
`)
	e := newEvaluator(t, Options{Dir: dir})
	ctx := context.Background()
	if got, defined, err := e.Eval(ctx, []string{"conflict", "x"}, map[string]any{"a": true}); err != nil || !defined || got != json.Number("1") {
		t.Fatalf("x = %v %v %v", got, defined, err)
	}
	if _, defined, err := e.Eval(ctx, []string{"conflict", "x"}, map[string]any{"a": true, "b": true}); err == nil || defined {
		t.Fatalf("conflict: defined=%v err=%v, want error", defined, err)
	}
}

func TestOptionsDirExtendsDefaults(t *testing.T) {
	dir := t.TempDir()
	// Same package, new file: adds a rule next to the embedded ones.
	writeFile(t, dir, "site.rego", `package interlink.authz

site_allowed if decision.allowed
`)
	e := newEvaluator(t, Options{Dir: dir})
	got, defined, err := e.Eval(context.Background(), []string{"interlink", "authz", "site_allowed"}, testInput(t, nil))
	if err != nil || !defined || got != true {
		t.Errorf("site_allowed = %v %v %v", got, defined, err)
	}
}

func TestDataFile(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"data.json": `{"interlink": {"limits": {"system:serviceaccounts:team-a": {"cpu": "4", "memory": "8Gi"}},
		  "default_limits": {"cpu": "1", "memory": "1Gi"}}}`,
		"data.yaml": `
interlink:
  limits:
    system:serviceaccounts:team-a:
      cpu: "4"
      memory: 8Gi
  default_limits:
    cpu: "1"
    memory: 1Gi
`,
	}
	for name, content := range files {
		t.Run(name, func(t *testing.T) {
			e := newEvaluator(t, Options{DataFile: writeFile(t, dir, name, content)})
			ctx := context.Background()
			path := []string{"interlink", "authz", "decision"}

			got, _, err := e.Eval(ctx, path, testInput(t, setContainerCPU("3")))
			if err != nil || got.(map[string]any)["allowed"] != true {
				t.Fatalf("under cap: %v %v", got, err)
			}
			got, _, err = e.Eval(ctx, path, testInput(t, setContainerCPU("5")))
			if err != nil {
				t.Fatal(err)
			}
			d := got.(map[string]any)
			want := `container "main" sets cpu limit 5 over the cap 4 for group "system:serviceaccounts:team-a"`
			if d["allowed"] != false || d["reason"] != want {
				t.Errorf("over cap: %v", d)
			}

			in := testInput(t, func(in map[string]any) {
				c := in["pod"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
				delete(c, "resources")
			})
			got, _, err = e.Eval(ctx, []string{"interlink", "authz", "decision", "modifications", "resource_limits"}, in)
			if err != nil {
				t.Fatal(err)
			}
			wantLimits := map[string]any{"main": map[string]any{"cpu": "1", "memory": "1Gi"}}
			if !reflect.DeepEqual(got, wantLimits) {
				t.Errorf("resource_limits = %v", got)
			}

			got, defined, err := e.Eval(ctx, []string{"interlink", "limits", "system:serviceaccounts:team-a", "cpu"}, nil)
			if err != nil || !defined || got != "4" {
				t.Errorf("raw data = %v %v %v", got, defined, err)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	brokenDir := filepath.Join(dir, "broken")
	typeErrDir := filepath.Join(dir, "typeerr")
	for _, d := range []string{brokenDir, typeErrDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, brokenDir, "bad.rego", "package bad\n\nallow if {\n")
	writeFile(t, typeErrDir, "typeerr.rego", "package typeerr\n\nx := count(1)\n")

	tests := []struct {
		name     string
		opts     Options
		contains string
		is       error
	}{
		{name: "parse error", opts: Options{Dir: brokenDir}, contains: "bad.rego"},
		{name: "compile error", opts: Options{Dir: typeErrDir}, contains: "typeerr.rego"},
		{name: "missing dir", opts: Options{Dir: filepath.Join(dir, "missing")}, is: fs.ErrNotExist},
		{name: "missing data file", opts: Options{DataFile: filepath.Join(dir, "missing.json")}, is: fs.ErrNotExist},
		{name: "array data", opts: Options{DataFile: writeFile(t, dir, "arr.json", `[1, 2]`)}, is: errDataNotObject},
		{name: "scalar yaml data", opts: Options{DataFile: writeFile(t, dir, "s.yaml", "just a string\n")}, is: errDataNotObject},
		{name: "empty data file", opts: Options{DataFile: writeFile(t, dir, "empty.yaml", "")}, is: errDataNotObject},
		{name: "malformed data", opts: Options{DataFile: writeFile(t, dir, "bad.json", `{"a": [}`)}, contains: "bad.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(context.Background(), tc.opts)
			if err == nil {
				t.Fatalf("New succeeded: %v", e)
			}
			if tc.contains != "" && !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q does not mention %q", err, tc.contains)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
		})
	}
}

func TestCacheBounded(t *testing.T) {
	e := newEvaluator(t, Options{})
	ctx := context.Background()
	for i := range cacheSize + 50 {
		if _, _, err := e.Eval(ctx, []string{"interlink", fmt.Sprintf("p%d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.prepared.Len(); n != cacheSize {
		t.Errorf("cache holds %d entries, want %d", n, cacheSize)
	}
	// Paths that would collide if segments were naively joined stay distinct.
	if cacheKey([]string{"a/b", "c"}) == cacheKey([]string{"a", "b/c"}) {
		t.Error("cache keys collide")
	}
}

func TestEvalConcurrent(t *testing.T) {
	e := newEvaluator(t, Options{})
	ctx := context.Background()
	allowed := testInput(t, nil)
	denied := testInput(t, func(in map[string]any) { in["review"] = map[string]any{"allowed": false, "reason": "no"} })

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				in, want := allowed, true
				if (g+i)%2 == 1 {
					in, want = denied, false
				}
				// Mix cached and fresh paths to exercise the LRU under contention.
				path := []string{"interlink", "authz", "allow"}
				if i%10 == 0 {
					path = []string{"interlink", "authz", fmt.Sprintf("x%d", g*100+i)}
				}
				got, defined, err := e.Eval(ctx, path, in)
				switch {
				case err != nil:
					errs <- err
				case len(path) == 3 && path[2] == "allow" && (!defined || got != want):
					errs <- fmt.Errorf("goroutine %d iter %d: allow = %v (defined %v), want %v", g, i, got, defined, want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func BenchmarkEvalDecision(b *testing.B) {
	e := newEvaluator(b, Options{})
	ctx := context.Background()
	in := testInput(b, nil)
	path := []string{"interlink", "authz", "decision"}
	b.ReportAllocs()
	for b.Loop() {
		if _, defined, err := e.Eval(ctx, path, in); err != nil || !defined {
			b.Fatalf("Eval: %v %v", defined, err)
		}
	}
}
