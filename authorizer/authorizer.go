// Package authorizer is the decision pipeline: it derives the identity of a pod decision,
// resolves the tenant, runs the SubjectAccessReviews (through the cache) and evaluates the
// policy document the caller asked for.
package authorizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/google/uuid"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sjson "sigs.k8s.io/json"

	k8sauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/sar-bridge/sar-bridge/kube"
	"github.com/sar-bridge/sar-bridge/mapping"
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
	Eval(ctx context.Context, path []string, input map[string]any) (result any, defined bool, err error)
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

// Operations and the review verb each one needs.
var operationVerbs = map[string]string{"create": "create", "delete": "delete", "status": "get"}

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
	return &Authorizer{cfg: cfg, reviewer: reviewer, view: view, evaluator: evaluator, metrics: metrics, logger: logger}
}

// Decision is the answer to one request.
type Decision struct {
	ID string
	// Result is the policy document's value; meaningful only when Defined.
	Result  any
	Defined bool
}

// podRequest is the typed view of a pod decision's input.
type podRequest struct {
	Operation string          `json:"operation"`
	Pod       json.RawMessage `json:"pod"`
	User      *inputUser      `json:"user"`
	Node      *struct {
		Name string `json:"name"`
	} `json:"node"`
}

// Decide answers the policy document at path for a pod decision's raw input.
func (a *Authorizer) Decide(ctx context.Context, path []string, rawInput json.RawMessage) (Decision, error) {
	if a.openshift.serves(path, rawInput) {
		return a.decideOpenShift(ctx, rawInput)
	}
	return a.decidePod(ctx, path, rawInput, nil)
}

// DecideAs answers like Decide for a subject a trusted caller has already authenticated
// (the API server's userInfo in an AdmissionReview): rawInput is a pod decision's input
// without input.user, and subject replaces the pod's service account.
func (a *Authorizer) DecideAs(ctx context.Context, path []string, rawInput json.RawMessage, subject Subject) (Decision, error) {
	return a.decidePod(ctx, path, rawInput, &subject)
}

// decidePod decides a pod request; trusted, when set, is the subject to review.
func (a *Authorizer) decidePod(ctx context.Context, path []string, rawInput json.RawMessage, trusted *Subject) (Decision, error) {
	start := time.Now()
	d := Decision{ID: uuid.NewString()}
	logFields := append([]any{"decision_id", d.ID, "path", strings.Join(path, "/")}, logFieldsFrom(ctx)...)
	outcome := "error"
	defer func() {
		a.metrics.decisions.WithLabelValues(outcome).Inc()
		a.metrics.decisionDuration.Observe(time.Since(start).Seconds())
	}()

	input, req, pod, err := decodePodInput(rawInput)
	if err != nil {
		level.Info(a.logger).Log(append(logFields, "msg", "rejected request", "err", err)...)
		return d, err
	}
	if err := a.waitForSync(ctx); err != nil {
		return d, err
	}

	subject := ServiceAccountSubject(pod)
	switch {
	case trusted != nil && req.User != nil:
		return d, NewInputError("input.user cannot be given with a subject from the caller")
	case trusted != nil:
		if subject, err = inputUser(*trusted).subject(); err != nil {
			return d, NewInputError(err.Error())
		}
	case req.User != nil:
		if subject, err = req.User.subject(); err != nil {
			return d, NewInputError(err.Error())
		}
		if err := a.vouch(ctx, subject); err != nil {
			level.Info(a.logger).Log(append(logFields, "client", callerName(ctx), "msg", "rejected input.user", "err", err)...)
			return d, err
		}
	}
	operation := req.Operation
	if operation == "" {
		operation = "create"
	}
	nodeName := pod.Spec.NodeName
	if req.Node != nil && req.Node.Name != "" {
		nodeName = req.Node.Name
	}
	logFields = append(logFields, "client", callerName(ctx), "subject", subject.Username, "namespace", pod.Namespace, "pod", pod.Name, "operation", operation)

	ns, err := a.view.Namespace(ctx, pod.Namespace)
	var summary reviewSummary
	var tenant, group string
	var cacheHit bool
	switch {
	case errors.Is(err, kube.ErrNamespaceNotFound):
		tenant = pod.Namespace
		summary = reviewSummary{Reason: fmt.Sprintf("namespace %q does not exist in the cluster", pod.Namespace)}
	case err != nil:
		level.Error(a.logger).Log(append(logFields, "msg", "namespace lookup failed", "err", err)...)
		return d, NewUnavailableError(err)
	default:
		tenant = mapping.Tenant(ns.Name, ns.Labels, a.cfg.TenantLabel)
		var mapped bool
		group, mapped = a.cfg.Mappings.Group(tenant)
		if !mapped {
			// No review: without a group there is nothing RBAC could grant.
			summary = reviewSummary{Reason: fmt.Sprintf("tenant %q (namespace %q) has no API group mapping: add --openshift.mappings %s=<group> or a %q fallback", tenant, pod.Namespace, tenant, mapping.Fallback)}
			break
		}
		specs := reviewSpecs(subject, operation, group, pod, nodeName, a.cfg.NodeAccess)
		summary, cacheHit, err = a.review(ctx, specs)
		if err != nil {
			level.Error(a.logger).Log(append(logFields, "tenant", tenant, "msg", "subject access review failed", "err", err)...)
			return d, NewUnavailableError(fmt.Errorf("subject access review failed: %w", err))
		}
	}
	logFields = append(logFields, "tenant", tenant)

	input["operation"] = operation
	input["subject"] = subject
	input["tenant"] = tenant
	input["tenant_label"] = a.cfg.TenantLabel
	input["group"] = nilIfEmpty(group)
	input["namespace"] = namespaceInput(pod.Namespace, ns)
	input["node"] = a.nodeInput(nodeName)
	input["review"] = summary.input()

	d.Result, d.Defined, err = a.evaluator.Eval(ctx, path, input)
	if err != nil {
		level.Error(a.logger).Log(append(logFields, "msg", "policy evaluation failed", "err", err)...)
		return d, fmt.Errorf("evaluating policy: %w", err)
	}
	allowed, reason := summarize(d.Result, d.Defined)
	outcome = allowed
	level.Info(a.logger).Log(append(logFields, "msg", "decision", "outcome", allowed, "reason", reason,
		"cache_hit", cacheHit, "duration", time.Since(start))...)
	return d, nil
}

