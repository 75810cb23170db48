package interlink.authz

# Quota (policies/rules/quota): tenant offload quotas. A tenant's quota is its OffloadTenant object
# (sar-bridge.io/v1alpha1: spec.hard, spec.nodes) and its usage the object's
# ledger (status.used): what the bridges charged, not what happens to be bound.
# sar-bridge puts both in the input, only for a create of a tenant with a quota
# (so the decision memo of every other tenant never sees them change):
#
#   input.quota.tenant:    {resource: amount} the tenant holds on virtual nodes
#   input.quota.node:      the same on the target node, for a node the quota caps
#   input.quota.request:   what this pod holds, as the SLURM plugin allocates it
#                          (tenants.PodAmounts): per container its CPU rounded up
#                          to whole cores and its memory to whole MiB (limit, else
#                          the flags' --cpus-per-task/--mem, else the request),
#                          summed as the scheduler sums (init peak vs the
#                          containers' sum, plus overhead); "pods" is 1
#   input.quota.hard:      the tenant's hard amounts
#   input.quota.node_hard: its hard amounts on the target node
#
# Amounts are numbers: cores for cpu, bytes for memory, units otherwise; a
# resource absent is 0. Only resources the pod holds are checked, as a
# ResourceQuota does. The pod decided is never part of the usage. The bridge
# then charges an allowed create to the ledger with a resourceVersion-checked
# write, which refuses it (whatever this rule said) if other bridges took the
# room meanwhile.
#
# authz.rego's fast path proves these rules silent without evaluating them:
# no input.quota.request, and no data.interlink.quotas. A rule that can fire
# otherwise must be proved there too.

# Over the tenant's quota.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some res, hard in input.quota.hard
	req := _quota_amount("request", res)
	req > 0
	used := _quota_amount("tenant", res)
	used + req > hard
	msg := sprintf("tenant %q would use %v %s on virtual nodes, over its quota of %v (%v in use, this pod holds %v)", [_quota_tenant, used + req, res, hard, used, req])
}

# Over the tenant's quota on the target node.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some res, hard in input.quota.node_hard
	req := _quota_amount("request", res)
	req > 0
	used := _quota_amount("node", res)
	used + req > hard
	msg := sprintf("tenant %q would use %v %s on virtual node %q, over its quota there of %v (%v in use, this pod holds %v)", [_quota_tenant, used + req, res, _quota_node, hard, used, req])
}

# A job whose size the SLURM plugin takes from a flavor's defaults (a container
# without a limit before the first that sets it: policies/hpc.go) cannot be
# charged what it holds.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some field in input.hpc.flavor_sized
	msg := sprintf("%s is not set while a later container sets it: the SLURM plugin then sizes the job from its flavor's default, which sar-bridge cannot know, so the pod cannot be charged to tenant %q's quota; set that limit, or set it on no container", [field, _quota_tenant])
}

# Usage or hard amounts that are not numbers cannot be compared: deny.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some part in ["tenant", "node", "request", "hard", "node_hard"]
	bad := _quota_malformed(part)
	msg := sprintf("input.quota.%s%s: the quota of tenant %q cannot be checked", [part, bad, _quota_tenant])
}

# The data file's quotas are no longer read: every create is refused until they
# are moved to OffloadTenant objects (README, "Tenants as cluster objects").
_quota_violations contains msg if {
	input.operation == "create"
	_ = data.interlink.quotas
	msg := "data.interlink.quotas is no longer read: declare each tenant's quota as an OffloadTenant object (sar-bridge.io/v1alpha1, spec.hard) and remove it from the policy data"
}

# The tenant and target node, read here rather than from authz.rego's
# helpers, so that this file compiles beside a replacement authz.rego.
_quota_tenant := t if {
	t := input.tenant
	is_string(t)
} else := ""

_quota_node := n if {
	n := input.node.name
	is_string(n)
} else := ""

# An amount of input.quota[part]: 0 when absent, as given otherwise
# (_quota_malformed reports what is not a number).
_quota_amount(part, res) := v if {
	v := input.quota[part][res]
	is_number(v)
} else := 0 if {
	not input.quota[part][res]
}

# Why input.quota[part] cannot be read as amounts, if it cannot.
_quota_malformed(part) := " is missing" if {
	not input.quota[part]
} else := sprintf(" is %s, not an object", [type_name(input.quota[part])]) if {
	not is_object(input.quota[part])
} else := sprintf("[%q] is %s, not a number", [res, json.marshal(v)]) if {
	some res, v in input.quota[part]
	not is_number(v)
}
