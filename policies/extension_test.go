package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// siteConditions are rule bodies a site module may use: some read what the memo keys
// on already, some what it would not without the site's rule (the pod's name, labels).
var siteConditions = []string{
	`true`,
	`input.operation == "create"`,
	`input.pod.metadata.labels.app == "trainer"`,
	`input.pod.metadata.name == "job-b"`,
	`some c in input.pod.spec.containers; c.image == "busybox"`,
	`input.subject.username == "bob"`,
	`input.tenant == "tenant-a"`,
	`count(input.pod.spec.containers) > 1`,
	`input.pod.metadata.annotations["slurm-job.vk.io/flags"]`,
	`not input.pod.spec.tolerations`,
}

// siteModule is one random module a site could add with --policies: rules extending
// the embedded package (violations, deny, modifications, a helper redefined, a rule
// nothing reads) or an extension package (interlink.site.<name>).
func siteModule(r *rand.Rand, i int, extensionsOnly bool) (text string, reachesDecision bool) {
	cond := siteConditions[r.IntN(len(siteConditions))]
	kind := r.IntN(8)
	if extensionsOnly {
		kind = 5 + r.IntN(3)
	}
	switch kind {
	case 0:
		return fmt.Sprintf("package interlink.authz\n\nviolations contains \"site rule %d\" if {\n\t%s\n}\n", i, cond), true
	case 1:
		return fmt.Sprintf("package interlink.authz\n\ndeny contains \"site deny %d\" if {\n\t%s\n}\n", i, cond), true
	case 2:
		return fmt.Sprintf("package interlink.authz\n\nmodifications := {\"pod_annotations\": {\"site\": \"%d\"}, \"resource_limits\": {}} if {\n\t%s\n}\n", i, cond), true
	case 3: // a helper redefined: one more way for the review to count as allowed
		return fmt.Sprintf("package interlink.authz\n\n_review_allowed if {\n\t%s\n}\n", cond), true
	case 4: // a helper redefined: a conflicting value is an evaluation error
		return fmt.Sprintf("package interlink.authz\n\n_username := \"site-%d\" if {\n\t%s\n}\n", i, cond), true
	case 5: // nothing reads it: the fast path stays
		return fmt.Sprintf("package interlink.authz\n\nsite_note_%d := \"x\" if {\n\t%s\n}\n", i, cond), false
	case 6:
		return fmt.Sprintf("package interlink.site.s%d\n\nviolations contains msg if {\n\t%s\n\tmsg := sprintf(\"site %d refuses %%v\", [input.pod.metadata.name])\n}\n", i, cond, i), false
	default:
		return fmt.Sprintf("package interlink.site.s%d\n\npod_annotations[\"site.example/%d\"] := input.tenant if {\n\t%s\n}\n", i, i, cond), false
	}
}

