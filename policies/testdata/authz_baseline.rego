# Baseline for BenchmarkPolicy and TestPolicyMatchesBaseline: the default policy as it
# was before the issue-19 rewrite, unchanged but for its package name. Not embedded.
# Default sar-bridge policy for interLink pod decisions.
#
# Every document here must stay defined (and never raise a conflict error)
# for any input, including a missing input or fields of the wrong type:
# the HTTP layer relies on `decision` and `allow` always having a value.
# Hence every lookup goes through a type-checked helper with an `else`.
package interlink.authz_baseline

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
	_is_create
}

# ---------------------------------------------------------------------------
# Generic helpers (type-safe accessors)
# ---------------------------------------------------------------------------

# _obj returns x[key] when it is an object, else {}.
_obj(x, key) := v if {
	is_object(x)
	v := x[key]
	is_object(v)
} else := {}

# _arr returns x[key] when it is an array, else [].
_arr(x, key) := v if {
	is_object(x)
	v := x[key]
	is_array(v)
} else := []

# _str returns x[key] when it is a string, else "".
_str(x, key) := v if {
	is_object(x)
	v := x[key]
	is_string(v)
} else := ""

_input := input if {
	is_object(input)
} else := {}

# Admin data is read key by key: referencing data.interlink as a whole would
# include this package's own rules and recurse.
_limits_cfg := v if {
	v := data.interlink.limits
	is_object(v)
} else := {}

_protected_cfg := v if {
	v := data.interlink.protected_taints
	is_array(v)
} else := []

_default_limits := v if {
	v := data.interlink.default_limits
	is_object(v)
	count(v) > 0
} else := null

# ---------------------------------------------------------------------------
# Input normalisation
# ---------------------------------------------------------------------------

_is_create if _str(_input, "operation") == "create"

_review := _obj(_input, "review")

_review_doc := r if {
	r := _input.review
} else := null

_review_allowed if _review.allowed == true

_review_reason := _str(_review, "reason")

_review_part := [] if {
	_review_allowed
} else := [_review_reason] if {
	_review_reason != ""
} else := ["subject access review did not allow the request"]

_subject := _obj(_input, "subject")

_username := _str(_subject, "username")

_subject_name := _username if {
	_username != ""
} else := "<unknown subject>"

_groups := {g | some g in _arr(_subject, "groups"); is_string(g)}

_pod := _obj(_input, "pod")

_spec := _obj(_pod, "spec")

# Containers and init containers with a display name; the index keeps
# unnamed containers distinguishable in messages.
_containers := [{"name": _container_name(c, i), "c": c} |
	some i, c in array.concat(_arr(_spec, "containers"), _arr(_spec, "initContainers"))
]

_container_name(c, i) := n if {
	n := _str(c, "name")
	n != ""
} else := sprintf("#%d", [i])

# ---------------------------------------------------------------------------
# Violations (rules 2-4 apply to create only)
# ---------------------------------------------------------------------------

# Rule 2: per-group resource caps.
_resources := ["cpu", "memory"]

# Kubernetes quantity grammar, checked before units.parse so that odd strings
# are rejected explicitly instead of silently yielding undefined. The short
# exponent bound keeps a hostile "1e999999" from costing a huge big.Rat.
_quantity_re := `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`

_quantity(q) := q if {
	is_number(q)
} else := v if {
	is_string(q)
	regex.match(_quantity_re, q)
	v := units.parse(q)
}

# Caps that apply to the subject: [value, group, raw] per resource.
_cap_candidates[res] := [[v, g, raw] |
	some g in _groups
	raw := _obj(_limits_cfg, g)[res]
	v := _quantity(raw)
] if {
	some res in _resources
}

# The largest cap among the subject's groups wins; ties go to the
# lexicographically first group so the message is deterministic.
_cap[res] := {"value": top, "group": g, "raw": raw} if {
	some res, entries in _cap_candidates
	count(entries) > 0
	top := max({e[0] | some e in entries})
	g := min({e[1] | some e in entries; e[0] == top})
	some e in entries
	e[0] == top
	e[1] == g
	raw := e[2]
}

# A limit, or the request when no limit is set for that resource.
_amount(c, res) := {"kind": "limit", "raw": raw} if {
	raw := _obj(_obj(c, "resources"), "limits")[res]
	raw != null
} else := {"kind": "request", "raw": raw} if {
	raw := _obj(_obj(c, "resources"), "requests")[res]
	raw != null
}

_amount_phrase(a, res) := sprintf("sets %s limit %v", [res, a.raw]) if {
	a.kind == "limit"
} else := sprintf("requests %s %v", [res, a.raw])

violations contains msg if {
	_is_create
	some entry in _containers
	some res, cap in _cap
	a := _amount(entry.c, res)
	_quantity(a.raw) > cap.value
	msg := sprintf("container %q %s over the cap %v for group %q", [entry.name, _amount_phrase(a, res), cap.raw, cap.group])
}

