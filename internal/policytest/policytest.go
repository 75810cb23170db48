// Package policytest is `sar-bridge test`: a policy directory's Rego tests and its
// sample cases, run offline as the bridge would decide them. Rego tests run with OPA's
// tester over the embedded policy and the directory's modules, with the bridge's
// built-ins (k8s.get, k8s.list over a cluster snapshot). Samples (the layout the
// built-in rules use, policies/rules/<name>/samples) are decided with the input the
// server builds: what the bridge derives from the pod comes from the authorizer's own
// input builder, the reviews and the rest of the cluster's view from the case.
package policytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/policies"
)

// Options configures Run.
type Options struct {
	// Dir is the policy directory: its *.rego files extend the embedded policy (as
	// --policies), its *_test.rego files are the Rego tests, and */samples/ and
	// samples/ hold the sample cases.
	Dir string
	// DataFile is the policy data (--policies.data) of the Rego tests, and of samples
	// when the directory has no samples/base_data.json.
	DataFile string
	// Snapshot serves k8s.get and k8s.list.
	Snapshot *Snapshot
	// Verbose prints passing tests too.
	Verbose bool
	Out     io.Writer
}

// Summary counts what ran.
type Summary struct {
	Tests, TestsFailed     int
	Samples, SamplesFailed int
}

// Failed says whether anything failed.
func (s Summary) Failed() bool { return s.TestsFailed > 0 || s.SamplesFailed > 0 }

// Run runs the directory's Rego tests, then its samples; an error is a directory
// that cannot be loaded (a test's failure is counted, not returned).
func Run(ctx context.Context, opts Options) (Summary, error) {
	var s Summary
	if opts.Snapshot == nil {
		opts.Snapshot, _ = ReadSnapshot("")
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if err := runRegoTests(ctx, opts, &s); err != nil {
		return s, err
	}
	if err := runSamples(ctx, opts, &s); err != nil {
		return s, err
	}
	return s, nil
}

// runRegoTests runs the *_test.rego files of opts.Dir over the embedded policy with
// the directory's modules layered as --policies layers them.
func runRegoTests(ctx context.Context, opts Options, s *Summary) error {
	sources := policies.DefaultModules()
	filenames := map[string]string{}
	for name := range sources {
		filenames[name] = "embedded:" + name
	}
	entries, err := os.ReadDir(opts.Dir)
	if err != nil {
		return fmt.Errorf("reading policy directory: %w", err)
	}
	tests := 0
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".rego") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(opts.Dir, e.Name()))
		if err != nil {
			return err
		}
		sources[e.Name()] = string(raw)
		filenames[e.Name()] = filepath.Join(opts.Dir, e.Name())
		if strings.HasSuffix(e.Name(), "_test.rego") {
			tests++
		}
	}
	if tests == 0 {
		return nil
	}
	// The embedded tests' fixtures (rules shared by the built-in rules' test files)
	// are loaded without their tests, so a rule directory's tests compile alone and
	// the embedded suite is not run again; a directory's file of the same name wins.
	for name, text := range policies.EmbeddedTestModules() {
		if _, own := sources[name]; !own {
			sources[name] = text
			filenames[name] = "embedded:" + name
		}
	}
	modules := make(map[string]*ast.Module, len(sources))
	for name, text := range sources {
		m, err := ast.ParseModuleWithOpts(filenames[name], text, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return err
		}
		if strings.HasPrefix(filenames[name], "embedded:") && isTestFile(name) {
			withoutTests(m)
		}
		modules[filenames[name]] = m
	}
	data := map[string]any{}
	if opts.DataFile != "" {
		raw, err := os.ReadFile(opts.DataFile)
		if err != nil {
			return fmt.Errorf("reading data file: %w", err)
		}
		if err := yaml.Unmarshal(raw, &data); err != nil {
			return fmt.Errorf("data file %s: %w", opts.DataFile, err)
		}
	}
	impls := policies.ClusterBuiltins(opts.Snapshot)
	decls := policies.CompilerBuiltins()
	builtins := []*tester.Builtin{{Decl: decls["k8s.get"], Func: impls[0]}, {Decl: decls["k8s.list"], Func: impls[1]}}
	ch, err := tester.NewRunner().
		// OPA's default of 5 s a test fails slow but sound tests on a loaded machine.
		SetTimeout(2*time.Minute).
		SetCompiler(ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithBuiltins(decls)).
		AddCustomBuiltins(builtins).
		SetStore(inmem.NewFromObject(data)).
		SetDefaultRegoVersion(ast.RegoV1).
		RaiseBuiltinErrors(true).
		Run(ctx, modules)
	if err != nil {
		return fmt.Errorf("running the Rego tests: %w", err)
	}
	var results []*tester.Result
	for r := range ch {
		if !strings.HasPrefix(r.Location.File, "embedded:") {
			results = append(results, r)
		}
	}
	sort.Slice(results, func(i, j int) bool {
		if results[i].Location.File != results[j].Location.File {
			return results[i].Location.File < results[j].Location.File
		}
		return results[i].Location.Row < results[j].Location.Row
	})
	for _, r := range results {
		name := r.Package + "." + r.Name
		switch {
		case r.Skip:
			fmt.Fprintf(opts.Out, "--- SKIP: %s\n", name)
			continue
		case r.Error != nil:
			fmt.Fprintf(opts.Out, "--- FAIL: %s (%s)\n    error: %v\n", name, r.Location, r.Error)
			s.TestsFailed++
		case r.Fail:
			fmt.Fprintf(opts.Out, "--- FAIL: %s (%s)\n", name, r.Location)
			s.TestsFailed++
		case opts.Verbose:
			fmt.Fprintf(opts.Out, "--- PASS: %s\n", name)
		}
		s.Tests++
	}
	return nil
}

