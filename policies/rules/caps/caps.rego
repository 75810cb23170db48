package interlink.authz

# Caps: per-group resource caps (policies/rules/caps).

# The cap of each capped resource for the subject: the best ranked among
# its groups.
_cap := {res: _static.caps[res][r] |
	some res, ranks in _static.cap_rank
	r := min([rank | some g in _group_list; rank := ranks[g]])
}

# What each container asks of each capped resource, as [index, resource,
# kind, raw, cap, parsed]: kind "limit", or "request" when no limit is set for
# that resource; parsed as in _pre_caps. Only the amounts over their cap or
# not a quantity are kept (a string sorts after every number, so the first
# of parsed ++ ["not a quantity"] is over the cap in both cases), so on an
# allowed pod the rules below have nothing to look at.
_amounts := array.concat(
	[[i, res, "limit", raw, cap, parsed] |
		caps := _cap
		count(caps) > 0
		some i, c in _all_containers
		some res, cap in caps
		raw := c.resources.limits[res]
		raw != null
		parsed := array.concat([raw | is_number(raw)], [v |
			is_string(raw)
			regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`, raw)
			v := units.parse(raw)
		])
		array.concat(parsed, ["not a quantity"])[0] > cap.value
	],
	[[i, res, "request", raw, cap, parsed] |
		caps := _cap
		count(caps) > 0
		some i, c in _all_containers
		some res, cap in caps
		raw := c.resources.requests[res]
		raw != null
		count([1 | l := c.resources.limits[res]; l != null]) == 0
		parsed := array.concat([raw | is_number(raw)], [v |
			is_string(raw)
			regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`, raw)
			v := units.parse(raw)
		])
		array.concat(parsed, ["not a quantity"])[0] > cap.value
	],
)

_amount_phrase("limit", res, raw) := sprintf("sets %s limit %v", [res, raw])

_amount_phrase("request", res, raw) := sprintf("requests %s %v", [res, raw])

_caps_violations contains msg if {
	input.operation == "create"
	some [i, res, kind, raw, cap, [_]] in _amounts
	msg := sprintf("container %q %s over the cap %v for group %q", [_container_name(i), _amount_phrase(kind, res, raw), cap.raw, cap.group])
}

# Fail closed on quantities that cannot be compared against a cap.
_caps_violations contains msg if {
	input.operation == "create"
	some [i, res, _, raw, cap, []] in _amounts
	msg := sprintf("container %q has an invalid %s quantity %v (cap %v for group %q)", [_container_name(i), res, raw, cap.raw, cap.group])
}

# A cap the admin mistyped must not silently lift the limit.
_caps_violations contains msg if {
	input.operation == "create"
	errors := _static.cap_errors
	count(errors) > 0
	some g in _group_list
	some msg in errors[g]
}

# ---------------------------------------------------------------------------
# Data-only documents, computed once per load (_pre_general in authz.rego)
# ---------------------------------------------------------------------------

_pre_cap_errors := {g: [sprintf("invalid %s cap %v configured for group %q", [res, raw, g]) |
	some [g2, res, raw, []] in _pre_caps
	g2 == g
] |
	some [g, _, _, []] in _pre_caps
}

# Every configured cap as [group, resource, raw, parsed], parsed being [value]
# or [] when raw is not a quantity: a number as is, or a string of the
# Kubernetes quantity grammar, units.parse'd. The grammar is checked before
# units.parse so that odd strings are rejected explicitly instead of
# silently yielding undefined; the short exponent bound keeps a hostile
# "1e999999" from costing a huge big.Rat. Admin data is read key by key:
# referencing data.interlink as a whole would include this package's own
# rules and recurse. A limits document that is not an object, or a group's
# entry that is not one, has no [g][res] to read.
_pre_caps := [[g, res, raw, parsed] |
	limits := data.interlink.limits
	is_object(limits)
	some g, entry in limits
	is_string(g)
	some res in ["cpu", "memory"]
	raw := entry[res]
	parsed := array.concat([raw | is_number(raw)], [v |
		is_string(raw)
		regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`, raw)
		v := units.parse(raw)
	])
]

# Valid caps per resource with their rank: the largest cap among the
# subject's groups wins, ties to the lexicographically first group so the
# message is deterministic.
_pre_ranked := {res: [{"value": v, "group": g, "raw": raw, "rank": rank} |
	some [g, r, raw, [v]] in _pre_caps
	r == res
	rank := count([1 |
		some [g2, r2, _, [v2]] in _pre_caps
		r2 == res
		_ranks_before(v2, g2, v, g)
	])
] |
	some res in {res | some [_, res, _, [_]] in _pre_caps}
}

_ranks_before(v2, _, v, _) if v2 > v

_ranks_before(v2, g2, v, g) if {
	v2 == v
	g2 < g
}
