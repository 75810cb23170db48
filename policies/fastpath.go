package policies

import (
	"context"
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
)

// The default policy's fast path (authz.rego) decides an allowed create in one rule
// body by proving that the general rules find nothing. The proof is written against
// the embedded rules: a site's own rule that `decision` can reach (a violation added to
// package interlink.authz, a helper redefined, a replaced file) is outside it, and the
// fast path would allow what that rule refuses (issue 31). So the fast path's tables are
// kept only when every rule `decision` can reach is an embedded one, or lives in an
// extension package below data.interlink.site, whose documents the fast path evaluates
// instead of proving. Otherwise the tables are dropped at load and the general rules
// decide every input: slower, never different.

// embeddedPrefix starts the file name of every embedded module (readSnapshot).
const embeddedPrefix = "embedded:"

var (
	decisionRef = ast.MustParseRef("data.interlink.authz.decision")
	// extensionRef is where sites add rules the fast path evaluates (README, "Writing
	// policies").
	extensionRef = ast.MustParseRef("data.interlink.site")
	// fastTables is the member of the default policy's precomputed document that the
	// fast path reads; without it the fast path is never taken.
	fastTables = storage.Path{"sar_bridge", "precomputed", "interlink", "authz", "fast"}
)

// fastPathBlocker names the first rule, in the order an evaluation of decision (then of
// the shared checks the evaluator sets input.hpc.proved from, sharedproof.go) reaches them,
// that is neither embedded nor in an extension package; "" when there is none.
func fastPathBlocker(c *ast.Compiler) string {
	for _, r := range append(reachableRules(c, decisionRef), reachableRules(c, sharedProofRef)...) {
		if strings.HasPrefix(r.Location.File, embeddedPrefix) || r.Module.Package.Path.HasPrefix(extensionRef) {
			continue
		}
		name := r.Module.Package.Path.Extend(r.Head.Ref().GroundPrefix())
		return fmt.Sprintf("%v (%s:%d)", name, r.Location.File, r.Location.Row)
	}
	return ""
}

// reachableRules lists every rule (else branches and functions included) that an
// evaluation of ref can reach, following references to data and calls.
func reachableRules(c *ast.Compiler, ref ast.Ref) []*ast.Rule {
	seen := map[*ast.Rule]bool{}
	var out, queue []*ast.Rule
	enqueue := func(ref ast.Ref) {
		for _, r := range c.GetRulesDynamic(ref) {
			for ; r != nil; r = r.Else {
				if !seen[r] {
					seen[r] = true
					queue = append(queue, r)
				}
			}
		}
	}
	enqueue(ref)
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		out = append(out, r)
		ast.WalkRefs(r, func(x ast.Ref) bool {
			if x.HasPrefix(ast.DefaultRootRef) {
				enqueue(x)
			}
			return false
		})
	}
	return out
}

// gateFastPath drops the fast path's tables from store when a rule outside the
// embedded policy and its extension packages can reach decision, and says which.
func gateFastPath(ctx context.Context, c *ast.Compiler, store storage.Store) (string, error) {
	blocker := fastPathBlocker(c)
	if blocker == "" {
		return "", nil
	}
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return "", err
	}
	if err := store.Write(ctx, txn, storage.RemoveOp, fastTables, nil); err != nil && !storage.IsNotFound(err) {
		store.Abort(ctx, txn)
		return "", fmt.Errorf("turning the fast path off: %w", err)
	}
	if err := store.Commit(ctx, txn); err != nil {
		return "", fmt.Errorf("turning the fast path off: %w", err)
	}
	return "decision can reach " + blocker + ", which is not part of the embedded policy nor of an extension package (data.interlink.site.*)", nil
}

// FastPathOff says why the default policy's fast path is off for this policy, or ""
// when it may be taken.
func (e *Evaluator) FastPathOff() string { return e.fastPathOff }
