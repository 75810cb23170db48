package policies

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestRegoUnitTests runs every embedded *_test.rego against the embedded
// policy, as `opa test` would.
func TestRegoUnitTests(t *testing.T) {
	srcs, err := embeddedModules(true)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(srcs))
	for name := range srcs {
		names = append(names, name)
	}
	sort.Strings(names)
	modules := make(map[string]*ast.Module, len(srcs))
	for _, name := range names {
		m, err := ast.ParseModuleWithOpts(srcs[name].path, srcs[name].text, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		modules[name] = m
	}

	// Strict compilation and raised builtin errors catch unused variables and
	// silently-undefined builtin failures that the lenient server mode hides.
	ctx := context.Background()
	ch, err := tester.NewRunner().
		// OPA's default of 5 s a test fails slow but sound tests on a loaded machine.
		SetTimeout(2*time.Minute).
		SetCompiler(ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithStrict(true).WithBuiltins(clusterBuiltinDecls)).
		AddCustomBuiltins(testerClusterBuiltins()).
		SetStore(inmem.New()).
		SetDefaultRegoVersion(ast.RegoV1).
		EnableTracing(false).
		RaiseBuiltinErrors(true).
		Run(ctx, modules)
	if err != nil {
		t.Fatalf("running rego tests: %v", err)
	}
	var ran, passed int
	for r := range ch {
		ran++
		switch {
		case r.Error != nil:
			t.Errorf("%s.%s: error: %v", r.Package, r.Name, r.Error)
		case r.Fail:
			t.Errorf("%s.%s: FAIL (%v)", r.Package, r.Name, r.Location)
		case r.Skip:
			t.Logf("%s.%s: skipped", r.Package, r.Name)
		default:
			passed++
		}
	}
	if ran == 0 {
		t.Fatal("no Rego tests ran")
	}
	t.Logf("rego tests: %d ran, %d passed", ran, passed)
}

// TestRegoFormatted keeps the embedded sources `opa fmt` clean.
func TestRegoFormatted(t *testing.T) {
	srcs, err := embeddedModules(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range srcs {
		out, err := format.SourceWithOpts(src.path, []byte(src.text), format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Errorf("format %s: %v", src.path, err)
			continue
		}
		if string(out) != src.text {
			t.Errorf("%s is not formatted (run opa fmt)", src.path)
		}
	}
}
