# Billing (policies/rules/billing): its tests, in the package of the decision's tests,
# whose fixtures (base, with_spec, ...) are in policies/rego/authz_test.rego.
package interlink.authz_test

import data.interlink.authz

test_mod_billing_annotation if {
	inp := object.union(base, {"namespace": {"name": "team-a", "labels": {"interlink.io/billing-project": "proj-42"}, "annotations": {}}})
	authz.decision.modifications.pod_annotations == {"interlink.io/billing-project": "proj-42"} with input as inp
}

test_mod_no_billing_annotation if {
	authz.decision.modifications.pod_annotations == {} with input as base
}
