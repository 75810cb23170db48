# Caps (policies/rules/caps): its tests, in the package of the decision's tests,
# whose fixtures (base, with_spec, ...) are in policies/rego/authz_test.rego.
package interlink.authz_test

import data.interlink.authz

test_caps_under_largest_cap_allowed if {
	# cpu cap = max(4, 2000m) = 4; memory cap = max(8Gi, 16384Mi) = 16Gi,
	# so 12Gi exceeds team-a's cap but not the larger one.
	inp := one_container({"limits": {"cpu": "3500m", "memory": "12Gi"}})
	authz.allow with input as inp with data.interlink.limits as limits
}

test_caps_limit_over_cap_denied if {
	inp := one_container({"limits": {"cpu": "4.5", "memory": "1Gi"}})
	not authz.allow with input as inp with data.interlink.limits as limits
	authz.deny == {"container \"main\" sets cpu limit 4.5 over the cap 4 for group \"system:serviceaccounts:team-a\""} with input as inp
		with data.interlink.limits as limits
}

test_caps_equal_to_cap_allowed if {
	inp := one_container({"limits": {"cpu": "4000m", "memory": "17179869184"}})
	authz.allow with input as inp with data.interlink.limits as limits
}

test_caps_memory_bytes_over_cap_denied if {
	inp := one_container({"limits": {"memory": "17179869185"}})
	authz.deny == {"container \"main\" sets memory limit 17179869185 over the cap 16384Mi for group \"system:authenticated\""} with input as inp
		with data.interlink.limits as limits
}

test_caps_decimal_si_units if {
	# 17G < 16Gi (17179869184) < 18G
	authz.allow with input as one_container({"limits": {"memory": "17G"}}) with data.interlink.limits as limits
	not authz.allow with input as one_container({"limits": {"memory": "18G"}}) with data.interlink.limits as limits
	authz.allow with input as one_container({"limits": {"memory": "16000000k"}}) with data.interlink.limits as limits
}

test_caps_exponent_forms if {
	not authz.allow with input as one_container({"limits": {"cpu": "1e3"}}) with data.interlink.limits as limits
	authz.allow with input as one_container({"limits": {"cpu": "4e0"}}) with data.interlink.limits as limits
	authz.allow with input as one_container({"limits": {"cpu": "35E-1"}}) with data.interlink.limits as limits
}

test_caps_request_used_when_limit_absent if {
	inp := one_container({"requests": {"cpu": "8"}})
	authz.deny == {"container \"main\" requests cpu 8 over the cap 4 for group \"system:serviceaccounts:team-a\""} with input as inp
		with data.interlink.limits as limits
}

test_caps_request_used_per_resource if {
	# A memory limit does not hide an oversized cpu request.
	inp := one_container({"limits": {"memory": "1Gi"}, "requests": {"cpu": "5", "memory": "512Mi"}})
	authz.deny == {"container \"main\" requests cpu 5 over the cap 4 for group \"system:serviceaccounts:team-a\""} with input as inp
		with data.interlink.limits as limits
}

test_caps_limit_preferred_over_request if {
	inp := one_container({"limits": {"cpu": "2"}, "requests": {"cpu": "5"}})
	authz.allow with input as inp with data.interlink.limits as limits
}

test_caps_init_containers_checked if {
	inp := with_spec({"initContainers": [{"name": "setup", "resources": {"limits": {"memory": "32Gi"}}}]})
	authz.deny == {"container \"setup\" sets memory limit 32Gi over the cap 16384Mi for group \"system:authenticated\""} with input as inp
		with data.interlink.limits as limits
}

test_caps_every_container_named if {
	inp := with_spec({"containers": [
		{"name": "a", "resources": {"limits": {"cpu": "5"}}},
		{"name": "b", "resources": {"limits": {"cpu": "6"}}},
		{"name": "c", "resources": {"limits": {"cpu": "1"}}},
	]})
	d := authz.deny with input as inp with data.interlink.limits as limits
	count(d) == 2
	every name in ["a", "b"] {
		some m in d
		startswith(m, sprintf("container %q ", [name]))
	}
}

test_caps_none_when_no_group_capped if {
	inp := object.union(one_container({"limits": {"cpu": "1000", "memory": "1Pi"}}), {"subject": {"username": "u", "groups": ["unrelated"]}})
	authz.allow with input as inp with data.interlink.limits as limits
}

test_caps_only_capped_resource_enforced if {
	inp := one_container({"limits": {"cpu": "1", "memory": "1Pi"}})
	authz.allow with input as inp with data.interlink.limits as {team_group: {"cpu": "2"}}
	not authz.allow with input as one_container({"limits": {"cpu": "3"}}) with data.interlink.limits as {team_group: {"cpu": "2"}}
}

test_caps_absent_without_data if {
	authz.allow with input as one_container({"limits": {"cpu": "1000"}})
}

test_caps_invalid_quantity_denied if {
	inp := one_container({"limits": {"cpu": "lots"}})
	authz.deny == {"container \"main\" has an invalid cpu quantity lots (cap 4 for group \"system:serviceaccounts:team-a\")"} with input as inp
		with data.interlink.limits as limits
}

test_caps_invalid_cap_denied if {
	inp := one_container({"limits": {"cpu": "1"}})
	authz.deny == {"invalid cpu cap four configured for group \"system:serviceaccounts:team-a\""} with input as inp
		with data.interlink.limits as {team_group: {"cpu": "four"}}
}

test_caps_numeric_values_accepted if {
	authz.allow with input as one_container({"limits": {"cpu": 2}}) with data.interlink.limits as {team_group: {"cpu": 3}}
	not authz.allow with input as one_container({"limits": {"cpu": 4}}) with data.interlink.limits as {team_group: {"cpu": 3}}
}

test_caps_ignored_for_delete_and_status if {
	inp := one_container({"limits": {"cpu": "64"}})
	authz.allow with input as object.union(inp, {"operation": "delete"}) with data.interlink.limits as limits
	authz.allow with input as object.union(inp, {"operation": "status"}) with data.interlink.limits as limits
}

test_caps_tie_goes_to_first_group if {
	inp := one_container({"limits": {"cpu": "5"}})
	authz.deny == {"container \"main\" sets cpu limit 5 over the cap 4000m for group \"system:authenticated\""} with input as inp
		with data.interlink.limits as {team_group: {"cpu": "4"}, "system:authenticated": {"cpu": "4000m"}}
}

test_caps_invalid_cap_ignored_for_the_largest if {
	# The mistyped cap is reported and the valid one still applies.
	inp := one_container({"limits": {"cpu": "3"}})
	authz.deny == {
		"container \"main\" sets cpu limit 3 over the cap 2 for group \"system:authenticated\"",
		"invalid cpu cap 8x configured for group \"system:serviceaccounts:team-a\"",
	} with input as inp
		with data.interlink.limits as {team_group: {"cpu": "8x"}, "system:authenticated": {"cpu": "2"}}
}

test_caps_null_limit_falls_back_to_request if {
	inp := one_container({"limits": {"cpu": null}, "requests": {"cpu": "5"}})
	authz.deny == {"container \"main\" requests cpu 5 over the cap 4 for group \"system:serviceaccounts:team-a\""} with input as inp
		with data.interlink.limits as limits
}

test_caps_unnamed_containers_by_index if {
	inp := with_spec({"containers": [{"name": "ok"}, {"resources": {"limits": {"cpu": "9"}}}]})
	authz.deny == {"container \"#1\" sets cpu limit 9 over the cap 4 for group \"system:serviceaccounts:team-a\""} with input as inp
		with data.interlink.limits as limits
}
