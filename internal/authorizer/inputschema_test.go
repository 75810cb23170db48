package authorizer

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestInputSchemaIsWhatDecisionsBuild: a create of a tenant with a quota, onto a node,
// carries every member of InputSchema but the caller's user (honoured only from a caller
// that may impersonate it), and nothing else.
func TestInputSchemaIsWhatDecisionsBuild(t *testing.T) {
	e := newQuotaEnv(t, corev1.ResourceList{"pods": resource.MustParse("2")})
	rec := &recordingEvaluator{Evaluator: e.a.evaluator}
	e.a.evaluator = rec
	if allowed, reason := decideQuota(t, e.a, ChargeNothing, quotaPod("schema")); !allowed {
		t.Fatalf("denied: %s", reason)
	}
	in, ok := rec.last.(ast.Object)
	if !ok {
		t.Fatalf("input %v is not an object", rec.last)
	}
	var got []string
	for _, k := range in.Keys() {
		got = append(got, string(k.Value.(ast.String)))
	}
	var want []string
	for _, m := range InputSchema {
		if m.Name != "user" {
			want = append(want, m.Name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the input's members are %q; InputSchema declares %q", got, want)
	}
}

func TestDocsShowTheInputSchema(t *testing.T) {
	page, err := os.ReadFile("../../docs/reference/input.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := InputSchemaMarkdown(); !strings.Contains(string(page), want) {
		t.Errorf("docs/reference/input.md does not show the table authorizer.InputSchema makes; put this in it:\n%s", want)
	}
}