// maxSyncWait bounds how long a decision waits for the first list of the cluster.
const maxSyncWait = 5 * time.Second

// waitForSync holds a decision until the cluster view has its first list (a bridge that
// just started), within the request's deadline and maxSyncWait: decisions are never
// made on a partial view.
func (a *Authorizer) waitForSync(ctx context.Context) error {
	if a.view.Synced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxSyncWait)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return a.view.Synced(), nil
	})
	if err != nil {
		return NewUnavailableError(errors.New("cluster view not synced yet: the Kubernetes API has not been listed"))
	}
	return nil
}

// decodePodInput checks a pod decision's input and returns it both as the generic object
// the policy sees and in typed form. Both readings must agree on every field, so the
// typed decoding is case-sensitive (as Kubernetes' own) and refuses duplicate keys, and
// a pod may hold no field the Pod type lacks: "Spec", "Operator" or "ſperator" would
// otherwise mean one thing to a Go client (encoding/json folds case) and nothing to the
// policy. A pod with a field newer than this build is refused too, never judged blind.
func decodePodInput(raw json.RawMessage) (map[string]any, podRequest, *corev1.Pod, error) {
	var req podRequest
	if err := strictUnmarshal(raw, &req, k8sjson.DisallowDuplicateFields); err != nil {
		return nil, req, nil, inputErrorf("input: %v", err)
	}
	if _, ok := operationVerbs[req.Operation]; !ok && req.Operation != "" {
		return nil, req, nil, inputErrorf("input.operation %q is not one of create, delete, status", req.Operation)
	}
	if p := bytes.TrimSpace(req.Pod); len(p) == 0 || p[0] != '{' {
		return nil, req, nil, inputErrorf("input.pod is required and must be a JSON object")
	}
	pod := &corev1.Pod{}
	if err := strictUnmarshal(req.Pod, pod, k8sjson.DisallowDuplicateFields, k8sjson.DisallowUnknownFields); err != nil {
		return nil, req, nil, inputErrorf("input.pod is not a valid Pod: %v", err)
	}
	if pod.Namespace == "" {
		return nil, req, nil, inputErrorf("input.pod.metadata.namespace is required")
	}
	if pod.Name == "" && req.Operation != "" && req.Operation != "create" {
		return nil, req, nil, inputErrorf("input.pod.metadata.name is required for %s", req.Operation)
	}
	// The policy sees the input as sent, numbers kept exact.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var input map[string]any
	if err := dec.Decode(&input); err != nil {
		return nil, req, nil, inputErrorf("input: %v", err)
	}
	return input, req, pod, nil
}

