// Package authorizer is the decision pipeline: it derives the identity of a pod decision,
// resolves the tenant, runs the SubjectAccessReviews (through the cache) and evaluates the
// policy document the caller asked for.
package authorizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/google/uuid"
	"github.com/open-policy-agent/opa/v1/ast"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	k8sauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/decisionlog"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
	"github.com/sar-bridge/sar-bridge/internal/tenants"
	"github.com/sar-bridge/sar-bridge/policies"
)

// ClusterView reads the cluster objects a decision depends on; kube.ClusterView is the
// real one.
type ClusterView interface {
	Synced() bool
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
	Node(name string) (*corev1.Node, bool)
}

// Evaluator evaluates a policy document; policies.Evaluator is the real one.
type Evaluator interface {
	EvalValue(ctx context.Context, path []string, input ast.Value, memo policies.Memo) (policies.Result, error)
}

// InputError is a request the pipeline cannot decide on: the caller must fix it (400).
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

func inputErrorf(format string, args ...any) error {
	return &InputError{msg: fmt.Sprintf(format, args...)}
}

// NewInputError returns an InputError with a message for the caller.
func NewInputError(msg string) *InputError { return &InputError{msg: msg} }

// UnavailableError means a dependency could not answer, so no decision was made (503).
// It is never turned into an allow.
type UnavailableError struct{ err error }

func (e *UnavailableError) Error() string { return e.err.Error() }
func (e *UnavailableError) Unwrap() error { return e.err }

// NewUnavailableError marks err as a dependency failure.
func NewUnavailableError(err error) *UnavailableError { return &UnavailableError{err: err} }

// TenantGroups maps a tenant to the API group its RBAC rules live in.
type TenantGroups interface {
	Group(tenant string) (group string, ok bool)
}

// Config configures an Authorizer.
type Config struct {
	// Mappings gives a tenant's API group: mapping.Mappings, or a mapping.Source that
	// follows a mapping file.
	Mappings    TenantGroups
	TenantLabel string
	// NodeAccess adds a review of "use" on the target node in the tenant's group.
	NodeAccess bool
	// Tenants are the OffloadTenant objects (their quotas; nil: no quotas), and Ledger
	// charges allowed creates to them (ledger.go).
	Tenants TenantDirectory
	Ledger  Charger
	// LivePods reads the live pod for input.hpc.writers (writers.go); nil: never read,
	// and writers is left out.
	LivePods LivePods
	// VKFieldManagers are the field managers under which the Virtual Kubelet writes
	// its annotations (--interlink.vk-field-managers); empty: no key is ever "vk".
	VKFieldManagers []string
	// DecisionLog receives every pod decision once its input is built (OPA's decision
	// logs, opaplugins); nil: none, at no cost.
	DecisionLog decisionlog.Log
}

// Authorizer decides pod requests.
type Authorizer struct {
	cfg       Config
	reviewer  *CachingReviewer
	view      ClusterView
	evaluator Evaluator
	metrics   *Metrics
	logger    log.Logger
	openshift *openshiftMode // nil: opa-openshift requests are not served
	objects   objectValues   // namespaces and nodes as input values, by version
	specs     podSpecs       // pod specs that decoded strictly before
	amounts   *tenants.AmountsCache
	budget    decisionBudget // inputs being decided at once, in bytes
	// impersonation answers whether a caller may impersonate the identity it sends in
	// input.user; nil refuses every input.user.
	impersonation k8sauthorizer.Authorizer
}

// SetImpersonationAuthorizer makes input.user count when the caller may impersonate it.
func (a *Authorizer) SetImpersonationAuthorizer(z k8sauthorizer.Authorizer) { a.impersonation = z }

// New returns an Authorizer.
func New(cfg Config, reviewer *CachingReviewer, view ClusterView, evaluator Evaluator, metrics *Metrics, logger log.Logger) *Authorizer {
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Authorizer{cfg: cfg, reviewer: reviewer, view: view, evaluator: evaluator, metrics: metrics, logger: logger, objects: newObjectValues(), specs: newPodSpecs(), budget: newDecisionBudget(), amounts: tenants.NewAmountsCache()}
}

// Decision is the answer to one request.
type Decision struct {
	ID string
	// Result is the policy document's value, in Rego's value form (encode it with
	// astjson.AppendJSON); nil unless Defined.
	Result  ast.Value
	Defined bool
}

