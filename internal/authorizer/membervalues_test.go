package authorizer

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// TestMemberValuesKeyed: the subject and review members are built once per key, and two
// subjects or reviews that differ in any field (however their strings run together)
// never share a key, so never a value.
func TestMemberValuesKeyed(t *testing.T) {
	subjects := []Subject{
		{Username: "ab", UID: ""},
		{Username: "a", UID: "b"},
		{Username: "a", UID: "b", Groups: []string{""}},
		{Username: "a", UID: "b", Groups: []string{"g1", "g2"}},
		{Username: "a", UID: "b", Groups: []string{"g1g2"}},
		{Username: "a", UID: "b", Groups: []string{"g2", "g1"}},
		{Username: "a", UID: "b", Extra: map[string][]string{"k": {"v"}}},
		{Username: "a", UID: "b", Extra: map[string][]string{"k": {"v", ""}}},
		{Username: "a", UID: "b", Extra: map[string][]string{"k": {}, "v": {}}},
		{Username: "a", UID: "b", Extra: map[string][]string{"kv": {}}},
	}
	attrs := func(ns, verb string) *authorizationv1.ResourceAttributes {
		return &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "interlink.io", Resource: "pods"}
	}
	reviews := []reviewSummary{
		{Allowed: true, Reason: "r", Attributes: []*authorizationv1.ResourceAttributes{attrs("team-a", "create")}},
		{Allowed: true, Reason: "r", Attributes: []*authorizationv1.ResourceAttributes{attrs("team-acreate", "")}},
		{Allowed: false, Reason: "r", Attributes: []*authorizationv1.ResourceAttributes{attrs("team-a", "create")}},
		{Denied: true, Reason: "r", Attributes: []*authorizationv1.ResourceAttributes{attrs("team-a", "create")}},
		{Allowed: true, Reason: "r"},
		{Allowed: true, Reason: "r", Attributes: []*authorizationv1.ResourceAttributes{attrs("team-a", "create"), attrs("team-a", "get")}},
	}
	o := newObjectValues()
	seen := map[string]int{}
	for i, s := range subjects {
		k := string(subjectKey(s))
		if j, dup := seen[k]; dup {
			t.Errorf("subjects %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
		got := o.getFor("subject", subjectKey(s), func() ast.Value { return subjectValue(s) })
		if ast.Compare(got, subjectValue(s)) != 0 {
			t.Errorf("subject %d: cached %v, want %v", i, got, subjectValue(s))
		}
	}
	for i, r := range reviews {
		k := "review " + string(r.key())
		if j, dup := seen[k]; dup {
			t.Errorf("reviews %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
		got := o.getFor("review", r.key(), r.value)
		if ast.Compare(got, r.value()) != 0 {
			t.Errorf("review %d: cached %v, want %v", i, got, r.value())
		}
	}
	// A second decision of a subject gets the value built for the first.
	builds := 0
	for range 2 {
		o.getFor("subject", subjectKey(subjects[3]), func() ast.Value { builds++; return subjectValue(subjects[3]) })
	}
	if builds != 0 {
		t.Errorf("the subject's value was built %d more times, want 0", builds)
	}
}
