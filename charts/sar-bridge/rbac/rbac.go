// Package rbac holds the bridge's own RBAC rules: the objects in this directory are their
// one source. manifests/base (and manifests/admission) install them through
// kustomization.yaml, the chart renders their rules under the release's names, and the
// interLink post-renderer reads the ones embedded here. go:embed cannot reach a parent
// directory, so the package sits next to the files rather than next to its users.
package rbac

import (
	_ "embed"
	"fmt"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

var (
	//go:embed clusterrole.yaml
	clusterRoleYAML []byte
	//go:embed role.yaml
	roleYAML []byte
)

// ClusterRoleRules are the rules of the bridge's ClusterRole (clusterrole.yaml).
func ClusterRoleRules() ([]rbacv1.PolicyRule, error) { return clusterRole() }

// LeaseRoleRules are the rules of the Role in the namespace of the quota reconciler's
// Lease (role.yaml).
func LeaseRoleRules() ([]rbacv1.PolicyRule, error) { return leaseRole() }

var (
	clusterRole = sync.OnceValues(func() ([]rbacv1.PolicyRule, error) {
		return rules("clusterrole.yaml", clusterRoleYAML, "ClusterRole")
	})
	leaseRole = sync.OnceValues(func() ([]rbacv1.PolicyRule, error) {
		return rules("role.yaml", roleYAML, "Role")
	})
)

// rules reads the rules of one RBAC object of kind. Strict: a misspelt field is an error
// rather than a rule that grants less (or, without its resourceNames, more) than written.
func rules(file string, data []byte, kind string) ([]rbacv1.PolicyRule, error) {
	// ClusterRole has every field of Role (and aggregationRule, which none here uses).
	var obj rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if obj.APIVersion != rbacv1.SchemeGroupVersion.String() || obj.Kind != kind {
		return nil, fmt.Errorf("%s: a %s %s, want a %s %s", file, obj.APIVersion, obj.Kind, rbacv1.SchemeGroupVersion, kind)
	}
	if obj.AggregationRule != nil {
		return nil, fmt.Errorf("%s: an aggregationRule: the bridge's rules are listed, not aggregated", file)
	}
	if len(obj.Rules) == 0 {
		return nil, fmt.Errorf("%s: no rules", file)
	}
	return obj.Rules, nil
}