// Decide answers the policy document at r.Path for r.Input: a pod decision, or an
// opa-openshift request on its path.
func (a *Authorizer) Decide(ctx context.Context, r Request) (Decision, error) {
	if r.As == nil && a.openshift.serves(r.Path, r.Input) {
		return a.decideOpenShift(ctx, r.Input, r.AccessToken)
	}
	return a.decidePod(ctx, r)
}

// decidePod decides a pod request.
func (a *Authorizer) decidePod(ctx context.Context, r Request) (d Decision, err error) {
	path, rawInput, trusted := r.Path, r.Input, r.As
	d = Decision{ID: uuid.NewString()}
	rec := a.beginDecision(append([]any{"decision_id", d.ID, "path", strings.Join(path, "/")}, r.LogFields...)...)
	defer rec.end()

	release, err := a.budget.acquire(ctx, len(rawInput))
	if err != nil {
		rec.failed(true, "input over the decision budget", err)
		return d, err
	}
	defer release()
	req, err := decodePodInput(rawInput, r.InputValid, a.specs)
	if err != nil {
		rec.failed(true, "rejected request", err)
		return d, err
	}
	if err := a.waitForSync(ctx); err != nil {
		return d, err
	}
	rec.add("client", callerName(ctx))
	subject, err := a.subjectOf(ctx, req, trusted)
	if err != nil {
		rec.failed(true, "rejected input.user", err)
		return d, err
	}
	pod := req.Pod
	if req.Operation == "" {
		req.Operation = "create"
	}
	if req.NodeName == "" {
		req.NodeName = pod.NodeName
	}
	rec.add("subject", subject.Username, "namespace", pod.Namespace, "pod", pod.Name, "operation", req.Operation)

	t, err := a.reviewTenant(ctx, req, subject)
	rec.add("tenant", t.tenant)
	if err != nil {
		rec.failed(false, t.failure, err)
		return d, err
	}

	hpc, writers, err := a.hpcWithWriters(ctx, req, r.NotStored)
	if err != nil {
		rec.failed(false, "live pod unavailable", err)
		return d, err
	}
	if writers != nil {
		rec.add("writers", writersField(writers))
	}

	node, _ := a.view.Node(req.NodeName)
	var nsValue, nodeVal ast.Value
	if t.ns != nil {
		nsValue = a.objects.get("namespace", t.ns, func() ast.Value { return namespaceValue(pod.Namespace, t.ns) })
	} else {
		nsValue = namespaceValue(pod.Namespace, nil)
	}
	if node != nil {
		nodeVal = a.objects.get("node", node, func() ast.Value { return nodeValue(req.NodeName, node) })
	} else {
		nodeVal = nodeValue(req.NodeName, nil)
	}
	in := withMembers(req.input, append([][2]*ast.Term{
		ast.Item(key("operation"), ast.StringTerm(req.Operation)),
		ast.Item(key("subject"), ast.NewTerm(a.objects.getFor("subject", subjectKey(subject), func() ast.Value { return subjectValue(subject) }))),
		ast.Item(key("front_door"), frontDoorTerm(r.FrontDoor)),
		ast.Item(key("tenant"), ast.StringTerm(t.tenant)),
		ast.Item(key("tenant_label"), ast.StringTerm(a.cfg.TenantLabel)),
		ast.Item(key("group"), stringOrNull(t.group)),
		ast.Item(key("namespace"), ast.NewTerm(nsValue)),
		ast.Item(key("node"), ast.NewTerm(nodeVal)),
		ast.Item(key("review"), ast.NewTerm(a.objects.getFor("review", t.summary.key(), t.summary.value))),
	}, req.derivedMembers(hpc)...)...)
	if a.cfg.DecisionLog != nil {
		defer func() { a.logDecision(ctx, rec, path, in, d, err) }()
	}

	quota, err := a.quotaInput(ctx, req, t, in, r.Charge)
	if err != nil {
		rec.failed(false, "quota usage unavailable", err)
		return d, err
	}

	var memo policies.Memo
	if t.memoTTL > 0 {
		memo = policies.Memo{Salt: memoSalt(t.summary, t.ns, node, t.tenant, t.group), Expires: rec.start.Add(t.memoTTL)}
	}
	res, err := a.evaluator.EvalValue(ctx, path, in, memo)
	if err != nil {
		rec.failed(false, "policy evaluation failed", err)
		return d, fmt.Errorf("evaluating policy: %w", err)
	}
	if memo.Salt != nil {
		a.metrics.memo.WithLabelValues(string(res.Memo)).Inc()
	}
	d.Result, d.Defined = res.Value, res.Defined
	outcome, reason := summarize(d.Result, d.Defined)
	if quota != nil && outcome == "allowed" {
		if d.Result, err = a.charge(ctx, quota, d.Result); err != nil {
			rec.failed(false, "quota ledger unavailable", err)
			return d, err
		}
		outcome, reason = summarize(d.Result, d.Defined)
	}
	extra := []any{"cache_hit", strconv.FormatBool(t.cacheHit), "memo", string(res.Memo)}
	if would := a.countViolations(d.Result, t.tenant, r.FrontDoor); len(would) > 0 {
		extra = append(extra, "would_deny", strings.Join(would, ","))
	}
	rec.decided(outcome, reason, extra...)
	return d, nil
}

