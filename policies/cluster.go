package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Cluster built-ins (issue 12): policies read watched cluster objects with
//
//	k8s.get(resource, namespace, name)      the object, or undefined
//	k8s.list(resource, namespace, selector) an array of objects
//
// served by a ClusterReader (informer caches in the bridge). Both are
// nondeterministic: their results depend on the cluster, not only on input and
// data, so a policy calling them is never memoised nor precomputed.

// ClusterReader reads watched cluster objects. Resource is the name a policy
// passes (e.g. "pods", "deployments.apps"); namespace "" means every namespace
// for List and is ignored for cluster-scoped resources. An undeclared resource
// is an error. Returned objects are shared: callers must not modify them.
type ClusterReader interface {
	Get(ctx context.Context, resource, namespace, name string) (obj map[string]any, found bool, err error)
	List(ctx context.Context, resource, namespace string, selector labels.Selector) ([]map[string]any, error)
}

// ErrNoClusterResources is the evaluation error of a cluster built-in when the
// Evaluator has no ClusterReader.
var ErrNoClusterResources = errors.New("no cluster resources are watched: start with --cluster.resources")

// Names of the cluster built-ins.
const (
	builtinK8sGet  = "k8s.get"
	builtinK8sList = "k8s.list"
)

var (
	anyObject   = types.NewObject(nil, types.NewDynamicProperty(types.S, types.A))
	k8sGetDecl  = &rego.Function{Name: builtinK8sGet, Decl: types.NewFunction(types.Args(types.Named("resource", types.S), types.Named("namespace", types.S), types.Named("name", types.S)), types.Named("object", anyObject)), Memoize: true, Nondeterministic: true}
	k8sListDecl = &rego.Function{Name: builtinK8sList, Decl: types.NewFunction(types.Args(types.Named("resource", types.S), types.Named("namespace", types.S), types.Named("selector", types.NewAny(types.S, anyObject))), types.Named("objects", types.NewArray(nil, anyObject))), Memoize: true, Nondeterministic: true}
)

// clusterBuiltinDecls declares the cluster built-ins to the compiler, whether or
// not a reader is configured: a policy calling them always compiles, and fails
// at evaluation without a reader.
var clusterBuiltinDecls = map[string]*ast.Builtin{
	builtinK8sGet:  {Name: builtinK8sGet, Decl: k8sGetDecl.Decl, Nondeterministic: true},
	builtinK8sList: {Name: builtinK8sList, Decl: k8sListDecl.Decl, Nondeterministic: true},
}

// isClusterBuiltin reports whether name is one of the cluster built-ins.
func isClusterBuiltin(name string) bool {
	_, ok := clusterBuiltinDecls[name]
	return ok
}

// ClusterBuiltins returns the rego options implementing the cluster built-ins
// over reader (nil: every call fails with ErrNoClusterResources). Tests use
// them with `opa test`-style runners; the Evaluator adds them itself.
func ClusterBuiltins(reader ClusterReader) []func(*rego.Rego) {
	b := clusterBuiltins{reader: reader}
	return []func(*rego.Rego){
		rego.Function3(k8sGetDecl, b.get),
		rego.Function3(k8sListDecl, b.list),
	}
}

type clusterBuiltins struct{ reader ClusterReader }

// clusterFuncs implements the cluster built-ins for OPA's evaluator, as the
// Evaluator calls it directly (evalQuery): memoised per evaluation like
// rego.Function's Memoize, so that one decision sees one state of the cluster
// per call, and halting on errors.
func clusterFuncs(reader ClusterReader) map[string]*topdown.Builtin {
	b := clusterBuiltins{reader: reader}
	return map[string]*topdown.Builtin{
		builtinK8sGet:  {Decl: clusterBuiltinDecls[builtinK8sGet], Func: memoised(builtinK8sGet, b.get)},
		builtinK8sList: {Decl: clusterBuiltinDecls[builtinK8sList], Func: memoised(builtinK8sList, b.list)},
	}
}

// clusterCall is a cluster built-in call, the key of its memoised result.
type clusterCall struct{ name, args string }

type clusterResult struct {
	term *ast.Term // nil: undefined
	err  error
}

