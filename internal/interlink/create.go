package interlink

import (
	corev1 "k8s.io/api/core/v1"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
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
	return decisionapi.Input{Operation: "create", Pod: c.pod}.Marshal()
}

// apply returns the body to forward: the original bytes when the modifications change
// nothing, else the body with only the pod's annotations, container limits and
// securityContext rewritten.
func (c createBody) apply(m authorizer.Modifications) ([]byte, error) {
	pod, err := parseObject(c.pod)
	if err != nil {
		return nil, fmt.Errorf("pod: %w", err)
	}
	changedMeta, err := mergeAnnotations(pod, m.PodAnnotations)
	if err != nil {
		return nil, err
	}
	changedSpec, err := applyLimits(pod, m.ResourceLimits)
	if err != nil {
		return nil, err
	}
	pod, changedUser, err := setRunAsUser(pod, m.RunAsUser)
	if err != nil {
		return nil, err
	}
	if !changedMeta && !changedSpec && !changedUser {
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
func applyLimits(pod object, limits map[string]corev1.ResourceList) (bool, error) {
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

func limitContainers(raw json.RawMessage, limits map[string]corev1.ResourceList) (json.RawMessage, bool, error) {
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

func limitContainer(raw json.RawMessage, limits map[string]corev1.ResourceList) (json.RawMessage, bool, error) {
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

// setRunAsUser sets the pod-level securityContext.runAsUser (the SLURM plugin's --uid),
// creating spec and securityContext when absent and keeping their other members. A
// runAsUser the pod already has is never overwritten: the policy asks only when there is
// none, so a different one means the policy and this pod disagree, and the create is
// refused rather than run as either uid. The same value is no change.
func setRunAsUser(pod object, uid *int64) (object, bool, error) {
	if uid == nil {
		return pod, false, nil
	}
	spec, err := parseOptionalObject(pod.get("spec"))
	if err != nil {
		return nil, false, fmt.Errorf("pod.spec: %w", err)
	}
	sc, err := parseOptionalObject(spec.get("securityContext"))
	if err != nil {
		return nil, false, fmt.Errorf("pod.spec.securityContext: %w", err)
	}
	if current := sc.get("runAsUser"); !isNull(current) {
		var have int64
		if err := json.Unmarshal(current, &have); err != nil || have != *uid {
			return nil, false, fmt.Errorf("pod.spec.securityContext.runAsUser is %s: the policy's %d would overwrite it", bytes.TrimSpace(current), *uid)
		}
		return pod, false, nil
	}
	scBytes, err := sc.set("runAsUser", []byte(strconv.FormatInt(*uid, 10))).marshal()
	if err != nil {
		return nil, false, err
	}
	specBytes, err := spec.set("securityContext", scBytes).marshal()
	if err != nil {
		return nil, false, err
	}
	return pod.set("spec", specBytes), true, nil
}

// parseOptionalObject reads an object member that may be absent or null (then empty).
func parseOptionalObject(raw json.RawMessage) (object, error) {
	if isNull(raw) {
		return object{}, nil
	}
	return parseObject(raw)
}
