package policies

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func TestCheckEnforcement(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    string
		relax   bool
		wantErr string // "" for none; else a part of the error
	}{
		{"none", `{}`, false, ""},
		{"actions", `{"interlink": {"enforcement": {"caps": "warn", "images": {"default": "audit", "admission": "warn", "relay": "deny"}, "site.gpu": "audit", "interlink.authz": "warn"}}}`, false, ""},
		{"safety rules at deny", `{"interlink": {"enforcement": {"hpc": "deny", "review": {"admission": "deny"}}}}`, false, ""},
		{"hpc relaxed", `{"interlink": {"enforcement": {"hpc": "warn"}}}`, false, `data.interlink.enforcement["hpc"]: hpc is a safety rule and cannot be set to warn without --policies.allow-relaxing-safety-rules`},
		{"review relaxed at one door", `{"interlink": {"enforcement": {"review": {"data_api": "audit"}}}}`, false, `data.interlink.enforcement["review"].data_api: review is a safety rule and cannot be set to audit`},
		{"relaxed with the flag", `{"interlink": {"enforcement": {"hpc": "audit", "review": "warn"}}}`, true, ""},
		{"not an object", `{"interlink": {"enforcement": ["caps"]}}`, false, "data.interlink.enforcement must be an object of rule names, not an array"},
		{"unknown rule", `{"interlink": {"enforcement": {"cap": "warn"}}}`, false, `unknown rule "cap"`},
		{"bare site", `{"interlink": {"enforcement": {"site.": "warn"}}}`, false, `unknown rule "site."`},
		{"unknown action", `{"interlink": {"enforcement": {"caps": "off"}}}`, false, `data.interlink.enforcement["caps"]: "off" is not an action (deny, warn or audit)`},
		{"action not a string", `{"interlink": {"enforcement": {"caps": {"default": true}}}}`, false, `data.interlink.enforcement["caps"].default: a boolean is not an action`},
		{"unknown front door", `{"interlink": {"enforcement": {"caps": {"webhook": "warn"}}}}`, false, `unknown front door "webhook"`},
		{"every problem", `{"interlink": {"enforcement": {"caps": 1, "quota": null}}}`, false, `data.interlink.enforcement["caps"]: a number is not an action (deny, warn or audit); data.interlink.enforcement["quota"]: null is not an action`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := New(context.Background(), Options{DataFile: writeFile(t, dir, "data.json", tc.data), AllowRelaxingSafetyRules: tc.relax})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("load refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("load error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestBuiltinRulesAreTheDirectories: BuiltinRules names every rule directory whose rule
// has violations, and nothing else.
func TestBuiltinRulesAreTheDirectories(t *testing.T) {
	var dirs []string
	for name, r := range loadRules(t) {
		if r.Violations != "" {
			dirs = append(dirs, name)
		}
	}
	slices.Sort(dirs)
	if !slices.Equal(dirs, BuiltinRules) {
		t.Errorf("rule directories with violations %q; BuiltinRules %q", dirs, BuiltinRules)
	}
	for _, r := range SafetyRules {
		if !slices.Contains(BuiltinRules, r) {
			t.Errorf("safety rule %s is no built-in rule", r)
		}
	}
}