// countViolations counts a decision's violations by rule, tenant, action and front
// door, and returns the rules whose violations warn or audit here (sorted, once each):
// what deny would refuse. A result without violations (another document, a policy of
// a site's own shape) counts nothing.
func (a *Authorizer) countViolations(result ast.Value, tenant string, door FrontDoor) []string {
	obj, ok := result.(ast.Object)
	if !ok {
		return nil
	}
	violations, err := readViolations(obj)
	if err != nil {
		return nil // the front door's reading of the verdict refuses it
	}
	var would []string
	for _, v := range violations {
		a.metrics.violations.WithLabelValues(v.Rule, tenant, v.Action, door.name()).Inc()
		if v.Action != decisionapi.ActionDeny && !slices.Contains(would, v.Rule) {
			would = append(would, v.Rule)
		}
	}
	slices.Sort(would)
	return would
}

// subjectOf is the identity a decision reviews: the pod's service account, the trusted
// caller's subject, or input.user when the caller may impersonate it.
func (a *Authorizer) subjectOf(ctx context.Context, req podRequest, trusted *Subject) (Subject, error) {
	switch {
	case trusted != nil && req.User != nil:
		return Subject{}, NewInputError("input.user cannot be given with a subject from the caller")
	case trusted != nil:
		s, err := inputUser(*trusted).subject()
		if err != nil {
			return Subject{}, NewInputError(err.Error())
		}
		return s, nil
	case req.User != nil:
		s, err := req.User.subject()
		if err != nil {
			return Subject{}, NewInputError(err.Error())
		}
		if err := a.vouch(ctx, s); err != nil {
			return Subject{}, err
		}
		return s, nil
	}
	return serviceAccountSubject(req.Pod.Namespace, req.Pod.ServiceAccount), nil
}

// tenantReview is what a decision learnt about the pod's tenant and its rights.
type tenantReview struct {
	ns            *corev1.Namespace // nil when the namespace does not exist
	tenant, group string
	summary       reviewSummary
	cacheHit      bool
	// memoTTL is how long the review outcome may be reused (0: not at all); a
	// memoised result keyed on it lives no longer.
	memoTTL time.Duration
	failure string // the log message of an error
}

// reviewTenant resolves the pod's tenant and API group and runs the reviews. A
// namespace that does not exist or a tenant without a mapping is an outcome the
// policy sees (review not allowed), not an error.
func (a *Authorizer) reviewTenant(ctx context.Context, req podRequest, subject Subject) (tenantReview, error) {
	pod := req.Pod
	ns, err := a.view.Namespace(ctx, pod.Namespace)
	switch {
	case errors.Is(err, kube.ErrNamespaceNotFound):
		return tenantReview{tenant: pod.Namespace,
			summary: reviewSummary{Reason: fmt.Sprintf("namespace %q does not exist in the cluster", pod.Namespace)}}, nil
	case err != nil:
		return tenantReview{failure: "namespace lookup failed"}, NewUnavailableError(err)
	}
	t := tenantReview{ns: ns}
	resolved := a.ResolveTenant(ns)
	t.tenant, t.group = resolved.Tenant, resolved.Group
	if !resolved.Mapped {
		// No review: without a group there is nothing RBAC could grant.
		t.summary = reviewSummary{Reason: resolved.Reason}
		return t, nil
	}
	specs := reviewSpecs(subject, req.Operation, t.group, pod, req.NodeName, a.cfg.NodeAccess)
	if t.summary, t.cacheHit, t.memoTTL, err = a.review(ctx, specs); err != nil {
		t.failure = "subject access review failed"
		return t, NewUnavailableError(fmt.Errorf("subject access review failed: %w", err))
	}
	return t, nil
}

