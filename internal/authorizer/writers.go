package authorizer

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/policies"
)

// input.hpc.writers (issue 32) says who wrote the shell annotations that interLink's
// Virtual Kubelet writes itself: with full-mesh networking it prepends its script to
// slurm-job.vk.io/pre-exec, otherwise it sets interlink.eu/wstunnel-client-commands,
// and either way it patches the pod in the API server before it sends the pod to its
// plugin. The policy refuses both to tenants, so it must tell the VK's text from a
// tenant's; the pod that reaches the relay cannot say, but the API server's record of
// the live pod can: its managedFields name the field manager of the last change of
// each annotation. A key is "vk" when the live pod holds the value sent and a field
// manager of the VK (Config.VKFieldManagers) owns it there; "other" otherwise.
//
// Field manager names are chosen by the writer (and managedFields may even be written
// outright), so this trusts every identity that may create, update or patch pods in the
// namespace not to write under the VK's names; only admission sees who writes.
// docs/install/README.md, "interLink's mesh networking", says what each layout guarantees.

// vkAnnotations are the annotations the Virtual Kubelet writes for interLink's networking.
var vkAnnotations = []string{policies.PreExecAnnotation, policies.WstunnelCommandsAnnotation}

// The values of input.hpc.writers.
const (
	writerVK    = "vk"
	writerOther = "other"
)

// LivePods reads a pod as the API server stores it now, managedFields included;
// kube.PodReader is the real one. A pod that does not exist is nil with no error.
type LivePods interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// hpcWithWriters is input.hpc with writers added. The live pod is read only for a named
// create that sets one of vkAnnotations, so other decisions cost nothing more; a live
// pod that cannot be read is an UnavailableError, never a guess either way.
func (a *Authorizer) hpcWithWriters(ctx context.Context, req podRequest, notStored bool) (ast.Value, map[string]string, error) {
	sent := sentVKAnnotations(req.input.Get(key("pod")))
	if len(sent) == 0 || req.Operation != "create" || req.Pod.Name == "" || a.cfg.LivePods == nil || notStored {
		return req.hpc, nil, nil
	}
	live, err := a.cfg.LivePods.Pod(ctx, req.Pod.Namespace, req.Pod.Name)
	if err != nil {
		// LivePods names the pod in its errors (kube.PodReader: "reading pod ns/name: ...").
		return nil, nil, NewUnavailableError(fmt.Errorf("who wrote %s (input.hpc.writers): %w", strings.Join(sortedKeys(sent), ", "), err))
	}
	w := writers(sent, req.Pod.UID, live, a.cfg.VKFieldManagers)
	hpc, ok := req.hpc.(ast.Object)
	if !ok {
		return req.hpc, w, nil // policies.PodHPC always builds an object
	}
	return withMembers(hpc, ast.Item(ast.StringTerm("writers"), writersTerm(w))), w, nil
}

// sentVKAnnotations are the vkAnnotations the input pod sets, with their values; nil
// when it sets none (allocated only for a pod that does).
func sentVKAnnotations(pod *ast.Term) map[string]string {
	if pod == nil {
		return nil
	}
	annotations, ok := astjson.Find(pod.Value, []*ast.Term{key("metadata"), key("annotations")}).(ast.Object)
	if !ok {
		return nil
	}
	var sent map[string]string
	for _, k := range vkAnnotations {
		if v, ok := astjson.Find(annotations, []*ast.Term{ast.StringTerm(k)}).(ast.String); ok {
			if sent == nil {
				sent = make(map[string]string, len(vkAnnotations))
			}
			sent[k] = string(v)
		}
	}
	return sent
}

// writers says for each annotation sent whether the Virtual Kubelet wrote that value:
// the live pod is the same pod (the same uid, when one was sent: a pod deleted and
// created again under its name is another), holds the same value, and one of
// managers owns the key there. A missing live pod writes nothing.
func writers(sent map[string]string, uid types.UID, live *corev1.Pod, managers []string) map[string]string {
	out := make(map[string]string, len(sent))
	for key, value := range sent {
		out[key] = writerOther
		if live == nil || (uid != "" && live.UID != uid) {
			continue
		}
		if liveValue, ok := live.Annotations[key]; ok && liveValue == value && ownedBy(live.ManagedFields, key, managers) {
			out[key] = writerVK
		}
	}
	return out
}

// ownedBy reports whether one of managers owns metadata.annotations[key] in the pod's
// managedFields, written through the pod itself. An Update takes a changed field from
// every other manager, so the owner is whoever changed the value last (an applier may
// share a value it left as it was, which changes nothing of who wrote it). The VK
// patches the pod, never pods/status: a status writer may change annotations too, and
// the admission webhooks are not called for it, so its entries prove nothing.
func ownedBy(entries []metav1.ManagedFieldsEntry, key string, managers []string) bool {
	path := fieldpath.MakePathOrDie("metadata", "annotations", key)
	for _, e := range entries {
		if e.FieldsV1 == nil || e.Subresource != "" || !slices.Contains(managers, e.Manager) {
			continue
		}
		var set fieldpath.Set
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			continue // unreadable, so it proves no ownership (the key stays refused)
		}
		if set.Has(path) {
			return true
		}
	}
	return false
}

// writersTerm is writers as a Rego object.
func writersTerm(w map[string]string) *ast.Term {
	items := make([][2]*ast.Term, 0, len(w))
	for _, k := range sortedKeys(w) {
		items = append(items, ast.Item(ast.StringTerm(k), ast.StringTerm(w[k])))
	}
	return ast.ObjectTerm(items...)
}

// writersField is writers for the decision log: "key=writer" pairs, sorted.
func writersField(w map[string]string) string {
	pairs := make([]string, 0, len(w))
	for _, k := range sortedKeys(w) {
		pairs = append(pairs, k+"="+w[k])
	}
	return strings.Join(pairs, ",")
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
