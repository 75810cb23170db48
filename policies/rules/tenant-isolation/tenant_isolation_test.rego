# Tenant isolation (policies/rules/tenant-isolation): its tests, in the package of the decision's tests,
# whose fixtures (base, with_spec, ...) are in policies/rego/authz_test.rego.
package interlink.authz_test

import data.interlink.authz

test_tenant_same_tenant_allowed if {
	inp := object.union(
		with_spec({
			"nodeSelector": {"interlink.io/tenant": "tenant-a"},
			"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "interlink.io/tenant", "operator": "In", "values": ["tenant-a"]}]}]}}},
		}),
		{"node": base.node},
	)
	authz.allow with input as inp
}

test_tenant_node_label_other_tenant_denied if {
	inp := object.union(base, {"node": node_b})
	authz.deny == {"target node \"vk-b\" belongs to tenant \"tenant-b\", not the pod's tenant \"tenant-a\""} with input as inp
}

test_tenant_node_not_found_or_null_allowed if {
	authz.allow with input as object.union(base, {"node": object.union(node_b, {"found": false})})
	authz.allow with input as object.union(base, {"node": null})
	authz.allow with input as object.union(base, {"node": {"name": "vk", "found": true, "labels": {}}})
}

test_tenant_node_selector_other_tenant_denied if {
	inp := with_spec({"nodeSelector": {"interlink.io/tenant": "tenant-b", "kubernetes.io/os": "linux"}})
	authz.deny == {"nodeSelector interlink.io/tenant=tenant-b selects tenant \"tenant-b\", not the pod's tenant \"tenant-a\""} with input as inp
}

test_tenant_affinity_other_tenant_denied if {
	inp := with_spec({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
		{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
		{"matchExpressions": [{"key": "interlink.io/tenant", "operator": "In", "values": ["tenant-a", "tenant-b"]}]},
	]}}}})
	authz.deny == {"required node affinity interlink.io/tenant In tenant-b selects tenant \"tenant-b\", not the pod's tenant \"tenant-a\""} with input as inp
}

test_tenant_affinity_not_in_and_preferred_ignored if {
	inp := with_spec({"affinity": {"nodeAffinity": {
		"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "interlink.io/tenant", "operator": "NotIn", "values": ["tenant-b"]}]}]},
		"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [{"key": "interlink.io/tenant", "operator": "In", "values": ["tenant-b"]}]}}],
	}}})
	authz.allow with input as inp
}

test_tenant_rules_ignored_for_status if {
	inp := object.union(with_spec({"nodeSelector": {"interlink.io/tenant": "tenant-b"}}), {"operation": "status", "node": node_b})
	authz.allow with input as inp
}