// sample is a sample case: the layout of policies/rules/<name>/samples (see
// policies/samples_test.go), plus a pod and reviews given as such.
type sample struct {
	Description string         `json:"description"`
	DataPatch   map[string]any `json:"data_patch"`
	InputPatch  map[string]any `json:"input_patch"`
	// Pod replaces input.pod (a Pod as YAML or JSON); Review replaces input.review
	// (allowed, denied, reason: what the SubjectAccessReviews answered).
	Pod    map[string]any `json:"pod"`
	Review map[string]any `json:"review"`
	Want   struct {
		Allowed       *bool          `json:"allowed"`
		Reason        *string        `json:"reason"`
		Violations    []string       `json:"violations"`
		Annotations   map[string]any `json:"annotations"`
		Modifications map[string]any `json:"modifications"`
		// DecisionViolations, when set, is the decision's violations exactly (each
		// {rule, message, action}), as the built-in samples use it.
		DecisionViolations []map[string]string `json:"decision_violations"`
	} `json:"want"`
}

// ruleDecl is what a rule directory's rule.json says of its documents (the built-in
// rules' file; its other members are theirs).
type ruleDecl struct {
	Violations  string `json:"violations"`
	Annotations string `json:"annotations"`
}

// docPath is a rule.json document: absolute (data.x.y) or in data.interlink.authz.
func docPath(doc string) []string {
	if rest, ok := strings.CutPrefix(doc, "data."); ok {
		return strings.Split(rest, ".")
	}
	return append([]string{"interlink", "authz"}, strings.Split(doc, ".")...)
}

