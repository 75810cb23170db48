package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// call is one decision the fake decider was asked for.
type call struct {
	input     map[string]any
	subject   *authorizer.Subject // nil: the pod's service account
	charge    authorizer.ChargeMode
	notStored bool
	frontDoor authorizer.FrontDoor
}

// fakeDecider answers every decision with result, or err.
type fakeDecider struct {
	result any
	err    error
	calls  []call
}

func (f *fakeDecider) Decide(_ context.Context, r authorizer.Request) (authorizer.Decision, error) {
	var in map[string]any
	if err := json.Unmarshal(r.Input, &in); err != nil {
		return authorizer.Decision{}, err
	}
	f.calls = append(f.calls, call{input: in, subject: r.As, charge: r.Charge, notStored: r.NotStored, frontDoor: r.FrontDoor})
	if f.err != nil {
		return authorizer.Decision{}, f.err
	}
	if f.result == nil {
		return authorizer.Decision{ID: "d-1"}, nil
	}
	return authorizer.Decision{ID: "d-1", Result: ast.MustInterfaceToValue(f.result), Defined: true}, nil
}

func allowResult(annotations map[string]any, limits map[string]any) map[string]any {
	return map[string]any{"allowed": true, "reason": "ok", "modifications": map[string]any{"pod_annotations": annotations, "resource_limits": limits}}
}

func denyResult(reason string) map[string]any {
	return map[string]any{"allowed": false, "reason": reason, "modifications": map[string]any{}}
}

var (
	podsGVR    = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	alice      = authenticationv1.UserInfo{Username: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}, Extra: map[string]authenticationv1.ExtraValue{"scopes": {"a", "b"}}}
	scheduler  = authenticationv1.UserInfo{Username: "system:kube-scheduler", Groups: []string{"system:authenticated"}}
	rsCtrl     = authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller"}
	tolVirtual = corev1.Toleration{Key: DefaultTaintKey, Operator: corev1.TolerationOpExists}
)

func testPod(spec corev1.PodSpec) *corev1.Pod {
	if spec.Containers == nil {
		spec.Containers = []corev1.Container{{Name: "main", Image: "busybox"}}
	}
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a"}, Spec: spec}
}

