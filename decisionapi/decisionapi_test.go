package decisionapi

import (
	"encoding/json"
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

func TestInputMarshal(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   Input
		want string
	}{
		{"pod only", Input{Pod: json.RawMessage(`{"metadata":{"name":"p"}}`)}, `{"pod":{"metadata":{"name":"p"}}}`},
		{"everything", Input{Operation: "create", Pod: map[string]any{}, Node: OnNode("vk-1"), User: &User{Username: "alice", Groups: []string{"g"}}},
			`{"operation":"create","pod":{},"node":{"name":"vk-1"},"user":{"username":"alice","groups":["g"]}}`},
		{"no node", Input{Operation: "status", Pod: map[string]any{}, Node: OnNode("")}, `{"operation":"status","pod":{}}`},
	} {
		got, err := tt.in.Marshal()
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: Marshal() = %s, %v; want %s", tt.name, got, err, tt.want)
		}
	}
}
