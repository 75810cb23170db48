package decisionapi

import (
	"slices"
	"testing"
)

func TestVerb(t *testing.T) {
	for _, tt := range []struct {
		operation, verb string
		ok              bool
	}{
		{"create", "create", true},
		{"delete", "delete", true},
		{"status", "get", true},
		{"get", "", false},
		{"", "", false},
	} {
		if verb, ok := Verb(tt.operation); verb != tt.verb || ok != tt.ok {
			t.Errorf("Verb(%q) = %q, %v; want %q, %v", tt.operation, verb, ok, tt.verb, tt.ok)
		}
	}
	if got := Operations(); !slices.Equal(got, []string{"create", "delete", "status"}) {
		t.Errorf("Operations() = %q", got)
	}
}

func TestPath(t *testing.T) {
	if got := PathParts(); !slices.Equal(got, []string{"interlink", "authz", "decision"}) {
		t.Errorf("PathParts() = %q", got)
	}
	if DataAPIPath != "/v1/data/interlink/authz/decision" {
		t.Errorf("DataAPIPath = %q", DataAPIPath)
	}
}
