package interlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sar-bridge/sar-bridge/authorizer"
)

// createBody is a parsed /create body (interLink's RetrievedPodData): the pod that is
// decided, and the raw body whose other members are forwarded untouched.
type createBody struct {
	raw []byte
	doc object
	pod json.RawMessage
}

// parseCreate reads a /create body. Only "pod" is interpreted; "container" (ConfigMaps,
// Secrets), "jobConfig", "jobScript" and anything newer pass through as they are.
func parseCreate(raw []byte) (createBody, error) {
	doc, err := parseObject(raw)
	if err != nil {
		return createBody{}, fmt.Errorf("body: %w", err)
	}
	// The plugin's encoding/json matches keys without case: a "Pod" beside "pod" could
	// be the one it runs while "pod" is the one decided.
	if k := doc.foldedKey("pod"); k != "" {
		return createBody{}, fmt.Errorf("body: key %q is ambiguous with \"pod\"", k)
	}
	pod := doc.get("pod")
	if t := bytes.TrimSpace(pod); len(t) == 0 || t[0] != '{' {
		return createBody{}, errors.New("body: \"pod\" is required and must be a JSON object")
	}
	return createBody{raw: raw, doc: doc, pod: pod}, nil
}

// decisionInput is the Data API input of a create: the pod alone, so the identity is the
// pod's service account and the target node its spec.nodeName.
func (c createBody) decisionInput() (json.RawMessage, error) {
	return json.Marshal(struct {
		Operation string          `json:"operation"`
		Pod       json.RawMessage `json:"pod"`
	}{"create", c.pod})
}

// verdict is what the relay reads from a decision.
type verdict struct {
	allowed bool
	reason  string
	mods    modifications
}

// modifications are the changes an allowing decision makes to the forwarded pod.
type modifications struct {
	annotations map[string]string
	// limits maps a container name to the limits it gets when it sets none.
	limits map[string]map[string]string
}

// readDecision reads allowed, reason and modifications from a decision. Anything but
// the expected shape is an error, never an allow.
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

// apply returns the body to forward: the original bytes when the modifications change
// nothing, else the body with only the pod's annotations and container limits rewritten.
func (c createBody) apply(m modifications) ([]byte, error) {
	pod, err := parseObject(c.pod)
	if err != nil {
		return nil, fmt.Errorf("pod: %w", err)
	}
	changedMeta, err := mergeAnnotations(pod, m.annotations)
	if err != nil {
		return nil, err
	}
	changedSpec, err := applyLimits(pod, m.limits)
	if err != nil {
		return nil, err
	}
	if !changedMeta && !changedSpec {
		return c.raw, nil
	}
	podBytes, err := pod.marshal()
	if err != nil {
		return nil, err
	}
	return c.doc.set("pod", podBytes).marshal()
}

// mergeAnnotations sets the policy's annotations on the pod; the policy's value wins
// over one the pod already has (a billing project is not the user's to choose).
func mergeAnnotations(pod object, add map[string]string) (bool, error) {
	if len(add) == 0 {
		return false, nil
	}
	meta, err := parseObject(pod.get("metadata"))
	if err != nil {
		return false, fmt.Errorf("pod.metadata: %w", err)
	}
	current := map[string]string{}
	if raw := meta.get("annotations"); !isNull(raw) {
		if err := json.Unmarshal(raw, &current); err != nil {
			return false, fmt.Errorf("pod.metadata.annotations: %w", err)
		}
	}
	changed := false
	for k, v := range add {
		if old, ok := current[k]; !ok || old != v {
			current[k], changed = v, true
		}
	}
	if !changed {
		return false, nil
	}
	annotations, err := marshalNoEscape(current)
	if err != nil {
		return false, err
	}
	metaBytes, err := meta.set("annotations", annotations).marshal()
	if err != nil {
		return false, err
	}
	pod.set("metadata", metaBytes)
	return true, nil
}

// applyLimits gives the named containers (and init containers) that set no limits the
// policy's limits; containers with limits of their own keep them.
func applyLimits(pod object, limits map[string]map[string]string) (bool, error) {
	if len(limits) == 0 {
		return false, nil
	}
	spec, err := parseObject(pod.get("spec"))
	if err != nil {
		return false, fmt.Errorf("pod.spec: %w", err)
	}
	changed := false
	for _, list := range []string{"containers", "initContainers"} {
		raw := spec.get(list)
		if isNull(raw) {
			continue
		}
		out, listChanged, err := limitContainers(raw, limits)
		if err != nil {
			return false, fmt.Errorf("pod.spec.%s: %w", list, err)
		}
		if listChanged {
			spec, changed = spec.set(list, out), true
		}
	}
	if !changed {
		return false, nil
	}
	specBytes, err := spec.marshal()
	if err != nil {
		return false, err
	}
	pod.set("spec", specBytes)
	return true, nil
}

func limitContainers(raw json.RawMessage, limits map[string]map[string]string) (json.RawMessage, bool, error) {
	var containers []json.RawMessage
	if err := json.Unmarshal(raw, &containers); err != nil {
		return nil, false, err
	}
	changed := false
	for i, cRaw := range containers {
		out, ok, err := limitContainer(cRaw, limits)
		if err != nil {
			return nil, false, fmt.Errorf("[%d]: %w", i, err)
		}
		if ok {
			containers[i], changed = out, true
		}
	}
	if !changed {
		return raw, false, nil
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, c := range containers {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(c)
	}
	buf.WriteByte(']')
	return buf.Bytes(), true, nil
}

func limitContainer(raw json.RawMessage, limits map[string]map[string]string) (json.RawMessage, bool, error) {
	c, err := parseObject(raw)
	if err != nil {
		return nil, false, err
	}
	var name string
	if n := c.get("name"); n != nil {
		if err := json.Unmarshal(n, &name); err != nil {
			return nil, false, fmt.Errorf("name: %w", err)
		}
	}
	want, ok := limits[name]
	if !ok || len(want) == 0 {
		return nil, false, nil
	}
	resources := object{}
	if r := c.get("resources"); !isNull(r) {
		if resources, err = parseObject(r); err != nil {
			return nil, false, fmt.Errorf("resources: %w", err)
		}
	}
	if hasLimits(resources.get("limits")) {
		return nil, false, nil
	}
	limitBytes, err := marshalNoEscape(want) // keys sorted: deterministic
	if err != nil {
		return nil, false, err
	}
	resBytes, err := resources.set("limits", limitBytes).marshal()
	if err != nil {
		return nil, false, err
	}
	out, err := c.set("resources", resBytes).marshal()
	return out, err == nil, err
}

// hasLimits reports limits the container chose itself: null and {} are none, as in the
// policy.
func hasLimits(raw json.RawMessage) bool {
	if isNull(raw) {
		return false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return true // not ours to overwrite; the decision already read it
	}
	return len(m) > 0
}
