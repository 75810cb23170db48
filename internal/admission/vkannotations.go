package admission

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/policies"
)

// interLink's Virtual Kubelet writes two annotations into a pod after it exists, with a
// patch of its own (pkg/virtualkubelet/mesh.go): its mesh script prepended to
// slurm-job.vk.io/pre-exec, and interlink.eu/wstunnel-client-commands. Both become shell
// on the HPC side. The relay tells the VK's text from a tenant's by the field manager
// that last wrote the key in the live pod (input.hpc.writers), but a field manager is a
// name any writer may pick. Only admission knows who writes, so a pod UPDATE that adds
// or changes either key is judged here: the VK's identities (VKIdentities) may, anyone
// else only if the pod so changed could be created by them (the policy opens the key).

// vkAnnotationKeys are the annotations judged on a pod UPDATE, in message order.
var vkAnnotationKeys = []string{policies.PreExecAnnotation, policies.WstunnelCommandsAnnotation}

// VKIdentities are the identities of interLink's Virtual Kubelet, trusted to write
// vkAnnotationKeys into any pod the webhooks judge: exact usernames
// (--admission.vk-users) and groups (--admission.vk-groups).
type VKIdentities struct {
	Users  []string
	Groups []string
}

// everyoneGroups are groups that hold far more than a Virtual Kubelet: listing one would
// let every user (or every service account) write shell into any pod.
var everyoneGroups = []string{"system:authenticated", "system:unauthenticated", "system:serviceaccounts"}

// Validate refuses names that cannot be meant: empty ones, wildcards (a name is compared
// exactly, so "system:serviceaccount:*:vk" would match nobody, while the writer of it
// likely meant everybody), and groups of everyone.
func (v VKIdentities) Validate() error {
	for _, list := range []struct {
		flag  string
		names []string
	}{{"--admission.vk-users", v.Users}, {"--admission.vk-groups", v.Groups}} {
		for _, n := range list.names {
			if err := checkVKName(n); err != nil {
				return fmt.Errorf("%s: %w", list.flag, err)
			}
		}
	}
	for _, g := range v.Groups {
		if slices.Contains(everyoneGroups, g) {
			return fmt.Errorf("--admission.vk-groups: %q is everyone's group, not the Virtual Kubelet's: to open the annotations to all, list it in data.interlink.restricted_annotations instead", g)
		}
	}
	return nil
}

func checkVKName(n string) error {
	switch {
	case strings.TrimSpace(n) == "":
		return errors.New("empty name")
	case n != strings.TrimSpace(n):
		return fmt.Errorf("%q has leading or trailing space (names are compared exactly)", n)
	case strings.Contains(n, "*"):
		return fmt.Errorf("%q: names are exact, no wildcards (interLink's chart runs the Virtual Kubelet as system:serviceaccount:<namespace>:<nodeName>: list each one)", n)
	}
	return nil
}

// includes reports whether the requester is one of the Virtual Kubelet's identities.
func (v VKIdentities) includes(u authenticationv1.UserInfo) bool {
	if slices.Contains(v.Users, u.Username) {
		return true
	}
	return slices.ContainsFunc(u.Groups, func(g string) bool { return slices.Contains(v.Groups, g) })
}

// changedVKAnnotations are the vkAnnotationKeys an update adds or gives a new value.
// Removing one is not listed: it takes shell away from the job, never adds any.
func changedVKAnnotations(oldPod, newPod *corev1.Pod) []string {
	var changed []string
	for _, k := range vkAnnotationKeys {
		v, set := newPod.Annotations[k]
		if was, had := oldPod.Annotations[k]; set && (!had || was != v) {
			changed = append(changed, k)
		}
	}
	return changed
}

// vkAnnotationRefusal is the message of an update that changes keys the requester may
// not write; reason is why the pod so changed could not be created by them.
func vkAnnotationRefusal(keys []string, requester, reason string) string {
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = fmt.Sprintf("%q", k)
	}
	what, it := "annotation "+quoted[0], "it"
	if len(quoted) > 1 {
		what, it = "annotations "+strings.Join(quoted, " and "), "them"
	}
	return fmt.Sprintf("%s of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens %s to; %s may not (%s)",
		what, it, requester, reason)
}
