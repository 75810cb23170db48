package policies

import (
	"context"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// readmeExample is the example policy of opa-kubernetes-api-client's README, as
// published (Rego v0), so that it runs unchanged against the compatibility package.
const readmeExample = `package authz

import data.kubernetes.api.client

mutating_actions := {"update", "patch", "delete"}

# Deny mutating action unless user is in group owning the resource
deny[reason] {
    mutating_actions[input.spec.resourceAttributes.verb]

    cluster_resource := client.query_name_ns(
        input.spec.resourceAttributes.resource,
        input.spec.resourceAttributes.name,
        input.spec.resourceAttributes.namespace,
    )
    resource_owner := cluster_resource.metadata.labels.owner
    user_groups := {group | group := input.spec.user.group[_]}

    not user_groups[resource_owner]

    reason := sprintf("User %v not in group %v, has %v", [input.spec.user.name, resource_owner, user_groups])
}
`

// TestReadmeExampleOfOPAKubernetesAPIClient runs the library's README example over
// the embedded compatibility package, with the real built-ins over a fake cluster.
func TestReadmeExampleOfOPAKubernetesAPIClient(t *testing.T) {
	srcs, err := embeddedModules(false)
	if err != nil {
		t.Fatal(err)
	}
	modules := map[string]*ast.Module{}
	for name, src := range srcs {
		if modules[name], err = ast.ParseModuleWithOpts(src.path, src.text, ast.ParserOptions{RegoVersion: ast.RegoV1}); err != nil {
			t.Fatal(err)
		}
	}
	if modules["readme.rego"], err = ast.ParseModuleWithOpts("readme.rego", readmeExample, ast.ParserOptions{RegoVersion: ast.RegoV0}); err != nil {
		t.Fatal(err)
	}
	c := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithBuiltins(clusterBuiltinDecls)
	if c.Compile(modules); c.Failed() {
		t.Fatal(c.Errors)
	}
	cluster := &fakeCluster{objects: map[string][]map[string]any{
		"configmaps": {configMap("default", "owned", map[string]any{"owner": "team-a"}, nil)},
	}}
	review := func(verb, name string, groups ...any) map[string]any {
		return map[string]any{"spec": map[string]any{
			"resourceAttributes": map[string]any{"verb": verb, "resource": "configmaps", "name": name, "namespace": "default"},
			"user":               map[string]any{"name": "jane", "group": groups},
		}}
	}
	for _, tc := range []struct {
		name  string
		input map[string]any
		want  string // "" = no deny
	}{
		{"owner's group may delete", review("delete", "owned", "team-a", "dev"), ""},
		{"another group may not", review("update", "owned", "team-b"), "User jane not in group team-a"},
		{"reads are not checked", review("get", "owned", "team-b"), ""},
		{"absent object: nothing to own", review("delete", "missing", "team-b"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]func(*rego.Rego){rego.Compiler(c), rego.Query("x := data.authz.deny"), rego.Input(tc.input)}, ClusterBuiltins(cluster)...)
			rs, err := rego.New(opts...).Eval(context.Background())
			if err != nil || len(rs) != 1 {
				t.Fatalf("eval: %v, %v", rs, err)
			}
			deny := rs[0].Bindings["x"].([]any)
			switch {
			case tc.want == "" && len(deny) != 0:
				t.Fatalf("deny = %v, want none", deny)
			case tc.want != "" && (len(deny) != 1 || !strings.Contains(deny[0].(string), tc.want)):
				t.Fatalf("deny = %v, want %q", deny, tc.want)
			}
		})
	}
}
