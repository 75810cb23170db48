package authorizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sar-bridge/sar-bridge/astjson"
)

// Verdict is what a front door (the interLink relay, the admission webhooks) reads from a
// pod decision: the policy document's allowed, reason and modifications, typed.
type Verdict struct {
	Allowed bool
	Reason  string
	// Modifications are set only when Allowed.
	Modifications Modifications
}

// Modifications are the changes an allowing decision makes to the pod.
type Modifications struct {
	Annotations map[string]string
	// Limits maps a container name to the limits it gets when it sets none.
	Limits map[string]map[string]string
	// RunAsUser is the pod-level securityContext.runAsUser to set (the SLURM plugin writes
	// it as the job's --uid); nil: none. The policy asks only when the pod sets none, and
	// a front door never overwrites one the pod has.
	RunAsUser *int64
}

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
	mods, err := readModifications(raw)
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

func readModifications(raw any) (Modifications, error) {
	var m Modifications
	if raw == nil {
		return m, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return m, fmt.Errorf("a %T, not an object", raw)
	}
	var err error
	if m.Annotations, err = readAnnotations(obj["pod_annotations"]); err != nil {
		return m, fmt.Errorf("pod_annotations: %w", err)
	}
	if m.Limits, err = readLimits(obj["resource_limits"]); err != nil {
		return m, fmt.Errorf("resource_limits: %w", err)
	}
	if m.RunAsUser, err = readUID(obj["run_as_user"]); err != nil {
		return m, fmt.Errorf("run_as_user: %w", err)
	}
	return m, nil
}

func readAnnotations(raw any) (map[string]string, error) {
	if raw == nil {
		return nil, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a %T, not an object", raw)
	}
	out := make(map[string]string, len(obj))
	for k, v := range obj {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%q: a %T, not a string", k, v)
		}
		out[k] = s
	}
	return out, nil
}

func readLimits(raw any) (map[string]map[string]string, error) {
	if raw == nil {
		return nil, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a %T, not an object", raw)
	}
	out := make(map[string]map[string]string, len(obj))
	for name, v := range obj {
		res, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("container %q: a %T, not an object", name, v)
		}
		limits := make(map[string]string, len(res))
		for r, q := range res {
			s, err := quantity(q)
			if err != nil {
				return nil, fmt.Errorf("container %q, %s: %w", name, r, err)
			}
			limits[r] = s
		}
		out[name] = limits
	}
	return out, nil
}

// readUID reads a uid: a JSON integer in Kubernetes' range for runAsUser. "20001.0" is
// refused too, as a typed int64 decode (the API server's, the plugin's) refuses it.
// Anything else is an error, never ignored: a front door that dropped it would run the
// job as whoever the plugin defaults to.
func readUID(raw any) (*int64, error) {
	if raw == nil {
		return nil, nil
	}
	n, ok := raw.(json.Number)
	if !ok {
		return nil, fmt.Errorf("a %T, not a number", raw)
	}
	uid, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s is not an integer uid", n)
	}
	if msgs := validation.IsValidUserID(uid); len(msgs) > 0 {
		return nil, fmt.Errorf("uid %d: %s", uid, msgs[0])
	}
	return &uid, nil
}

// quantity checks a limit from the policy (a string or a number) and returns it in
// Kubernetes' canonical form.
func quantity(v any) (string, error) {
	var s string
	switch q := v.(type) {
	case string:
		s = q
	case json.Number:
		s = q.String()
	case float64, int, int64:
		s = fmt.Sprint(q)
	default:
		return "", fmt.Errorf("a %T, not a quantity", v)
	}
	parsed, err := resource.ParseQuantity(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	return parsed.String(), nil
}
