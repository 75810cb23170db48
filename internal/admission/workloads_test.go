package admission

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// templateOf is a pod template with the runner service account and spec changed by f.
func templateOf(f func(*corev1.PodSpec)) corev1.PodTemplateSpec {
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "pi"}, Annotations: map[string]string{"slurm-job.vk.io/flags": "-p short"}},
		Spec:       corev1.PodSpec{ServiceAccountName: "runner", RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if f != nil {
		f(&t.Spec)
	}
	return t
}

var (
	aimed = templateOf(func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"virtual-node.interlink/type": "virtual-kubelet"}
	})
	unaimed = templateOf(nil)
	meta    = metav1.ObjectMeta{Name: "pi", Namespace: "team-a"}
)

func job(t corev1.PodTemplateSpec) *batchv1.Job {
	return &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: meta, Spec: batchv1.JobSpec{Template: t}}
}

func deployment(t corev1.PodTemplateSpec, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Template: t}}
}

// workloadRequest is an AdmissionRequest for a workload of the kind obj says it is.
func workloadRequest(t *testing.T, op admissionv1.Operation, sub string, obj, old runtime.Object, opts ...reqOpt) *admissionv1.AdmissionRequest {
	t.Helper()
	gvk := obj.GetObjectKind().GroupVersionKind()
	resource := strings.ToLower(gvk.Kind) + "s"
	r := newRequest(t, op, sub, obj, nil, opts...)
	if old != nil {
		r.OldObject = raw(t, old)
	}
	r.Kind = metav1.GroupVersionKind(gvk)
	r.Resource = metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource}
	r.Name = meta.Name
	return r
}