func memoised(name string, f func(rego.BuiltinContext, *ast.Term, *ast.Term, *ast.Term) (*ast.Term, error)) topdown.BuiltinFunc {
	return func(bctx topdown.BuiltinContext, operands []*ast.Term, iter func(*ast.Term) error) error {
		key := clusterCall{name: name, args: ast.NewArray(operands[:3]...).String()}
		hit, ok := bctx.Cache.Get(key)
		if !ok {
			t, err := f(bctx, operands[0], operands[1], operands[2])
			hit = clusterResult{term: t, err: err}
			bctx.Cache.Put(key, hit)
		}
		r := hit.(clusterResult)
		if r.err != nil {
			// As rego reports a halting custom function's error.
			e := &topdown.Error{Code: topdown.BuiltinErr, Message: name + ": " + r.err.Error(), Location: bctx.Location}
			return topdown.Halt{Err: e.Wrap(r.err)}
		}
		if r.term == nil {
			return nil
		}
		return iter(r.term)
	}
}

// get implements k8s.get. Errors halt the evaluation: a failed read must never
// turn into an undefined expression (and so, perhaps, an allow).
func (b clusterBuiltins) get(bctx rego.BuiltinContext, resource, namespace, name *ast.Term) (*ast.Term, error) {
	if b.reader == nil {
		return nil, rego.NewHaltError(ErrNoClusterResources)
	}
	args, err := stringArgs(resource, namespace, name)
	if err != nil {
		return nil, rego.NewHaltError(err)
	}
	obj, found, err := b.reader.Get(bctx.Context, args[0], args[1], args[2])
	if err != nil {
		return nil, rego.NewHaltError(err)
	}
	if !found {
		return nil, nil
	}
	return objectTerm(obj)
}

// list implements k8s.list.
func (b clusterBuiltins) list(bctx rego.BuiltinContext, resource, namespace, selector *ast.Term) (*ast.Term, error) {
	if b.reader == nil {
		return nil, rego.NewHaltError(ErrNoClusterResources)
	}
	args, err := stringArgs(resource, namespace)
	if err != nil {
		return nil, rego.NewHaltError(err)
	}
	sel, err := parseSelector(selector.Value)
	if err != nil {
		return nil, rego.NewHaltError(err)
	}
	objs, err := b.reader.List(bctx.Context, args[0], args[1], sel)
	if err != nil {
		return nil, rego.NewHaltError(err)
	}
	terms := make([]*ast.Term, 0, len(objs))
	for _, obj := range objs {
		t, err := objectTerm(obj)
		if err != nil {
			return nil, rego.NewHaltError(err)
		}
		terms = append(terms, t)
	}
	return ast.ArrayTerm(terms...), nil
}

func stringArgs(terms ...*ast.Term) ([]string, error) {
	out := make([]string, len(terms))
	for i, t := range terms {
		s, ok := t.Value.(ast.String)
		if !ok {
			return nil, fmt.Errorf("operand %d must be a string, got %v", i+1, ast.ValueName(t.Value))
		}
		out[i] = string(s)
	}
	return out, nil
}

func objectTerm(obj map[string]any) (*ast.Term, error) {
	v, err := ast.InterfaceToValue(obj)
	if err != nil {
		return nil, fmt.Errorf("converting cluster object: %w", err)
	}
	return ast.NewTerm(v), nil
}

// parseSelector reads a label selector: a string in kubectl's syntax
// ("app=x,tier in (a,b)") or a LabelSelector object ({matchLabels,
// matchExpressions}). An empty string or object selects everything.
func parseSelector(v ast.Value) (labels.Selector, error) {
	switch v := v.(type) {
	case ast.String:
		sel, err := labels.Parse(string(v))
		if err != nil {
			return nil, fmt.Errorf("label selector %q: %w", string(v), err)
		}
		return sel, nil
	case ast.Object:
		ls, err := labelSelectorObject(v)
		if err != nil {
			return nil, fmt.Errorf("label selector %v: %w", v, err)
		}
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			return nil, fmt.Errorf("label selector %v: %w", v, err)
		}
		return sel, nil
	default:
		return nil, fmt.Errorf("label selector must be a string or an object, got %v", ast.ValueName(v))
	}
}

// labelSelectorObject decodes a LabelSelector strictly: a misspelt field
// (matchLabel) would otherwise select everything.
func labelSelectorObject(v ast.Object) (*metav1.LabelSelector, error) {
	raw, err := ast.JSON(v)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var ls metav1.LabelSelector
	if err := dec.Decode(&ls); err != nil {
		return nil, err
	}
	return &ls, nil
}
