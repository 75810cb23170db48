package policies

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// What a bundle does to the policy of the files: its modules extend the policy or
// replace an embedded file of the same base name, its data replaces the files'
// under its roots, and a policy that fails is refused with the serving one kept.
func TestActivateBundles(t *testing.T) {
	const data = "cfg:\n  value: from-file\ninterlink:\n  limits: {kept: true}\n  hpc: {from: file}\n"
	tests := []struct {
		name    string
		bundles []Bundle
		accept  error
		replace string // an embedded file the bundle replaces: no longer compiled
		wantErr string
		want    map[string]any // document path → value; nil: undefined
	}{{
		name: "extends, data under its root",
		bundles: []Bundle{{Name: "site", Revision: "r1", Roots: []string{"interlink/hpc", "acme"},
			Modules: []BundleModule{{Path: "/acme/acme.rego", Text: "package acme\n\nhpc := data.interlink.hpc\n"}},
			Data:    map[string]any{"interlink": map[string]any{"hpc": map[string]any{"from": "bundle"}}}}},
		want: map[string]any{"acme.hpc.from": "bundle", "interlink.hpc.from": "bundle", "interlink.limits.kept": true, "cfg.value": "from-file", "site.value": "from-file"},
	}, {
		name: "owns all of data",
		bundles: []Bundle{{Name: "site", Revision: "r1",
			Modules: []BundleModule{{Path: "/acme.rego", Text: "package acme\n\nv := data.cfg.value\n"}},
			Data:    map[string]any{"cfg": map[string]any{"value": "from-bundle"}}}},
		want: map[string]any{"acme.v": "from-bundle", "interlink.limits": nil},
	}, {
		name: "replaces an embedded file by base name",
		bundles: []Bundle{{Name: "site", Revision: "r1", Roots: []string{"x"},
			Modules: []BundleModule{{Path: "/nested/quota.rego", Text: DefaultModules()["quota.rego"] + "\nreplaced := true\n"}}}},
		replace: "embedded:rules/quota/quota.rego",
		want:    map[string]any{"interlink.authz.replaced": true, "interlink.authz.decision.allowed": false},
	}, {
		name: "drops the decision",
		bundles: []Bundle{{Name: "site", Revision: "r2", Roots: []string{"x"},
			Modules: []BundleModule{{Path: "/authz.rego", Text: "package interlink.authz\n\nallow := false\n"}}}},
		wantErr: "new policy no longer defines data.interlink.authz.decision",
	}, {
		name: "a module of a rule file's name and another package is refused",
		bundles: []Bundle{{Name: "site", Revision: "r2", Roots: []string{"acme"},
			Modules: []BundleModule{{Path: "/acme/billing.rego", Text: "package acme\n\nv := 1\n"}}}},
		wantErr: "bundle site: policy bundle:site/acme/billing.rego replaces the embedded rules/billing/billing.rego",
	}, {
		name: "refused by accept",
		bundles: []Bundle{{Name: "site", Revision: "r2", Roots: []string{"acme"},
			Modules: []BundleModule{{Path: "/acme.rego", Text: "package acme\n\nv := 1\n"}}}},
		accept:  errors.New("OPA refuses it"),
		wantErr: "OPA refuses it",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newReloadFixture(t, map[string]string{"site.rego": sitePolicy}, data)
			err := f.r.ActivateBundles(context.Background(), tc.bundles, func(ev *Evaluator) error {
				if _, compiled := ev.BaseModules()[tc.replace]; compiled {
					t.Errorf("%s is compiled beside the bundle's module that replaces it", tc.replace)
				}
				return tc.accept
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ActivateBundles: %v, want an error with %q", err, tc.wantErr)
				}
				if got := f.eval(t, "site", "value"); got != "from-file" || f.r.Generation() != 0 {
					t.Fatalf("after a refused bundle: site.value %v, generation %d; want the files' policy unchanged", got, f.r.Generation())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for path, want := range tc.want {
				got, defined, err := f.r.Eval(context.Background(), strings.Split(path, "."), map[string]any{})
				if err != nil || (want == nil) == defined || (defined && got != want) {
					t.Errorf("data.%s = %v (defined %v, %v), want %v", path, got, defined, err, want)
				}
			}
		})
	}
}

// The files keep being watched under the bundles in force.
func TestActivateBundlesThenFileChange(t *testing.T) {
	f := newReloadFixture(t, map[string]string{"site.rego": sitePolicy}, "cfg:\n  value: one\n")
	b := Bundle{Name: "site", Revision: "r1", Roots: []string{"acme"},
		Modules: []BundleModule{{Path: "/acme.rego", Text: "package acme\n\nv := \"bundle\"\n"}}}
	if err := f.r.ActivateBundles(context.Background(), []Bundle{b}, func(*Evaluator) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f.waitGeneration(t, 1)
	replaceFile(t, f.dir, "site.rego", "package site\n\nvalue := \"two\"\n")
	f.waitGeneration(t, 2)
	if got := f.eval(t, "site", "value"); got != "two" {
		t.Fatalf("site.value = %v after the file changed", got)
	}
	if got := f.eval(t, "acme", "v"); got != "bundle" {
		t.Fatalf("acme.v = %v: the bundle was lost at the file reload", got)
	}
}

// newBundleEvaluator builds the policy the way a bundle delivers it: opts' data file
// and the embedded modules (as a site that ships the whole policy does) come in a
// bundle owning all of data, over a bridge with no files.
func newBundleEvaluator(t testing.TB, opts Options) *Evaluator {
	t.Helper()
	b := Bundle{Name: "site", Revision: "r1", Data: map[string]any{}}
	if opts.DataFile != "" {
		raw, err := os.ReadFile(opts.DataFile)
		if err != nil {
			t.Fatal(err)
		}
		if b.Data, err = parseData(opts.DataFile, raw); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range DefaultModules() {
		b.Modules = append(b.Modules, BundleModule{Path: "/policy/" + name, Text: text})
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := NewReloader(ctx, ReloaderOptions{Options: Options{Cluster: opts.Cluster}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ActivateBundles(ctx, []Bundle{b}, func(*Evaluator) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return r.v.Current().ev
}

// evaluatorSources are the two ways a policy and its data arrive, for the tests that
// must hold whatever the source (precompute, the fast path, the memo).
var evaluatorSources = map[string]func(testing.TB, Options) *Evaluator{
	"files":  newEvaluator,
	"bundle": newBundleEvaluator,
}

// A bundle's data files land at their directory's path, merged, as OPA reads them.
func TestBundleAddDataFile(t *testing.T) {
	files := []struct{ path, raw string }{
		{"/data.json", `{"top": {"a": 1}}`},
		{"/top/data.yaml", "b: two\n"},
		{"/x/y/data.yml", "z: [1]\n"},
		{"/x/policy.rego", "not data"},
	}
	var b Bundle
	for _, f := range files {
		if err := b.AddDataFile(f.path, []byte(f.raw)); err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
	}
	got, _ := json.Marshal(b.Data)
	if want := `{"top":{"a":1,"b":"two"},"x":{"y":{"z":[1]}}}`; string(got) != want {
		t.Errorf("data %s, want %s", got, want)
	}
	if err := b.AddDataFile("/top/data.json", []byte(`{"a": 2}`)); err == nil || !strings.Contains(err.Error(), "a is set twice") {
		t.Errorf("a value set twice: %v", err)
	}
	if err := b.AddDataFile("/top/a/data.json", []byte(`{"c": 2}`)); err == nil || !strings.Contains(err.Error(), "not an object") {
		t.Errorf("data under a number: %v", err)
	}
}