func TestValidateWorkloads(t *testing.T) {
	aliceDenied := `alice may not create pods.interlink.io in namespace "team-a"`
	everyKind := []runtime.Object{
		job(aimed),
		&batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"}, ObjectMeta: meta,
			Spec: batchv1.CronJobSpec{Schedule: "* * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: aimed}}}},
		deployment(aimed, 1),
		&appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}, ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Template: aimed}},
		&appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}, ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Template: aimed}},
		&appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}, ObjectMeta: meta, Spec: appsv1.ReplicaSetSpec{Template: aimed}},
	}
	type tc struct {
		name     string
		identity Identity
		req      func(t *testing.T) *admissionv1.AdmissionRequest
		mutate   bool
		result   any
		err      error
		allowed  bool
		code     int32
		message  string
		warnings []string
		decided  bool
		subject  string // "" = the template's service account (Decide)
	}
	cases := []tc{}
	for _, o := range everyKind {
		kind := strings.ToLower(o.GetObjectKind().GroupVersionKind().Kind)
		cases = append(cases, tc{name: kind + " aimed at virtual nodes, denied", result: denyResult(aliceDenied),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", o, nil)
			},
			code: 403, message: "pod template of " + kind + "/pi: " + aliceDenied, decided: true, subject: "alice"})
	}
	cases = append(cases, []tc{
		{name: "allowed create", result: allowResult(map[string]any{"a": "b"}, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
			},
			allowed: true, decided: true, subject: "alice"},
		{name: "allowed dry run says nothing is reserved", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
				r.DryRun = ptr.To(true)
				return r
			},
			allowed: true, decided: true, subject: "alice", warnings: []string{dryRunWarning}},
		{name: "denied dry run", result: denyResult(aliceDenied),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
				r.DryRun = ptr.To(true)
				return r
			},
			code: 403, message: "pod template of job/pi: " + aliceDenied, decided: true, subject: "alice"},
		{name: "template not aimed at virtual nodes", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(unaimed), nil)
			},
			allowed: true},
		{name: "aimed by tolerating the virtual taint", result: denyResult("no"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(templateOf(func(s *corev1.PodSpec) { s.Tolerations = []corev1.Toleration{tolVirtual} })), nil)
			},
			code: 403, message: "pod template of job/pi: no", decided: true, subject: "alice"},
		{name: "aimed by a keyless Exists toleration", result: denyResult("no"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(templateOf(func(s *corev1.PodSpec) {
					s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
				})), nil)
			},
			code: 403, message: "pod template of job/pi: no", decided: true, subject: "alice"},
		{name: "aimed by nodeName", result: denyResult("no"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(templateOf(func(s *corev1.PodSpec) { s.NodeName = "vk-1" })), nil)
			},
			code: 403, message: "pod template of job/pi: no", decided: true, subject: "alice"},
		{name: "aimed by required node affinity", result: denyResult("no"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(templateOf(func(s *corev1.PodSpec) { s.Affinity = required(names("vk-2")) })), nil)
			},
			code: 403, message: "pod template of job/pi: no", decided: true, subject: "alice"},
		{name: "nodeName of an ordinary node", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(templateOf(func(s *corev1.PodSpec) { s.NodeName = "worker" })), nil)
			},
			allowed: true},
		{name: "scaling is not judged", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Update, "", deployment(aimed, 5), deployment(aimed, 1))
			},
			allowed: true},
		{name: "an update aiming the template is judged", result: denyResult(aliceDenied),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Update, "", deployment(aimed, 1), deployment(unaimed, 1))
			},
			code: 403, message: "pod template of deployment/pi: " + aliceDenied, decided: true, subject: "alice"},
		{name: "any change of an aimed template is judged", result: denyResult(aliceDenied),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				changed := aimed.DeepCopy()
				changed.Annotations["slurm-job.vk.io/flags"] = "-p long"
				return workloadRequest(t, admissionv1.Update, "", deployment(*changed, 1), deployment(aimed, 1))
			},
			code: 403, message: "pod template of deployment/pi: " + aliceDenied, decided: true, subject: "alice"},
		{name: "an update moving the template off virtual nodes", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Update, "", deployment(unaimed, 1), deployment(aimed, 1))
			},
			allowed: true},
		{name: "serviceaccount identity", identity: IdentityServiceAccount, result: denyResult("runner may not"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
			},
			code: 403, message: "pod template of job/pi: runner may not", decided: true},
		{name: "the cronjob controller acts for the template's service account", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(aimed), nil, asUser(authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:cronjob-controller"}))
			},
			allowed: true, decided: true},
		{name: "undecidable template: refused", err: authorizer.NewInputError("input.pod is not a valid Pod: unknown field"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
			},
			code: 400, message: "sar-bridge cannot decide the pod template of job/pi: input.pod is not a valid Pod: unknown field", decided: true, subject: "alice"},
		{name: "a field this build does not know: refused", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
				r.Object.Raw = []byte(strings.Replace(string(r.Object.Raw), `"containers":`, `"futureField":true,"containers":`, 1))
				return r
			},
			code: 400, message: `object: decoding: strict decoding error: unknown field "spec.template.spec.futureField"`},
		{name: "object of another namespace", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
				r.Namespace = "other"
				return r
			},
			code: 400, message: `object: metadata.namespace "team-a" is not the request's namespace "other"`},
		{name: "object of another kind", result: allowResult(nil, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
				r.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
				return r
			},
			code: 400, message: `object: a Job.batch, not the request's Deployment.apps`},
		{name: "the scale subresource is not ours", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Update, "scale", deployment(aimed, 5), deployment(aimed, 1))
			},
			allowed: true},
		{name: "delete is not ours", result: denyResult("never asked"),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := workloadRequest(t, admissionv1.Delete, "", job(aimed), nil)
				r.OldObject, r.Object = r.Object, runtime.RawExtension{}
				return r
			},
			allowed: true},
		{name: "the mutating webhook leaves workloads alone", mutate: true, result: allowResult(map[string]any{"a": "b"}, nil),
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return workloadRequest(t, admissionv1.Create, "", job(aimed), nil)
			},
			allowed: true},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			identity := tc.identity
			if identity == "" {
				identity = IdentityRequester
			}
			d := &fakeDecider{result: tc.result, err: tc.err}
			path := ValidatePath
			if tc.mutate {
				path = MutatePath
			}
			status, resp, body := post(t, newHandler(t, d, testCluster(), identity, nil), path, tc.req(t))
			if status != http.StatusOK {
				t.Fatalf("HTTP %d: %s", status, body)
			}
			if want := map[bool]int{true: 1}[tc.decided]; len(d.calls) != want {
				t.Fatalf("%d decisions, want %d", len(d.calls), want)
			}
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed %v, want %v (%s)", resp.Allowed, tc.allowed, body)
			}
			if !tc.allowed && (resp.Result == nil || resp.Result.Code != tc.code || resp.Result.Message != tc.message || resp.Result.Status != metav1.StatusFailure) {
				t.Errorf("result %+v, want code %d message %q", resp.Result, tc.code, tc.message)
			}
			if !reflect.DeepEqual(resp.Warnings, tc.warnings) {
				t.Errorf("warnings %q, want %q", resp.Warnings, tc.warnings)
			}
			if resp.Patch != nil {
				t.Errorf("a workload was patched: %s", body)
			}
			if !tc.decided {
				return
			}
			got := d.calls[0]
			switch {
			case tc.subject == "" && got.subject != nil:
				t.Errorf("decided as %q, want the template's service account", got.subject.Username)
			case tc.subject != "" && (got.subject == nil || got.subject.Username != tc.subject):
				t.Errorf("decided as %+v, want %q", got.subject, tc.subject)
			}
			if got.input["operation"] != "create" || got.input["node"] != nil {
				t.Errorf("input.operation %v, input.node %v: want create and no node", got.input["operation"], got.input["node"])
			}
		})
	}
}

