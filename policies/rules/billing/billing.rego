package interlink.authz

# Billing (policies/rules/billing): the namespace's interlink.io/billing-project
# label as a pod annotation (authz.rego's _pod_annotations and the fast path add
# it to modifications.pod_annotations).
_billing_annotation := {"interlink.io/billing-project": v} if {
	v := input.namespace.labels["interlink.io/billing-project"]
	is_string(v)
} else := {}