# Fail closed on quantities that cannot be compared against a cap.
violations contains msg if {
	_is_create
	some entry in _containers
	some res, cap in _cap
	a := _amount(entry.c, res)
	not _quantity(a.raw)
	msg := sprintf("container %q has an invalid %s quantity %v (cap %v for group %q)", [entry.name, res, a.raw, cap.raw, cap.group])
}

# A cap the admin mistyped must not silently lift the limit.
violations contains msg if {
	_is_create
	some g in _groups
	some res in _resources
	raw := _obj(_limits_cfg, g)[res]
	not _quantity(raw)
	msg := sprintf("invalid %s cap %v configured for group %q", [res, raw, g])
}

# Rule 3: protected taints, with pod-toleration semantics.
_protected := [t |
	some t in _protected_cfg
	_str(t, "key") != ""
]

_tolerations := [t | some t in _arr(_spec, "tolerations"); is_object(t)]

_tol_op(t) := op if {
	op := _str(t, "operator")
	op != ""
} else := "Equal"

_subject_may_tolerate(p) if {
	_username != ""
	some u in _arr(p, "allowed_users")
	u == _username
}

_subject_may_tolerate(p) if {
	some g in _arr(p, "allowed_groups")
	g in _groups
}

violations contains msg if {
	_is_create
	some t in _tolerations
	_tol_op(t) == "Exists"
	key := _str(t, "key")
	some p in _protected
	p.key == key
	msg := sprintf("toleration %q with operator Exists covers protected taint %q and is not allowed for any subject (subject %q)", [key, key, _subject_name])
}

violations contains msg if {
	_is_create
	some t in _tolerations
	_tol_op(t) == "Equal"
	key := _str(t, "key")
	value := _str(t, "value")
	some p in _protected
	p.key == key
	_str(p, "value") == value
	not _subject_may_tolerate(p)
	msg := sprintf("toleration %q=%q of a protected taint is not allowed for subject %q", [key, value, _subject_name])
}

# Operators other than Equal/Exists are invalid in Kubernetes; on a
# protected key, refuse rather than guess the semantics.
violations contains msg if {
	_is_create
	some t in _tolerations
	op := _tol_op(t)
	not op in {"Equal", "Exists"}
	key := _str(t, "key")
	some p in _protected
	p.key == key
	msg := sprintf("toleration %q uses unsupported operator %q on a protected taint (subject %q)", [key, op, _subject_name])
}

violations contains msg if {
	_is_create
	count(_protected) > 0
	some t in _tolerations
	_tol_op(t) == "Exists"
	_str(t, "key") == ""
	msg := sprintf("toleration without key and operator Exists tolerates protected taints and is not allowed (subject %q)", [_subject_name])
}

# Rule 4: tenant isolation.
_tenant := _str(_input, "tenant")

_tenant_label := _str(_input, "tenant_label")

_node := _obj(_input, "node")

violations contains msg if {
	_is_create
	_tenant_label != ""
	_node.found == true
	other := _obj(_node, "labels")[_tenant_label]
	other != _tenant
	msg := sprintf("target node %q belongs to tenant %q, not the pod's tenant %q", [_str(_node, "name"), other, _tenant])
}

violations contains msg if {
	_is_create
	_tenant_label != ""
	other := _obj(_spec, "nodeSelector")[_tenant_label]
	other != _tenant
	msg := sprintf("nodeSelector %s=%v selects tenant %q, not the pod's tenant %q", [_tenant_label, other, other, _tenant])
}

violations contains msg if {
	_is_create
	_tenant_label != ""
	required := _obj(_obj(_obj(_spec, "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution")
	some term in _arr(required, "nodeSelectorTerms")
	some expr in _arr(term, "matchExpressions")
	_str(expr, "key") == _tenant_label
	_str(expr, "operator") == "In"
	some other in _arr(expr, "values")
	other != _tenant
	msg := sprintf("required node affinity %s In %v selects tenant %q, not the pod's tenant %q", [_tenant_label, other, other, _tenant])
}

# ---------------------------------------------------------------------------
# Modifications (rule 5)
# ---------------------------------------------------------------------------

_billing_label := "interlink.io/billing-project"

_pod_annotations := {_billing_label: v} if {
	v := _obj(_obj(_input, "namespace"), "labels")[_billing_label]
	is_string(v)
} else := {}

# Iterate a set of names so duplicate container names cannot produce a
# conflicting object key.
_resource_limits := {name: _default_limits |
	some name in {name |
		some entry in _containers
		name := _str(entry.c, "name")
		name != "" # a synthetic "#i" name would patch nothing
		_has_no_limits(entry.c)
	}
} if {
	_default_limits != null
} else := {}

_has_no_limits(c) if not _has_limits(c)

# An explicit null or {} counts as "no limits"; anything else is the
# caller's choice and is left alone.
_has_limits(c) if {
	limits := _obj(c, "resources").limits
	limits != null
	limits != {}
}
