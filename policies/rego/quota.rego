package interlink.authz

# Rule 7: tenant offload quotas. data.interlink.quotas (parsed once per load
# in quota_limits.rego) against what the tenant's pods on virtual nodes
# already request. sar-bridge puts the usage in the input, only for a tenant
# that has a quota (so the decision memo of every other tenant never sees it
# change):
#
#   input.quota.tenant:  {resource: amount} the tenant's non-terminated pods
#                        on virtual nodes request, plus the creates the bridge
#                        allowed moments ago that its informer has not seen
#   input.quota.node:    the same on the target node (input.node.name)
#   input.quota.request: what this pod requests, summed as the scheduler
#                        does (max of init containers vs the sum of
#                        containers, plus overhead); "pods" is 1
#
# Amounts are numbers: cores for cpu, bytes for memory, units otherwise; a
# resource absent is 0. The pod decided is never part of the usage. Only
# resources the pod requests are checked, as a ResourceQuota does.
#
# Cost: the rules for a tenant with a quota fail at input.quota.request
# when there is none; the two others read the precomputed table once.
# authz.rego's fast path proves these rules silent without evaluating them:
# no input.quota.request, no table errors, no table entry for the tenant.
# A rule that can fire otherwise must be proved there too.

_quota_table := data.interlink.quota_limits.table

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

# Over the tenant's quota.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some res, limit in _quota_table.tenants[_quota_tenant].limits
	req := _quota_amount("request", res)
	req > 0
	used := _quota_amount("tenant", res)
	used + req > limit.value
	msg := sprintf("tenant %q would use %v %s on virtual nodes, over its quota of %s (%v in use, this pod requests %v)", [_quota_tenant, used + req, res, _quota_limit_text(limit), used, req])
}

# Over the tenant's quota on the target node.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some res, limit in _quota_table.tenants[_quota_tenant].nodes[_quota_node]
	req := _quota_amount("request", res)
	req > 0
	used := _quota_amount("node", res)
	used + req > limit.value
	msg := sprintf("tenant %q would use %v %s on virtual node %q, over its quota of %s there (%v in use, this pod requests %v)", [_quota_tenant, used + req, res, _quota_node, _quota_limit_text(limit), used, req])
}

# A quota the admin mistyped denies the tenant's creates: it must never
# lift the limit.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some msg in _quota_table.tenants[_quota_tenant].errors
}

# Usage that is not numbers cannot be compared: deny.
_quota_violations contains msg if {
	input.operation == "create"
	input.quota.request
	some part in ["tenant", "node", "request"]
	bad := _quota_malformed(part)
	msg := sprintf("input.quota.%s%s: the quota of tenant %q cannot be checked", [part, bad, _quota_tenant])
}

# data.interlink.quotas is not an object of tenants: every create is denied.
_quota_violations contains msg if {
	input.operation == "create"
	some msg in _quota_table.errors
}

# A tenant with a quota but no usage in the input (the policy run without
# sar-bridge's usage tracker, or a data reload a moment ago): the quota
# cannot be enforced, so the create is denied.
_quota_violations contains msg if {
	input.operation == "create"
	not input.quota.request
	input.review.allowed == true
	_quota_table.tenants[_quota_tenant]
	msg := sprintf("tenant %q has an offload quota (data.interlink.quotas) but the input carries no usage (input.quota): the quota cannot be enforced", [_quota_tenant])
}

# An amount of input.quota[part]: 0 when absent, as given otherwise
# (_quota_malformed reports what is not a number).
_quota_amount(part, res) := v if {
	v := input.quota[part][res]
	is_number(v)
} else := 0 if {
	not input.quota[part][res]
}

# Why input.quota[part] cannot be read as amounts, if it cannot: "node" may
# be absent (no target node), "tenant" and "request" may not.
_quota_malformed(part) := " is missing" if {
	part != "node"
	not input.quota[part]
} else := sprintf(" is %s, not an object", [type_name(input.quota[part])]) if {
	not is_object(input.quota[part])
} else := sprintf("[%q] is %s, not a number", [res, json.marshal(v)]) if {
	some res, v in input.quota[part]
	not is_number(v)
}

_quota_limit_text(limit) := sprintf("%v", [limit.raw]) if {
	sprintf("%v", [limit.raw]) == sprintf("%v", [limit.value])
} else := sprintf("%v = %v", [limit.raw, limit.value])
