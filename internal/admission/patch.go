package admission

import (
	corev1 "k8s.io/api/core/v1"

	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// patchPod is the part of a pod a patch is built from, read from the raw object so the
// paths match what the API server holds (an absent member needs "add" on its parent).
type patchPod struct {
	Metadata struct {
		Annotations *map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers      []patchContainer      `json:"containers"`
		InitContainers  []patchContainer      `json:"initContainers"`
		SecurityContext *patchSecurityContext `json:"securityContext"`
	} `json:"spec"`
}

// patchSecurityContext keeps runAsUser raw: null and absent are both none.
type patchSecurityContext struct {
	RunAsUser json.RawMessage `json:"runAsUser"`
}

type patchContainer struct {
	Name      string `json:"name"`
	Resources *struct {
		Limits map[string]json.RawMessage `json:"limits"`
	} `json:"resources"`
}

// buildPatch returns the JSONPatch that applies m to the raw pod, or nil when m changes
// nothing. The policy's annotations win over the pod's own (a billing project is not the
// user's to choose); limits go only to containers that set none, and runAsUser only to a
// pod that sets none, as in the relay.
func buildPatch(rawPod []byte, m authorizer.Modifications) ([]byte, error) {
	var pod patchPod
	if err := json.Unmarshal(rawPod, &pod); err != nil {
		return nil, fmt.Errorf("reading the pod: %w", err)
	}
	ops := annotationOps(pod.Metadata.Annotations, m.PodAnnotations)
	ops = append(ops, limitOps("/spec/containers", pod.Spec.Containers, m.ResourceLimits)...)
	ops = append(ops, limitOps("/spec/initContainers", pod.Spec.InitContainers, m.ResourceLimits)...)
	userOps, err := runAsUserOps(pod.Spec.SecurityContext, m.RunAsUser)
	if err != nil {
		return nil, err
	}
	ops = append(ops, userOps...)
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

func annotationOps(current *map[string]string, add map[string]string) []patchOp {
	if len(add) == 0 {
		return nil
	}
	if current == nil || *current == nil {
		// No annotations member (or null): create it whole.
		return []patchOp{{Op: "add", Path: "/metadata/annotations", Value: add}}
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ops []patchOp
	for _, k := range keys {
		old, ok := (*current)[k]
		switch {
		case !ok:
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(k), Value: add[k]})
		case old != add[k]:
			ops = append(ops, patchOp{Op: "replace", Path: "/metadata/annotations/" + escapePointer(k), Value: add[k]})
		}
	}
	return ops
}

func limitOps(list string, containers []patchContainer, limits map[string]corev1.ResourceList) []patchOp {
	var ops []patchOp
	for i, c := range containers {
		want := limits[c.Name]
		if len(want) == 0 {
			continue
		}
		base := fmt.Sprintf("%s/%d/resources", list, i)
		switch {
		case c.Resources == nil:
			ops = append(ops, patchOp{Op: "add", Path: base, Value: map[string]any{"limits": want}})
		case len(c.Resources.Limits) == 0:
			// "add" also replaces a limits member that is null or {}.
			ops = append(ops, patchOp{Op: "add", Path: base + "/limits", Value: want})
		}
	}
	return ops
}

// runAsUserOps sets the pod-level securityContext.runAsUser (the SLURM plugin's --uid).
// One the pod already has is never replaced: the policy asks only when there is none, so
// a different one is an error (the call fails and failurePolicy applies), never a silent
// overwrite; the same value needs no op.
func runAsUserOps(sc *patchSecurityContext, uid *int64) ([]patchOp, error) {
	switch {
	case uid == nil:
		return nil, nil
	case sc == nil:
		// No securityContext member (or null): create it whole.
		return []patchOp{{Op: "add", Path: "/spec/securityContext", Value: map[string]int64{"runAsUser": *uid}}}, nil
	case len(sc.RunAsUser) == 0 || string(sc.RunAsUser) == "null":
		// "add" also replaces a runAsUser member that is null.
		return []patchOp{{Op: "add", Path: "/spec/securityContext/runAsUser", Value: *uid}}, nil
	}
	var have int64
	if err := json.Unmarshal(sc.RunAsUser, &have); err != nil || have != *uid {
		return nil, fmt.Errorf("spec.securityContext.runAsUser is %s: the policy's %d would overwrite it", sc.RunAsUser, *uid)
	}
	return nil, nil
}

// escapePointer escapes a JSON Pointer reference token (RFC 6901): "~" then "/".
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
