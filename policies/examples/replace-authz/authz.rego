# Replaces the embedded authz.rego (same file name): RBAC alone decides, with
# interLink's rules (interlink.rego) and quotas (quota.rego) still applied.
package interlink.authz

default allow := false

allow if {
	input.review.allowed == true
	count(deny) == 0
}

deny contains msg if some msg in _interlink_violations

deny contains msg if some msg in _quota_violations

decision := {
	"allowed": allow,
	"reason": reason,
	"modifications": {"pod_annotations": {}, "resource_limits": {}},
	"review": input.review,
}

reason := input.review.reason if allow

else := concat("; ", sort(deny)) if count(deny) > 0

else := "subject access review did not allow the request"
