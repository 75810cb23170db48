package interlink.authz

# The input as the built-in rules read it (the subject, the containers, the
# tenant), shared by the rule files of policies/rules/<name>/. Kept apart from
# authz.rego so that a policy directory that replaces authz.rego (or any one rule
# file) still compiles with the rest; a file of this name replaces it as any
# embedded file (docs/policies.md, "Replacing a file").

_username := u if {
	u := input.subject.username
	is_string(u)
} else := ""

_subject_name := _username if {
	_username != ""
} else := "<unknown subject>"

# The subject's groups, as given: entries that are not strings match no key
# of the precomputed documents, whose groups are all strings.
_group_list := gs if {
	gs := input.subject.groups
	is_array(gs)
} else := []

# Containers and init containers; the index keeps unnamed containers
# distinguishable in messages.
_all_containers := array.concat(
	[c | cs := input.pod.spec.containers; is_array(cs); some c in cs],
	[c | cs := input.pod.spec.initContainers; is_array(cs); some c in cs],
)

# Display name of _all_containers[i] (messages only).
_container_name(i) := n if {
	n := _all_containers[i].name
	is_string(n)
	n != ""
} else := sprintf("#%d", [i])

# The pod's tenant, as the rules and their messages read it.
_tenant := t if {
	t := input.tenant
	is_string(t)
} else := ""

# ---------------------------------------------------------------------------
# Data-only documents, computed once per load (authz.rego's _precompute)
# ---------------------------------------------------------------------------

# The precomputed document when the evaluator stored one, else the part of
# it the general rules use, computed here.
_static := s if {
	s := data.sar_bridge.precomputed.interlink.authz
} else := _pre_general

# Everything below depends on data only (sar-bridge checks this at load) and
# is JSON (objects with string keys serve as sets):
#   caps:           {res: [{"value", "group", "raw"}, ...]}, valid caps,
#                   largest first, ties by group name (the message's group)
#   cap_rank:       {res: {group: index in caps[res]}}
#   cap_errors:     {group: [message, ...]} for caps that are not quantities
#   protected_keys: {key: true} of well-formed protected taints
#   protected:      {key: {value: [{"users": {u: true}, "groups": {g: true}}]}}
#   default_limits: the default limits when configured, else absent
_pre_general := object.union(
	{
		"caps": {res: [e |
			some r in numbers.range(0, count(entries) - 1)
			some e in entries
			e.rank == r
		] |
			some res, entries in _pre_ranked
		},
		"cap_rank": {res: {e.group: e.rank | some e in entries} | some res, entries in _pre_ranked},
		"cap_errors": _pre_cap_errors,
		"protected_keys": {key: true | some [key, _, _] in _pre_protected},
		"protected": {key: {value: [{"users": users, "groups": groups} |
			some [k, v, i] in _pre_protected
			k == key
			v == value
			users := {u: true | us := data.interlink.protected_taints[i].allowed_users; is_array(us); some u in us; is_string(u); u != ""}
			groups := {g: true | gs := data.interlink.protected_taints[i].allowed_groups; is_array(gs); some g in gs; is_string(g)}
		] |
			some [k, value, _] in _pre_protected
			k == key
		} |
			some [key, _, _] in _pre_protected
		},
	},
	{"default_limits": d | d := data.interlink.default_limits; is_object(d); count(d) > 0},
)
