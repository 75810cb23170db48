package interlink.quota_test

import data.interlink.authz

# Quota (quota.rego): hard amounts and usage come from the tenant's OffloadTenant
# object, in input.quota (tenants.QuotaInput).

# create builds an allowed create of tenant-a on vk-a with the given input.quota.
create(quota) := {
	"operation": "create",
	"pod": {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}},
	"subject": {"username": "system:serviceaccount:team-a:runner", "uid": "", "groups": ["system:authenticated"], "extra": {}},
	"tenant": "tenant-a",
	"tenant_label": "interlink.io/tenant",
	"group": "interlink.io",
	"namespace": {"name": "team-a", "labels": {}, "annotations": {}},
	"node": {"name": "vk-a", "found": true, "labels": {}, "taints": [], "allocatable": {}},
	"review": {"allowed": true, "denied": false, "reason": "RBAC: allowed", "attributes": []},
	"quota": quota,
	"hpc": {"inert": true, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 0, "flavor_sized": [], "script_bound": {"slurm": [], "htcondor": []}, "bound_plugins": []},
}

# hard: 2 pods, 4 cores, 8 GiB, 2 GPUs; 1 GPU on vk-a.
hard := {"pods": 2, "cpu": 4, "memory": 8589934592, "nvidia.com/gpu": 2}

quota(tenant, request) := {"tenant": tenant, "node": {}, "request": request, "hard": hard, "node_hard": {}}

on_node(q, used, node_hard) := object.union(q, {"node": used, "node_hard": node_hard})

allowed(inp) if authz.decision.allowed with input as inp

denied_with(inp, reason) if {
	d := authz.decision with input as inp
	d.allowed == false
	d.reason == reason
}

test_no_quota_no_effect if {
	inp := object.remove(create({}), ["quota"])
	allowed(inp)
	count(authz._quota_violations) == 0 with input as inp
}

test_pods_within if {
	allowed(create(quota({"pods": 1}, {"pods": 1})))
}

test_pods_over if {
	denied_with(create(quota({"pods": 2}, {"pods": 1})), "tenant \"tenant-a\" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod holds 1)")
}

test_cpu_and_memory if {
	allowed(create(quota({"pods": 0, "cpu": 3}, {"pods": 1, "cpu": 1, "memory": 1073741824})))
	denied_with(create(quota({"cpu": 3.5}, {"pods": 1, "cpu": 1})), "tenant \"tenant-a\" would use 4.5 cpu on virtual nodes, over its quota of 4 (3.5 in use, this pod holds 1)")
	denied_with(create(quota({"memory": 8589934592}, {"pods": 1, "memory": 1})), "tenant \"tenant-a\" would use 8589934593 memory on virtual nodes, over its quota of 8589934592 (8589934592 in use, this pod holds 1)")
}

# Only what the pod holds is checked, as a ResourceQuota does.
test_unheld_resource_not_checked if {
	allowed(create(quota({"nvidia.com/gpu": 5}, {"pods": 1})))
}

test_node_quota if {
	q := on_node(quota({"nvidia.com/gpu": 1}, {"pods": 1, "nvidia.com/gpu": 1}), {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1})
	denied_with(create(q), "tenant \"tenant-a\" would use 2 nvidia.com/gpu on virtual node \"vk-a\", over its quota there of 1 (1 in use, this pod holds 1)")
	allowed(create(on_node(quota({"nvidia.com/gpu": 1}, {"pods": 1, "nvidia.com/gpu": 1}), {}, {"nvidia.com/gpu": 1})))
}

test_malformed_usage_denies if {
	d := authz.decision with input as create(quota({"pods": "two"}, {"pods": 1}))
	d.allowed == false
	d.reason == "input.quota.tenant[\"pods\"] is \"two\", not a number: the quota of tenant \"tenant-a\" cannot be checked"
	not allowed(create({"request": {"pods": 1}}))
}

# A policy data file's quotas are no longer read: refused until moved.
test_data_quotas_refuse_every_create if {
	d := authz.decision with input as object.remove(create({}), ["quota"]) with data.interlink.quotas as {"tenant-a": {"pods": 2}}
	d.allowed == false
	d.reason == "data.interlink.quotas is no longer read: declare each tenant's quota as an OffloadTenant object (sar-bridge.io/v1alpha1, spec.hard) and remove it from the policy data"
}

test_quota_ignored_for_delete if {
	allowed(object.union(create(quota({"pods": 9}, {"pods": 1})), {"operation": "delete"}))
}

# A job the SLURM plugin sizes from a flavor's defaults cannot be charged.
test_flavor_sized_refused_with_a_quota if {
	sized := object.union(create(quota({"pods": 0}, {"pods": 1, "cpu": 2})), {"hpc": object.union(create({}).hpc, {"flavor_sized": ["spec.initContainers[0].resources.limits.cpu"]})})
	denied_with(sized, "spec.initContainers[0].resources.limits.cpu is not set while a later container sets it: the SLURM plugin then sizes the job from its flavor's default, which sar-bridge cannot know, so the pod cannot be charged to tenant \"tenant-a\"'s quota; set that limit, or set it on no container")

	# Without a quota nothing is charged.
	allowed(object.remove(sized, ["quota"]))
}
