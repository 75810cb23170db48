package policies

import (
	"fmt"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// footprint is the part of the input a compiled query can read: the constant prefixes
// of every reference to input in the rules the query can reach. Two inputs equal on
// every prefix give the same result, provided nothing else the query reads varies, so
// a memo keyed on these values is sound; when some read cannot be bounded this way,
// reason says why and the query is never memoised.
type footprint struct {
	paths [][]*ast.Term // sorted, none a prefix of another
	// shared[i] is how many leading terms paths[i] shares with paths[i-1] (0 for the
	// first), so that reading the values at the paths looks each prefix up once.
	shared []int
	reason string // non-empty: not memoisable
}

func (f footprint) memoisable() bool { return f.reason == "" }

// inputFootprint walks the rules query (a ref below data) can reach, with their
// functions and else branches, collecting references to input. It gives up on a read
// of the whole input (input passed as a value, input[x] with x unknown), on `with
// input`, and on any built-in that is nondeterministic or unknown to OPA's standard
// library (the cluster built-ins, http.send, time.now_ns, rand.intn, …): such results
// depend on more than input and data.
func inputFootprint(c *ast.Compiler, query ast.Ref) footprint {
	w := footprintWalker{compiler: c, seen: map[*ast.Rule]bool{}}
	w.enqueue(query)
	for len(w.queue) > 0 && w.reason == "" {
		r := w.queue[0]
		w.queue = w.queue[1:]
		ast.NewGenericVisitor(w.visit).Walk(r)
	}
	if w.reason != "" {
		return footprint{reason: w.reason}
	}
	paths := minimalPrefixes(w.paths)
	shared := make([]int, len(paths))
	for i := 1; i < len(paths); i++ {
		shared[i] = commonPrefixLen(paths[i], paths[i-1])
	}
	return footprint{paths: paths, shared: shared}
}

type footprintWalker struct {
	compiler *ast.Compiler
	seen     map[*ast.Rule]bool
	queue    []*ast.Rule
	paths    [][]*ast.Term
	reason   string
}

// enqueue adds the rules a data reference can reach.
func (w *footprintWalker) enqueue(ref ast.Ref) {
	for _, r := range w.compiler.GetRulesDynamic(ref) {
		if !w.seen[r] {
			w.seen[r] = true
			w.queue = append(w.queue, r)
		}
	}
}

func (w *footprintWalker) giveUp(format string, args ...any) bool {
	if w.reason == "" {
		w.reason = fmt.Sprintf(format, args...)
	}
	return true
}

// visit is the generic visitor's callback: true stops descending below x.
func (w *footprintWalker) visit(x any) bool {
	if w.reason != "" {
		return true
	}
	switch x := x.(type) {
	case *ast.Expr:
		for _, with := range x.With {
			if ref, ok := with.Target.Value.(ast.Ref); ok && ref.HasPrefix(ast.InputRootRef) {
				return w.giveUp("an expression replaces input with `with %v`", with.Target)
			}
		}
		if x.IsCall() {
			// The compiler has moved references out of call arguments into their own
			// expressions (x = input.a; f(x)): a call reads nothing by itself, and
			// object.get(input, …) reads the whole input.
			return w.call(x.Operator())
		}
	case *ast.Term:
		switch v := x.Value.(type) {
		case ast.Var:
			if v.Equal(ast.InputRootDocument.Value) {
				return w.giveUp("the whole input is read as a value")
			}
		case ast.Ref:
			switch {
			case v.HasPrefix(ast.InputRootRef):
				return w.inputRef(v)
			case v.HasPrefix(ast.DefaultRootRef):
				w.enqueue(v)
			}
		}
	}
	return false
}

// call follows a function call: a policy function is walked like any rule, a
// built-in must be one of OPA's deterministic ones.
func (w *footprintWalker) call(op ast.Ref) bool {
	if op.HasPrefix(ast.DefaultRootRef) {
		w.enqueue(op)
		return false
	}
	name := op.String()
	b, known := ast.BuiltinMap[name]
	switch {
	case !known:
		return w.giveUp("the built-in %s is not part of OPA's standard library", name)
	case b.IsNondeterministic():
		return w.giveUp("the built-in %s is nondeterministic", name)
	}
	return false
}

// inputRef records the constant prefix of a reference to input, then walks the
// reference's other terms (a key may itself be a reference to follow).
func (w *footprintWalker) inputRef(ref ast.Ref) bool {
	n := 1
	for n < len(ref) && isConstantKey(ref[n]) {
		n++
	}
	switch {
	case len(ref) == 1:
		return w.giveUp("the whole input is read as a value")
	case n == 1:
		return w.giveUp("input is read with a key known only at evaluation (%v)", ref)
	}
	w.paths = append(w.paths, ref[1:n])
	for _, t := range ref[n:] {
		ast.NewGenericVisitor(w.visit).Walk(t)
	}
	return true
}

func isConstantKey(t *ast.Term) bool {
	switch t.Value.(type) {
	case ast.String, ast.Number, ast.Boolean, ast.Null:
		return true
	}
	return false
}

// minimalPrefixes drops every path that has another path as a prefix: hashing the
// shorter one covers it.
func minimalPrefixes(paths [][]*ast.Term) [][]*ast.Term {
	slices.SortFunc(paths, func(a, b []*ast.Term) int { return ast.Ref(a).Compare(ast.Ref(b)) })
	var out [][]*ast.Term
	for _, p := range paths {
		if len(out) > 0 && hasPathPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func hasPathPrefix(p, prefix []*ast.Term) bool {
	return commonPrefixLen(p, prefix) == len(prefix)
}

// commonPrefixLen is how many leading terms a and b share.
func commonPrefixLen(a, b []*ast.Term) int {
	n := 0
	for n < min(len(a), len(b)) && a[n].Equal(b[n]) {
		n++
	}
	return n
}
