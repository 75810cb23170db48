package decisionapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Verdict is a pod decision's answer, typed: what the relay, the admission webhooks,
// `sar-bridge check` and the Go client act on. ReadVerdict is its one reader.
type Verdict struct {
	Allowed bool
	Reason  string
	// Modifications are set only when Allowed.
	Modifications Modifications
	// Violations are every rule's findings with the action each takes here (the
	// decision's "violations", sorted by rule, then message); only those of action deny
	// count in Allowed and Reason.
	Violations []Violation
}

// A Violation is one message of one rule, and what it does at this front door.
type Violation struct {
	// Rule names the rule: a built-in rule's directory under policies/rules/ (caps,
	// review, ...), site.<name> for a site package, interlink.authz for a rule added to
	// the policy's own package.
	Rule    string `json:"rule"`
	Message string `json:"message"`
	// Action is ActionDeny, ActionWarn or ActionAudit.
	Action string `json:"action"`
}

// Actions of a violation (data.interlink.enforcement).
const (
	ActionDeny  = "deny"
	ActionWarn  = "warn"
	ActionAudit = "audit"
)

// Warnings are the violations whose action is warn: allowed, and shown to whoever
// asked (the webhooks answer them as admission warnings).
func (v Verdict) Warnings() []Violation { return v.withAction(ActionWarn) }

// WouldDeny are the violations that warn or audit: what deny would refuse.
func (v Verdict) WouldDeny() []Violation {
	return append(v.withAction(ActionWarn), v.withAction(ActionAudit)...)
}

func (v Verdict) withAction(action string) []Violation {
	var out []Violation
	for _, x := range v.Violations {
		if x.Action == action {
			out = append(out, x)
		}
	}
	return out
}

// CheckViolation checks a violation read from a decision: every member a string, the
// action one of the three. Anything else is an error, never ignored.
func CheckViolation(x Violation) error {
	switch x.Action {
	case ActionDeny, ActionWarn, ActionAudit:
		return nil
	}
	return fmt.Errorf("rule %q: action %q is not deny, warn or audit", x.Rule, x.Action)
}

// Modifications are what an allowing decision asks the caller to change in the pod.
type Modifications struct {
	// PodAnnotations are merged into the pod's annotations (their values win).
	PodAnnotations map[string]string `json:"pod_annotations"`
	// ResourceLimits gives, per container name, the limits of a container that sets none.
	ResourceLimits map[string]corev1.ResourceList `json:"resource_limits"`
	// RunAsUser, when set, is the pod-level spec.securityContext.runAsUser to set (the
	// tenant's HPC uid; the SLURM plugin submits the job with it as --uid). The policy
	// asks only when the pod sets none: create spec.securityContext if it is nil, and
	// never overwrite a runAsUser the pod has (refuse the pod instead).
	RunAsUser *int64 `json:"run_as_user"`
}

// ReadVerdict reads a decision's result, as JSON decodes it with UseNumber: an object
// with a boolean "allowed", its "reason" when a string, and on an allow its
// "modifications". Anything but that shape is an error, never an allow.
func ReadVerdict(result any) (Verdict, error) {
	obj, ok := result.(map[string]any)
	if !ok {
		return Verdict{}, fmt.Errorf("the policy answered a %s, not an object", jsonType(result))
	}
	allowed, ok := obj["allowed"].(bool)
	if !ok {
		return Verdict{}, errors.New("the policy answer has no boolean \"allowed\"")
	}
	v := Verdict{Allowed: allowed}
	v.Reason, _ = obj["reason"].(string)
	var err error
	if v.Violations, err = readViolations(obj["violations"]); err != nil {
		return Verdict{}, fmt.Errorf("violations: %w", err)
	}
	if !allowed {
		return v, nil
	}
	mods, err := ReadModifications(obj["modifications"])
	if err != nil {
		return Verdict{}, fmt.Errorf("modifications: %w", err)
	}
	v.Modifications = mods
	return v, nil
}

// readViolations reads a decision's violations (absent or null: none).
func readViolations(raw any) ([]Violation, error) {
	if raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("a %s, not an array", jsonType(raw))
	}
	out := make([]Violation, 0, len(list))
	for i, item := range list {
		obj, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%d: a %s, not an object", i, jsonType(item))
		}
		var x Violation
		for name, dst := range map[string]*string{"rule": &x.Rule, "message": &x.Message, "action": &x.Action} {
			if *dst, ok = obj[name].(string); !ok {
				return nil, fmt.Errorf("%d: %s is a %s, not a string", i, name, jsonType(obj[name]))
			}
		}
		if err := CheckViolation(x); err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
		out = append(out, x)
	}
	return out, nil
}

// ReadModifications reads an allowing decision's modifications (JSON decoded with
// UseNumber; nil: none).
func ReadModifications(raw any) (Modifications, error) { return readModifications(raw) }

// jsonType names a JSON value's type as Rego does ("boolean", "array").
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number, float64:
		return "number"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
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
	if m.PodAnnotations, err = readAnnotations(obj["pod_annotations"]); err != nil {
		return m, fmt.Errorf("pod_annotations: %w", err)
	}
	if m.ResourceLimits, err = readLimits(obj["resource_limits"]); err != nil {
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

func readLimits(raw any) (map[string]corev1.ResourceList, error) {
	if raw == nil {
		return nil, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a %T, not an object", raw)
	}
	out := make(map[string]corev1.ResourceList, len(obj))
	for name, v := range obj {
		res, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("container %q: a %T, not an object", name, v)
		}
		limits := make(corev1.ResourceList, len(res))
		for r, q := range res {
			parsed, err := quantity(q)
			if err != nil {
				return nil, fmt.Errorf("container %q, %s: %w", name, r, err)
			}
			limits[corev1.ResourceName(r)] = parsed
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

// quantity checks a limit from the policy (a string or a number) and parses it.
func quantity(v any) (resource.Quantity, error) {
	var s string
	switch q := v.(type) {
	case string:
		s = q
	case json.Number:
		s = q.String()
	case float64, int, int64:
		s = fmt.Sprint(q)
	default:
		return resource.Quantity{}, fmt.Errorf("a %T, not a quantity", v)
	}
	parsed, err := resource.ParseQuantity(s)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%q: %w", s, err)
	}
	return parsed, nil
}
