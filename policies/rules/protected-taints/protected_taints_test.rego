# Protected taints (policies/rules/protected-taints): its tests, in the package of the decision's tests,
# whose fixtures (base, with_spec, ...) are in policies/rego/authz_test.rego.
package interlink.authz_test

import data.interlink.authz

test_taint_exists_denied_even_for_allowed_user if {
	inp := tol({"key": "hpc.example/reserved", "operator": "Exists", "effect": "NoSchedule"})
	not authz.allow with input as inp with data.interlink.protected_taints as protected
	authz.deny == {"toleration \"hpc.example/reserved\" with operator Exists covers protected taint \"hpc.example/reserved\" and is not allowed for any subject (subject \"system:serviceaccount:team-a:runner\")"} with input as inp
		with data.interlink.protected_taints as protected
}

test_taint_exists_denied_even_for_allowed_group if {
	inp := object.union(tol({"key": "hpc.example/reserved", "operator": "Exists"}), {"subject": gpu_group_subject})
	not authz.allow with input as inp with data.interlink.protected_taints as protected
}

test_taint_equal_by_allowed_user_allowed if {
	inp := tol({"key": "hpc.example/reserved", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
	authz.allow with input as inp with data.interlink.protected_taints as protected
}

test_taint_equal_default_operator_by_allowed_group_allowed if {
	inp := object.union(tol({"key": "hpc.example/reserved", "value": "gpu"}), {"subject": gpu_group_subject})
	authz.allow with input as inp with data.interlink.protected_taints as protected
}

test_taint_equal_by_other_subject_denied if {
	inp := object.union(tol({"key": "hpc.example/reserved", "value": "gpu"}), {"subject": other_subject})
	authz.deny == {"toleration \"hpc.example/reserved\"=\"gpu\" of a protected taint is not allowed for subject \"alice\""} with input as inp
		with data.interlink.protected_taints as protected
}

test_taint_equal_empty_operator_string_is_equal if {
	inp := object.union(tol({"key": "hpc.example/reserved", "operator": "", "value": "gpu"}), {"subject": other_subject})
	not authz.allow with input as inp with data.interlink.protected_taints as protected
}

test_taint_untracked_key_allowed if {
	authz.allow with input as tol({"key": "other/taint", "operator": "Exists"}) with data.interlink.protected_taints as protected
	authz.allow with input as object.union(tol({"key": "other/taint", "value": "gpu"}), {"subject": other_subject})
		with data.interlink.protected_taints as protected
}

test_taint_protected_key_other_value_allowed if {
	inp := object.union(tol({"key": "hpc.example/reserved", "operator": "Equal", "value": "cpu"}), {"subject": other_subject})
	authz.allow with input as inp with data.interlink.protected_taints as protected
}

test_taint_keyless_exists_denied_when_protected_configured if {
	inp := tol({"operator": "Exists"})
	not authz.allow with input as inp with data.interlink.protected_taints as protected
	not authz.allow with input as tol({"key": "", "operator": "Exists"}) with data.interlink.protected_taints as protected
}

test_taint_keyless_exists_allowed_without_protected_taints if {
	authz.allow with input as tol({"operator": "Exists"})
	authz.allow with input as tol({"operator": "Exists"}) with data.interlink.protected_taints as []
}

test_taint_unknown_operator_on_protected_key_denied if {
	inp := tol({"key": "hpc.example/reserved", "operator": "Like", "value": "gpu"})
	not authz.allow with input as inp with data.interlink.protected_taints as protected
}

test_taint_rules_ignored_for_delete if {
	inp := object.union(tol({"operator": "Exists"}), {"operation": "delete"})
	authz.allow with input as inp with data.interlink.protected_taints as protected
}

test_taint_non_string_operator_is_equal if {
	inp := object.union(tol({"key": "hpc.example/reserved", "operator": 7, "value": "gpu"}), {"subject": other_subject})
	authz.deny == {"toleration \"hpc.example/reserved\"=\"gpu\" of a protected taint is not allowed for subject \"alice\""} with input as inp
		with data.interlink.protected_taints as protected
}

test_taint_protected_without_value_matches_empty_value if {
	inp := object.union(tol({"key": "hpc.example/reserved"}), {"subject": other_subject})
	authz.deny == {"toleration \"hpc.example/reserved\"=\"\" of a protected taint is not allowed for subject \"alice\""} with input as inp
		with data.interlink.protected_taints as [{"key": "hpc.example/reserved"}]
}

test_taint_malformed_protected_entries_ignored if {
	authz.allow with input as tol({"operator": "Exists"}) with data.interlink.protected_taints as [1, {"key": 2}, {"key": ""}]
	authz.allow with input as tol({"key": "k", "operator": "Exists"}) with data.interlink.protected_taints as {"a": {"key": "k"}}
}
