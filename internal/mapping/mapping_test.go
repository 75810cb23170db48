package mapping

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		pairs   []string
		wantErr string
		lookups map[string]string // tenant -> group; "" = unmapped
	}{
		{name: "none", lookups: map[string]string{"a": ""}},
		{
			name:    "exact and fallback",
			pairs:   []string{"tenant-a=a.interlink.io", "*=interlink.io"},
			lookups: map[string]string{"tenant-a": "a.interlink.io", "tenant-b": "interlink.io", "*": "interlink.io"},
		},
		{name: "no fallback", pairs: []string{"tenant-a=a.io"}, lookups: map[string]string{"tenant-a": "a.io", "tenant-b": ""}},
		{name: "spaces trimmed", pairs: []string{" tenant-a = a.io "}, lookups: map[string]string{"tenant-a": "a.io"}},
		{name: "same pair twice", pairs: []string{"a=a.io", "a=a.io"}, lookups: map[string]string{"a": "a.io"}},
		{name: "missing =", pairs: []string{"tenant-a"}, wantErr: `mapping "tenant-a": want tenant=group`},
		{name: "empty group", pairs: []string{"tenant-a="}, wantErr: "want tenant=group"},
		{name: "empty tenant", pairs: []string{"=a.io"}, wantErr: "want tenant=group"},
		{name: "bad group", pairs: []string{"a=Not_A_Group"}, wantErr: `group "Not_A_Group" is not a valid API group`},
		{name: "conflict", pairs: []string{"a=a.io", "a=b.io"}, wantErr: `tenant "a" is already mapped to "a.io"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.pairs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want %q", tt.pairs, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.pairs, err)
			}
			for tenant, want := range tt.lookups {
				got, ok := m.Group(tenant)
				if ok != (want != "") || got != want {
					t.Errorf("Group(%q) = %q, %v; want %q", tenant, got, ok, want)
				}
			}
		})
	}
}

// Named ignores the fallback: an OffloadTenant's group may differ from it.
func TestNamed(t *testing.T) {
	m, err := Parse([]string{"tenant-a=a.interlink.io", "*=interlink.io"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tenant, want string }{
		{"tenant-a", "a.interlink.io"},
		{"tenant-b", ""},
		{"*", ""},
	} {
		got, ok := m.Named(tc.tenant)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("Named(%q) = %q, %v; want %q", tc.tenant, got, ok, tc.want)
		}
	}
}

func TestTenant(t *testing.T) {
	const key = "interlink.io/tenant"
	tests := []struct {
		name   string
		ns     string
		labels map[string]string
		want   string
	}{
		{"label wins", "team-a", map[string]string{key: "tenant-b"}, "tenant-b"},
		{"no label", "team-a", nil, "team-a"},
		{"other label", "team-a", map[string]string{"other": "x"}, "team-a"},
		{"empty label", "team-a", map[string]string{key: ""}, "team-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Tenant(tt.ns, tt.labels, key); got != tt.want {
				t.Errorf("Tenant() = %q, want %q", got, tt.want)
			}
		})
	}
}
