package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// Rules by name (issue 40): each built-in rule has a directory rules/<name> with its
// Rego (defining its documents in package interlink.authz), its tests, and rule.json,
// which names those documents and declares its fast check:
//
//	{"violations": "_caps_violations",  the rule's own messages ("" for none)
//	 "annotations": "...",              optional: its own pod annotations
//	 "fast_check": "rego/authz.rego:101-105: ...",  the lines of decision's fast path
//	                                    that prove it silent, and how
//	 "fast_path": true}                 whether its allowed samples take the fast path
//
// and, under samples, inputs with the answers expected of them. A sample is a JSON
// object:
//
//	{"description": "...",
//	 "data_patch": {...},   JSON merge patch (RFC 7386) over rules/samples/base_data.json
//	 "input_patch": {...},  the same over rules/samples/base_input.json; input.resources,
//	                        input.tolerations and input.hpc are then derived from
//	                        input.pod as the bridge derives them
//	 "want": {"allowed": bool,
//	          "violations": [message, ...],  the rule's own messages, sorted
//	          "annotations": {...},          optional: the rule's own pod annotations
//	          "modifications": {...},        optional: the decision's modifications
//	          "decision_violations": [...]}} optional: the decision's violations, each
//	                                         {"rule", "message", "action"}; set with a
//	                                         data_patch of interlink.enforcement for
//	                                         warn and audit
//
// TestSamples decides every sample three ways: the rule alone (its violations
// document), the decision with the precomputed tables (the fast path's, as sar-bridge
// loads the policy) and the decision without them (as the opa CLI or an OPA server
// evaluates it). The two decisions must be identical, and every allowed sample must
// take the fast path (unless rule.json says the rule has none): a rule added without its
// fast check lets the fast path allow what the rule refuses, so its refused samples
// decide differently with the tables and without.
const samplesDir = "rules"

// ruleDecl is a rule directory's rule.json.
type ruleDecl struct {
	Violations  string `json:"violations"`
	Annotations string `json:"annotations"`
	FastCheck   string `json:"fast_check"`
	FastPath    bool   `json:"fast_path"`
}

// loadRules reads the rule.json of every rule directory, by name.
func loadRules(t testing.TB) map[string]ruleDecl {
	t.Helper()
	out := map[string]ruleDecl{}
	for _, f := range glob(t, filepath.Join(samplesDir, "*", "rule.json")) {
		var r ruleDecl
		decodeStrict(t, f, &r)
		out[filepath.Base(filepath.Dir(f))] = r
	}
	return out
}

// glob lists the files matching pattern, sorted; at least one.
func glob(t testing.TB, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: %d files (%v)", pattern, len(files), err)
	}
	sort.Strings(files)
	return files
}

// decodeStrict reads a JSON file into v, refusing unknown fields (a misspelt key of a
// sample or rule.json must not go unchecked).
func decodeStrict(t testing.TB, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

type sample struct {
	file        string
	rule        string
	Description string         `json:"description"`
	DataPatch   map[string]any `json:"data_patch"`
	InputPatch  map[string]any `json:"input_patch"`
	Want        struct {
		Allowed       bool           `json:"allowed"`
		Violations    []string       `json:"violations"`
		Annotations   map[string]any `json:"annotations"`
		Modifications map[string]any `json:"modifications"`
		// DecisionViolations, when set, is the decision's violations exactly.
		DecisionViolations []map[string]string `json:"decision_violations"`
	} `json:"want"`
}

// loadSamples reads every sample of every rule directory.
func loadSamples(t testing.TB) []sample {
	t.Helper()
	var out []sample
	for _, f := range glob(t, filepath.Join(samplesDir, "*", "samples", "*.json")) {
		var s sample
		decodeStrict(t, f, &s)
		s.file = f
		s.rule = filepath.Base(filepath.Dir(filepath.Dir(f)))
		out = append(out, s)
	}
	return out
}

// readJSON reads a JSON file as generic values.
func readJSON(t testing.TB, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return v
}

// mergePatch applies a JSON merge patch (RFC 7386): objects merge key by key, null
// deletes, anything else replaces.
func mergePatch(target any, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = v
	}
	for k, v := range p {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = mergePatch(out[k], v)
	}
	return out
}

// sampleInput is the sample's input, with what the bridge derives from the pod.
func (s sample) input(t testing.TB) map[string]any {
	t.Helper()
	base := readJSON(t, filepath.Join(samplesDir, "samples", "base_input.json"))
	in := mergePatch(base, s.InputPatch).(map[string]any)
	// Round-trip so that numbers are json.Number-free float64s throughout.
	b, _ := json.Marshal(in)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return bridged(t, m)
}

