package authorizer

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// Subject is the identity a decision is reviewed for.
type Subject struct {
	Username string              `json:"username"`
	UID      string              `json:"uid"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra"`
}

// ServiceAccountSubject is the identity Kubernetes gives a pod: its service account, in
// the groups every service account of that namespace is in. interLink only knows the
// Virtual Kubelet that forwards the pod, so the pod itself must carry the identity.
func ServiceAccountSubject(pod *corev1.Pod) Subject {
	name := pod.Spec.ServiceAccountName
	if name == "" {
		name = pod.Spec.DeprecatedServiceAccount
	}
	return serviceAccountSubject(pod.Namespace, name)
}

// serviceAccountSubject is the identity of service account name ("": default) in
// namespace ns.
func serviceAccountSubject(ns, name string) Subject {
	if name == "" {
		name = "default"
	}
	return Subject{
		Username: serviceaccount.MakeUsername(ns, name),
		Groups:   []string{serviceaccount.AllServiceAccountsGroup, serviceaccount.MakeNamespaceGroupName(ns), "system:authenticated"},
		Extra:    map[string][]string{},
	}
}

// inputUser is the optional identity a trusted caller asserts in input.user.
type inputUser struct {
	Username string              `json:"username"`
	UID      string              `json:"uid"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra"`
}

func (u inputUser) subject() (Subject, error) {
	if u.Username == "" {
		return Subject{}, fmt.Errorf("input.user.username is required when input.user is given")
	}
	groups := slices.Clone(canonical(u.Groups))
	if groups == nil {
		groups = []string{}
	}
	extra := make(map[string][]string, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = append([]string(nil), v...)
	}
	return Subject{Username: u.Username, UID: u.UID, Groups: groups, Extra: extra}, nil
}

// canonical is the one canonical form of a group list (and of extra values): sorted, v
// itself when it already is, else a sorted copy. Reviews do not depend on the order, so
// neither may subjects or review cache keys.
func canonical(v []string) []string {
	if slices.IsSorted(v) {
		return v
	}
	return slices.Sorted(slices.Values(v))
}
