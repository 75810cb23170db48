package policies

import (
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

// sar-bridge's input.tolerations gives policies a pod's tolerations as Kubernetes
// matches them against taints, by key, so that a policy guarding tainted nodes looks
// up the few keys it protects instead of walking every toleration (three passes over
// them were a quarter of the default policy's cost):
//
//	{"equal": {key: {value: true}}, "other": {key: true}, "keyless_exists": n}
//
// equal holds the tolerations with a string key whose operator is Equal, or absent,
// empty or not a string (Kubernetes defaults it to Equal), each value "" when absent or
// not a string; other the keys of the tolerations with a string key and any other
// operator (Exists, or one Kubernetes does not know); keyless_exists counts the
// tolerations whose operator is Exists and whose key is absent, empty or not a string:
// each tolerates every taint. Elements that are not objects are left out, as the
// default policy's rules leave them; input.tolerations is null when the pod, its spec
// or spec.tolerations has a type that no pod has.

// Keys of input.tolerations and of a toleration, allocated once.
var (
	equalKey, otherKey, keylessExistsKey = ast.StringTerm("equal"), ast.StringTerm("other"), ast.StringTerm("keyless_exists")
	tolerationsKey                       = ast.StringTerm("tolerations")
	keyKey, operatorKey, valueKey        = ast.StringTerm("key"), ast.StringTerm("operator"), ast.StringTerm("value")
)

// PodTolerations is input.tolerations for a pod value (input.pod), or null.
func PodTolerations(pod ast.Value) ast.Value {
	list, ok := podTolerationList(pod)
	if !ok {
		return ast.Null{}
	}
	equal, other := ast.NewObject(), ast.NewObject()
	keylessExists := 0
	for i := range list.Len() {
		t, ok := list.Elem(i).Value.(ast.Object)
		if !ok {
			continue
		}
		key, hasKey := stringMember(t, keyKey)
		op, hasOp := stringMember(t, operatorKey)
		if op == "Exists" && hasOp && (!hasKey || key == "") {
			keylessExists++
		}
		if !hasKey {
			continue
		}
		keyTerm := ast.StringTerm(key)
		if hasOp && op != "" && op != "Equal" {
			other.Insert(keyTerm, ast.InternedTerm(true))
			continue
		}
		value, _ := stringMember(t, valueKey) // "" when absent or not a string
		values, ok := astjson.Member(equal, keyTerm).(ast.Object)
		if !ok {
			values = ast.NewObject()
			equal.Insert(keyTerm, ast.NewTerm(values))
		}
		values.Insert(ast.StringTerm(value), ast.InternedTerm(true))
	}
	return ast.NewObject(
		[2]*ast.Term{equalKey, ast.NewTerm(equal)},
		[2]*ast.Term{otherKey, ast.NewTerm(other)},
		[2]*ast.Term{keylessExistsKey, ast.InternedTerm(keylessExists)},
	)
}

// podTolerationList is pod.spec.tolerations, empty when absent or null; false when
// the pod, its spec or the list has the wrong type.
func podTolerationList(pod ast.Value) (*ast.Array, bool) {
	spec, ok := podSpec(pod)
	if !ok {
		return nil, false
	}
	if spec == nil {
		return ast.NewArray(), true
	}
	switch list := astjson.Member(spec, tolerationsKey).(type) {
	case nil, ast.Null:
		return ast.NewArray(), true
	case *ast.Array:
		return list, true
	default:
		return nil, false
	}
}

// stringMember is obj[key] when it is a string.
func stringMember(obj ast.Object, key *ast.Term) (string, bool) {
	s, ok := astjson.Member(obj, key).(ast.String)
	return string(s), ok
}
