package rbac

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The embedded objects read as what the post-renderer needs. What they grant is asserted
// against a real API server by the e2e tests (TestManifestsBaseClusterRole, TestChartRBAC).
func TestEmbedded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules func() ([]rbacv1.PolicyRule, error)
		want  rbacv1.PolicyRule // one rule it must hold
	}{
		{"ClusterRole", ClusterRoleRules, rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}}},
		{"Role", LeaseRoleRules, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.rules()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(got, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.APIGroups, tc.want.APIGroups) && slices.Equal(r.Resources, tc.want.Resources) && slices.Equal(r.Verbs, tc.want.Verbs)
			}) {
				t.Errorf("rules %+v lack %+v", got, tc.want)
			}
		})
	}
}

func TestRules(t *testing.T) {
	const head = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n"
	for _, tc := range []struct {
		name, data, kind, wantErr string
	}{
		{name: "a Role", data: head + "rules: [{apiGroups: [''], resources: [pods], verbs: [get]}]", kind: "Role"},
		{name: "another kind", data: head + "rules: [{apiGroups: [''], resources: [pods], verbs: [get]}]", kind: "ClusterRole",
			wantErr: "f.yaml: a rbac.authorization.k8s.io/v1 Role, want a rbac.authorization.k8s.io/v1 ClusterRole"},
		{name: "another API version", data: "apiVersion: rbac.authorization.k8s.io/v1beta1\nkind: Role\nrules: [{verbs: [get]}]", kind: "Role",
			wantErr: "f.yaml: a rbac.authorization.k8s.io/v1beta1 Role, want a rbac.authorization.k8s.io/v1 Role"},
		{name: "a misspelt field", data: head + "rules: [{apiGroups: [''], resources: [pods], resourceName: [x], verbs: [get]}]", kind: "Role",
			wantErr: `f.yaml: error unmarshaling JSON: while decoding JSON: json: unknown field "resourceName"`},
		{name: "no rules", data: head + "rules: []", kind: "Role", wantErr: "f.yaml: no rules"},
		{name: "aggregated", data: "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\naggregationRule: {clusterRoleSelectors: [{}]}\nrules: [{verbs: [get]}]", kind: "ClusterRole",
			wantErr: "f.yaml: an aggregationRule: the bridge's rules are listed, not aggregated"},
		{name: "not YAML", data: "rules: [", kind: "Role", wantErr: "f.yaml: error converting YAML to JSON: yaml: line 1: did not find expected node content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rules("f.yaml", []byte(tc.data), tc.kind)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0].Verbs[0] != "get" {
				t.Fatalf("rules %+v, %v", got, err)
			}
		})
	}
}