// ResolvedTenant is a namespace's tenant and the API group its RBAC rules live in.
type ResolvedTenant struct {
	Tenant, Group string
	// Mapped is false when RBAC can grant nothing to the namespace's pods: Reason says
	// why (no mapping, or OffloadTenants in conflict).
	Mapped bool
	Reason string
}

// ResolveTenant is how every decision, and who-can, names a namespace's tenant and
// group: an OffloadTenant that lists the namespace, else the tenant label, else the
// namespace itself; its group from the OffloadTenant, the flags or the mappings file.
func (a *Authorizer) ResolveTenant(ns *corev1.Namespace) ResolvedTenant {
	r := ResolvedTenant{Tenant: mapping.Tenant(ns.Name, ns.Labels, a.cfg.TenantLabel)}
	if a.cfg.Tenants != nil {
		// An OffloadTenant that lists the namespace names its tenant; two that list it
		// leave it to none (no review: a person must fix the objects).
		listed, ok, err := a.cfg.Tenants.Tenant(ns.Name)
		switch {
		case err != nil:
			r.Reason = err.Error()
			return r
		case ok:
			r.Tenant = listed
		}
	}
	if r.Group, r.Mapped = a.cfg.Mappings.Group(r.Tenant); r.Mapped {
		return r
	}
	r.Reason = fmt.Sprintf("tenant %q (namespace %q) has no API group mapping: add an OffloadTenant, --openshift.mappings %s=<group> or a %q fallback", r.Tenant, ns.Name, r.Tenant, mapping.Fallback)
	if a.cfg.Tenants != nil {
		if conflict := a.cfg.Tenants.Conflict(r.Tenant); conflict != "" {
			r.Reason = conflict
		}
	}
	return r
}

// maxSyncWait bounds how long a decision waits for the first list of the cluster.
const maxSyncWait = 5 * time.Second

// waitForSync holds a decision until the cluster view has its first list (a bridge that
// just started), within the request's deadline and maxSyncWait: decisions are never
// made on a partial view.
func (a *Authorizer) waitForSync(ctx context.Context) error {
	if a.synced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxSyncWait)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return a.synced(), nil
	})
	if err != nil {
		return NewUnavailableError(errors.New("cluster view not synced yet: the Kubernetes API has not been listed"))
	}
	return nil
}

// synced says the cluster view, and the OffloadTenants when they are followed, have their
// first lists.
func (a *Authorizer) synced() bool {
	if t, ok := a.cfg.Tenants.(interface{ HasSynced() bool }); ok && !t.HasSynced() {
		return false
	}
	return a.view.Synced()
}

// reviewSpecs are the reviews a decision needs. A create review names no pod: RBAC
// resourceNames cannot restrict creation, and one cached review then serves every pod a
// service account creates in the namespace.
func reviewSpecs(s Subject, operation, group string, pod podIdentity, nodeName string, nodeAccess bool) []authorizationv1.SubjectAccessReviewSpec {
	base := authorizationv1.SubjectAccessReviewSpec{UID: s.UID, User: s.Username, Groups: s.Groups, Extra: extraValues(s.Extra)}
	verb, _ := decisionapi.Verb(operation) // validated with the input
	podSpec := base
	podSpec.ResourceAttributes = &authorizationv1.ResourceAttributes{
		Namespace: pod.Namespace, Verb: verb, Group: group, Resource: "pods",
	}
	if operation != "create" {
		podSpec.ResourceAttributes.Name = pod.Name
	}
	specs := []authorizationv1.SubjectAccessReviewSpec{podSpec}
	if nodeAccess {
		nodeSpec := base
		nodeSpec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: pod.Namespace, Verb: "use", Group: group, Resource: "nodes", Name: nodeName,
		}
		specs = append(specs, nodeSpec)
	}
	return specs
}

