package interlink.authz

# Tenant isolation (policies/rules/tenant-isolation).
_tenant_label := l if {
	l := input.tenant_label
	is_string(l)
} else := ""

_node_name := n if {
	n := input.node.name
	is_string(n)
} else := ""

_tenant_isolation_violations contains msg if {
	input.operation == "create"
	input.node.found == true
	_tenant_label != ""
	other := input.node.labels[_tenant_label]
	other != _tenant
	msg := sprintf("target node %q belongs to tenant %q, not the pod's tenant %q", [_node_name, other, _tenant])
}

_tenant_isolation_violations contains msg if {
	input.operation == "create"
	_tenant_label != ""
	other := input.pod.spec.nodeSelector[_tenant_label]
	other != _tenant
	msg := sprintf("nodeSelector %s=%v selects tenant %q, not the pod's tenant %q", [_tenant_label, other, other, _tenant])
}

_tenant_isolation_violations contains msg if {
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
