package authorizer

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/sar-bridge/sar-bridge/quota"
)

// QuotaTracker keeps tenants' offload usage for the quota rules: quota.Tracker.
type QuotaTracker interface {
	// Hold returns the usage a create is decided against and holds the tenant's
	// other creates until it is released; nil for a tenant without a quota.
	Hold(ctx context.Context, req quota.Request) (*quota.Hold, error)
}

var quotaKey = ast.StringTerm("quota")

// holdQuota sets input.quota for a create the review allowed, when the tenant has a
// quota; release must be called with the outcome (it reserves an allowed create) and
// may be called again. For every other decision input.quota is left out, so the memo
// key of a tenant without a quota never changes with usage; a caller's own
// input.quota is replaced by null, never believed.
func (a *Authorizer) holdQuota(ctx context.Context, req podRequest, t tenantReview, in ast.Object) (release func(allowed bool), err error) {
	release = func(bool) {}
	if in.Get(quotaKey) != nil {
		in.Insert(quotaKey, ast.NullTerm())
	}
	if a.cfg.Quotas == nil || req.Operation != "create" || !t.summary.Allowed {
		return release, nil
	}
	h, err := a.cfg.Quotas.Hold(ctx, quota.Request{
		Tenant: t.tenant, Node: req.NodeName, Namespace: req.Pod.Namespace, Name: req.Pod.Name,
		UID: req.Pod.UID, Pod: in.Get(ast.StringTerm("pod")).Value,
	})
	if err != nil || h == nil {
		return release, unavailable(err)
	}
	in.Insert(quotaKey, ast.NewTerm(h.Input()))
	return h.Release, nil
}

// unavailable marks a tracker's error as a dependency failure (503): no decision.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return NewUnavailableError(err)
}