// runSamples decides every sample of opts.Dir.
func runSamples(ctx context.Context, opts Options, s *Summary) error {
	var files []string
	err := filepath.WalkDir(opts.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := d.Name()
		if d.IsDir() || filepath.Base(filepath.Dir(path)) != "samples" || strings.HasPrefix(base, "base_") {
			return nil
		}
		switch filepath.Ext(base) {
		case ".json", ".yaml", ".yml":
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finding samples: %w", err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil
	}
	// A sample patches the directory's own samples/base_input.json, else the built-in
	// rules' base; its data, the directory's samples/base_data.json, else
	// --policies.data, else the built-in base's.
	builtinInput, builtinData := policies.SampleBase()
	baseInput, err := readBase(filepath.Join(opts.Dir, "samples", "base_input.json"), builtinInput)
	if err != nil {
		return err
	}
	dataFile := filepath.Join(opts.Dir, "samples", "base_data.json")
	if _, err := os.Stat(dataFile); err != nil && opts.DataFile != "" {
		dataFile = opts.DataFile
	}
	baseData, err := readBase(dataFile, builtinData)
	if err != nil {
		return err
	}
	evaluators := map[string]*policies.Evaluator{}
	tmp, err := os.MkdirTemp("", "sar-bridge-test-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, f := range files {
		c, err := readSample(f)
		if err != nil {
			return err
		}
		rule, err := readRule(filepath.Dir(filepath.Dir(f)))
		if err != nil {
			return err
		}
		data, err := json.Marshal(mergePatch(baseData, c.DataPatch))
		if err != nil {
			return err
		}
		ev := evaluators[string(data)]
		if ev == nil {
			file := filepath.Join(tmp, fmt.Sprintf("data-%d.json", len(evaluators)))
			if err := os.WriteFile(file, data, 0o600); err != nil {
				return err
			}
			if ev, err = policies.New(ctx, policies.Options{Dir: opts.Dir, DataFile: file, Cluster: opts.Snapshot}); err != nil {
				return fmt.Errorf("loading the policy for %s: %w", f, err)
			}
			evaluators[string(data)] = ev
		}
		name, _ := filepath.Rel(opts.Dir, f)
		diffs, err := decideSample(ctx, ev, rule, c, baseInput)
		if err != nil {
			diffs = []string{"error: " + err.Error()}
		}
		s.Samples++
		switch {
		case len(diffs) > 0:
			s.SamplesFailed++
			fmt.Fprintf(opts.Out, "--- FAIL: %s (%s)\n", filepath.ToSlash(name), c.Description)
			for _, d := range diffs {
				fmt.Fprintf(opts.Out, "    %s\n", strings.ReplaceAll(d, "\n", "\n    "))
			}
		case opts.Verbose:
			fmt.Fprintf(opts.Out, "--- PASS: %s\n", filepath.ToSlash(name))
		}
	}
	return nil
}

// decideSample decides c and lists how the answers differ from those it wants.
func decideSample(ctx context.Context, ev *policies.Evaluator, rule ruleDecl, c sample, baseInput any) ([]string, error) {
	in, _ := mergePatch(baseInput, c.InputPatch).(map[string]any)
	if in == nil {
		in = map[string]any{}
	}
	if c.Pod != nil {
		in["pod"] = c.Pod
	}
	if c.Review != nil {
		in["review"] = c.Review
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	input, err := authorizer.DerivedInput(raw)
	var refused *authorizer.InputError
	if errors.As(err, &refused) {
		// The bridge answers such a request with a 400 before any policy sees it: never
		// an allow, and no rule's message to compare.
		if w := c.Want.Allowed; w != nil && *w {
			return []string{"allowed: got a refusal of the input (400), want true\nreason: " + refused.Error()}, nil
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the input, as the bridge reads it: %w", err)
	}
	eval := func(path []string) (any, error) {
		res, err := ev.EvalValue(ctx, path, input, policies.Memo{})
		if err != nil || !res.Defined {
			return nil, err
		}
		return ast.JSON(res.Value)
	}
	decision, err := eval([]string{"interlink", "authz", "decision"})
	if err != nil {
		return nil, err
	}
	d, _ := decision.(map[string]any)
	var diffs []string
	if w := c.Want.Allowed; w != nil && d["allowed"] != *w {
		diffs = append(diffs, fmt.Sprintf("allowed: got %v, want %v\nreason: %q", d["allowed"], *w, d["reason"]))
	}
	if w := c.Want.Reason; w != nil && d["reason"] != *w {
		diffs = append(diffs, fmt.Sprintf("reason:\n    got  %q\n    want %q", d["reason"], *w))
	}
	if rule.Violations != "" {
		v, err := eval(docPath(rule.Violations))
		if err != nil {
			return nil, err
		}
		if diff := listDiff(strs(v), c.Want.Violations); diff != "" {
			diffs = append(diffs, "violations of "+rule.Violations+" (- want, + got):\n"+diff)
		}
	}
	if c.Want.Annotations != nil {
		var got any
		if rule.Annotations != "" {
			if got, err = eval(docPath(rule.Annotations)); err != nil {
				return nil, err
			}
		}
		if diff := jsonDiff(got, c.Want.Annotations); diff != "" {
			diffs = append(diffs, "annotations of "+rule.Annotations+":\n"+diff)
		}
	}
	if c.Want.DecisionViolations != nil {
		want := make([]any, len(c.Want.DecisionViolations))
		for i, v := range c.Want.DecisionViolations {
			m := map[string]any{}
			for k, x := range v {
				m[k] = x
			}
			want[i] = m
		}
		if diff := jsonDiff(d["violations"], want); diff != "" {
			diffs = append(diffs, "the decision's violations:\n"+diff)
		}
	}
	if c.Want.Modifications != nil {
		if diff := jsonDiff(d["modifications"], c.Want.Modifications); diff != "" {
			diffs = append(diffs, "modifications:\n"+diff)
		}
	}
	return diffs, nil
}

func strs(v any) []string {
	out := []string{}
	vs, _ := v.([]any)
	for _, x := range vs {
		if s, ok := x.(string); ok {
			out = append(out, s)
		} else {
			b, _ := json.Marshal(x)
			out = append(out, string(b))
		}
	}
	return out
}

// listDiff is the lines only in want (-) and only in got (+), sorted; "" when equal.
func listDiff(got, want []string) string {
	count := map[string]int{}
	for _, w := range want {
		count[w]++
	}
	for _, g := range got {
		count[g]--
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		for n := count[k]; n > 0; n-- {
			fmt.Fprintf(&b, "- %q\n", k)
		}
	}
	for _, k := range keys {
		for n := count[k]; n < 0; n++ {
			fmt.Fprintf(&b, "+ %q\n", k)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func jsonDiff(got, want any) string {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if bytes.Equal(g, w) {
		return ""
	}
	return fmt.Sprintf("- %s\n+ %s", w, g)
}

func readSample(file string) (sample, error) {
	var c sample
	raw, err := os.ReadFile(file)
	if err != nil {
		return c, err
	}
	if raw, err = yaml.YAMLToJSON(raw); err != nil {
		return c, fmt.Errorf("%s: %w", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // a misspelt member must not go unchecked
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

// readRule reads dir's rule.json; none declares no documents.
func readRule(dir string) (ruleDecl, error) {
	var r ruleDecl
	raw, err := os.ReadFile(filepath.Join(dir, "rule.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("%s/rule.json: %w", dir, err)
	}
	return r, nil
}

// readBase reads a JSON or YAML file as a generic value; fallback's when missing.
func readBase(file string, fallback []byte) (any, error) {
	raw, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		raw, err = fallback, nil
	}
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return v, nil
}

// mergePatch applies a JSON merge patch (RFC 7386), as the built-in rules' samples do.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		if patch == nil {
			return target
		}
		return patch
	}
	t, _ := target.(map[string]any)
	out := make(map[string]any, len(t)+len(p))
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

func isTestFile(name string) bool { return strings.HasSuffix(name, "_test.rego") }

// withoutTests drops a module's test rules (test_*, todo_test_*), keeping its fixtures.
func withoutTests(m *ast.Module) {
	kept := m.Rules[:0]
	for _, r := range m.Rules {
		name := r.Head.Ref().String()
		if strings.HasPrefix(name, "test_") || strings.HasPrefix(name, "todo_test_") {
			continue
		}
		kept = append(kept, r)
	}
	m.Rules = kept
}
