package interlink.authz

# Protected taints, with pod-toleration semantics (policies/rules/protected-taints).

# Tolerations of a protected key as [key, operator, value]: operator "Equal"
# when absent, empty or not a string; value "" when absent or not a string.
_protected_tolerations := [[key, op, value] |
	keys := _static.protected_keys
	count(keys) > 0
	ts := input.pod.spec.tolerations
	is_array(ts)
	some t in ts
	key := t.key
	keys[key]
	op := array.concat([o | o := t.operator; is_string(o); o != ""], ["Equal"])[0]
	value := array.concat([v | v := t.value; is_string(v)], [""])[0]
]

_protected_taints_violations contains msg if {
	input.operation == "create"
	some [key, "Exists", _] in _protected_tolerations
	msg := sprintf("toleration %q with operator Exists covers protected taint %q and is not allowed for any subject (subject %q)", [key, key, _subject_name])
}

_protected_taints_violations contains msg if {
	input.operation == "create"
	some [key, "Equal", value] in _protected_tolerations
	some e in _static.protected[key][value]
	not e.users[_username]
	count([1 | some g in _group_list; e.groups[g]]) == 0
	msg := sprintf("toleration %q=%q of a protected taint is not allowed for subject %q", [key, value, _subject_name])
}

# Operators other than Equal/Exists are invalid in Kubernetes; on a
# protected key, refuse rather than guess the semantics.
_protected_taints_violations contains msg if {
	input.operation == "create"
	some [key, op, _] in _protected_tolerations
	not op in {"Equal", "Exists"}
	msg := sprintf("toleration %q uses unsupported operator %q on a protected taint (subject %q)", [key, op, _subject_name])
}

# A toleration without a key (absent, empty or not a string) and operator
# Exists tolerates every taint.
_protected_taints_violations contains msg if {
	input.operation == "create"
	count(_static.protected_keys) > 0
	ts := input.pod.spec.tolerations
	is_array(ts)
	some t in ts
	t.operator == "Exists"
	count([1 | k := t.key; is_string(k); k != ""]) == 0
	msg := sprintf("toleration without key and operator Exists tolerates protected taints and is not allowed (subject %q)", [_subject_name])
}

# Well-formed protected entries as [key, value, index]; value "" when absent
# or not a string.
_pre_protected := [[key, value, i] |
	pts := data.interlink.protected_taints
	is_array(pts)
	some i, p in pts
	key := p.key
	is_string(key)
	key != ""
	value := array.concat([v | v := p.value; is_string(v)], [""])[0]
]
