# Default sar-bridge policy for interLink pod decisions.
#
# Every document here must stay defined (and never raise a conflict error)
# for any input, including a missing input or fields of the wrong type:
# the HTTP layer relies on `decision` and `allow` always having a value.
# Hence every lookup is a type-checked reference with an `else`.
#
# Evaluation cost (issue 19): input is read through references
# (`input.pod.spec.containers`), never handed to a function. A user function
# call plugs and hashes its arguments for OPA's per-query cache and evaluates
# a child query: passing `input`, a pod or a spec costs a walk of the whole
# object, and even a call on a scalar costs several times an inline
# comprehension. So the path every decision takes has no function call
# (quantities are parsed in comprehensions, once per distinct value); the
# few helpers left build messages only. Rules that apply to creates test
# `input.operation == "create"` first, so OPA's rule index skips them all for
# delete and status, and tolerations are looked at only when protected taints
# are configured, and then only those of a protected key or none.
package interlink.authz

# ---------------------------------------------------------------------------
# Public documents
# ---------------------------------------------------------------------------

default allow := false

allow if {
	_review_allowed
	count(deny) == 0
}

decision := {
	"allowed": allow,
	"reason": reason,
	"modifications": modifications,
	"review": _review_doc,
}

# Review reason first (it is the root cause when the SAR refused), then the
# policy's own messages in a stable order.
reason := _review_reason if {
	allow
} else := concat("; ", array.concat(_review_part, [m | some m in sort(violations); not m in _review_part]))

# All deny messages: the review refusal plus every policy violation.
deny contains msg if {
	some msg in _review_part
}

deny contains msg if {
	some msg in violations
}

default modifications := {"pod_annotations": {}, "resource_limits": {}}

modifications := {
	"pod_annotations": _pod_annotations,
	"resource_limits": _resource_limits,
} if {
	input.operation == "create"
}

# ---------------------------------------------------------------------------
# Input normalisation
# ---------------------------------------------------------------------------

_review_doc := r if {
	r := input.review
} else := null

_review_allowed if input.review.allowed == true

_review_reason := r if {
	r := input.review.reason
	is_string(r)
} else := ""

_review_part := [] if {
	_review_allowed
} else := [_review_reason] if {
	_review_reason != ""
} else := ["subject access review did not allow the request"]

_username := u if {
	u := input.subject.username
	is_string(u)
} else := ""

_subject_name := _username if {
	_username != ""
} else := "<unknown subject>"

_groups := {g |
	gs := input.subject.groups
	is_array(gs)
	some g in gs
	is_string(g)
}

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

# ---------------------------------------------------------------------------
# Violations (rules 2-4 apply to create only)
# ---------------------------------------------------------------------------

# Rule 2: per-group resource caps.
#
# A quantity is a number as is, or a string of the Kubernetes quantity
# grammar, units.parse'd. The grammar is checked before units.parse so that
# odd strings are rejected explicitly instead of silently yielding undefined;
# the short exponent bound keeps a hostile "1e999999" from costing a huge
# big.Rat. Quantities are parsed inline, once per value (see the top).

# The caps configured for the subject's groups, per resource, as [group, raw,
# parsed], parsed being [value] or [] when raw is not a valid quantity.
# Admin data is read key by key: referencing data.interlink as a whole would
# include this package's own rules and recurse. A limits document that is not
# an object, or a group's entry that is not one, has no [g][res] to read.
_group_caps := {res: entries |
	groups := _groups
	some res in ["cpu", "memory"]
	entries := [[g, raw, parsed] |
		some g in groups
		raw := data.interlink.limits[g][res]
		parsed := array.concat([raw | is_number(raw)], [v |
			is_string(raw)
			regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`, raw)
			v := units.parse(raw)
		])
	]
}

# The largest cap among the subject's groups wins; ties go to the
# lexicographically first group so the message is deterministic.
_cap := {res: {"value": top, "group": g, "raw": raw} |
	some res, entries in _group_caps
	candidates := [[v, g, raw] | some [g, raw, [v]] in entries]
	count(candidates) > 0
	top := max([c[0] | some c in candidates])
	[_, g, raw] := min([c | some c in candidates; c[0] == top])
}

# What each container asks of each capped resource: [index, resource, kind,
# raw, parsed, cap], kind "limit", or "request" when no limit is set for that
# resource; parsed as in _group_caps.
_amounts := [[i, res, kind, raw, parsed, cap] |
	caps := _cap
	count(caps) > 0
	some i, c in _all_containers
	some res, cap in caps
	limits := [["limit", l] | l := c.resources.limits[res]; l != null]
	some [kind, raw] in array.concat(limits, [["request", r] |
		count(limits) == 0
		r := c.resources.requests[res]
		r != null
	])
	parsed := array.concat([raw | is_number(raw)], [v |
		is_string(raw)
		regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`, raw)
		v := units.parse(raw)
	])
]

_amount_phrase("limit", res, raw) := sprintf("sets %s limit %v", [res, raw])

_amount_phrase("request", res, raw) := sprintf("requests %s %v", [res, raw])

violations contains msg if {
	input.operation == "create"
	some [i, res, kind, raw, parsed, cap] in _amounts
	count(parsed) > 0
	parsed[0] > cap.value
	msg := sprintf("container %q %s over the cap %v for group %q", [_container_name(i), _amount_phrase(kind, res, raw), cap.raw, cap.group])
}