// strictUnmarshal decodes with exact (case-sensitive) field names, and with the given
// strictness.
func strictUnmarshal(data []byte, v any, strict ...k8sjson.StrictOption) error {
	strictErrs, err := k8sjson.UnmarshalStrict(data, v, strict...)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return errors.Join(strictErrs...)
	}
	return nil
}

// reviewSpecs are the reviews a decision needs. A create review names no pod: RBAC
// resourceNames cannot restrict creation, and one cached review then serves every pod a
// service account creates in the namespace.
func reviewSpecs(s Subject, operation, group string, pod *corev1.Pod, nodeName string, nodeAccess bool) []authorizationv1.SubjectAccessReviewSpec {
	base := authorizationv1.SubjectAccessReviewSpec{UID: s.UID, User: s.Username, Groups: s.Groups, Extra: extraValues(s.Extra)}
	podSpec := base
	podSpec.ResourceAttributes = &authorizationv1.ResourceAttributes{
		Namespace: pod.Namespace, Verb: operationVerbs[operation], Group: group, Resource: "pods",
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

func (s reviewSummary) input() map[string]any {
	attrs := make([]any, 0, len(s.Attributes))
	for _, a := range s.Attributes {
		attrs = append(attrs, map[string]any{
			"namespace": a.Namespace, "verb": a.Verb, "group": a.Group, "resource": a.Resource, "name": a.Name,
		})
	}
	return map[string]any{"allowed": s.Allowed, "denied": s.Denied, "reason": s.Reason, "attributes": attrs}
}

// review runs the reviews in order and stops at the first that does not allow: every
// one must allow. hit is true when the cache answered all of them.
func (a *Authorizer) review(ctx context.Context, specs []authorizationv1.SubjectAccessReviewSpec) (reviewSummary, bool, error) {
	summary := reviewSummary{Allowed: true}
	hit := true
	var reasons []string
	for _, spec := range specs {
		summary.Attributes = append(summary.Attributes, spec.ResourceAttributes)
		if spec.ResourceAttributes.Resource == "nodes" && spec.ResourceAttributes.Name == "" {
			return reviewSummary{Attributes: summary.Attributes,
				Reason: "node access review needs a target node: set input.node.name or pod.spec.nodeName"}, hit, nil
		}
		r, cached, err := a.reviewer.Review(ctx, spec)
		if err != nil {
			return reviewSummary{}, false, err
		}
		hit = hit && cached
		if !r.Allowed {
			return reviewSummary{Denied: r.Denied, Reason: denialReason(spec, r), Attributes: summary.Attributes}, hit, nil
		}
		reasons = append(reasons, r.Reason)
	}
	summary.Reason = strings.Join(reasons, "; ")
	return summary, hit, nil
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

func namespaceInput(name string, ns *corev1.Namespace) map[string]any {
	if ns == nil {
		return map[string]any{"name": name, "labels": map[string]string{}, "annotations": map[string]string{}}
	}
	return map[string]any{"name": ns.Name, "labels": orEmpty(ns.Labels), "annotations": orEmpty(ns.Annotations)}
}

// nodeInput describes the target node as the cluster knows it, whatever the caller said.
func (a *Authorizer) nodeInput(name string) any {
	if name == "" {
		return nil
	}
	node, found := a.view.Node(name)
	if !found {
		return map[string]any{"name": name, "found": false, "labels": map[string]string{}, "taints": []any{}, "allocatable": map[string]string{}}
	}
	taints := make([]any, 0, len(node.Spec.Taints))
	for _, t := range node.Spec.Taints {
		taints = append(taints, map[string]any{"key": t.Key, "value": t.Value, "effect": string(t.Effect)})
	}
	allocatable := make(map[string]string, len(node.Status.Allocatable))
	for k, q := range node.Status.Allocatable {
		allocatable[string(k)] = q.String()
	}
	return map[string]any{"name": node.Name, "found": true, "labels": orEmpty(node.Labels), "taints": taints, "allocatable": allocatable}
}

// summarize reads the outcome and reason of a result for the decision log.
func summarize(result any, defined bool) (outcome, reason string) {
	if !defined {
		return "undefined", ""
	}
	switch r := result.(type) {
	case bool:
		return allowedWord(r), ""
	case map[string]any:
		reason, _ := r["reason"].(string)
		if allowed, ok := r["allowed"].(bool); ok {
			return allowedWord(allowed), reason
		}
		return "other", reason
	}
	return "other", ""
}

func allowedWord(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
