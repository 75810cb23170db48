// Package decisionapi is the contract of a pod decision that the server, its front doors,
// the admin commands and the Go client share: the policy document that decides, and the
// operations a decision is asked about with the RBAC verb each one is reviewed for. It
// imports nothing, so the public Go client can use it without the server's dependencies.
package decisionapi

import (
	"slices"
	"strings"
)

// Path is the policy document of a pod decision, as in /v1/data/<Path>.
const Path = "interlink/authz/decision"

// DataAPIPath is the URL path of the decision on the OPA Data API.
const DataAPIPath = "/v1/data/" + Path

// PathParts is Path split into its references: data.interlink.authz.decision.
func PathParts() []string { return strings.Split(Path, "/") }

// operationVerbs are the operations of input.operation and the verb on "pods" the
// SubjectAccessReview of each one asks for.
var operationVerbs = map[string]string{"create": "create", "delete": "delete", "status": "get"}

// Verb is the RBAC verb an operation is reviewed for; false for an unknown operation.
func Verb(operation string) (string, bool) {
	verb, ok := operationVerbs[operation]
	return verb, ok
}

// Operations lists the operations a decision may be asked about, sorted.
func Operations() []string {
	ops := make([]string, 0, len(operationVerbs))
	for op := range operationVerbs {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}
