# Review (policies/rules/review): its tests, in the package of the decision's tests,
# whose fixtures (base, with_spec, ...) are in policies/rego/authz_test.rego.
package interlink.authz_test

import data.interlink.authz

test_review_denial_reason_passes_through if {
	inp := object.union(base, {"review": {"allowed": false, "denied": true, "reason": "RBAC: no binding for create interlink.io/pods", "attributes": []}})
	not authz.allow with input as inp
	d := authz.decision with input as inp
	d.allowed == false
	d.reason == "RBAC: no binding for create interlink.io/pods"
	d.review == inp.review
}

test_review_denial_generic_reason_when_empty if {
	inp := object.union(base, {"review": {"allowed": false, "denied": false, "reason": ""}})
	r := authz.decision.reason with input as inp
	r == "subject access review did not allow the request"
}

test_review_unmapped_tenant if {
	inp := object.union(base, {"group": null, "review": {"allowed": false, "denied": false, "reason": "tenant \"tenant-x\" is not mapped to an API group"}})
	not authz.allow with input as inp
	authz.decision.reason == "tenant \"tenant-x\" is not mapped to an API group" with input as inp
}

test_review_allowed_must_be_true_boolean if {
	inp := object.union(base, {"review": {"allowed": "true", "reason": "x"}})
	not authz.allow with input as inp
}

test_review_reason_first_then_sorted_violations if {
	inp := object.union(with_spec({"nodeSelector": {"interlink.io/tenant": "tenant-b"}, "tolerations": [{"operator": "Exists"}]}), {"review": {"allowed": false, "reason": "RBAC: denied"}})
	r := authz.decision.reason with input as inp with data.interlink.protected_taints as protected
	r == concat("; ", [
		"RBAC: denied",
		"nodeSelector interlink.io/tenant=tenant-b selects tenant \"tenant-b\", not the pod's tenant \"tenant-a\"",
		"toleration without key and operator Exists tolerates protected taints and is not allowed (subject \"system:serviceaccount:team-a:runner\")",
	])
}