func extraValues(extra map[string][]string) map[string]authorizationv1.ExtraValue {
	if len(extra) == 0 {
		return nil
	}
	out := make(map[string]authorizationv1.ExtraValue, len(extra))
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// reviewSummary folds the reviews of one decision into what the policy reads.
type reviewSummary struct {
	Allowed    bool
	Denied     bool
	Reason     string
	Attributes []*authorizationv1.ResourceAttributes
}

// review runs the reviews in order and stops at the first that does not allow: every
// one must allow. hit is true when the cache answered all of them; ttl is the shortest
// time the cache keeps any of their outcomes.
func (a *Authorizer) review(ctx context.Context, specs []authorizationv1.SubjectAccessReviewSpec) (summary reviewSummary, hit bool, ttl time.Duration, err error) {
	summary = reviewSummary{Allowed: true}
	hit = true
	var reasons []string
	for i, spec := range specs {
		summary.Attributes = append(summary.Attributes, spec.ResourceAttributes)
		if spec.ResourceAttributes.Resource == "nodes" && spec.ResourceAttributes.Name == "" {
			return reviewSummary{Attributes: summary.Attributes,
				Reason: "node access review needs a target node: set input.node.name or pod.spec.nodeName"}, hit, 0, nil
		}
		r, cached, err := a.reviewer.Review(ctx, spec)
		if err != nil {
			return reviewSummary{}, false, 0, err
		}
		hit = hit && cached
		if t := a.reviewer.ttl(r); i == 0 || t < ttl {
			ttl = t
		}
		if !r.Allowed {
			return reviewSummary{Denied: r.Denied, Reason: denialReason(spec, r), Attributes: summary.Attributes}, hit, ttl, nil
		}
		reasons = append(reasons, r.Reason)
	}
	summary.Reason = strings.Join(reasons, "; ")
	return summary, hit, ttl, nil
}

// denialReason says who may not do what where, so a person knows which binding is
// missing; RBAC itself gives no reason for a denial.
func denialReason(spec authorizationv1.SubjectAccessReviewSpec, r ReviewResult) string {
	attrs := spec.ResourceAttributes
	resource := attrs.Resource
	if attrs.Group != "" {
		resource += "." + attrs.Group
	}
	if attrs.Name != "" {
		resource += fmt.Sprintf(" %q", attrs.Name)
	}
	msg := fmt.Sprintf("%s may not %s %s in namespace %q", spec.User, attrs.Verb, resource, attrs.Namespace)
	if r.Reason != "" {
		msg += ": " + r.Reason
	}
	if r.EvaluationError != "" {
		msg += " (evaluation error: " + r.EvaluationError + ")"
	}
	return msg
}

// summarize reads the outcome and reason of a result for the decision log.
func summarize(result ast.Value, defined bool) (outcome, reason string) {
	if !defined {
		return "undefined", ""
	}
	if r, ok := result.(ast.Boolean); ok { // data.interlink.authz.allow
		return allowedWord(bool(r)), ""
	}
	allowed, reason, err := ReadAllowed(Decision{Result: result, Defined: true})
	if err != nil {
		return "other", reason
	}
	return allowedWord(allowed), reason
}

func allowedWord(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// logDecision sends a decision whose input was built to the decision log: its
// result, or the error that left it without one.
func (a *Authorizer) logDecision(ctx context.Context, rec *decisionRecord, path []string, input ast.Value, d Decision, err error) {
	e := decisionlog.Event{ID: d.ID, Path: strings.Join(path, "/"), Input: input, Err: err,
		Timestamp: rec.start, Duration: time.Since(rec.start), RequestedBy: callerName(ctx)}
	if err == nil && d.Defined {
		e.Result = withWouldDeny(d.Result)
	}
	a.cfg.DecisionLog.LogDecision(ctx, e)
}

// wouldDenyKey is the member of a logged decision that lists what its violations of
// action warn or audit would deny.
var wouldDenyKey = ast.StringTerm("would_deny")

// withWouldDeny is a decision's result as the decision log records it: with
// "would_deny", the violations that warn or audit (rule, message, action), when there
// are any; the answer itself is unchanged.
func withWouldDeny(result ast.Value) ast.Value {
	obj, ok := result.(ast.Object)
	if !ok {
		return result
	}
	violations, err := readViolations(obj)
	if err != nil {
		return result
	}
	var would []*ast.Term
	for _, v := range violations {
		if v.Action != decisionapi.ActionDeny {
			would = append(would, violationTerm(v))
		}
	}
	if len(would) == 0 {
		return result
	}
	return withMembers(obj, ast.Item(wouldDenyKey, ast.ArrayTerm(would...)))
}

func violationTerm(v Violation) *ast.Term {
	return ast.ObjectTerm(
		ast.Item(key("rule"), ast.StringTerm(v.Rule)),
		ast.Item(key("message"), ast.StringTerm(v.Message)),
		ast.Item(key("action"), ast.StringTerm(v.Action)),
	)
}