# Fail closed on quantities that cannot be compared against a cap.
violations contains msg if {
	input.operation == "create"
	some [i, res, _, raw, [], cap] in _amounts
	msg := sprintf("container %q has an invalid %s quantity %v (cap %v for group %q)", [_container_name(i), res, raw, cap.raw, cap.group])
}

# A cap the admin mistyped must not silently lift the limit.
violations contains msg if {
	input.operation == "create"
	some res, entries in _group_caps
	some [g, raw, []] in entries
	msg := sprintf("invalid %s cap %v configured for group %q", [res, raw, g])
}

# Rule 3: protected taints, with pod-toleration semantics.

# Well-formed protected entries as [key, value, index]; value "" when absent
# or not a string.
_protected := [[key, value, i] |
	pts := data.interlink.protected_taints
	is_array(pts)
	some i, p in pts
	key := p.key
	is_string(key)
	key != ""
	value := array.concat([v | v := p.value; is_string(v)], [""])[0]
]

_protected_keys := {e[0] | some e in _protected}

# Tolerations of a protected key as [key, operator, value]: operator "Equal"
# when absent, empty or not a string; value "" when absent or not a string.
_protected_tolerations := [[key, op, value] |
	ts := input.pod.spec.tolerations
	is_array(ts)
	keys := _protected_keys
	some t in ts
	key := t.key
	key in keys
	op := array.concat([o | o := t.operator; is_string(o); o != ""], ["Equal"])[0]
	value := array.concat([v | v := t.value; is_string(v)], [""])[0]
]

violations contains msg if {
	input.operation == "create"
	some [key, "Exists", _] in _protected_tolerations
	msg := sprintf("toleration %q with operator Exists covers protected taint %q and is not allowed for any subject (subject %q)", [key, key, _subject_name])
}

violations contains msg if {
	input.operation == "create"
	some [key, "Equal", value] in _protected_tolerations
	some e in _protected
	e[0] == key
	e[1] == value
	i := e[2]
	count([1 | _username != ""; us := data.interlink.protected_taints[i].allowed_users; is_array(us); _username in us]) == 0
	count([1 | gs := data.interlink.protected_taints[i].allowed_groups; is_array(gs); some g in gs; g in _groups]) == 0
	msg := sprintf("toleration %q=%q of a protected taint is not allowed for subject %q", [key, value, _subject_name])
}

# Operators other than Equal/Exists are invalid in Kubernetes; on a
# protected key, refuse rather than guess the semantics.
violations contains msg if {
	input.operation == "create"
	some [key, op, _] in _protected_tolerations
	not op in {"Equal", "Exists"}
	msg := sprintf("toleration %q uses unsupported operator %q on a protected taint (subject %q)", [key, op, _subject_name])
}

# A toleration without a key (absent, empty or not a string) and operator
# Exists tolerates every taint.
violations contains msg if {
	input.operation == "create"
	count(_protected) > 0
	ts := input.pod.spec.tolerations
	is_array(ts)
	some t in ts
	t.operator == "Exists"
	count([1 | k := t.key; is_string(k); k != ""]) == 0
	msg := sprintf("toleration without key and operator Exists tolerates protected taints and is not allowed (subject %q)", [_subject_name])
}

# Rule 4: tenant isolation.
_tenant := t if {
	t := input.tenant
	is_string(t)
} else := ""

_tenant_label := l if {
	l := input.tenant_label
	is_string(l)
} else := ""

_node_name := n if {
	n := input.node.name
	is_string(n)
} else := ""

violations contains msg if {
	input.operation == "create"
	input.node.found == true
	_tenant_label != ""
	other := input.node.labels[_tenant_label]
	other != _tenant
	msg := sprintf("target node %q belongs to tenant %q, not the pod's tenant %q", [_node_name, other, _tenant])
}

violations contains msg if {
	input.operation == "create"
	_tenant_label != ""
	other := input.pod.spec.nodeSelector[_tenant_label]
	other != _tenant
	msg := sprintf("nodeSelector %s=%v selects tenant %q, not the pod's tenant %q", [_tenant_label, other, other, _tenant])
}

violations contains msg if {
	input.operation == "create"
	_tenant_label != ""
	terms := input.pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
	is_array(terms)
	some term in terms
	exprs := term.matchExpressions
	is_array(exprs)
	some expr in exprs
	expr.key == _tenant_label
	expr.operator == "In"
	values := expr.values
	is_array(values)
	some other in values
	other != _tenant
	msg := sprintf("required node affinity %s In %v selects tenant %q, not the pod's tenant %q", [_tenant_label, other, other, _tenant])
}

# ---------------------------------------------------------------------------
# Modifications (rule 5)
# ---------------------------------------------------------------------------

_pod_annotations := {"interlink.io/billing-project": v} if {
	v := input.namespace.labels["interlink.io/billing-project"]
	is_string(v)
} else := {}

# Iterate a set of names so duplicate container names cannot produce a
# conflicting object key. An explicit null or {} counts as "no limits";
# anything else is the caller's choice and is left alone.
_resource_limits := {name: defaults |
	some name in {name |
		some c in _all_containers
		name := c.name
		is_string(name)
		name != "" # a synthetic "#i" name would patch nothing
		count([1 | l := c.resources.limits; l != null; l != {}]) == 0
	}
} if {
	defaults := data.interlink.default_limits
	is_object(defaults)
	count(defaults) > 0
} else := {}