// TestSiteRulesAlwaysCount is issue 31's property: whatever a site adds beside the
// embedded policy, the bridge's decision (fast path, precomputed tables, data read
// once, memo) is the decision of the general rules as OPA itself evaluates them, with
// no precomputed document, so no fast path and no memo.
func TestSiteRulesAlwaysCount(t *testing.T) {
	inputs := siteInputs(t)
	datas := precomputeDatas()
	dataNames := sortedKeys(datas)
	var fastSets, slowSets, fastTaken, compared int
	for seed := range 40 {
		r := rand.New(rand.NewPCG(uint64(seed), 31))
		dir := t.TempDir()
		reaches, extensionsOnly := false, seed%2 == 0
		var texts []string
		for i := range 1 + r.IntN(3) {
			text, reach := siteModule(r, i, extensionsOnly)
			reaches = reaches || reach
			texts = append(texts, text)
			writeFile(t, dir, fmt.Sprintf("site%d.rego", i), text)
		}
		dname := dataNames[r.IntN(len(dataNames))]
		opts := Options{Dir: dir}
		var parsed map[string]any
		if d := datas[dname]; d != "" {
			opts.DataFile = writeFile(t, t.TempDir(), "data.json", d)
			var err error
			if parsed, err = parseData("data.json", []byte(d)); err != nil {
				t.Fatal(err)
			}
		}
		e, err := New(context.Background(), opts)
		if err != nil {
			continue // a module set that does not compile is refused at load, never served
		}
		if got := e.FastPathOff() == ""; got == reaches {
			t.Errorf("seed %d: fast path on = %v (%q), want %v for:\n%s", seed, got, e.FastPathOff(), !reaches, strings.Join(texts, "\n"))
		}
		if reaches {
			slowSets++
		} else {
			fastSets++
			fastTaken += countFastPath(t, e, inputs)
		}
		oracle, err := rego.New(rego.Query("result = data.interlink.authz.decision"), rego.Compiler(e.compiler),
			rego.Store(inmem.NewFromObjectWithOpts(parsed, inmem.OptReturnASTValuesOnRead(true)))).PrepareForEval(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range inputs {
			if !inCorpus(t, i, seed) {
				continue
			}
			want, wantErr := oracleDecision(oracle, in)
			value, err := ast.InterfaceToValue(in)
			if err != nil {
				t.Fatal(err)
			}
			// Three times: the memo keeps a result the second time and answers the third.
			for range 3 {
				res, err := e.EvalValue(context.Background(), []string{"interlink", "authz", "decision"}, value,
					Memo{Salt: []byte("salt"), Expires: time.Now().Add(time.Hour)})
				got := ""
				if err == nil {
					b, _ := json.Marshal(mustJSON(t, res.Value))
					got = string(b)
				}
				if (err != nil) != (wantErr != nil) || got != want {
					ij, _ := json.Marshal(in)
					t.Fatalf("seed %d, data %s, memo %s, site modules:\n%s\ninput %s\nbridge  %s (%v)\ngeneral %s (%v)",
						seed, dname, res.Memo, strings.Join(texts, "\n"), ij, got, err, want, wantErr)
				}
				compared++
			}
		}
	}
	if fastSets < 10 || slowSets < 10 || fastTaken < 50 {
		t.Errorf("module sets not varied enough: %d kept the fast path (%d decisions took it), %d turned it off", fastSets, fastTaken, slowSets)
	}
	t.Logf("%d module sets kept the fast path (%d decisions took it), %d turned it off; %d decisions compared", fastSets, fastTaken, slowSets, compared)
}

// siteInputs are well-formed inputs, each under three pod names so that a memo keyed
// without the name would answer one with another's result.
func siteInputs(t *testing.T) []map[string]any {
	var out []map[string]any
	for i, in := range wellFormedInputs(t) {
		if i%10 != 0 {
			continue
		}
		for _, name := range []string{"job-a", "job-b", "job-c"} {
			b, _ := json.Marshal(in)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			m["pod"].(map[string]any)["metadata"].(map[string]any)["name"] = name
			out = append(out, m)
		}
	}
	return out
}

// countFastPath counts the inputs whose decision the fast path gave: with allow
// replaced, only the general rules' decision shows the replacement.
func countFastPath(t *testing.T, e *Evaluator, inputs []map[string]any) int {
	t.Helper()
	pq, err := rego.New(rego.Query(`result = data.interlink.authz.decision with data.interlink.authz.allow as "general"`),
		rego.Compiler(e.compiler), rego.Store(e.store)).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if d, _ := oracleDecision(pq, in); strings.HasPrefix(d, `{"allowed":true`) {
			n++
		}
	}
	return n
}

func oracleDecision(pq rego.PreparedEvalQuery, in map[string]any) (string, error) {
	rs, err := pq.Eval(context.Background(), rego.EvalInput(in))
	if err != nil {
		return "", err
	}
	if len(rs) != 1 {
		return "", fmt.Errorf("%d results", len(rs))
	}
	b, _ := json.Marshal(rs[0].Bindings["result"])
	return string(b), nil
}

func mustJSON(t *testing.T, v ast.Value) any {
	t.Helper()
	if v == nil {
		return nil
	}
	out, err := ast.JSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestSiteViolationRefuses is issue 31's finding: one violation a site adds to the
// default policy's package refuses every create, the fast path's domain included.
func TestSiteViolationRefuses(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "site.rego", "package interlink.authz\n\nviolations contains \"site rule\" if input.operation == \"create\"\n")
	for dname, data := range precomputeDatas() {
		opts := Options{Dir: dir}
		if data != "" {
			opts.DataFile = writeFile(t, t.TempDir(), "data.json", data)
		}
		e := newEvaluator(t, opts)
		for i, in := range wellFormedInputs(t) {
			if !inCorpus(t, i, dname) {
				continue
			}
			got, _, err := e.Eval(context.Background(), []string{"interlink", "authz", "decision"}, in.(map[string]any))
			if err != nil {
				t.Fatal(err)
			}
			if d := got.(map[string]any); d["allowed"] != false || !strings.Contains(d["reason"].(string), "site rule") {
				t.Errorf("data %s, input %d: decision %v, want a denial naming the site rule", dname, i, d)
			}
		}
	}
}

