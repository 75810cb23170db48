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
	if !allowed {
		return v, nil
	}
	result := d.Result.(ast.Object) // ReadAllowed checked it
	var raw any                     // the modifications as Go values; small, and only on an allow
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

// valueName names a value's type as Rego does ("boolean", "array").
func valueName(v ast.Value) string {
	if v == nil {
		return "missing value"
	}
	return ast.ValueName(v)
}
