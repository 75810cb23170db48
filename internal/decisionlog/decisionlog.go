// Package decisionlog is what a decision log receives of each decision: the types
// the authorizer sends and the log (opaplugins, OPA's decision log plugin) takes,
// so that neither imports the other.
package decisionlog

import (
	"context"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Event is one decision, as OPA's decision log event describes it.
type Event struct {
	ID   string
	Path string // slash-separated, as OPA's: interlink/authz/decision
	// Input is the whole input the policy evaluated (not what the caller sent):
	// the log masks it before it leaves the process.
	Input ast.Value
	// Result is the document's value; nil when undefined or on Err.
	Result ast.Value
	// Err is why there is no result (the policy failed, the quota ledger could not
	// be written); nil when decided.
	Err       error
	Timestamp time.Time
	Duration  time.Duration
	// RequestedBy names the caller (its authenticated name, or address).
	RequestedBy string
}

// Log receives decisions. LogDecision must not block on the network: OPA's plugin
// buffers events and uploads them in batches.
type Log interface {
	LogDecision(ctx context.Context, e Event)
}