// The pod a workload is decided as: named like it, in its namespace, with the template's
// labels, annotations, service account and spec.
func TestWorkloadDecidedAsItsPod(t *testing.T) {
	d := &fakeDecider{result: allowResult(nil, nil)}
	j := job(aimed)
	j.Namespace = "" // the API server may leave it to the request
	_, resp, body := post(t, newHandler(t, d, testCluster(), IdentityRequester, nil), ValidatePath, workloadRequest(t, admissionv1.Create, "", j, nil))
	if resp == nil || !resp.Allowed || len(d.calls) != 1 {
		t.Fatalf("answer %s", body)
	}
	b, err := json.Marshal(d.calls[0].input["pod"])
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	want := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "pi", Namespace: "team-a", Labels: aimed.Labels, Annotations: aimed.Annotations},
		Spec:       aimed.Spec,
	}
	if !reflect.DeepEqual(pod, want) {
		t.Errorf("decided\n%+v\nwant\n%+v", pod, want)
	}
}

func TestWorkloadKindsHandled(t *testing.T) {
	h := newHandler(t, &fakeDecider{}, testCluster(), IdentityRequester, nil)
	for _, tc := range []struct {
		gr     schema.GroupResource
		sub    string
		op     admissionv1.Operation
		mutate bool
		want   bool
	}{
		{schema.GroupResource{Group: "batch", Resource: "jobs"}, "", admissionv1.Create, false, true},
		{schema.GroupResource{Group: "batch", Resource: "cronjobs"}, "", admissionv1.Update, false, true},
		{schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "", admissionv1.Create, false, true},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, "", admissionv1.Create, true, false},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, "status", admissionv1.Update, false, false},
		{schema.GroupResource{Group: "batch", Resource: "jobs"}, "", admissionv1.Delete, false, false},
		{schema.GroupResource{Resource: "replicationcontrollers"}, "", admissionv1.Create, false, false},
	} {
		req := &admissionv1.AdmissionRequest{Resource: metav1.GroupVersionResource{Group: tc.gr.Group, Version: "v1", Resource: tc.gr.Resource}, SubResource: tc.sub, Operation: tc.op}
		if got := h.handles(req, tc.mutate); got != tc.want {
			t.Errorf("%s/%s %s (mutate %v): handles = %v, want %v", tc.gr, tc.sub, tc.op, tc.mutate, got, tc.want)
		}
	}
}
