// Package admission serves the pod decision as Kubernetes validating and mutating
// admission webhooks (AdmissionReview admission.k8s.io/v1): the same decision as the
// Data API and the interLink relay, for pods aimed at virtual nodes, reviewed for the
// user who makes the request. The validating webhook also judges workloads (Jobs,
// CronJobs, Deployments, ...) whose pod template aims at virtual nodes, as the user who
// creates or changes them: their pods are later created by controllers, which act for
// the pods' service account. And it judges who changes the annotations interLink's
// Virtual Kubelet writes into running pods (vkannotations.go), which the relay can only
// attribute by field manager name.
package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/workload"
)

// Paths of the two webhooks on the public listener.
const (
	ValidatePath = "/admission/validate"
	MutatePath   = "/admission/mutate"
)

// DefaultMaxBodyBytes bounds an AdmissionReview: the API server sends the object and,
// for an update, the old one, so twice the Data API's bound.
const DefaultMaxBodyBytes = 2 << 20

// Identity is whose permissions a decision reviews.
type Identity string

const (
	// IdentityRequester reviews the AdmissionRequest's userInfo (uid and extra included),
	// except for the scheduler and kube-system's controllers, which act for the pod's
	// service account.
	IdentityRequester Identity = "requester"
	// IdentityServiceAccount always reviews the pod's service account, as the Data API.
	IdentityServiceAccount Identity = "serviceaccount"
)

// ParseIdentity checks an --admission.identity value.
func ParseIdentity(s string) (Identity, error) {
	switch id := Identity(s); id {
	case IdentityRequester, IdentityServiceAccount:
		return id, nil
	}
	return "", fmt.Errorf("%q: want requester or serviceaccount", s)
}

// Decider is the decision pipeline: *authorizer.Authorizer, or a fake in tests.
type Decider = authorizer.Decider

// Cluster reads what a request does not carry: nodes (is the target virtual?) and, for a
// binding, the pod being bound. Node and Pod return nil and no error when absent.
type Cluster interface {
	NodeGetter
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// Options configures the webhooks.
type Options struct {
	DecisionPath []string
	Identity     Identity
	Targets      Targets
	MaxBodyBytes int64
	// Timeout bounds one decision; the API server's timeoutSeconds should be longer.
	Timeout time.Duration
	// VK are the Virtual Kubelet's identities, which may change the annotations it
	// writes (vkAnnotationKeys) in pods; empty: nobody is trusted to without the policy.
	VK         VKIdentities
	Logger     log.Logger
	Registerer prometheus.Registerer
}

// Handler serves ValidatePath and MutatePath.
type Handler struct {
	decider  Decider
	cluster  Cluster
	opts     Options
	requests *prometheus.CounterVec
}

// New returns the webhooks' handler.
func New(decider Decider, cluster Cluster, opts Options) (*Handler, error) {
	if len(opts.DecisionPath) == 0 {
		return nil, errors.New("admission: a decision path is required")
	}
	if _, err := ParseIdentity(string(opts.Identity)); err != nil {
		return nil, fmt.Errorf("admission identity: %w", err)
	}
	if opts.Targets.selector == nil {
		return nil, errors.New("admission: targets are required (NewTargets)")
	}
	if err := opts.VK.Validate(); err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
	h := &Handler{decider: decider, cluster: cluster, opts: opts,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_admission_requests_total",
			Help: "AdmissionReviews answered, by webhook (validate, mutate) and result (skipped: not aimed at a virtual node, allowed, denied, error).",
		}, []string{"webhook", "result"}),
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(h.requests); err != nil {
			return nil, fmt.Errorf("admission metrics: %w", err)
		}
	}
	return h, nil
}

