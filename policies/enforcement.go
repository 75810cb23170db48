package policies

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Enforcement actions (issue 42): data.interlink.enforcement sets, per rule and
// optionally per front door, what a violation of the rule does: deny (the default),
// warn (allowed, the message returned) or audit (allowed silently). Both of the latter
// are counted and logged as "would deny". The data is checked here at every load, so
// that a mistyped action, rule or front door is a load error (a refused reload, a
// refused bundle), never silently read as deny, and the safety rules are never relaxed
// without the operator's flag.

// Actions a rule's violations can take.
const (
	ActionDeny  = "deny"
	ActionWarn  = "warn"
	ActionAudit = "audit"
)

// Front doors, as input.front_door names them.
const (
	FrontDoorRelay     = "relay"
	FrontDoorAdmission = "admission"
	FrontDoorDataAPI   = "data_api"
)

// FrontDoors are the values of input.front_door.
var FrontDoors = []string{FrontDoorRelay, FrontDoorAdmission, FrontDoorDataAPI}

// BuiltinRules are the default policy's rules that refuse pods, by their directory
// name under policies/rules/ (TestBuiltinRulesAreTheDirectories): what a violation's
// "rule" names, besides site.<name> (a site package) and OwnPackageRule.
var BuiltinRules = []string{"caps", "hpc", "images", "protected-taints", "quota", "restricted-annotations", "review", "tenant-isolation"}

// SafetyRules cannot be set below deny without Options.AllowRelaxingSafetyRules: the
// review (RBAC, the bridge's source of truth) and the HPC rules (what reaches a job
// script or a batch system's options).
var SafetyRules = []string{"hpc", "review"}

// OwnPackageRule names the violations a site adds to package interlink.authz itself.
const OwnPackageRule = "interlink.authz"

// enforcementKey is where data sets the actions.
const enforcementKey = "enforcement"

// checkEnforcement checks data.interlink.enforcement: an object whose keys are rule
// names and whose values are an action, or an object of actions by front door and
// "default". Every problem is reported, sorted.
func checkEnforcement(data map[string]any, allowRelaxing bool) error {
	il, ok := data["interlink"].(map[string]any)
	if !ok {
		return nil
	}
	raw, ok := il[enforcementKey]
	if !ok {
		return nil
	}
	rules, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("data.interlink.%s must be an object of rule names, not %s", enforcementKey, jsonKind(raw))
	}
	var problems []string
	for rule, v := range rules {
		if err := validRuleName(rule); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		settings := map[string]any{"": v} // "": every front door
		if obj, ok := v.(map[string]any); ok {
			settings = obj
		}
		for door, a := range settings {
			where := fmt.Sprintf("data.interlink.%s[%q]", enforcementKey, rule)
			if door != "" {
				where += fmt.Sprintf(".%s", door)
				if door != "default" && !slices.Contains(FrontDoors, door) {
					problems = append(problems, fmt.Sprintf("%s: unknown front door %q (want default, %s)", where, door, strings.Join(FrontDoors, ", ")))
					continue
				}
			}
			action, ok := a.(string)
			if !ok || (action != ActionDeny && action != ActionWarn && action != ActionAudit) {
				problems = append(problems, fmt.Sprintf("%s: %s is not an action (deny, warn or audit)", where, describe(a)))
				continue
			}
			if action != ActionDeny && slices.Contains(SafetyRules, rule) && !allowRelaxing {
				problems = append(problems, fmt.Sprintf("%s: %s is a safety rule and cannot be set to %s without --policies.allow-relaxing-safety-rules", where, rule, action))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return errors.New(strings.Join(problems, "; "))
}

// validRuleName accepts a built-in rule, site.<name> and OwnPackageRule.
func validRuleName(rule string) error {
	switch {
	case slices.Contains(BuiltinRules, rule), rule == OwnPackageRule:
		return nil
	case strings.HasPrefix(rule, "site.") && len(rule) > len("site."):
		return nil
	}
	return fmt.Errorf("data.interlink.%s: unknown rule %q (want one of %s, %s or site.<package>)", enforcementKey, rule, strings.Join(BuiltinRules, ", "), OwnPackageRule)
}

// jsonKind names a decoded JSON value's type.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "a number"
}

func describe(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return jsonKind(v)
}