func raw(t *testing.T, obj any) runtime.RawExtension {
	t.Helper()
	if obj == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

type reqOpt func(*admissionv1.AdmissionRequest)

func asUser(u authenticationv1.UserInfo) reqOpt {
	return func(r *admissionv1.AdmissionRequest) { r.UserInfo = u }
}

func newRequest(t *testing.T, op admissionv1.Operation, sub string, obj, old any, opts ...reqOpt) *admissionv1.AdmissionRequest {
	r := &admissionv1.AdmissionRequest{
		UID: types.UID("req-1"), Resource: podsGVR, SubResource: sub, Operation: op,
		Namespace: "team-a", Name: "p", UserInfo: alice, Object: raw(t, obj), OldObject: raw(t, old),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

func newHandler(t *testing.T, d Decider, c Cluster, identity Identity, reg prometheus.Registerer) *Handler {
	t.Helper()
	h, err := New(d, c, Options{DecisionPath: []string{"interlink", "authz", "decision"}, Identity: identity,
		Targets: mustTargets(t, DefaultNodeSelector, DefaultTaintKey), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// post sends a review and returns the HTTP status, the response (nil unless 200) and body.
func post(t *testing.T, h http.Handler, path string, req *admissionv1.AdmissionRequest) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	hr := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, hr)
	if rec.Code != http.StatusOK {
		return rec.Code, nil, rec.Body.String()
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("answer is not an AdmissionReview: %v: %s", err, rec.Body)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("answer %s", rec.Body)
	}
	if out.Response.UID != req.UID {
		t.Errorf("response uid %q, want %q", out.Response.UID, req.UID)
	}
	return rec.Code, out.Response, rec.Body.String()
}

func TestValidate(t *testing.T) {
	onVirtual := testPod(corev1.PodSpec{NodeName: "vk-1"})
	ordinary := testPod(corev1.PodSpec{NodeName: "worker"})
	withTol := func(p *corev1.Pod, tols ...corev1.Toleration) *corev1.Pod {
		p = p.DeepCopy()
		p.Spec.Tolerations = append(p.Spec.Tolerations, tols...)
		return p
	}
	gpu := corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpEqual, Value: "a100"}
	for _, tc := range []struct {
		name     string
		identity Identity
		req      func(t *testing.T) *admissionv1.AdmissionRequest
		result   any
		err      error
		status   int
		allowed  bool
		code     int32
		message  string
		calls    int
		subject  string // "" = the pod's service account (Decide)
		node     string // input.node.name
	}{
		{name: "denied create of a pod on a virtual node", result: denyResult(`user "alice" may not create pods.interlink.io`),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil)
			},
			status: 200, code: 403, message: `user "alice" may not create pods.interlink.io`, calls: 1, subject: "alice"},
		{name: "allowed create", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil)
			},
			status: 200, allowed: true, calls: 1, subject: "alice"},
		{name: "ordinary pod: no decision", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", ordinary, nil)
			},
			status: 200, allowed: true},
		{name: "serviceaccount identity", identity: IdentityServiceAccount, result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil)
			},
			status: 200, allowed: true, calls: 1},
		{name: "a controller acts for the pod's service account", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil, asUser(rsCtrl))
			},
			status: 200, allowed: true, calls: 1},
		{name: "the controller manager's own identity acts for the pod's service account", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil, asUser(authenticationv1.UserInfo{Username: "system:kube-controller-manager"}))
			},
			status: 200, allowed: true, calls: 1},
		{name: "API outage: the call fails", err: authorizer.NewUnavailableError(errors.New("connection refused")),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil)
			},
			status: 500, message: "connection refused", calls: 1, subject: "alice"},
		{name: "policy failure: the call fails", err: errors.New("evaluating policy: boom"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil)
			},
			status: 500, message: "boom", calls: 1, subject: "alice"},
		{name: "undefined document: the call fails",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil)
			},
			status: 500, message: "undefined", calls: 1, subject: "alice"},
		{name: "undecidable pod: refused", err: authorizer.NewInputError("input.pod is not a valid Pod: unknown field"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "", onVirtual, nil)
			},
			status: 200, code: 400, message: "sar-bridge cannot decide this pod: input.pod is not a valid Pod: unknown field", calls: 1, subject: "alice"},
		{name: "update adding no toleration", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Update, "", withTol(onVirtual, gpu), withTol(onVirtual, gpu))
			},
			status: 200, allowed: true},
		{name: "update adding a toleration is judged as a create", result: denyResult("toleration refused"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Update, "", withTol(onVirtual, gpu), onVirtual)
			},
			status: 200, code: 403, message: "toleration refused", calls: 1, subject: "alice"},
		{name: "update adding the virtual toleration to an unplaced pod", result: denyResult("no"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Update, "", withTol(testPod(corev1.PodSpec{}), tolVirtual), testPod(corev1.PodSpec{}))
			},
			status: 200, code: 403, message: "no", calls: 1, subject: "alice"},
		{name: "update swapping a duplicate toleration for the virtual one", result: denyResult(`user "alice" may not create pods.interlink.io`),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				unplaced := testPod(corev1.PodSpec{})
				return newRequest(t, admissionv1.Update, "", withTol(unplaced, gpu, tolVirtual), withTol(unplaced, gpu, gpu))
			},
			status: 200, code: 403, message: `user "alice" may not create pods.interlink.io`, calls: 1, subject: "alice"},
		{name: "update of an ordinary pod adding a toleration", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Update, "", withTol(ordinary, gpu), ordinary)
			},
			status: 200, allowed: true},
		{name: "binding to a virtual node by the scheduler", result: denyResult("sa may not"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "binding", corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a"}, Target: corev1.ObjectReference{Kind: "Node", Name: "vk-2"}}, nil, asUser(scheduler))
			},
			status: 200, code: 403, message: "sa may not", calls: 1, node: "vk-2"},
		{name: "binding to a virtual node by a user", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "binding", corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Name: "vk-2"}}, nil)
			},
			status: 200, allowed: true, calls: 1, subject: "alice", node: "vk-2"},
		{name: "binding to an ordinary node", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Create, "binding", corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "worker"}}, nil, asUser(scheduler))
			},
			status: 200, allowed: true},
		{name: "binding of a missing pod", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := newRequest(t, admissionv1.Create, "binding", corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "gone"}, Target: corev1.ObjectReference{Kind: "Node", Name: "vk-1"}}, nil, asUser(scheduler))
				r.Name = "gone"
				return r
			},
			status: 200, code: 404, message: `pod "gone" not found in namespace "team-a"`},
		{name: "pod status is not ours", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Update, "status", onVirtual, onVirtual)
			},
			status: 200, allowed: true},
		{name: "delete is not ours", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return newRequest(t, admissionv1.Delete, "", nil, onVirtual)
			},
			status: 200, allowed: true},
		{name: "object of another namespace", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := newRequest(t, admissionv1.Create, "", onVirtual, nil)
				r.Namespace = "other"
				return r
			},
			status: 200, code: 400, message: `object: metadata.namespace "team-a" is not the request's namespace "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			identity := tc.identity
			if identity == "" {
				identity = IdentityRequester
			}
			d := &fakeDecider{result: tc.result, err: tc.err}
			c := testCluster()
			c.pods["team-a/p"] = onVirtual
			status, resp, body := post(t, newHandler(t, d, c, identity, nil), ValidatePath, tc.req(t))
			if status != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", status, tc.status, body)
			}
			if len(d.calls) != tc.calls {
				t.Fatalf("%d decisions, want %d", len(d.calls), tc.calls)
			}
			if status != http.StatusOK {
				if !strings.Contains(body, tc.message) {
					t.Errorf("body %q does not contain %q", body, tc.message)
				}
				return
			}
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed %v, want %v (%s)", resp.Allowed, tc.allowed, body)
			}
			if !tc.allowed {
				if resp.Result == nil || resp.Result.Code != tc.code || resp.Result.Message != tc.message || resp.Result.Status != metav1.StatusFailure {
					t.Errorf("result %+v, want code %d message %q", resp.Result, tc.code, tc.message)
				}
			}
			if resp.Patch != nil || resp.PatchType != nil {
				t.Errorf("validate answered a patch: %s", body)
			}
			if tc.calls == 0 {
				return
			}
			got := d.calls[0]
			switch {
			case tc.subject == "" && got.subject != nil:
				t.Errorf("decided as %q, want the pod's service account", got.subject.Username)
			case tc.subject != "" && (got.subject == nil || got.subject.Username != tc.subject):
				t.Errorf("decided as %+v, want %q", got.subject, tc.subject)
			}
			if got.input["operation"] != "create" {
				t.Errorf("input.operation %v, want create", got.input["operation"])
			}
			if !got.notStored {
				t.Error("a pod under admission was decided as the one stored under its name")
			}
			if pod, _ := got.input["pod"].(map[string]any); pod == nil || pod["metadata"].(map[string]any)["namespace"] != "team-a" {
				t.Errorf("input.pod %v", got.input["pod"])
			}
			node, _ := got.input["node"].(map[string]any)
			if gotNode, _ := node["name"].(string); gotNode != tc.node {
				t.Errorf("input.node.name %q, want %q", gotNode, tc.node)
			}
		})
	}
}

func TestRequesterSubject(t *testing.T) {
	d := &fakeDecider{result: allowResult(nil, nil)}
	_, resp, body := post(t, newHandler(t, d, testCluster(), IdentityRequester, nil), ValidatePath,
		newRequest(t, admissionv1.Create, "", testPod(corev1.PodSpec{NodeName: "vk-1"}), nil))
	if resp == nil || !resp.Allowed {
		t.Fatalf("answer %s", body)
	}
	want := authorizer.Subject{Username: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"}, Extra: map[string][]string{"scopes": {"a", "b"}}}
	if got := d.calls[0].subject; got == nil || fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Errorf("subject %+v, want %+v", got, want)
	}
	if resp.AuditAnnotations["decision-id"] != "d-1" {
		t.Errorf("audit annotations %v", resp.AuditAnnotations)
	}
}

func TestNamespaceFilledIn(t *testing.T) {
	pod := testPod(corev1.PodSpec{NodeName: "vk-1"})
	pod.Namespace = ""
	d := &fakeDecider{result: allowResult(nil, nil)}
	_, resp, body := post(t, newHandler(t, d, testCluster(), IdentityRequester, nil), ValidatePath, newRequest(t, admissionv1.Create, "", pod, nil))
	if resp == nil || !resp.Allowed || len(d.calls) != 1 {
		t.Fatalf("answer %s", body)
	}
	meta := d.calls[0].input["pod"].(map[string]any)["metadata"].(map[string]any)
	if meta["namespace"] != "team-a" || meta["name"] != "p" {
		t.Errorf("metadata %v", meta)
	}
}

func TestMutate(t *testing.T) {
	onVirtual := testPod(corev1.PodSpec{NodeName: "vk-1"})
	for _, tc := range []struct {
		name      string
		req       *admissionv1.AdmissionRequest
		result    any
		calls     int
		wantPatch string
	}{
		{name: "annotation and limits", req: newRequest(t, admissionv1.Create, "", onVirtual, nil), calls: 1,
			result:    allowResult(map[string]any{"interlink.io/billing-project": "proj-7"}, map[string]any{"main": map[string]any{"cpu": "1", "memory": "1Gi"}}),
			wantPatch: `[{"op":"add","path":"/metadata/annotations","value":{"interlink.io/billing-project":"proj-7"}},{"op":"add","path":"/spec/containers/0/resources/limits","value":{"cpu":"1","memory":"1Gi"}}]`},
		{name: "nothing to change", req: newRequest(t, admissionv1.Create, "", onVirtual, nil), calls: 1, result: allowResult(map[string]any{}, map[string]any{})},
		{name: "run_as_user", req: newRequest(t, admissionv1.Create, "", onVirtual, nil), calls: 1,
			result:    withRunAsUser(allowResult(map[string]any{"slurm-job.vk.io/flags": "--account=proj-a"}, map[string]any{}), 20001),
			wantPatch: `[{"op":"add","path":"/metadata/annotations","value":{"slurm-job.vk.io/flags":"--account=proj-a"}},{"op":"add","path":"/spec/securityContext","value":{"runAsUser":20001}}]`},
		{name: "run_as_user beside the pod's securityContext", calls: 1,
			req:       newRequest(t, admissionv1.Create, "", testPod(corev1.PodSpec{NodeName: "vk-1", SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr.To[int64](7)}}), nil),
			result:    withRunAsUser(allowResult(nil, nil), 20001),
			wantPatch: `[{"op":"add","path":"/spec/securityContext/runAsUser","value":20001}]`},
		{name: "denied: left to the validating webhook", req: newRequest(t, admissionv1.Create, "", onVirtual, nil), calls: 1, result: denyResult("no")},
		{name: "ordinary pod", req: newRequest(t, admissionv1.Create, "", testPod(corev1.PodSpec{}), nil), result: allowResult(map[string]any{"a": "b"}, nil)},
		{name: "updates are not mutated", req: newRequest(t, admissionv1.Update, "", onVirtual, testPod(corev1.PodSpec{})), result: allowResult(map[string]any{"a": "b"}, nil)},
		{name: "bindings are not mutated", req: newRequest(t, admissionv1.Create, "binding", corev1.Binding{Target: corev1.ObjectReference{Name: "vk-1"}}, nil), result: allowResult(map[string]any{"a": "b"}, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDecider{result: tc.result}
			status, resp, body := post(t, newHandler(t, d, testCluster(), IdentityRequester, nil), MutatePath, tc.req)
			if status != http.StatusOK || !resp.Allowed {
				t.Fatalf("HTTP %d %s: want an allow", status, body)
			}
			if len(d.calls) != tc.calls {
				t.Errorf("%d decisions, want %d", len(d.calls), tc.calls)
			}
			if tc.wantPatch == "" {
				if resp.Patch != nil || resp.PatchType != nil {
					t.Errorf("unexpected patch: %s", body)
				}
				return
			}
			if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || string(resp.Patch) != tc.wantPatch {
				t.Errorf("patch %s (type %v), want %s", resp.Patch, resp.PatchType, tc.wantPatch)
			}
		})
	}
}

// withRunAsUser adds modifications.run_as_user to an allowing result.
func withRunAsUser(result map[string]any, uid any) map[string]any {
	result["modifications"].(map[string]any)["run_as_user"] = uid
	return result
}

// A run_as_user that cannot be applied fails the call (failurePolicy decides), never an
// allow without it, nor a patch over the pod's own runAsUser.
func TestMutateRunAsUserFailures(t *testing.T) {
	onVirtual := testPod(corev1.PodSpec{NodeName: "vk-1"})
	root := testPod(corev1.PodSpec{NodeName: "vk-1", SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)}})
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		uid     any
		message string
	}{
		{"a string", onVirtual, "20001", "modifications: run_as_user: a string, not a number"},
		{"a fraction", onVirtual, 20001.5, "modifications: run_as_user: 20001.5 is not an integer uid"},
		{"negative", onVirtual, -1, "modifications: run_as_user: uid -1: must be between 0 and 2147483647, inclusive"},
		{"over the pod's own", root, 20001, "building the patch: spec.securityContext.runAsUser is 0: the policy's 20001 would overwrite it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDecider{result: withRunAsUser(allowResult(nil, nil), tc.uid)}
			status, _, body := post(t, newHandler(t, d, testCluster(), IdentityRequester, nil), MutatePath, newRequest(t, admissionv1.Create, "", tc.pod, nil))
			if status != http.StatusInternalServerError || !strings.Contains(body, tc.message) {
				t.Fatalf("HTTP %d %q, want 500 containing %q", status, body, tc.message)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	h := newHandler(t, &fakeDecider{}, testCluster(), IdentityRequester, nil)
	for _, tc := range []struct {
		name, method, path, contentType, body string
		status                                int
		want                                  string
	}{
		{"GET", http.MethodGet, ValidatePath, "", "", 405, "POST"},
		{"unknown webhook", http.MethodPost, "/admission/other", "application/json", "{}", 404, "no such admission webhook"},
		{"not JSON", http.MethodPost, ValidatePath, "application/json", "{", 400, "not an AdmissionReview"},
		{"YAML", http.MethodPost, ValidatePath, "application/yaml", "{}", 415, "want application/json"},
		{"v1beta1", http.MethodPost, MutatePath, "application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, 400, "admissionReviewVersions: [v1]"},
		{"no request", http.MethodPost, ValidatePath, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400, "has no request"},
		{"no uid", http.MethodPost, ValidatePath, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, 400, "has no uid"},
		{"too large", http.MethodPost, ValidatePath, "application/json", `{"apiVersion":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`, 413, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			h.ServeHTTP(rec, r)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("HTTP %d %q, want %d containing %q", rec.Code, rec.Body, tc.status, tc.want)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := &fakeDecider{result: denyResult("no")}
	h := newHandler(t, d, testCluster(), IdentityRequester, reg)
	post(t, h, ValidatePath, newRequest(t, admissionv1.Create, "", testPod(corev1.PodSpec{}), nil))
	post(t, h, ValidatePath, newRequest(t, admissionv1.Create, "", testPod(corev1.PodSpec{NodeName: "vk-1"}), nil))
	post(t, h, MutatePath, newRequest(t, admissionv1.Create, "", testPod(corev1.PodSpec{NodeName: "vk-1"}), nil))
	want := `
# HELP sar_bridge_admission_requests_total AdmissionReviews answered, by webhook (validate, mutate) and result (skipped: not aimed at a virtual node, allowed, denied, error).
# TYPE sar_bridge_admission_requests_total counter
sar_bridge_admission_requests_total{result="denied",webhook="mutate"} 1
sar_bridge_admission_requests_total{result="denied",webhook="validate"} 1
sar_bridge_admission_requests_total{result="skipped",webhook="validate"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sar_bridge_admission_requests_total"); err != nil {
		t.Error(err)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	tg := mustTargets(t, DefaultNodeSelector, DefaultTaintKey)
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no path", Options{Identity: IdentityRequester, Targets: tg}, "decision path"},
		{"bad identity", Options{DecisionPath: []string{"a"}, Identity: "root", Targets: tg}, "want requester or serviceaccount"},
		{"no targets", Options{DecisionPath: []string{"a"}, Identity: IdentityRequester}, "targets are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(&fakeDecider{}, testCluster(), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestChargeMode: what an allow under admission charges to the tenant's ledger.
func TestChargeMode(t *testing.T) {
	dry := true
	for _, tc := range []struct {
		name   string
		op     admissionv1.Operation
		sub    string
		dryRun bool
		s      subject
		mutate bool
		want   authorizer.ChargeMode
	}{
		{name: "a create", op: admissionv1.Create, want: authorizer.ChargeNew},
		{name: "the mutating webhook", op: admissionv1.Create, mutate: true, want: authorizer.ChargeNothing},
		{name: "a dry run", op: admissionv1.Create, dryRun: true, want: authorizer.ChargeNothing},
		{name: "a workload's template", op: admissionv1.Create, s: subject{workload: "job/x"}, want: authorizer.ChargeNothing},
		{name: "the VK's annotations", op: admissionv1.Update, s: subject{vkKeys: []string{"k"}}, want: authorizer.ChargeNothing},
		{name: "a binding", op: admissionv1.Create, sub: "binding", want: authorizer.ChargeStored},
		{name: "an update", op: admissionv1.Update, want: authorizer.ChargeStored},
	} {
		req := &admissionv1.AdmissionRequest{Operation: tc.op, SubResource: tc.sub}
		if tc.dryRun {
			req.DryRun = &dry
		}
		if got := chargeMode(req, tc.s, tc.mutate); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