// Results counted by sar_bridge_admission_requests_total.
const (
	resultSkipped = "skipped"
	resultAllowed = "allowed"
	resultDenied  = "denied"
	resultError   = "error"
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var mutate bool
	switch r.URL.Path {
	case ValidatePath:
	case MutatePath:
		mutate = true
	default:
		http.Error(w, "no such admission webhook: "+r.URL.Path, http.StatusNotFound)
		return
	}
	webhook := strings.TrimPrefix(r.URL.Path, "/admission/")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "admission webhooks take POST", http.StatusMethodNotAllowed)
		return
	}
	review, status, err := h.readReview(w, r)
	if err != nil {
		h.requests.WithLabelValues(webhook, resultError).Inc()
		http.Error(w, err.Error(), status)
		return
	}
	req := review.Request
	ctx := r.Context()
	if h.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.opts.Timeout)
		defer cancel()
	}
	resp, result, err := h.answer(ctx, req, mutate)
	logFields := []any{"webhook", webhook, "uid", req.UID, "operation", req.Operation, "resource", req.Resource.Resource,
		"sub_resource", req.SubResource, "namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username, "dry_run", dryRun(req)}
	h.requests.WithLabelValues(webhook, result).Inc()
	if err != nil {
		// Not an AdmissionResponse: the call fails, so the webhook's failurePolicy
		// decides (Fail in the shipped manifests), never an allow by default.
		level.Error(h.opts.Logger).Log(append(logFields, "msg", "admission request not decided", "err", err)...)
		http.Error(w, "sar-bridge could not decide: "+err.Error(), http.StatusInternalServerError)
		return
	}
	level.Debug(h.opts.Logger).Log(append(logFields, "msg", "admission answer", "result", result)...)
	resp.UID = req.UID
	writeReview(w, admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
}

// readReview reads a bounded AdmissionReview v1 with a request.
func (h *Handler) readReview(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q: want application/json", ct)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("AdmissionReview larger than %d bytes", h.opts.MaxBodyBytes)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the AdmissionReview: %w", err)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	gv := admissionv1.SchemeGroupVersion.String()
	switch {
	case review.APIVersion != gv || review.Kind != "AdmissionReview":
		return nil, http.StatusBadRequest, fmt.Errorf("got %s %s: want an AdmissionReview of %s (admissionReviewVersions: [v1])", review.APIVersion, review.Kind, gv)
	case review.Request == nil:
		return nil, http.StatusBadRequest, errors.New("the AdmissionReview has no request")
	case review.Request.UID == "":
		return nil, http.StatusBadRequest, errors.New("the AdmissionReview's request has no uid")
	}
	review.TypeMeta = metav1.TypeMeta{APIVersion: gv, Kind: "AdmissionReview"}
	return &review, http.StatusOK, nil
}

