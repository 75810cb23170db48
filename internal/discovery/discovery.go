// Package discovery generates the objects that make sar-bridge's RBAC resources known to
// the Kubernetes API: for each API group, CustomResourceDefinitions for pods.<group> and
// nodes.<group>, so that `kubectl auth can-i` and RBAC tools resolve them, and a
// ValidatingAdmissionPolicy with its binding that refuses every object of them, since
// they are names for RBAC only and nothing may be stored.
//
// The objects are plain maps (the CRD's Go types live in k8s.io/apiextensions-apiserver,
// far too heavy for this), written out with sigs.k8s.io/yaml; the tests decode them
// strictly into the API's types.
package discovery

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Kinds of the CRDs. Not "Pod" and "Node": a kind that reads like the core ones would
// make `kubectl explain`, audit logs and RBAC tools ambiguous.
const (
	PodKind  = "OffloadPod"
	NodeKind = "OffloadNode"
)

// Labels every generated object carries.
var Labels = map[string]string{
	"app.kubernetes.io/name":      "sar-bridge",
	"app.kubernetes.io/component": "discovery",
}

// PolicyName is the name of the ValidatingAdmissionPolicy (and of its binding) of group.
func PolicyName(group string) string { return "sar-bridge-discovery." + group }

// Message is the refusal of the admission policy: why the type exists and why it stores
// nothing.
func Message(group string) string {
	return fmt.Sprintf("pods.%[1]s and nodes.%[1]s exist only as names for RBAC: sar-bridge asks the API server whether a subject may create pods.%[1]s (and use nodes.%[1]s) before it offloads a pod; no object of them is stored", group)
}

// ValidateGroup refuses what cannot be a CRD's API group: a DNS subdomain with at least
// one dot (the API server's own rule for CRDs), short enough for the names made from it.
func ValidateGroup(group string) error {
	if errs := validation.IsDNS1123Subdomain(group); len(errs) > 0 {
		return fmt.Errorf("group %q is not a valid API group: %s", group, strings.Join(errs, "; "))
	}
	if !strings.Contains(group, ".") {
		return fmt.Errorf("group %q is not a valid API group for a CustomResourceDefinition: it needs at least one dot (e.g. interlink.io)", group)
	}
	// The longest name made from it is the policy's.
	if n := len(PolicyName(group)); n > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("group %q is too long: the policy name %s would be %d characters, at most %d are allowed", group, PolicyName(group), n, validation.DNS1123SubdomainMaxLength)
	}
	return nil
}

// Objects returns, for each group in sorted order (duplicates once), its two CRDs, the
// admission policy and its binding.
func Objects(groups []string) ([]map[string]any, error) {
	if len(groups) == 0 {
		return nil, errors.New("no API group")
	}
	var errs []error
	for _, g := range groups {
		if err := ValidateGroup(g); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	groups = slices.Clone(groups)
	slices.Sort(groups)
	groups = slices.Compact(groups)
	var objs []map[string]any
	for _, g := range groups {
		objs = append(objs,
			crd(g, "pods", PodKind, fmt.Sprintf("The right to offload a pod through sar-bridge: grant create (delete, get) on pods.%s in a namespace. A name for RBAC only; no object is stored.", g)),
			crd(g, "nodes", NodeKind, fmt.Sprintf("The right to use a virtual node through sar-bridge (--review.node-access): grant use on nodes.%s named after the node. A name for RBAC only; no object is stored.", g)),
			policy(g),
			binding(g),
		)
	}
	return objs, nil
}

// YAML is Objects as a multi-document YAML stream, for `kubectl apply -f -`.
func YAML(groups []string) ([]byte, error) {
	objs, err := Objects(groups)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return []byte(b.String()), nil
}

func metadata(name string) map[string]any {
	labels := make(map[string]any, len(Labels))
	for k, v := range Labels {
		labels[k] = v
	}
	return map[string]any{"name": name, "labels": labels}
}

func crd(group, plural, kind, description string) map[string]any {
	return map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   metadata(plural + "." + group),
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{
				"kind":     kind,
				"listKind": kind + "List",
				"plural":   plural,
				"singular": strings.ToLower(kind),
			},
			"versions": []any{map[string]any{
				"name":    "v1",
				"served":  true,
				"storage": true,
				// No field is kept (no x-kubernetes-preserve-unknown-fields): even an
				// object that slipped past the policy would be empty.
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type":        "object",
					"description": description,
				}},
			}},
		},
	}
}

func policy(group string) map[string]any {
	return map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingAdmissionPolicy",
		"metadata":   metadata(PolicyName(group)),
		"spec": map[string]any{
			// An error evaluating the policy refuses too.
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{
				"resourceRules": []any{map[string]any{
					"apiGroups":   []any{group},
					"apiVersions": []any{"*"},
					"operations":  []any{"CREATE", "UPDATE"},
					"resources":   []any{"pods", "nodes"},
				}},
			},
			"validations": []any{map[string]any{
				"expression": "false",
				"message":    Message(group),
				"reason":     "Forbidden",
			}},
		},
	}
}

func binding(group string) map[string]any {
	return map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingAdmissionPolicyBinding",
		"metadata":   metadata(PolicyName(group)),
		"spec": map[string]any{
			"policyName":        PolicyName(group),
			"validationActions": []any{"Deny"},
		},
	}
}
