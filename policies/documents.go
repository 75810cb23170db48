package policies

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Documents lists the documents the compiled policy defines, sorted: every package
// and every rule under it, as path segments below data (["interlink", "authz",
// "decision"]). A rule whose head has a variable part (p[x]) is listed up to it.
func (e *Evaluator) Documents() [][]string {
	seen := map[string]bool{}
	var out [][]string
	add := func(doc []string) {
		if key := strings.Join(doc, "\x00"); len(doc) > 0 && !seen[key] {
			seen[key] = true
			out = append(out, doc)
		}
	}
	for _, m := range e.compiler.Modules {
		pkg := staticPrefix(m.Package.Path[1:]) // [0] is data
		add(pkg)
		for _, r := range m.Rules {
			add(append(slices.Clone(pkg), staticPrefix(r.Head.Ref())...))
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return slices.Compare(a, b) })
	return out
}

// Documents lists the documents the current policy defines; see Evaluator.Documents.
func (r *Reloader) Documents() [][]string { return r.v.Current().ev.Documents() }

// staticPrefix is the leading names of ref: a rule's own name (a variable term) and
// the string terms after it, up to the first term that is neither.
func staticPrefix(ref ast.Ref) []string {
	var out []string
	for i, t := range ref {
		switch v := t.Value.(type) {
		case ast.Var:
			if i > 0 {
				return out
			}
			out = append(out, string(v))
		case ast.String:
			out = append(out, string(v))
		default:
			return out
		}
	}
	return out
}
