package admission

import (
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sar-bridge/sar-bridge/authorizer"
)

// The reading of a decision document below follows interlink/create.go (readDecision and
// its helpers, unexported there): the two front doors must read the same shape the same
// way.

// verdict is what a webhook reads from a decision.
type verdict struct {
	allowed bool
	reason  string
	mods    modifications
}

// modifications are the changes an allowing decision makes to the pod.
type modifications struct {
	annotations map[string]string
	// limits maps a container name to the limits it gets when it sets none.
	limits map[string]map[string]string
}

// readDecision reads allowed, reason and modifications. Anything but the expected shape
// is an error, never an allow.
func readDecision(d authorizer.Decision) (verdict, error) {
	if !d.Defined {
		return verdict{}, errors.New("the policy document is undefined")
	}
	result, ok := d.Result.(map[string]any)
	if !ok {
		return verdict{}, fmt.Errorf("the policy answered a %T, not an object", d.Result)
	}
	allowed, ok := result["allowed"].(bool)
	if !ok {
		return verdict{}, errors.New("the policy answer has no boolean \"allowed\"")
	}
	reason, _ := result["reason"].(string)
	v := verdict{allowed: allowed, reason: reason}
	if !allowed {
		return v, nil
	}
	mods, err := readModifications(result["modifications"])
	if err != nil {
		return verdict{}, fmt.Errorf("modifications: %w", err)
	}
	v.mods = mods
	return v, nil
}

func readModifications(raw any) (modifications, error) {
	var m modifications
	if raw == nil {
		return m, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return m, fmt.Errorf("a %T, not an object", raw)
	}
	var err error
	if m.annotations, err = readAnnotations(obj["pod_annotations"]); err != nil {
		return m, fmt.Errorf("pod_annotations: %w", err)
	}
	if m.limits, err = readLimits(obj["resource_limits"]); err != nil {
		return m, fmt.Errorf("resource_limits: %w", err)
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
