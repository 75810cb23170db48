package authorizer

import (
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

// Verdict is a pod decision's answer, typed (decisionapi.Verdict, which the Go client
// reads too).
type Verdict = decisionapi.Verdict

// Modifications are the changes an allowing decision makes to the pod.
type Modifications = decisionapi.Modifications

// ReadAllowed is the one reading of a decision's answer: an object with a boolean
// "allowed" and, when a string, its "reason". Anything else is an error, never an allow.
// ReadVerdict, `sar-bridge check` and the decision log all read answers through it.
func ReadAllowed(d Decision) (allowed bool, reason string, err error) {
	if !d.Defined {
		return false, "", errors.New("the policy document is undefined")
	}
	result, ok := d.Result.(ast.Object)
	if !ok {
		return false, "", fmt.Errorf("the policy answered a %s, not an object", valueName(d.Result))
	}
	if r, ok := astjson.Member(result, key("reason")).(ast.String); ok {
		reason = string(r)
	}
	a, ok := astjson.Member(result, key("allowed")).(ast.Boolean)
	if !ok {
		return false, reason, errors.New("the policy answer has no boolean \"allowed\"")
	}
	return bool(a), reason, nil
}

// ReadVerdict reads allowed, reason and modifications from a decision. Anything but
// the expected shape is an error, never an allow.
func ReadVerdict(d Decision) (Verdict, error) {
	allowed, reason, err := ReadAllowed(d)
	if err != nil {
		return Verdict{}, err
	}
	v := Verdict{Allowed: allowed, Reason: reason}
	result := d.Result.(ast.Object) // ReadAllowed checked it
	if v.Violations, err = readViolations(result); err != nil {
		return Verdict{}, err
	}
	if !allowed {
		return v, nil
	}
	var raw any // the modifications as Go values; small, and only on an allow
	if m := astjson.Member(result, key("modifications")); m != nil {
		var err error
		if raw, err = ast.JSON(m); err != nil {
			return Verdict{}, fmt.Errorf("modifications: %w", err)
		}
	}
	mods, err := decisionapi.ReadModifications(raw)
	if err != nil {
		return Verdict{}, fmt.Errorf("modifications: %w", err)
	}
	v.Modifications = mods
	return v, nil
}

// Violation is one message of one rule and its action (decisionapi.Violation).
type Violation = decisionapi.Violation

// readViolations reads a decision's "violations" (absent or null: none): an array of
// objects of string rule, message and action. Anything else is an error, never ignored.
func readViolations(result ast.Object) ([]Violation, error) {
	raw := astjson.Member(result, key("violations"))
	if raw == nil {
		return nil, nil
	}
	if _, ok := raw.(ast.Null); ok {
		return nil, nil
	}
	list, ok := raw.(*ast.Array)
	if !ok {
		return nil, fmt.Errorf("violations: a %s, not an array", valueName(raw))
	}
	out := make([]Violation, 0, list.Len())
	for i := range list.Len() {
		obj, ok := list.Elem(i).Value.(ast.Object)
		if !ok {
			return nil, fmt.Errorf("violations: %d: a %s, not an object", i, valueName(list.Elem(i).Value))
		}
		var x Violation
		for _, m := range []struct {
			name string
			dst  *string
		}{{"rule", &x.Rule}, {"message", &x.Message}, {"action", &x.Action}} {
			s, ok := astjson.Member(obj, key(m.name)).(ast.String)
			if !ok {
				return nil, fmt.Errorf("violations: %d: %s is not a string", i, m.name)
			}
			*m.dst = string(s)
		}
		if err := decisionapi.CheckViolation(x); err != nil {
			return nil, fmt.Errorf("violations: %d: %w", i, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// valueName names a value's type as Rego does ("boolean", "array").
func valueName(v ast.Value) string {
	if v == nil {
		return "missing value"
	}
	return ast.ValueName(v)
}
