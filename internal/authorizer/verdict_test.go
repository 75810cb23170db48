package authorizer

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/open-policy-agent/opa/v1/ast"
)

// jsonOf is a decision's value as Go values (nil when there is none), for comparisons.
func jsonOf(v ast.Value) any {
	if v == nil {
		return nil
	}
	return ast.MustJSON(v)
}

func TestReadVerdict(t *testing.T) {
	decision := func(result any) Decision {
		return Decision{ID: "d", Result: ast.MustInterfaceToValue(result), Defined: true}
	}
	tests := []struct {
		name    string
		d       Decision
		want    Verdict
		wantErr string
	}{
		{name: "undefined", d: Decision{}, wantErr: "undefined"},
		{name: "boolean document", d: decision(true), wantErr: "a boolean, not an object"},
		{name: "no allowed", d: decision(map[string]any{"reason": "x"}), wantErr: `no boolean "allowed"`},
		{name: "allowed is a string", d: decision(map[string]any{"allowed": "true"}), wantErr: `no boolean "allowed"`},
		{name: "denied", d: decision(map[string]any{"allowed": false, "reason": "no binding", "modifications": "ignored"}),
			want: Verdict{Reason: "no binding"}},
		{name: "allowed without modifications", d: decision(map[string]any{"allowed": true, "reason": "ok"}),
			want: Verdict{Allowed: true, Reason: "ok"}},
		{name: "allowed with modifications", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{
			"pod_annotations": map[string]any{"b": "p-7"},
			"resource_limits": map[string]any{"main": map[string]any{"cpu": "1000m", "memory": json.Number("1073741824")}},
		}}), want: Verdict{Allowed: true, Modifications: Modifications{
			PodAnnotations: map[string]string{"b": "p-7"},
			ResourceLimits: limitsOf(map[string]map[string]string{"main": {"cpu": "1", "memory": "1073741824"}}),
		}}},
		{name: "run_as_user", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{
			"pod_annotations": map[string]any{}, "resource_limits": map[string]any{}, "run_as_user": json.Number("20001"),
		}}), want: Verdict{Allowed: true, Modifications: Modifications{PodAnnotations: map[string]string{}, ResourceLimits: limitsOf(map[string]map[string]string{}), RunAsUser: ptr(20001)}}},
		{name: "run_as_user 0", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": 0}}),
			want: Verdict{Allowed: true, Modifications: Modifications{RunAsUser: ptr(0)}}},
		{name: "run_as_user largest uid", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": json.Number("2147483647")}}),
			want: Verdict{Allowed: true, Modifications: Modifications{RunAsUser: ptr(2147483647)}}},
		{name: "run_as_user null is none", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": nil}}),
			want: Verdict{Allowed: true}},
		{name: "run_as_user ignored on a deny", d: decision(map[string]any{"allowed": false, "modifications": map[string]any{"run_as_user": "root"}}),
			want: Verdict{}},
		{name: "run_as_user a string", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": "20001"}}),
			wantErr: "modifications: run_as_user: a string, not a number"},
		{name: "run_as_user a boolean", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": true}}),
			wantErr: "modifications: run_as_user: a bool, not a number"},
		{name: "run_as_user an object", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": map[string]any{"uid": 1}}}),
			wantErr: "modifications: run_as_user: a map[string]interface {}, not a number"},
		{name: "run_as_user a fraction", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": json.Number("20001.5")}}),
			wantErr: "modifications: run_as_user: 20001.5 is not an integer uid"},
		{name: "run_as_user integral but not an integer literal", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": json.Number("20001.0")}}),
			wantErr: "modifications: run_as_user: 20001.0 is not an integer uid"},
		{name: "run_as_user in exponent form", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": json.Number("2e4")}}),
			wantErr: "modifications: run_as_user: 2e4 is not an integer uid"},
		{name: "run_as_user negative", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": -1}}),
			wantErr: "modifications: run_as_user: uid -1: must be between 0 and 2147483647, inclusive"},
		{name: "run_as_user over Kubernetes' range", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": json.Number("2147483648")}}),
			wantErr: "modifications: run_as_user: uid 2147483648: must be between 0 and 2147483647, inclusive"},
		{name: "run_as_user over int64", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{"run_as_user": json.Number("9223372036854775808")}}),
			wantErr: "modifications: run_as_user: 9223372036854775808 is not an integer uid"},
		{name: "modifications not an object", d: decision(map[string]any{"allowed": true, "modifications": []any{}}), wantErr: "modifications: a []interface {}"},
		{name: "annotation not a string", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{
			"pod_annotations": map[string]any{"b": 7}}}), wantErr: `pod_annotations: "b": a json.Number`},
		{name: "limits not an object", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{
			"resource_limits": map[string]any{"main": "1"}}}), wantErr: `resource_limits: container "main"`},
		{name: "limit not a quantity", d: decision(map[string]any{"allowed": true, "modifications": map[string]any{
			"resource_limits": map[string]any{"main": map[string]any{"cpu": "lots"}}}}), wantErr: `container "main", cpu: "lots"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadVerdict(tt.d)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error containing %q, got %v (%+v)", tt.wantErr, err, got)
				}
				if got.Allowed {
					t.Fatal("an error verdict allows")
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !equalVerdict(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func equalVerdict(a, b Verdict) bool {
	ja, _ := json.Marshal([]any{a.Allowed, a.Reason, a.Modifications.PodAnnotations, a.Modifications.ResourceLimits, a.Modifications.RunAsUser})
	jb, _ := json.Marshal([]any{b.Allowed, b.Reason, b.Modifications.PodAnnotations, b.Modifications.ResourceLimits, b.Modifications.RunAsUser})
	return string(ja) == string(jb)
}

func ptr(n int64) *int64 { return &n }

// limitsOf is limits per container as a front door receives them.
func limitsOf(m map[string]map[string]string) map[string]corev1.ResourceList {
	out := make(map[string]corev1.ResourceList, len(m))
	for name, limits := range m {
		list := corev1.ResourceList{}
		for r, q := range limits {
			list[corev1.ResourceName(r)] = resource.MustParse(q)
		}
		out[name] = list
	}
	return out
}
