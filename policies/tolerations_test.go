package policies

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestPodTolerations: tolerations by key as the default policy's rules read them
// (operator Equal when absent, empty or not a string; value "" when absent or not a
// string), keyless Exists counted, and null only where the list itself is mistyped.
func TestPodTolerations(t *testing.T) {
	const none = `{"equal": {}, "other": {}, "keyless_exists": 0}`
	for _, tc := range []struct {
		name, pod, want string
	}{
		{"interLink's", `{"spec": {"tolerations": [
			{"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"},
			{"key": "hpc.example/gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
			{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}}`,
			`{"equal": {"hpc.example/gpu": {"a100": true}}, "other": {"node.kubernetes.io/not-ready": true, "virtual-node.interlink/no-schedule": true}, "keyless_exists": 0}`},
		{"Equal by default", `{"spec": {"tolerations": [{"key": "k", "value": "a"}, {"key": "k", "operator": "", "value": "b"}, {"key": "k", "operator": 7, "value": "c"}, {"key": "k", "operator": null}]}}`,
			`{"equal": {"k": {"a": true, "b": true, "c": true, "": true}}, "other": {}, "keyless_exists": 0}`},
		{"a value that is not a string is empty", `{"spec": {"tolerations": [{"key": "k", "value": 1}, {"key": "j", "value": ["a"]}]}}`,
			`{"equal": {"k": {"": true}, "j": {"": true}}, "other": {}, "keyless_exists": 0}`},
		{"operators Kubernetes does not know", `{"spec": {"tolerations": [{"key": "k", "operator": "Like", "value": "a"}, {"key": "k", "operator": "exists"}]}}`,
			`{"equal": {}, "other": {"k": true}, "keyless_exists": 0}`},
		{"one key, two operators", `{"spec": {"tolerations": [{"key": "k", "operator": "Exists"}, {"key": "k", "value": "a"}]}}`,
			`{"equal": {"k": {"a": true}}, "other": {"k": true}, "keyless_exists": 0}`},
		{"keyless Exists", `{"spec": {"tolerations": [{"operator": "Exists"}, {"key": "", "operator": "Exists"}, {"key": null, "operator": "Exists"}, {"key": 5, "operator": "Exists"}]}}`,
			`{"equal": {}, "other": {"": true}, "keyless_exists": 4}`},
		{"keyless but not Exists", `{"spec": {"tolerations": [{"value": "a"}, {"key": "", "operator": "Equal"}, {"operator": "exists"}]}}`,
			`{"equal": {"": {"": true}}, "other": {}, "keyless_exists": 0}`},
		{"elements that are not objects", `{"spec": {"tolerations": [1, "k", null, [], {"key": "k", "operator": "Exists"}]}}`,
			`{"equal": {}, "other": {"k": true}, "keyless_exists": 0}`},
		{"no tolerations", `{"spec": {"containers": []}}`, none},
		{"null tolerations", `{"spec": {"tolerations": null}}`, none},
		{"no spec", `{"metadata": {"name": "p"}}`, none},
		{"tolerations not a list", `{"spec": {"tolerations": {"key": "k"}}}`, `null`},
		{"spec not an object", `{"spec": null}`, `null`},
		{"pod not an object", `[]`, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := ast.MustParseTerm(tc.pod).Value
			want := ast.MustParseTerm(tc.want).Value
			if got := PodTolerations(pod); ast.Compare(got, want) != 0 {
				t.Errorf("PodTolerations =\n %v\nwant\n %v", got, want)
			}
		})
	}
}
