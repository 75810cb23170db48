package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Defaults of interLink's Virtual Kubelet: the label of its node and the taint it puts on it.
const (
	DefaultNodeSelector = "virtual-node.interlink/type=virtual-kubelet"
	DefaultTaintKey     = "virtual-node.interlink/no-schedule"
)

// NodeGetter finds a node by name; nil and no error when the cluster has none of that name.
type NodeGetter interface {
	Node(ctx context.Context, name string) (*corev1.Node, error)
}

// Targets says which pods aim at a virtual node.
type Targets struct {
	selector labels.Selector
	// positive are the selector's requirements a pod's node selection can imply
	// (=, ==, in, exists); the others cannot be told from a pod.
	positive []labels.Requirement
	taintKey string
}

// NewTargets parses a virtual-node label selector (e.g. DefaultNodeSelector) and the key
// of the virtual nodes' taint. The selector needs at least one requirement a pod can
// name (key=value, key in (...), or key), so a pod's nodeSelector can be matched to it.
func NewTargets(nodeSelector, taintKey string) (Targets, error) {
	sel, err := labels.Parse(nodeSelector)
	if err != nil {
		return Targets{}, fmt.Errorf("node selector %q: %w", nodeSelector, err)
	}
	reqs, _ := sel.Requirements()
	var positive []labels.Requirement
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In, selection.Exists:
			positive = append(positive, r)
		}
	}
	if len(positive) == 0 {
		return Targets{}, fmt.Errorf("node selector %q: needs a requirement a pod can select on (key=value, key in (...), or key)", nodeSelector)
	}
	if taintKey == "" {
		return Targets{}, errors.New("the virtual nodes' taint key must not be empty")
	}
	return Targets{selector: sel, positive: positive, taintKey: taintKey}, nil
}

// IsVirtual reports whether a node is a virtual node.
func (t Targets) IsVirtual(n *corev1.Node) bool {
	return n != nil && t.selector.Matches(labels.Set(n.Labels))
}

// nodeIsVirtual looks a node up by name. A node the cluster does not know (yet) counts
// as virtual: it may register as one later, and the pod would already be bound to it.
func (t Targets) nodeIsVirtual(ctx context.Context, nodes NodeGetter, name string) (bool, error) {
	n, err := nodes.Node(ctx, name)
	if err != nil {
		return false, fmt.Errorf("looking up node %q: %w", name, err)
	}
	return n == nil || t.IsVirtual(n), nil
}

// PodTargets reports whether a pod aims at a virtual node, and how:
//   - spec.nodeName names a virtual node (then nothing else matters: the pod goes there);
//   - its nodeSelector, or every term of its required node affinity, implies the
//     virtual-node selector (names the label with a value the selector accepts), or
//     an affinity term picks only virtual nodes by name;
//   - it tolerates the virtual nodes' taint: a toleration of that key, or a keyless
//     "Exists" toleration, which tolerates every taint.
//
// Pods that could only reach a virtual node through the scheduler are decided again when
// they are bound (pods/binding).
func (t Targets) PodTargets(ctx context.Context, nodes NodeGetter, pod *corev1.Pod) (string, error) {
	if name := pod.Spec.NodeName; name != "" {
		virtual, err := t.nodeIsVirtual(ctx, nodes, name)
		if err != nil || !virtual {
			return "", err
		}
		return fmt.Sprintf("spec.nodeName %q is a virtual node", name), nil
	}
	if t.impliedBy(selectorExpressions(pod.Spec.NodeSelector)) {
		return "spec.nodeSelector selects virtual nodes", nil
	}
	ok, err := t.affinityTargets(ctx, nodes, pod)
	if err != nil {
		return "", err
	}
	if ok {
		return "required node affinity selects only virtual nodes", nil
	}
	for _, tol := range pod.Spec.Tolerations {
		if tol.Key == t.taintKey {
			return fmt.Sprintf("it tolerates the virtual node taint %q", t.taintKey), nil
		}
		if tol.Key == "" && tol.Operator == corev1.TolerationOpExists {
			return "a toleration without key and operator Exists tolerates every taint", nil
		}
	}
	return "", nil
}

// affinityTargets reports a required node affinity whose every term (they are ORed)
// reaches only virtual nodes. The pod's nodeSelector applies together with each term.
func (t Targets) affinityTargets(ctx context.Context, nodes NodeGetter, pod *corev1.Pod) (bool, error) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false, nil
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false, nil
	}
	base := selectorExpressions(pod.Spec.NodeSelector)
	for _, term := range terms {
		ok, err := t.termTargets(ctx, nodes, term, base)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func (t Targets) termTargets(ctx context.Context, nodes NodeGetter, term corev1.NodeSelectorTerm, base []corev1.NodeSelectorRequirement) (bool, error) {
	if t.impliedBy(append(slices.Clone(base), term.MatchExpressions...)) {
		return true, nil
	}
	for _, f := range term.MatchFields {
		if f.Key != "metadata.name" || f.Operator != corev1.NodeSelectorOpIn || len(f.Values) == 0 {
			continue
		}
		all := true
		for _, name := range f.Values {
			virtual, err := t.nodeIsVirtual(ctx, nodes, name)
			if err != nil {
				return false, err
			}
			all = all && virtual
		}
		if all {
			return true, nil
		}
	}
	return false, nil
}

// impliedBy reports whether every node that satisfies all of exprs satisfies each
// positive requirement of the selector.
func (t Targets) impliedBy(exprs []corev1.NodeSelectorRequirement) bool {
	if len(exprs) == 0 {
		return false
	}
	for _, r := range t.positive {
		if !slices.ContainsFunc(exprs, func(e corev1.NodeSelectorRequirement) bool { return implies(e, r) }) {
			return false
		}
	}
	return true
}

// implies reports whether a node satisfying e satisfies r.
func implies(e corev1.NodeSelectorRequirement, r labels.Requirement) bool {
	if e.Key != r.Key() {
		return false
	}
	switch e.Operator {
	case corev1.NodeSelectorOpIn:
		if r.Operator() == selection.Exists {
			return len(e.Values) > 0
		}
		return len(e.Values) > 0 && !slices.ContainsFunc(e.Values, func(v string) bool { return !r.Values().Has(v) })
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		return r.Operator() == selection.Exists
	}
	return false
}

// selectorExpressions turns a nodeSelector map into the equivalent In expressions.
func selectorExpressions(m map[string]string) []corev1.NodeSelectorRequirement {
	out := make([]corev1.NodeSelectorRequirement, 0, len(m))
	for k, v := range m {
		out = append(out, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}})
	}
	return out
}

// addsToleration reports whether newPod has a toleration oldPod lacks. Tolerations are
// compared by what they tolerate (key, operator, value, effect); tolerationSeconds is
// the only part of an existing toleration an update may change.
func addsToleration(oldPod, newPod *corev1.Pod) bool {
	for _, n := range newPod.Spec.Tolerations {
		if !slices.ContainsFunc(oldPod.Spec.Tolerations, func(o corev1.Toleration) bool { return sameToleration(o, n) }) {
			return true
		}
	}
	return false
}

func sameToleration(a, b corev1.Toleration) bool {
	op := func(o corev1.TolerationOperator) corev1.TolerationOperator {
		if o == "" {
			return corev1.TolerationOpEqual
		}
		return o
	}
	return a.Key == b.Key && op(a.Operator) == op(b.Operator) && a.Value == b.Value && a.Effect == b.Effect
}
