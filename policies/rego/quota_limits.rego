# Tenant offload quotas (data.interlink.quotas), parsed once per load for
# the quota rules of interlink.authz (quota.rego):
#
#   quotas:
#     <tenant>:
#       pods: 20                  # any resource name: pods, cpu, memory,
#       cpu: "64"                 # nvidia.com/gpu, ...; a number or a
#       memory: 256Gi             # Kubernetes quantity string
#       nodes:                    # optional, per virtual node
#         <node>: {nvidia.com/gpu: 4}
#
# Parsing a quantity (units.parse) costs more than a decision's other
# checks, so this package follows sar-bridge's precompute convention
# (policies/precompute.go): sar-bridge evaluates _precompute at every policy
# or data load and stores it at
# data.sar_bridge.precomputed.interlink.quota_limits; `table` reads it from
# there, or computes it (the opa CLI, `opa test`, an OPA server).
package interlink.quota_limits

# {"tenants": {tenant: {"limits": {res: limit}, "nodes": {node: {res: limit}},
#  "errors": [message]}}, "errors": [message]}; a limit is {"value": number,
# "raw": what data says}. Amounts that are not quantities are left out of
# limits and reported in errors: the rules deny a tenant with errors.
table := t if {
	t := data.sar_bridge.precomputed.interlink.quota_limits
} else := _precompute

_precompute := {
	"tenants": {tenant: {
		"limits": _limits(entry),
		"nodes": _node_limits(entry),
		"errors": array.concat(_entry_errors(tenant, entry), _node_errors(tenant, entry)),
	} |
		some tenant, entry in _quotas
		is_string(tenant)
	},
	"errors": [sprintf("data.interlink.quotas must be an object of tenants, not %s", [type_name(q)]) |
		q := data.interlink.quotas
		not is_object(q)
	],
}

_quotas := q if {
	q := data.interlink.quotas
	is_object(q)
} else := {}

# The quantity grammar of authz.rego's caps: checked before units.parse so
# that an odd string is an explicit error, never a silent undefined.
_quantity_pattern := `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`

_parse(raw) := raw if {
	is_number(raw)
} else := units.parse(raw) if {
	is_string(raw)
	regex.match(_quantity_pattern, raw)
}

# The valid amounts of an object of resources ("nodes" is not a resource).
_amounts(obj) := {res: {"value": _parse(raw), "raw": raw} |
	some res, raw in obj
	res != "nodes"
	_parse(raw)
}

_limits(entry) := _amounts(entry) if is_object(entry)

else := {}

_node_limits(entry) := {node: _amounts(amounts) |
	some node, amounts in entry.nodes
	is_object(amounts)
} if {
	is_object(entry.nodes)
} else := {}

_entry_errors(tenant, entry) := [sprintf("quota of tenant %q must be an object of resources, not %s", [tenant, type_name(entry)])] if {
	not is_object(entry)
} else := [sprintf("invalid quota %s %v for tenant %q: not a number or a Kubernetes quantity", [res, raw, tenant]) |
	some res, raw in entry
	res != "nodes"
	not _parse(raw)
]

_node_errors(tenant, entry) := [msg] if {
	nodes := entry.nodes
	not is_object(nodes)
	msg := sprintf("quota nodes of tenant %q must be an object of nodes, not %s", [tenant, type_name(nodes)])
} else := array.concat(
	[sprintf("quota of tenant %q on node %q must be an object of resources, not %s", [tenant, node, type_name(amounts)]) |
		some node, amounts in entry.nodes
		not is_object(amounts)
	],
	[sprintf("invalid quota %s %v for tenant %q on node %q: not a number or a Kubernetes quantity", [res, raw, tenant, node]) |
		some node, amounts in entry.nodes
		is_object(amounts)
		some res, raw in amounts
		not _parse(raw)
	],
)