// TestSiteExamples runs the extension examples of docs/policies.md (examples/).
func TestSiteExamples(t *testing.T) {
	gpu := func(limit bool, project string) func(map[string]any) {
		return func(in map[string]any) {
			pod := in["pod"].(map[string]any)
			if project != "" {
				pod["metadata"].(map[string]any)["labels"] = map[string]any{"example.org/project": project}
			}
			if limit {
				c := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
				c["resources"].(map[string]any)["limits"].(map[string]any)["nvidia.com/gpu"] = "1"
			}
			bridged(t, in)
		}
	}
	onNode := func(name string) func(map[string]any) {
		return func(in map[string]any) { in["node"].(map[string]any)["name"] = name; bridged(t, in) }
	}
	preExec := func(in map[string]any) {
		in["pod"].(map[string]any)["metadata"].(map[string]any)["annotations"] = map[string]any{"slurm-job.vk.io/pre-exec": "echo"}
		bridged(t, in)
	}
	billing := map[string]any{"interlink.io/billing-project": "proj-1"}
	withTenant := map[string]any{"interlink.io/billing-project": "proj-1", "example.org/tenant": "tenant-a"}
	tests := []struct {
		dir     string
		fastOff string // "": the fast path stays on; else a part of why it is off
		mutate  func(map[string]any)
		allowed bool
		reason  string
		annots  map[string]any // nil: not checked
	}{
		{"site-extension", "", gpu(true, ""), false, `container "main" asks for GPUs: label the pod with example.org/project`, nil},
		{"site-extension", "", gpu(true, "p-7"), true, reviewReason, withTenant},
		{"site-extension", "", gpu(false, ""), true, reviewReason, withTenant},
		{"site-own-package", "data.interlink.authz.violations", onNode("vk-maintenance"), false, "offloading to vk-maintenance is paused", nil},
		{"site-own-package", "data.interlink.authz.violations", onNode("vk-a"), true, reviewReason, billing},
		{"replace-authz", "data.interlink.authz.decision", nil, true, reviewReason, map[string]any{}},
		{"replace-authz", "data.interlink.authz.decision", preExec, false,
			`annotation "slurm-job.vk.io/pre-exec" is restricted: subject "system:serviceaccount:team-a:runner" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)`, nil},
	}
	// The examples' SLURM plugin picks no flavor by itself: GPU pods need none.
	noAutoFlavors := writeFile(t, t.TempDir(), "data.json", `{"interlink": {"hpc": {"auto_flavors": []}}}`)
	for i, tc := range tests {
		e := newEvaluator(t, Options{Dir: filepath.Join("examples", tc.dir), DataFile: noAutoFlavors})
		if off := e.FastPathOff(); (tc.fastOff == "") != (off == "") || !strings.Contains(off, tc.fastOff) {
			t.Errorf("%d %s: fast path off because %q, want %q", i, tc.dir, off, tc.fastOff)
		}
		in := testInput(t, tc.mutate)
		bridged(t, in)
		got, _, err := e.Eval(context.Background(), []string{"interlink", "authz", "decision"}, in)
		if err != nil {
			t.Fatalf("%d %s: %v", i, tc.dir, err)
		}
		d := got.(map[string]any)
		if d["allowed"] != tc.allowed || d["reason"] != tc.reason {
			t.Errorf("%d %s: allowed %v, reason %q; want %v, %q", i, tc.dir, d["allowed"], d["reason"], tc.allowed, tc.reason)
		}
		if tc.annots != nil && !reflect.DeepEqual(d["modifications"].(map[string]any)["pod_annotations"], tc.annots) {
			t.Errorf("%d %s: pod_annotations %v, want %v", i, tc.dir, d["modifications"], tc.annots)
		}
		if tc.dir == "site-extension" && tc.allowed && countFastPath(t, e, []map[string]any{in}) != 1 {
			t.Errorf("%d %s: the fast path did not decide an allowed pod", i, tc.dir)
		}
	}
}

// TestDocsShowSiteExamples: the policies page's examples are the tested files.
func TestDocsShowSiteExamples(t *testing.T) {
	readme, err := os.ReadFile("../docs/policies.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"site-extension/gpu.rego", "site-own-package/maintenance.rego"} {
		b, err := os.ReadFile(filepath.Join("examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), string(b)) {
			t.Errorf("docs/policies.md does not show examples/%s as it is", f)
		}
	}
}

// TestSiteAnnotationConflict: two extension packages setting one annotation to different
// values make no decision (an error, so 500 or 503 at the front doors), never an allow.
func TestSiteAnnotationConflict(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.rego", "package interlink.site.a\n\npod_annotations[\"example.org/k\"] := \"1\"\n")
	writeFile(t, dir, "b.rego", "package interlink.site.b\n\npod_annotations[\"example.org/k\"] := \"2\"\n")
	e := newEvaluator(t, Options{Dir: dir})
	in := bridged(t, testInput(t, nil))
	if got, _, err := e.Eval(context.Background(), []string{"interlink", "authz", "decision"}, in); err == nil || !strings.Contains(err.Error(), "object keys must be unique") {
		t.Fatalf("decision %v, error %v; want a conflict error", got, err)
	}
}
