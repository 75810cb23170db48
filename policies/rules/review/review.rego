package interlink.authz

# Review (policies/rules/review): the subject access review's answer, which
# authz.rego puts first in deny and reason (it is the root cause when the review
# refused). The fast path reads input.review itself: it is taken only for an
# allowed review.

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