func writeReview(w http.ResponseWriter, review admissionv1.AdmissionReview) {
	b, err := json.Marshal(review)
	if err != nil {
		http.Error(w, "encoding the AdmissionReview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// subject is what a request is decided on: the pod, its raw JSON, the target node when
// it is not spec.nodeName, why it aims at a virtual node ("" when it does not), the
// workload whose pod template it is ("job/pi"; "" for a pod), and for a pod UPDATE
// judged for the Virtual Kubelet's annotations, the keys it changes and who asks.
type subject struct {
	pod       *corev1.Pod
	raw       json.RawMessage
	node      string
	target    string
	workload  string
	vkKeys    []string
	requester string
}

// what names the subject in a refusal: "this pod" or "the pod template of job/pi".
func (s subject) what() string {
	if s.workload == "" {
		return "this pod"
	}
	return "the pod template of " + s.workload
}

// explain prefixes a decision's reason with the pod template it is about, or says which
// of the Virtual Kubelet's annotations the requester may not change.
func (s subject) explain(reason string) string {
	switch {
	case len(s.vkKeys) > 0:
		return vkAnnotationRefusal(s.vkKeys, s.requester, reason)
	case s.workload != "":
		return "pod template of " + s.workload + ": " + reason
	}
	return reason
}

// answer decides one request. An error means no answer could be given (the API or the
// policy failed): the call must fail so failurePolicy applies.
func (h *Handler) answer(ctx context.Context, req *admissionv1.AdmissionRequest, mutate bool) (*admissionv1.AdmissionResponse, string, error) {
	if !h.handles(req, mutate) {
		return allowed(), resultSkipped, nil
	}
	s, refusal, err := h.subjectOf(ctx, req)
	switch {
	case err != nil:
		return nil, resultError, err
	case refusal != nil:
		return refusal, resultDenied, nil
	case s.target == "":
		return allowed(), resultSkipped, nil
	case len(s.vkKeys) > 0 && h.opts.VK.includes(req.UserInfo):
		// The Virtual Kubelet writing its own annotations: trusted by configuration,
		// with no decision (it needs no offload grant of its own).
		return withDryRunWarning(allowed(), req, mutate), resultAllowed, nil
	}
	d, err := h.decide(ctx, req, s, mutate)
	var inputErr *authorizer.InputError
	switch {
	case errors.As(err, &inputErr):
		// The pod cannot be decided (e.g. a field this build does not know): refused,
		// never judged blind.
		return denied(http.StatusBadRequest, metav1.StatusReasonBadRequest, "sar-bridge cannot decide "+s.what()+": "+err.Error(), ""), resultDenied, nil
	case err != nil:
		return nil, resultError, err
	}
	v, err := authorizer.ReadVerdict(d)
	if err != nil {
		return nil, resultError, fmt.Errorf("decision %s: %w", d.ID, err)
	}
	if !v.Allowed {
		if mutate {
			// Nothing to add to a pod the validating webhook refuses with this reason.
			return withDecision(allowed(), d.ID), resultDenied, nil
		}
		return denied(http.StatusForbidden, metav1.StatusReasonForbidden, s.explain(v.Reason), d.ID), resultDenied, nil
	}
	resp := withDryRunWarning(withDecision(allowed(), d.ID), req, mutate)
	if !mutate {
		// Rules in warn: allowed, and the API server hands the messages to the client
		// (kubectl prints "Warning: ..."). Once, from the validating webhook.
		resp.Warnings = append(resp.Warnings, s.warnings(v.Warnings())...)
	}
	if mutate {
		patch, err := buildPatch(s.raw, v.Modifications)
		if err != nil {
			return nil, resultError, fmt.Errorf("decision %s: building the patch: %w", d.ID, err)
		}
		if patch != nil {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
	}
	return resp, resultAllowed, nil
}

// warnings are the admission warnings of a decision's violations in warn: the rule and
// its message, about the pod template of a workload where that is what was decided.
func (s subject) warnings(violations []authorizer.Violation) []string {
	out := make([]string, 0, len(violations))
	for _, v := range violations {
		w := fmt.Sprintf("sar-bridge: %s (warn): %s", v.Rule, v.Message)
		if s.workload != "" {
			w = fmt.Sprintf("sar-bridge: pod template of %s: %s (warn): %s", s.workload, v.Rule, v.Message)
		}
		out = append(out, w)
	}
	return out
}

// dryRunWarning is what an allowed dry run answers: the decision is the real one, but
// nothing (quota, a charge) is taken for a request that is not carried out.
const dryRunWarning = "sar-bridge: dry run decided as the request would be; nothing is reserved"

// withDryRunWarning adds dryRunWarning to the validating webhook's allow of a dry run.
func withDryRunWarning(resp *admissionv1.AdmissionResponse, req *admissionv1.AdmissionRequest, mutate bool) *admissionv1.AdmissionResponse {
	if dryRun(req) && !mutate {
		resp.Warnings = []string{dryRunWarning}
	}
	return resp
}

// handles reports whether a request is one the webhook decides: pod CREATE and UPDATE,
// pods/binding CREATE and workload CREATE and UPDATE; the mutating webhook only changes
// pods being created.
func (h *Handler) handles(req *admissionv1.AdmissionRequest, mutate bool) bool {
	if isWorkload(req) {
		return !mutate && req.SubResource == "" && (req.Operation == admissionv1.Create || req.Operation == admissionv1.Update)
	}
	if req.Resource.Group != "" || req.Resource.Resource != "pods" {
		return false
	}
	switch {
	case req.SubResource == "" && req.Operation == admissionv1.Create:
		return true
	case mutate:
		return false
	case req.SubResource == "" && req.Operation == admissionv1.Update:
		return true
	case req.SubResource == "binding" && req.Operation == admissionv1.Create:
		return true
	}
	return false
}

// subjectOf reads the pod a request is about and whether it aims at a virtual node. A
// non-nil response is a refusal given before any decision.
func (h *Handler) subjectOf(ctx context.Context, req *admissionv1.AdmissionRequest) (subject, *admissionv1.AdmissionResponse, error) {
	if req.SubResource == "binding" {
		return h.bindingSubject(ctx, req)
	}
	if isWorkload(req) {
		return h.workloadSubject(ctx, req)
	}
	pod, raw, err := decodePod(req.Object.Raw, req.Namespace)
	if err != nil {
		return subject{}, denied(http.StatusBadRequest, metav1.StatusReasonBadRequest, "object: "+err.Error(), ""), nil
	}
	if req.Operation == admissionv1.Update {
		old := &corev1.Pod{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return subject{}, denied(http.StatusBadRequest, metav1.StatusReasonBadRequest, "oldObject is not a Pod: "+err.Error(), ""), nil
		}
		if !addsToleration(old, pod) {
			// Tolerations added are decided as today (the whole pod, shell annotations
			// included); otherwise only a change of the VK's annotations is judged.
			return h.vkAnnotationsSubject(ctx, req, old, pod, raw)
		}
	}
	target, err := h.opts.Targets.PodTargets(ctx, h.cluster, pod)
	if err != nil {
		return subject{}, nil, err
	}
	return subject{pod: pod, raw: raw, target: target}, nil, nil
}

// vkAnnotationsSubject is a pod UPDATE that adds no toleration: judged only when it adds
// or changes an annotation the Virtual Kubelet writes (vkAnnotationKeys) of a pod aimed
// at a virtual node. Anyone but the VK's identities may then make the change only if
// they could create the pod so changed: it is decided as that create, as the toleration
// path decides, so the policy (restricted_annotations, a site's own rules) says who it
// opens the key to, and no update yields a pod its writer could not have created. A pod
// aimed nowhere is judged when it is aimed (a toleration added, a binding).
func (h *Handler) vkAnnotationsSubject(ctx context.Context, req *admissionv1.AdmissionRequest, old, pod *corev1.Pod, raw json.RawMessage) (subject, *admissionv1.AdmissionResponse, error) {
	keys := changedVKAnnotations(old, pod)
	if len(keys) == 0 {
		return subject{}, nil, nil
	}
	target, err := h.opts.Targets.PodTargets(ctx, h.cluster, pod)
	if err != nil || target == "" {
		return subject{}, nil, err
	}
	return subject{pod: pod, raw: raw, target: target, vkKeys: keys, requester: req.UserInfo.Username}, nil, nil
}

// bindingSubject is the bound pod, read from the API, on the binding's target node.
func (h *Handler) bindingSubject(ctx context.Context, req *admissionv1.AdmissionRequest) (subject, *admissionv1.AdmissionResponse, error) {
	var b corev1.Binding
	if err := json.Unmarshal(req.Object.Raw, &b); err != nil {
		return subject{}, denied(http.StatusBadRequest, metav1.StatusReasonBadRequest, "object is not a Binding: "+err.Error(), ""), nil
	}
	if b.Target.Kind != "" && b.Target.Kind != "Node" {
		return subject{}, nil, nil // the API server refuses it anyway
	}
	virtual, err := h.opts.Targets.nodeIsVirtual(ctx, h.cluster, b.Target.Name)
	if err != nil || !virtual {
		return subject{}, nil, err
	}
	pod, err := h.cluster.Pod(ctx, req.Namespace, req.Name)
	if err != nil {
		return subject{}, nil, fmt.Errorf("reading pod %s/%s: %w", req.Namespace, req.Name, err)
	}
	if pod == nil {
		msg := fmt.Sprintf("pod %q not found in namespace %q", req.Name, req.Namespace)
		return subject{}, denied(http.StatusNotFound, metav1.StatusReasonNotFound, msg, ""), nil
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return subject{}, nil, fmt.Errorf("encoding pod %s/%s: %w", req.Namespace, req.Name, err)
	}
	return subject{pod: pod, raw: raw, node: b.Target.Name, target: fmt.Sprintf("it is bound to the virtual node %q", b.Target.Name)}, nil, nil
}

func isWorkload(req *admissionv1.AdmissionRequest) bool {
	return workload.IsWorkload(schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource})
}

// workloadSubject is a workload's pod template as the pod its controller would create:
// named like the workload, in its namespace, with the template's service account. An
// UPDATE is judged only when the template (labels, annotations, spec: everything the
// decision reads) changed; scaling, status and the workload's own metadata are not.
func (h *Handler) workloadSubject(ctx context.Context, req *admissionv1.AdmissionRequest) (subject, *admissionv1.AdmissionResponse, error) {
	p, err := decodeWorkload(req.Object.Raw, req)
	if err != nil {
		return subject{}, denied(http.StatusBadRequest, metav1.StatusReasonBadRequest, "object: "+err.Error(), ""), nil
	}
	if req.Operation == admissionv1.Update {
		old, err := decodeWorkload(req.OldObject.Raw, req)
		if err != nil {
			return subject{}, denied(http.StatusBadRequest, metav1.StatusReasonBadRequest, "oldObject: "+err.Error(), ""), nil
		}
		if sameTemplate(old.Pod, p.Pod) {
			return subject{}, nil, nil
		}
	}
	target, err := h.opts.Targets.PodTargets(ctx, h.cluster, p.Pod)
	if err != nil || target == "" {
		return subject{}, nil, err
	}
	raw, err := json.Marshal(p.Pod)
	if err != nil {
		return subject{}, nil, fmt.Errorf("encoding the pod template of %s: %w", p.Source, err)
	}
	return subject{pod: p.Pod, raw: raw, target: target, workload: p.Source}, nil, nil
}

// decodeWorkload reads a workload of the request's kind strictly (a field this build does
// not know is refused, never judged as absent, as the authorizer does for pods) and
// returns its pod template as a pod in the request's namespace.
func decodeWorkload(raw []byte, req *admissionv1.AdmissionRequest) (workload.Pod, error) {
	gvk := schema.GroupVersionKind(req.Kind)
	obj, err := workload.Decode(raw, &gvk)
	if err != nil {
		return workload.Pod{}, err
	}
	if got := obj.GetObjectKind().GroupVersionKind(); got.GroupKind() != gvk.GroupKind() {
		return workload.Pod{}, fmt.Errorf("a %s, not the request's %s", got.GroupKind(), gvk.GroupKind())
	}
	p, err := workload.PodOf(obj)
	if err != nil {
		return workload.Pod{}, err
	}
	switch ns := p.Pod.Namespace; {
	case ns == "":
		p.Pod.Namespace = req.Namespace
	case ns != req.Namespace:
		return workload.Pod{}, fmt.Errorf("metadata.namespace %q is not the request's namespace %q", ns, req.Namespace)
	}
	return p, nil
}

// sameTemplate reports whether two pod templates (as pods) agree on everything a
// decision reads. Semantic equality: quantities by value, nil and empty alike.
func sameTemplate(a, b *corev1.Pod) bool {
	return equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		equality.Semantic.DeepEqual(a.Annotations, b.Annotations) &&
		equality.Semantic.DeepEqual(a.Spec, b.Spec)
}

// decodePod reads a pod from an AdmissionRequest. The raw JSON is what is decided, with
// metadata.namespace filled in from the request when the object lacks it.
func decodePod(raw []byte, namespace string) (*corev1.Pod, json.RawMessage, error) {
	pod := &corev1.Pod{}
	if err := json.Unmarshal(raw, pod); err != nil {
		return nil, nil, fmt.Errorf("not a Pod: %w", err)
	}
	switch {
	case pod.Namespace == namespace:
		return pod, raw, nil
	case pod.Namespace != "":
		return nil, nil, fmt.Errorf("metadata.namespace %q is not the request's namespace %q", pod.Namespace, namespace)
	}
	pod.Namespace = namespace
	filled, err := withNamespace(raw, namespace)
	if err != nil {
		return nil, nil, err
	}
	return pod, filled, nil
}

// withNamespace sets metadata.namespace in a raw object, keeping every other member and
// every number as it was.
func withNamespace(raw []byte, namespace string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	meta := map[string]json.RawMessage{}
	if m := obj["metadata"]; len(bytes.TrimSpace(m)) > 0 && !bytes.Equal(bytes.TrimSpace(m), []byte("null")) {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
	}
	ns, err := json.Marshal(namespace)
	if err != nil {
		return nil, err
	}
	meta["namespace"] = ns
	if obj["metadata"], err = json.Marshal(meta); err != nil {
		return nil, err
	}
	return json.Marshal(obj)
}

// decide asks the authorizer for the pod, as the requester or as the pod's service account.
func (h *Handler) decide(ctx context.Context, req *admissionv1.AdmissionRequest, s subject, mutate bool) (authorizer.Decision, error) {
	raw, err := decisionapi.Input{Operation: "create", Pod: s.raw, Node: decisionapi.OnNode(s.node)}.Marshal()
	if err != nil {
		return authorizer.Decision{}, fmt.Errorf("encoding the decision input: %w", err)
	}
	r := authorizer.Request{
		Path: h.opts.DecisionPath, Input: raw, Charge: chargeMode(req, s, mutate), FrontDoor: authorizer.FrontDoorAdmission,
		// The pod under admission is not the one stored under its name, if any: who wrote
		// the live pod's annotations says nothing about this one (input.hpc.writers).
		NotStored: true,
		LogFields: []any{"admission_uid", string(req.UID), "dry_run", dryRun(req)},
	}
	if h.opts.Identity != IdentityServiceAccount && !actsForPod(req.UserInfo.Username) {
		as := requester(req.UserInfo)
		r.As = &as
	}
	return h.decider.Decide(ctx, r)
}

// chargeMode says what an allow of the request charges to the tenant's quota ledger:
// nothing for the mutating webhook (the validating one charges the same pod, once it has
// its UID), a dry run, a workload's template (its pods are charged when created) or a
// change of the Virtual Kubelet's annotations (the pod was charged, or not, as it was
// aimed); a pod being created is charged by its UID; a stored pod (a binding, an update
// that aims it) may carry the reconciler's confirmation of an earlier charge.
func chargeMode(req *admissionv1.AdmissionRequest, s subject, mutate bool) authorizer.ChargeMode {
	switch {
	case mutate || dryRun(req) || s.workload != "" || len(s.vkKeys) > 0:
		return authorizer.ChargeNothing
	case req.SubResource == "binding" || req.Operation == admissionv1.Update:
		return authorizer.ChargeStored
	}
	return authorizer.ChargeNew
}

// actsForPod reports requesters that create or bind pods (and workloads: a CronJob's
// Jobs, a Deployment's ReplicaSets) on someone else's behalf: the scheduler and
// kube-system's controllers (replicaset-controller, job-controller, ..., or the
// controller manager's own identity when it runs without per-controller service
// accounts). Their own rights say nothing about the pod, so its service account is
// reviewed; the user who made the workload was reviewed when it was created or its
// template changed.
func actsForPod(username string) bool {
	switch username {
	case "system:kube-scheduler", "system:kube-controller-manager":
		return true
	}
	return strings.HasPrefix(username, "system:serviceaccount:kube-system:")
}

// requester is the user the API server authenticated, uid and extra included.
func requester(u authenticationv1.UserInfo) authorizer.Subject {
	extra := make(map[string][]string, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = append([]string(nil), v...)
	}
	return authorizer.Subject{Username: u.Username, UID: u.UID, Groups: append([]string(nil), u.Groups...), Extra: extra}
}

func dryRun(req *admissionv1.AdmissionRequest) bool {
	// A dry run is decided like any request, so its answer is the real one; an allowed
	// one says that nothing is reserved for it (dryRunWarning).
	return req.DryRun != nil && *req.DryRun
}

func allowed() *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func withDecision(resp *admissionv1.AdmissionResponse, id string) *admissionv1.AdmissionResponse {
	if id != "" {
		resp.AuditAnnotations = map[string]string{"decision-id": id}
	}
	return resp
}

// denied is a refusal the API server shows as is: kubectl prints the message.
func denied(code int32, reason metav1.StatusReason, message, decisionID string) *admissionv1.AdmissionResponse {
	return withDecision(&admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message},
	}, decisionID)
}
