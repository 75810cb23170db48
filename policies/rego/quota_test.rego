package interlink.quota_test

import data.interlink.authz

# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

quotas := {
	"tenant-a": {
		"pods": 2,
		"cpu": "4",
		"memory": "8Gi",
		"nvidia.com/gpu": 2,
		"nodes": {"vk-a": {"nvidia.com/gpu": 1}},
	},
	"tenant-b": {"pods": 1},
}

# create builds an allowed create of tenant-a on vk-a with the given usage.
create(usage) := {
	"operation": "create",
	"pod": {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}},
	"subject": {"username": "system:serviceaccount:team-a:runner", "uid": "", "groups": ["system:authenticated"], "extra": {}},
	"tenant": "tenant-a",
	"tenant_label": "interlink.io/tenant",
	"group": "interlink.io",
	"namespace": {"name": "team-a", "labels": {}, "annotations": {}},
	"node": {"name": "vk-a", "found": true, "labels": {}, "taints": [], "allocatable": {}},
	"review": {"allowed": true, "denied": false, "reason": "RBAC: allowed", "attributes": []},
	"quota": usage,
	"hpc": {"inert": true, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false},
}

usage(tenant, node, request) := {"tenant": tenant, "node": node, "request": request}

one_pod := {"pods": 1}

without_quota := object.remove(create({}), ["quota"])

denied_with(inp, fragment) if {
	d := authz.decision with input as inp with data.interlink.quotas as quotas
	d.allowed == false
	contains(d.reason, fragment)
}

allowed(inp) if {
	d := authz.decision with input as inp with data.interlink.quotas as quotas
	d.allowed == true
}

# ---------------------------------------------------------------------------
# No quota: no effect
# ---------------------------------------------------------------------------

test_no_quotas_no_effect if {
	d := authz.decision with input as without_quota
	d.allowed == true
	count(authz._quota_violations) == 0 with input as without_quota
}

test_tenant_without_quota_unaffected if {
	allowed(object.union(without_quota, {"tenant": "tenant-c"}))
}

test_delete_not_checked if {
	allowed(object.union(create(usage({"pods": 9}, {}, one_pod)), {"operation": "delete"}))
}

# ---------------------------------------------------------------------------
# Each resource kind, allow and deny
# ---------------------------------------------------------------------------

test_pods_within if {
	allowed(create(usage({"pods": 1}, {"pods": 1}, one_pod)))
}

test_pods_over if {
	denied_with(
		create(usage({"pods": 2}, {"pods": 2}, one_pod)),
		`tenant "tenant-a" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod requests 1)`,
	)
}

test_cpu_within if {
	allowed(create(usage({"pods": 1, "cpu": 3.5}, {}, {"pods": 1, "cpu": 0.5})))
}

test_cpu_over if {
	denied_with(
		create(usage({"pods": 1, "cpu": 3.5}, {}, {"pods": 1, "cpu": 0.75})),
		`would use 4.25 cpu on virtual nodes, over its quota of 4 (3.5 in use, this pod requests 0.75)`,
	)
}

test_memory_within if {
	allowed(create(usage({"memory": 4294967296}, {}, {"pods": 1, "memory": 4294967296})))
}

test_memory_over if {
	denied_with(
		create(usage({"memory": 4294967296}, {}, {"pods": 1, "memory": 4294967297})),
		`would use 8589934593 memory on virtual nodes, over its quota of 8Gi = 8589934592 (4294967296 in use, this pod requests 4294967297)`,
	)
}

test_extended_within if {
	allowed(create(usage({"nvidia.com/gpu": 1}, {}, {"pods": 1, "nvidia.com/gpu": 1})))
}

test_extended_over if {
	denied_with(
		create(usage({"nvidia.com/gpu": 2}, {}, {"pods": 1, "nvidia.com/gpu": 1})),
		`would use 3 nvidia.com/gpu on virtual nodes, over its quota of 2 (2 in use, this pod requests 1)`,
	)
}

# A resource the pod does not request is not checked, even when over.
test_unrequested_resource_not_checked if {
	allowed(create(usage({"nvidia.com/gpu": 5}, {}, one_pod)))
}

# ---------------------------------------------------------------------------
# Per node
# ---------------------------------------------------------------------------

test_node_quota_over if {
	denied_with(
		create(usage({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1}, {"pods": 1, "nvidia.com/gpu": 1})),
		`tenant "tenant-a" would use 2 nvidia.com/gpu on virtual node "vk-a", over its quota of 1 there (1 in use, this pod requests 1)`,
	)
}

test_node_quota_other_node if {
	inp := object.union(
		create(usage({"nvidia.com/gpu": 1}, {}, {"pods": 1, "nvidia.com/gpu": 1})),
		{"node": {"name": "vk-b", "found": true, "labels": {}, "taints": [], "allocatable": {}}},
	)
	allowed(inp)
}

test_node_quota_within if {
	allowed(create(usage({"nvidia.com/gpu": 0}, {}, {"pods": 1, "nvidia.com/gpu": 1})))
}

# ---------------------------------------------------------------------------
# Fail closed
# ---------------------------------------------------------------------------

test_mistyped_amount_denies if {
	d := authz.decision with input as create(usage({}, {}, one_pod))
		with data.interlink.quotas as {"tenant-a": {"pods": "lots", "cpu": "4"}}
	d.allowed == false
	contains(d.reason, `invalid quota pods lots for tenant "tenant-a"`)
}

test_mistyped_entry_denies if {
	d := authz.decision with input as create(usage({}, {}, one_pod))
		with data.interlink.quotas as {"tenant-a": "2 pods"}
	d.allowed == false
	contains(d.reason, `quota of tenant "tenant-a" must be an object of resources, not string`)
}

test_mistyped_nodes_deny if {
	d := authz.decision with input as create(usage({}, {}, one_pod))
		with data.interlink.quotas as {"tenant-a": {"pods": 5, "nodes": ["vk-a"]}}
	d.allowed == false
	contains(d.reason, `quota nodes of tenant "tenant-a" must be an object of nodes, not array`)
}

test_mistyped_node_amount_denies if {
	d := authz.decision with input as create(usage({}, {}, one_pod))
		with data.interlink.quotas as {"tenant-a": {"nodes": {"vk-b": {"cpu": true}}}}
	d.allowed == false
	contains(d.reason, `invalid quota cpu true for tenant "tenant-a" on node "vk-b"`)
}

test_quotas_not_an_object_denies_every_create if {
	d := authz.decision with input as without_quota with data.interlink.quotas as ["tenant-a"]
	d.allowed == false
	contains(d.reason, "data.interlink.quotas must be an object of tenants, not array")
}

test_quota_without_usage_denies if {
	denied_with(without_quota, `tenant "tenant-a" has an offload quota (data.interlink.quotas) but the input carries no usage`)
}

test_usage_not_a_number_denies if {
	denied_with(create(usage({"pods": "1"}, {}, one_pod)), `input.quota.tenant["pods"] is "1", not a number`)
}

test_usage_not_an_object_denies if {
	denied_with(create(usage("none", {}, one_pod)), "input.quota.tenant is string, not an object")
}

test_usage_missing_denies if {
	denied_with(create({"request": one_pod}), "input.quota.tenant is missing")
}

# The messages come with the general rules' ones, and a denied review still
# names the review first.
test_review_denied_reason_first if {
	inp := object.union(create(usage({"pods": 2}, {}, one_pod)), {"review": {"allowed": false, "denied": true, "reason": "no RBAC", "attributes": []}})
	d := authz.decision with input as inp with data.interlink.quotas as quotas
	d.allowed == false
	startswith(d.reason, "no RBAC")
}
