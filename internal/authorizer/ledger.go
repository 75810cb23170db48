package authorizer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/internal/tenants"
)

// TenantDirectory is what the authorizer reads of the OffloadTenant objects:
// tenants.Directory.
type TenantDirectory interface {
	// Tenant is the tenant whose object lists the namespace, if any.
	Tenant(namespace string) (tenant string, ok bool, err error)
	// Quota is the tenant's object when it sets hard amounts.
	Quota(tenant string) (*v1alpha1.OffloadTenant, bool)
	// Conflict says why a named tenant has no group ("" when it has one or none).
	Conflict(tenant string) string
}

// Charger charges an allowed create to its tenant's ledger: tenants.Ledger.
type Charger interface {
	Charge(ctx context.Context, req tenants.Request) error
	// Prior is what the pod is already charged, nil when it is not.
	Prior(ctx context.Context, t *v1alpha1.OffloadTenant, req tenants.Request) (corev1.ResourceList, error)
}

// quotaCharge is the charge an allowed create makes, nil when it makes none.
type quotaCharge struct{ req tenants.Request }

// quotaInput sets input.quota for a create the review allowed of a tenant with a quota,
// and returns the charge to make if the policy allows it. For every other decision
// input.quota is left out (a caller's own is replaced by null, never believed), so the
// memo key of a tenant without a quota never changes with usage.
func (a *Authorizer) quotaInput(ctx context.Context, req podRequest, t tenantReview, in ast.Object, mode ChargeMode) (*quotaCharge, error) {
	if in.Get(quotaKey) != nil {
		in.Insert(quotaKey, ast.NullTerm())
	}
	if a.cfg.Tenants == nil || req.Operation != "create" || !t.summary.Allowed {
		return nil, nil
	}
	obj, ok := a.cfg.Tenants.Quota(t.tenant)
	if !ok {
		return nil, nil
	}
	if a.cfg.Ledger == nil {
		return nil, NewUnavailableError(fmt.Errorf("tenant %q has an offload quota (OffloadTenant %s) but --quota.enabled=false: it cannot be enforced", t.tenant, obj.Name))
	}
	amounts, err := a.amounts.Amounts(in.Get(key("pod")).Value)
	if err != nil {
		return nil, NewInputError(err.Error())
	}
	charge := tenants.Request{
		Tenant: t.tenant, UID: req.Pod.UID, Namespace: req.Pod.Namespace, Name: req.Pod.Name, Node: req.NodeName,
		Amounts: amounts, Exists: mode == ChargeStored || mode == ChargeByUID && req.Pod.UID != "",
		Generation: obj.Generation, // a bridge's slice charges only under the spec it was granted for
		Marked:     req.Pod.Charged == t.tenant,
	}
	// The pod decided is never part of its own usage: a pod charged already (by another
	// front door, or the reconciler confirmed) is checked as if it were not.
	prior, err := a.cfg.Ledger.Prior(ctx, obj, charge)
	if err != nil {
		return nil, NewUnavailableError(err)
	}
	in.Insert(quotaKey, ast.NewTerm(tenants.QuotaInput(withoutPrior(obj, req.NodeName, prior), req.NodeName, amounts)))
	if mode == ChargeNothing {
		return nil, nil
	}
	return &quotaCharge{req: charge}, nil
}

// withoutPrior is t with prior taken out of its usage (a copy when there is any).
func withoutPrior(t *v1alpha1.OffloadTenant, node string, prior corev1.ResourceList) *v1alpha1.OffloadTenant {
	if len(prior) == 0 {
		return t
	}
	out := t.DeepCopy()
	out.Status.Used = tenants.Sub(out.Status.Used, prior)
	if used, ok := out.Status.NodesUsed[node]; ok {
		out.Status.NodesUsed[node] = tenants.Sub(used, prior)
	}
	return out
}

// charge writes an allowed create's charge. A charge over the quota (another bridge took
// the room since the usage the policy saw) turns the decision into a denial with the
// ledger's message; a ledger that cannot be written is no decision at all.
func (a *Authorizer) charge(ctx context.Context, q *quotaCharge, result ast.Value) (ast.Value, error) {
	err := a.cfg.Ledger.Charge(ctx, q.req)
	var refusal *tenants.Refusal
	switch {
	case err == nil:
		return result, nil
	case errors.As(err, &refusal):
		return deniedBy(result, refusal.Message), nil
	}
	return nil, NewUnavailableError(err)
}

// deniedBy is a decision's result turned into a denial for reason: a decision object
// keeps its other members, and its violations (when it has them) gain the ledger's
// refusal as a deny of rule quota, in order; any other document (allow) becomes false.
func deniedBy(result ast.Value, reason string) ast.Value {
	obj, ok := result.(ast.Object)
	if !ok {
		return ast.Boolean(false)
	}
	members := [][2]*ast.Term{
		ast.Item(key("allowed"), ast.BooleanTerm(false)),
		ast.Item(key("reason"), ast.StringTerm(reason)),
	}
	if list, ok := astjson.Member(obj, key("violations")).(*ast.Array); ok {
		refusal := Violation{Rule: "quota", Message: reason, Action: decisionapi.ActionDeny}
		terms := make([]*ast.Term, 0, list.Len()+1)
		list.Foreach(func(t *ast.Term) { terms = append(terms, t) })
		at := len(terms)
		for i, t := range terms {
			if o, ok := t.Value.(ast.Object); ok && !violationBefore(o, refusal) {
				at = i
				break
			}
		}
		terms = slices.Insert(terms, at, violationTerm(refusal))
		members = append(members, ast.Item(key("violations"), ast.ArrayTerm(terms...)))
	}
	return withMembers(obj, members...)
}

// violationBefore says whether the violation o sorts before v (by rule, then message).
func violationBefore(o ast.Object, v Violation) bool {
	rule, _ := astjson.Member(o, key("rule")).(ast.String)
	msg, _ := astjson.Member(o, key("message")).(ast.String)
	if string(rule) != v.Rule {
		return string(rule) < v.Rule
	}
	return string(msg) < v.Message
}

var quotaKey = ast.StringTerm("quota")