// data is the sample's policy data, as JSON text.
func (s sample) data(t testing.TB) string {
	t.Helper()
	base := readJSON(t, filepath.Join(samplesDir, "samples", "base_data.json"))
	b, err := json.Marshal(mergePatch(base, s.DataPatch))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// threeWays evaluates documents of the default policy as sar-bridge loads it (with
// the precomputed tables, so with the fast path) and without the precomputed
// document (as the opa CLI does), over the same compiled modules and data.
type threeWays struct {
	e                *Evaluator
	plain            storage.Store
	prepared, plainQ map[string]rego.PreparedEvalQuery
}

func newThreeWays(t testing.TB, newEv func(testing.TB, Options) *Evaluator, data string) *threeWays {
	t.Helper()
	e := newEv(t, Options{DataFile: writeFile(t, t.TempDir(), "data.json", data)})
	parsed, err := parseData("data.json", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return &threeWays{
		e:        e,
		plain:    inmem.NewFromObjectWithOpts(parsed, inmem.OptReturnASTValuesOnRead(true)),
		prepared: map[string]rego.PreparedEvalQuery{},
		plainQ:   map[string]rego.PreparedEvalQuery{},
	}
}

func (w *threeWays) query(t testing.TB, q string, precomputed bool) rego.PreparedEvalQuery {
	t.Helper()
	cache, store := w.prepared, w.e.store
	if !precomputed {
		cache, store = w.plainQ, w.plain
	}
	if pq, ok := cache[q]; ok {
		return pq
	}
	pq, err := rego.New(rego.Query(q), rego.Compiler(w.e.compiler), rego.Store(store)).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cache[q] = pq
	return pq
}

// eval evaluates `result = <q>`.
func (w *threeWays) eval(t testing.TB, q string, precomputed bool, in any) any {
	t.Helper()
	return evalResult(t, w.query(t, "result = "+q, precomputed), rego.EvalInput(in))
}

// fastPathTaken says whether the default policy decides in as sar-bridge loads it
// through the fast path: with allow replaced, only the general rules' decision shows
// the replacement.
func (w *threeWays) fastPathTaken(t testing.TB, in any) bool {
	t.Helper()
	d, _ := w.eval(t, `data.interlink.authz.decision with data.interlink.authz.allow as "general"`, true, in).(map[string]any)
	return d["allowed"] == true
}

// TestSamples runs every rule's samples three ways and reports how many take the fast
// path; every allowed one must.
func TestSamples(t *testing.T) {
	samples := loadSamples(t)
	rules := loadRules(t)
	for source, newEv := range evaluatorSources {
		t.Run(source, func(t *testing.T) {
			ways := map[string]*threeWays{}
			var allowed, fast int
			for _, s := range samples {
				data := s.data(t)
				w := ways[data]
				if w == nil {
					w = newThreeWays(t, newEv, data)
					ways[data] = w
				}
				in := s.input(t)
				name := strings.TrimPrefix(s.file, samplesDir+"/")

				// 1. The rule alone.
				rule, ok := rules[s.rule]
				if !ok {
					t.Fatalf("%s: rule directory %q has no rule.json", name, s.rule)
				}
				got := []string{}
				if rule.Violations != "" {
					got = toStrings(w.eval(t, "[m | some m in data.interlink.authz."+rule.Violations+"]", true, in))
				}
				want := append([]string{}, s.Want.Violations...)
				sort.Strings(got)
				sort.Strings(want)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %s: the rule's violations\n got %q\nwant %q", name, s.Description, got, want)
				}
				if s.Want.Annotations != nil {
					ga, _ := json.Marshal(w.eval(t, "data.interlink.authz."+rule.Annotations, true, in))
					wa, _ := json.Marshal(s.Want.Annotations)
					if rule.Annotations == "" || string(ga) != string(wa) {
						t.Errorf("%s: %s: the rule's annotations (%q)\n got %s\nwant %s", name, s.Description, rule.Annotations, ga, wa)
					}
				}

				// 2 and 3. The decision with the precomputed tables and without.
				with := w.eval(t, "data.interlink.authz.decision", true, in)
				without := w.eval(t, "data.interlink.authz.decision", false, in)
				wj, _ := json.Marshal(with)
				oj, _ := json.Marshal(without)
				if string(wj) != string(oj) {
					t.Errorf("%s: the decision with the precomputed tables differs from the one without:\n   with %s\nwithout %s", name, wj, oj)
				}
				// The decision as the bridge evaluates it: the shared checks apart (sharedproof.go),
				// with a memo of its own salt, so evaluated here.
				parsed, err := ast.InterfaceToValue(in)
				if err != nil {
					t.Fatal(err)
				}
				res, err := w.e.EvalValue(context.Background(), decisionPath, parsed, Memo{Salt: []byte(name), Expires: time.Now().Add(time.Hour)})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				bv, _ := ast.JSON(res.Value)
				if bj, _ := json.Marshal(bv); string(bj) != string(wj) {
					t.Errorf("%s: the decision as the bridge evaluates it differs from the one with the precomputed tables:\nbridge %s\n  with %s", name, bj, wj)
				}
				d, _ := with.(map[string]any)
				if d["allowed"] != s.Want.Allowed {
					t.Errorf("%s: %s: allowed = %v, want %v (reason %q)", name, s.Description, d["allowed"], s.Want.Allowed, d["reason"])
				}
				if s.Want.Modifications != nil {
					gm, _ := json.Marshal(d["modifications"])
					wm, _ := json.Marshal(s.Want.Modifications)
					if string(gm) != string(wm) {
						t.Errorf("%s: modifications\n got %s\nwant %s", name, gm, wm)
					}
				}
				if s.Want.DecisionViolations != nil {
					gv, _ := json.Marshal(d["violations"])
					wv, _ := json.Marshal(s.Want.DecisionViolations)
					if string(gv) != string(wv) {
						t.Errorf("%s: decision violations\n got %s\nwant %s", name, gv, wv)
					}
				}
				if d["allowed"] != true {
					continue
				}
				allowed++
				// Allowed with violations in warn or audit too: the fast path evaluates
				// the rules in warn or audit rather than proving them silent.
				switch taken := w.fastPathTaken(t, in); {
				case taken:
					fast++
					if !rule.FastPath {
						t.Errorf("%s: %s: took the fast path, which rule.json says the rule has none of", name, s.Description)
					}
				case rule.FastPath:
					t.Errorf("%s: %s: allowed by the general rules, not by the fast path", name, s.Description)
				}
			}
			t.Logf("%d samples of %d rules, %d allowed, %d of them by the fast path", len(samples), len(rules), allowed, fast)
		})
	}
}

func toStrings(v any) []string {
	out := []string{}
	vs, _ := v.([]any)
	for _, x := range vs {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// BenchmarkPolicyHPC decides the HPC pod of make bench-http (the sample
// hpc/samples/allow-everything.json: flags with values, a flavor, a bind mount, a uid,
// GPUs) as the bridge does (bridge: Evaluator.EvalValue, the fast path), and by the
// general rules alone (general: a prepared query over the data without the precomputed
// tables, parsed input).
func BenchmarkPolicyHPC(b *testing.B) { benchmarkSample(b, "hpc/samples/allow-everything.json") }

// BenchmarkPolicyHPCImages: the same pod where the tenant's images must come from its
// registry (image_registries; the sample images/samples/allow-hpc-pod.json).
func BenchmarkPolicyHPCImages(b *testing.B) { benchmarkSample(b, "images/samples/allow-hpc-pod.json") }

// benchmarkSample decides an allowed sample, which must take the fast path, as the
// bridge does and by the general rules alone.
func benchmarkSample(b *testing.B, file string) {
	var s sample
	for _, x := range loadSamples(b) {
		if strings.HasSuffix(x.file, file) {
			s = x
		}
	}
	if s.file == "" {
		b.Fatalf("no sample %s", file)
	}
	w := newThreeWays(b, newEvaluator, s.data(b))
	in := s.input(b)
	parsed, err := ast.InterfaceToValue(in)
	if err != nil {
		b.Fatal(err)
	}
	if !w.fastPathTaken(b, in) {
		b.Fatal("the sample does not take the fast path")
	}
	ctx := context.Background()
	decision := []string{"interlink", "authz", "decision"}
	b.Run("bridge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := w.e.EvalValue(ctx, decision, parsed, Memo{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	general := w.query(b, "result = data.interlink.authz.decision", false)
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := general.Eval(ctx, rego.EvalParsedInput(parsed)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRuleDirectories: every rule directory declares its documents and its fast check,
// defines them in its own Rego (rules/<name>/*.rego), and has samples that it allows
// and, where it has messages, that it refuses.
func TestRuleDirectories(t *testing.T) {
	rules := loadRules(t)
	e := newEvaluator(t, Options{})
	// A rule's documents are defined, and only in its own directory's Rego.
	defined := func(name, doc string) bool {
		rules := e.compiler.GetRules(ast.MustParseRef("data.interlink.authz." + doc))
		for _, r := range rules {
			if !strings.HasPrefix(r.Location.File, embeddedPrefix+samplesDir+"/"+name+"/") {
				t.Errorf("rule %s: %s is defined in %s, outside its directory", name, doc, r.Location.File)
			}
		}
		return len(rules) > 0
	}
	counts := map[string][2]int{}
	for _, s := range loadSamples(t) {
		c := counts[s.rule]
		if s.Want.Allowed {
			c[0]++
		} else {
			c[1]++
		}
		counts[s.rule] = c
	}
	for name, r := range rules {
		if r.FastCheck == "" {
			t.Errorf("rule %s: rule.json declares no fast_check", name)
		}
		if r.FastPath {
			checkFastCheckLines(t, name, r.FastCheck)
		}
		for _, doc := range []string{r.Violations, r.Annotations} {
			if doc != "" && !defined(name, doc) {
				t.Errorf("rule %s: data.interlink.authz.%s is not defined", name, doc)
			}
		}
		if r.Violations == "" && r.Annotations == "" {
			t.Errorf("rule %s: rule.json names neither violations nor annotations", name)
		}
		c := counts[name]
		if c[0] == 0 || (r.Violations != "" && c[1] == 0) {
			t.Errorf("rule %s: %d allowed and %d refused samples: want at least one of each (refused only where it has violations)", name, c[0], c[1])
		}
	}
	for name := range counts {
		if _, ok := rules[name]; !ok {
			t.Errorf("samples of %s, which has no rule.json", name)
		}
	}
}

// fastCheckLocation is how a rule.json's fast_check starts where the rule has one: the
// file under policies/ and the line ranges of its checks ("rego/authz.rego:101-105,
// 233-278: ..."). The fast path stays one Rego body (a rule evaluation costs several
// expressions; docs/development.md), so a rule's fast check is there, cited by line.
var fastCheckLocation = regexp.MustCompile(`^([a-z_/]+\.rego):([0-9]+-[0-9]+(?:,[0-9]+-[0-9]+)*): `)

// checkFastCheckLines: every range fast_check cites is in its file and starts with the
// comment that names the rule's directory, so the citation follows the file's edits or
// fails here.
func checkFastCheckLines(t *testing.T, name, fastCheck string) {
	t.Helper()
	m := fastCheckLocation.FindStringSubmatch(fastCheck)
	if m == nil {
		t.Errorf("rule %s: fast_check %q does not start with the lines of its checks (%v)", name, fastCheck, fastCheckLocation)
		return
	}
	raw, err := os.ReadFile(m[1])
	if err != nil {
		t.Errorf("rule %s: fast_check: %v", name, err)
		return
	}
	lines := strings.Split(string(raw), "\n")
	for _, r := range strings.Split(m[2], ",") {
		var from, to int
		if _, err := fmt.Sscanf(r, "%d-%d", &from, &to); err != nil || from < 1 || to < from || to > len(lines) {
			t.Errorf("rule %s: fast_check cites %s:%s, not lines of it (%d lines)", name, m[1], r, len(lines))
			continue
		}
		if first := lines[from-1]; !strings.Contains(first, "# ") || !strings.Contains(first, "policies/rules/"+name+")") && !strings.Contains(first, "policies/rules/"+name+":") {
			t.Errorf("rule %s: fast_check cites %s:%s, whose first line is %q, not the comment naming policies/rules/%s", name, m[1], r, strings.TrimSpace(first), name)
		}
	}
}

// TestViolationsCovered: every rule adding to data.interlink.authz.violations reads one
// rule directory's document, or is the site rules' (data.interlink.site): a rule added
// beside them, without a directory, samples and a fast check, fails here.
func TestViolationsCovered(t *testing.T) {
	rules := loadRules(t)
	docs := map[string]bool{}
	for name, r := range rules {
		if r.Violations != "" && name != "review" { // the review's refusal is in deny
			docs[r.Violations] = true
		}
	}
	// _interlink_violations is the union of two rule directories' documents.
	docs["_interlink_violations"] = true
	site := ast.MustParseRef("data.interlink.site")
	e := newEvaluator(t, Options{})
	covered := map[string]bool{}
	for _, r := range e.compiler.GetRules(ast.MustParseRef("data.interlink.authz.violations")) {
		var reads []string
		ast.WalkRefs(r.Body, func(x ast.Ref) bool {
			if x.HasPrefix(site) {
				reads = append(reads, "site")
			}
			// The compiler rewrites `some msg in doc` to doc[__local__].
			if len(x) >= 4 && x.HasPrefix(ast.MustParseRef("data.interlink.authz")) {
				if s, ok := x[3].Value.(ast.String); ok && docs[string(s)] {
					reads = append(reads, string(s))
				}
			}
			return false
		})
		if len(reads) == 0 {
			t.Errorf("%v adds to violations without reading a rule directory's document (policies/rules/*/rule.json)", r.Location)
		}
		for _, d := range reads {
			covered[d] = true
		}
	}
	for d := range docs {
		if !covered[d] && d != "_restricted_annotations_violations" && d != "_images_violations" {
			t.Errorf("%s is no part of violations", d)
		}
	}
}
