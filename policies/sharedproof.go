package policies

import (
	"context"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The fast path's shared checks, evaluated apart. Of an allowed create's fast path, the
// checks on what the pods of one job share (tolerations, tenant isolation, images, what
// the HPC side reads of the pod: _fast_shared_silent in authz.rego) are most of the
// cost; the decision also reads each pod's name, UID and amounts, which differ between
// those pods, so the decision memo never helps them, and a memo of the shared checks
// alone does. The evaluator evaluates _fast_shared_proof first, through the memo, and
// sets input.hpc.proved when it holds; the fast path then skips _fast_shared_silent.
//
// input.hpc.proved is the evaluator's alone: whatever a caller put there is removed
// before any evaluation, and set only from this policy's own proof on the same input.
// The proof is part of the fast path: a rule of it outside the embedded policy turns
// the fast path off (fastpath.go).

var (
	sharedProofPath = []string{"interlink", "authz", "_fast_shared_proof"}
	sharedProofRef  = ast.MustParseRef("data.interlink.authz._fast_shared_proof")
	// decisionPath is the document whose fast path reads input.hpc.proved; a query of
	// it or of a document above it (the package, data) evaluates that fast path.
	decisionPath = []string{"interlink", "authz", "decision"}
	provedKey    = ast.InternedTerm("proved")
	hpcMember    = ast.InternedTerm("hpc")
)

// withSharedProof returns input as the evaluation of path should see it:
// input.hpc.proved removed, then set to true where path reaches the fast path, which is
// on, the caller asked for a memo (without one the proof would be evaluated twice), and
// _fast_shared_proof holds. Input that is not an object, or whose hpc is not, is
// returned as it is.
func (e *Evaluator) withSharedProof(ctx context.Context, path []string, input ast.Value, m Memo) (ast.Value, error) {
	obj, ok := input.(ast.Object)
	if !ok {
		return input, nil
	}
	term := obj.Get(hpcMember)
	if term == nil {
		return input, nil
	}
	hpc, ok := term.Value.(ast.Object)
	if !ok {
		return input, nil
	}
	if hpc.Get(provedKey) != nil {
		hpc = withoutMember(hpc, provedKey)
		obj = withMember(obj, hpcMember, ast.NewTerm(hpc))
	}
	if e.fastPathOff != "" || m.Salt == nil || !reachesDecision(path) {
		return obj, nil
	}
	res, err := e.EvalValue(ctx, sharedProofPath, obj, m)
	if err != nil {
		return nil, err
	}
	if !res.Defined || !ast.Boolean(true).Equal(res.Value) {
		return obj, nil
	}
	return withMember(obj, hpcMember, ast.NewTerm(withMember(hpc, provedKey, ast.InternedTerm(true)))), nil
}

// reachesDecision says whether evaluating data.<path...> evaluates the decision.
func reachesDecision(path []string) bool {
	return len(path) <= len(decisionPath) && slices.Equal(path, decisionPath[:len(path)])
}

// withMember returns a copy of obj (its members shared) with k set to v.
func withMember(obj ast.Object, k, v *ast.Term) ast.Object {
	return ast.NewObject(append(membersBut(obj, k), [2]*ast.Term{k, v})...)
}

// withoutMember returns a copy of obj (its members shared) without k.
func withoutMember(obj ast.Object, k *ast.Term) ast.Object {
	return ast.NewObject(membersBut(obj, k)...)
}

// membersBut lists obj's members but k's, with room for one more.
func membersBut(obj ast.Object, k *ast.Term) [][2]*ast.Term {
	items := make([][2]*ast.Term, 0, obj.Len()+1)
	obj.Foreach(func(key, value *ast.Term) {
		if !key.Equal(k) {
			items = append(items, [2]*ast.Term{key, value})
		}
	})
	return items
}
