package policies

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplacingFiles: a --policies file replaces the embedded file of its base name
// (interlink.rego both files it used to be), must declare that file's package, and the
// rule files compile and count without authz.rego's own rules (docs/policies.md,
// "Replacing a file").
func TestReplacingFiles(t *testing.T) {
	var deny sample // a refused caps sample, and an allowed images sample of its data
	for _, s := range loadSamples(t) {
		if strings.HasSuffix(s.file, "caps/samples/deny-cpu-limit-over-cap.json") {
			deny = s
		}
	}
	if deny.file == "" {
		t.Fatal("no caps sample deny-cpu-limit-over-cap.json")
	}
	capsMessage := deny.Want.Violations[0]
	authz := DefaultModules()["authz.rego"]
	images := DefaultModules()["images.rego"]
	legacyInterlink := DefaultModules()["restricted_annotations.rego"] + images[strings.Index(images, "\n"):]
	tests := []struct {
		name    string
		files   map[string]string
		wantErr string
		// want: the decision's reason holds it; "" when the pod is allowed.
		want       string
		embedded   []string // embedded files that must still be compiled
		replaced   []string // embedded files that must not
		fastPathOn bool
	}{{
		name:       "a copy of authz.rego keeps every rule",
		files:      map[string]string{"authz.rego": authz},
		want:       capsMessage,
		embedded:   []string{"rules/caps/caps.rego", "rego/authz_helpers.rego"},
		replaced:   []string{"rego/authz.rego"},
		fastPathOn: false,
	}, {
		name: "caps.rego replaced by one of its package",
		// What the other files read of caps.rego must be defined (the compiler names it).
		files:    map[string]string{"caps.rego": "package interlink.authz\n\n_caps_violations contains \"site caps\" if input.operation == \"create\"\n\n_pre_caps := []\n\n_pre_ranked := {}\n\n_pre_cap_errors := {}\n"},
		want:     "site caps",
		embedded: []string{"rego/authz.rego"},
		replaced: []string{"rules/caps/caps.rego"},
	}, {
		name:    "a site file of a rule file's name and another package is refused",
		files:   map[string]string{"images.rego": "package interlink.site.images\n\nviolations contains \"x\" if false\n"},
		wantErr: "replaces the embedded rules/images/images.rego (its base name) but declares package interlink.site.images, not package interlink.authz",
	}, {
		name: "interlink.rego replaces both rules it used to hold",
		// interlink.rego as it was: both rules in one file, and one more message.
		files:    map[string]string{"interlink.rego": legacyInterlink + "\n_interlink_violations contains \"legacy\" if input.operation == \"create\"\n"},
		want:     "legacy",
		embedded: []string{"rules/caps/caps.rego"},
		replaced: []string{"rules/restricted-annotations/restricted_annotations.rego", "rules/images/images.rego"},
	}, {
		name:       "authz.rego without decision still compiles with the rule files",
		files:      map[string]string{"authz.rego": "package interlink.authz\n\nallow := false\n"},
		embedded:   []string{"rules/caps/caps.rego", "rules/hpc/hpc.rego"},
		replaced:   []string{"rego/authz.rego"},
		fastPathOn: true, // no decision, so no rule of the site's reaches it
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range tc.files {
				writeFile(t, dir, name, text)
			}
			data := writeFile(t, t.TempDir(), "data.json", deny.data(t))
			e, err := New(context.Background(), Options{Dir: dir, DataFile: data})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.embedded {
				if _, ok := e.compiler.Modules[embeddedPrefix+f]; !ok {
					t.Errorf("%s is not compiled", f)
				}
			}
			for _, f := range tc.replaced {
				if _, ok := e.compiler.Modules[embeddedPrefix+f]; ok {
					t.Errorf("%s is compiled beside its replacement", f)
				}
			}
			if on := e.FastPathOff() == ""; on != tc.fastPathOn {
				t.Errorf("fast path on = %v, want %v (%s)", on, tc.fastPathOn, e.FastPathOff())
			}
			if _, ok := tc.files["authz.rego"]; ok && tc.want == "" {
				return // no decision to ask
			}
			got, defined, err := e.Eval(context.Background(), []string{"interlink", "authz", "decision"}, deny.input(t))
			if err != nil || !defined {
				t.Fatalf("decision: %v %v %v", got, defined, err)
			}
			d := got.(map[string]any)
			if d["allowed"] != false || !strings.Contains(d["reason"].(string), tc.want) {
				t.Errorf("decision = %v, want refused with %q", d, tc.want)
			}
		})
	}
}

// TestEmbeddedBaseNamesUnique: every embedded file, rule files included, has a base
// name of its own (a site replaces a file by it), and sits under rego/ or rules/<name>/.
func TestEmbeddedBaseNamesUnique(t *testing.T) {
	mods, err := embeddedModules(true)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range mods {
		if filepath.Base(m.path) != name {
			t.Errorf("%s keyed %s", m.path, name)
		}
		if dir := filepath.Dir(m.path); dir != "rego" && filepath.Dir(dir) != "rules" {
			t.Errorf("%s: embedded outside rego/ and rules/<name>/", m.path)
		}
		if _, err := os.Stat(m.path); err != nil {
			t.Errorf("%s: embedded but not in the tree: %v", m.path, err)
		}
	}
}
