package policies

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Precomputed documents (issue 19): what a policy derives from data alone
// is worked out once per load, not on every decision.
//
// The convention: a package p may define a rule named _precompute that
// depends on data only. At every build of an Evaluator (New, and so every
// policy or data reload) its value is evaluated once and stored as data at
// data.sar_bridge.precomputed.<p> (e.g. data.sar_bridge.precomputed.interlink.authz).
// The package reads it from there, falling back to the rule itself:
//
//	_static := s if {
//		s := data.sar_bridge.precomputed.interlink.authz
//	} else := _precompute
//
// so the same policy runs unchanged, with the same results, under the opa
// CLI, `opa test` or an OPA server, which only compute it on every query.
//
// At load, _precompute and every rule and function it depends on must not
// refer to input or to data.sar_bridge.precomputed, nor call a
// nondeterministic built-in, and its value must be JSON (no sets, string
// object keys), as data is: otherwise the load fails. An undefined
// _precompute is not stored (the fallback is undefined too). Data may not
// define sar_bridge.precomputed itself.
const precomputeRule = "_precompute"

// precomputedRoot is where precomputed documents are stored, below data.
var precomputedRoot = storage.Path{"sar_bridge", "precomputed"}

// precomputedRef is data.sar_bridge.precomputed, which precomputed documents
// may not read.
var precomputedRef = ast.MustParseRef("data.sar_bridge.precomputed")

// precompute evaluates the _precompute document of every package that defines
// one and writes its value to store under precomputedRoot.
func precompute(ctx context.Context, c *ast.Compiler, store storage.Store) error {
	pkgs := precomputePackages(c)
	if len(pkgs) == 0 {
		return nil
	}
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return err
	}
	defer func() {
		if txn != nil {
			store.Abort(ctx, txn)
		}
	}()
	if _, err := store.Read(ctx, txn, precomputedRoot); err == nil {
		return fmt.Errorf("data must not define %s: sar-bridge stores precomputed documents there", pathRef(precomputedRoot))
	} else if !storage.IsNotFound(err) {
		return err
	}
	for _, pkg := range pkgs {
		ref := pkg.Append(ast.StringTerm(precomputeRule))
		if err := dataOnly(c, ref); err != nil {
			return err
		}
		v, ok, err := evalDataOnly(ctx, c, store, txn, ref)
		if err != nil {
			return fmt.Errorf("precomputing %v: %w", ref, err)
		}
		if !ok {
			continue
		}
		if err := jsonOnly(v); err != nil {
			return fmt.Errorf("precomputing %v: %w", ref, err)
		}
		path := append(slices.Clone(precomputedRoot), refPath(pkg)...)
		if err := storage.MakeDir(ctx, store, txn, path[:len(path)-1]); err != nil {
			return fmt.Errorf("storing %v: %w", ref, err)
		}
		if err := store.Write(ctx, txn, storage.AddOp, path, v); err != nil {
			return fmt.Errorf("storing %v: %w", ref, err)
		}
	}
	err = store.Commit(ctx, txn)
	txn = nil
	return err
}

// precomputePackages lists, sorted, the package paths (data.p...) that define
// a _precompute rule.
func precomputePackages(c *ast.Compiler) []ast.Ref {
	seen := map[string]bool{}
	var out []ast.Ref
	for _, m := range c.Modules {
		for _, r := range m.Rules {
			if h := r.Head.Ref(); len(h) == 1 && h[0].Equal(ast.VarTerm(precomputeRule)) && !seen[m.Package.Path.String()] {
				seen[m.Package.Path.String()] = true
				out = append(out, m.Package.Path)
			}
		}
	}
	slices.SortFunc(out, func(a, b ast.Ref) int { return a.Compare(b) })
	return out
}

// dataOnly checks that the rules of ref, and every rule and function they
// depend on, read no input, no precomputed document and call no
// nondeterministic built-in.
func dataOnly(c *ast.Compiler, ref ast.Ref) error {
	var todo []*ast.Rule
	for _, r := range c.GetRules(ref) {
		for ; r != nil; r = r.Else {
			todo = append(todo, r)
		}
	}
	seen := map[*ast.Rule]bool{}
	for len(todo) > 0 {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[r] {
			continue
		}
		seen[r] = true
		var bad error
		ast.WalkRefs(r, func(x ast.Ref) bool {
			switch {
			case bad != nil:
			case x.HasPrefix(ast.InputRootRef):
				bad = fmt.Errorf("reads %v", x)
			case x.HasPrefix(precomputedRef) || precomputedRef.HasPrefix(x):
				bad = fmt.Errorf("reads %v", x)
			default:
				if isClusterBuiltin(x.String()) {
					bad = fmt.Errorf("calls %s, which reads the cluster", x)
				} else if b, ok := ast.BuiltinMap[x.String()]; ok && b.Nondeterministic {
					bad = fmt.Errorf("calls nondeterministic %s", b.Name)
				}
			}
			return bad != nil
		})
		if bad != nil {
			return fmt.Errorf("%v must depend on data only: %s (%v)", ref, bad, r.Location)
		}
		for dep := range c.Graph.Dependencies(r) {
			if d, ok := dep.(*ast.Rule); ok {
				todo = append(todo, d)
			}
		}
	}
	return nil
}

// evalDataOnly evaluates ref without input, as a Rego value.
func evalDataOnly(ctx context.Context, c *ast.Compiler, store storage.Store, txn storage.Transaction, ref ast.Ref) (ast.Value, bool, error) {
	x := ast.VarTerm("x")
	query, err := c.QueryCompiler().Compile(ast.NewBody(ast.Equality.Expr(x, ast.NewTerm(ref))))
	if err != nil {
		return nil, false, err
	}
	rs, err := topdown.NewQuery(query).
		WithCompiler(c).
		WithStore(store).
		WithTransaction(txn).
		Run(ctx)
	if err != nil || len(rs) == 0 {
		return nil, false, err
	}
	return rs[0][x.Value.(ast.Var)].Value, true, nil
}

var errNotJSON = errors.New("value is not JSON")

// jsonOnly reports a set or a non-string object key in v: data is JSON, and
// a set stored as data would read back as an array.
func jsonOnly(v ast.Value) error {
	var bad error
	ast.WalkTerms(v, func(t *ast.Term) bool {
		switch x := t.Value.(type) {
		case ast.Set:
			bad = fmt.Errorf("%w: set %v", errNotJSON, x)
		case ast.Object:
			x.Foreach(func(k, _ *ast.Term) {
				if _, ok := k.Value.(ast.String); !ok && bad == nil {
					bad = fmt.Errorf("%w: object key %v", errNotJSON, k)
				}
			})
		}
		return bad != nil
	})
	return bad
}

// refPath turns a package path (data.a.b) into a storage path (a/b).
func refPath(pkg ast.Ref) storage.Path {
	out := make(storage.Path, 0, len(pkg)-1)
	for _, t := range pkg[1:] {
		out = append(out, string(t.Value.(ast.String)))
	}
	return out
}

func pathRef(p storage.Path) string { return "data." + strings.Join(p, ".") }
