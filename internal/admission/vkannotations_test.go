package admission

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	preExec  = "slurm-job.vk.io/pre-exec"
	wstunnel = "interlink.eu/wstunnel-client-commands"
	// meshScript has the shape of interLink's mesh script: the relay's policy accepts it
	// from the VK's field manager, which is exactly what a tenant could forge.
	meshScript = "cat <<'EOFMESH' > $TMPDIR/mesh.sh\n#!/bin/bash\necho mesh up\nEOFMESH"
	restricted = `annotation "slurm-job.vk.io/pre-exec" is restricted: subject "alice" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)`
)

var (
	vkUser    = authenticationv1.UserInfo{Username: "system:serviceaccount:interlink:vk-1", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:interlink", "system:authenticated"}}
	vkByGroup = authenticationv1.UserInfo{Username: "system:serviceaccount:interlink:vk-2", Groups: []string{"interlink:virtual-kubelets", "system:authenticated"}}
	// lookalike has the VK's name in another namespace: names are compared exactly.
	lookalike  = authenticationv1.UserInfo{Username: "system:serviceaccount:team-a:vk-1", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"}}
	vkIdentity = VKIdentities{Users: []string{vkUser.Username}, Groups: []string{"interlink:virtual-kubelets"}}
)

// annotated is a copy of p with annotations.
func annotated(p *corev1.Pod, annotations map[string]string) *corev1.Pod {
	p = p.DeepCopy()
	p.Annotations = annotations
	return p
}

func vkHandler(t *testing.T, d Decider, identity Identity, reg prometheus.Registerer) *Handler {
	t.Helper()
	h, err := New(d, testCluster(), Options{DecisionPath: []string{"interlink", "authz", "decision"}, Identity: identity,
		Targets: mustTargets(t, DefaultNodeSelector, DefaultTaintKey), VK: vkIdentity, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestValidateVKAnnotations(t *testing.T) {
	onVirtual := testPod(corev1.PodSpec{NodeName: "vk-1"})
	ordinary := testPod(corev1.PodSpec{NodeName: "worker"})
	tenantPre := map[string]string{preExec: "echo mine"}
	meshed := map[string]string{preExec: meshScript, "other": "x"}
	dry := func(r *admissionv1.AdmissionRequest) { r.DryRun = ptr.To(true) }
	bothRefused := `annotations "slurm-job.vk.io/pre-exec" and "interlink.eu/wstunnel-client-commands" of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens them to; alice may not (no)`
	for _, tc := range []struct {
		name     string
		identity Identity
		user     authenticationv1.UserInfo
		obj, old *corev1.Pod
		opts     []reqOpt
		result   any
		allowed  bool
		message  string // of a refusal
		calls    int
		subject  string // "" with calls: the pod's service account
		warning  bool   // the dry-run warning
	}{
		{name: "the VK adds its mesh script", user: vkUser, obj: annotated(onVirtual, meshed), old: onVirtual,
			result: denyResult("never asked"), allowed: true},
		{name: "the VK prepends its script to the tenant's pre-exec", user: vkUser, obj: annotated(onVirtual, map[string]string{preExec: meshScript + "echo mine"}),
			old: annotated(onVirtual, tenantPre), result: denyResult("never asked"), allowed: true},
		{name: "a member of a VK group sets the wstunnel commands", user: vkByGroup, obj: annotated(onVirtual, map[string]string{wstunnel: "wstunnel client"}), old: onVirtual,
			result: denyResult("never asked"), allowed: true},
		{name: "a tenant sets a mesh-shaped pre-exec", user: alice, obj: annotated(onVirtual, meshed), old: onVirtual,
			result: denyResult(restricted), calls: 1, subject: "alice",
			message: `annotation "slurm-job.vk.io/pre-exec" of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens it to; alice may not (` + restricted + `)`},
		{name: "a tenant rewrites the VK's pre-exec", user: alice, obj: annotated(onVirtual, tenantPre), old: annotated(onVirtual, meshed),
			result: denyResult(restricted), calls: 1, subject: "alice",
			message: `annotation "slurm-job.vk.io/pre-exec" of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens it to; alice may not (` + restricted + `)`},
		{name: "the VK's name in another namespace is not the VK", user: lookalike, obj: annotated(onVirtual, meshed), old: onVirtual,
			result: denyResult("no"), calls: 1, subject: lookalike.Username,
			message: `annotation "slurm-job.vk.io/pre-exec" of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens it to; system:serviceaccount:team-a:vk-1 may not (no)`},
		{name: "both keys by a tenant", user: alice, obj: annotated(onVirtual, map[string]string{preExec: "a", wstunnel: "b"}), old: onVirtual,
			result: denyResult("no"), calls: 1, subject: "alice", message: bothRefused},
		{name: "a subject the policy opens the key to", user: alice, obj: annotated(onVirtual, tenantPre), old: onVirtual,
			result: allowResult(nil, nil), allowed: true, calls: 1, subject: "alice"},
		{name: "serviceaccount identity decides as the pod's service account", identity: IdentityServiceAccount, user: alice,
			obj: annotated(onVirtual, tenantPre), old: onVirtual, result: denyResult("no"), calls: 1,
			message: `annotation "slurm-job.vk.io/pre-exec" of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens it to; alice may not (no)`},
		{name: "a tenant removes the pre-exec: harmless, not judged", user: alice, obj: annotated(onVirtual, map[string]string{"other": "x"}), old: annotated(onVirtual, meshed),
			result: denyResult("never asked"), allowed: true},
		{name: "a tenant changes another annotation", user: alice, obj: annotated(onVirtual, map[string]string{preExec: meshScript, "other": "y"}), old: annotated(onVirtual, meshed),
			result: denyResult("never asked"), allowed: true},
		{name: "a tenant changes a label of a meshed pod", user: alice, obj: func() *corev1.Pod {
			p := annotated(onVirtual, meshed)
			p.Labels = map[string]string{"x": "y"}
			return p
		}(),
			old: annotated(onVirtual, meshed), result: denyResult("never asked"), allowed: true},
		{name: "a pod on an ordinary node", user: alice, obj: annotated(ordinary, tenantPre), old: ordinary,
			result: denyResult("never asked"), allowed: true},
		{name: "a dry run by a tenant is refused the same", user: alice, obj: annotated(onVirtual, tenantPre), old: onVirtual, opts: []reqOpt{dry},
			result: denyResult(restricted), calls: 1, subject: "alice",
			message: `annotation "slurm-job.vk.io/pre-exec" of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens it to; alice may not (` + restricted + `)`},
		{name: "a dry run the policy allows", user: alice, obj: annotated(onVirtual, tenantPre), old: onVirtual, opts: []reqOpt{dry},
			result: allowResult(nil, nil), allowed: true, calls: 1, subject: "alice", warning: true},
		{name: "a dry run by the VK", user: vkUser, obj: annotated(onVirtual, meshed), old: onVirtual, opts: []reqOpt{dry},
			result: denyResult("never asked"), allowed: true, warning: true},
		{name: "tolerations added too: decided as today", user: vkUser,
			obj: func() *corev1.Pod {
				p := annotated(onVirtual, meshed)
				p.Spec.Tolerations = []corev1.Toleration{{Key: "hpc.example/gpu", Operator: corev1.TolerationOpExists}}
				return p
			}(), old: onVirtual, result: denyResult("toleration refused"), calls: 1, subject: vkUser.Username, message: "toleration refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			identity := tc.identity
			if identity == "" {
				identity = IdentityRequester
			}
			d := &fakeDecider{result: tc.result}
			req := newRequest(t, admissionv1.Update, "", tc.obj, tc.old, append([]reqOpt{asUser(tc.user)}, tc.opts...)...)
			status, resp, body := post(t, vkHandler(t, d, identity, nil), ValidatePath, req)
			if status != 200 {
				t.Fatalf("HTTP %d: %s", status, body)
			}
			if len(d.calls) != tc.calls {
				t.Fatalf("%d decisions, want %d", len(d.calls), tc.calls)
			}
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed %v, want %v: %s", resp.Allowed, tc.allowed, body)
			}
			if !tc.allowed && (resp.Result == nil || resp.Result.Code != 403 || resp.Result.Reason != metav1.StatusReasonForbidden || resp.Result.Message != tc.message) {
				t.Errorf("result %+v\nwant 403 %q", resp.Result, tc.message)
			}
			if got := len(resp.Warnings) == 1 && resp.Warnings[0] == dryRunWarning; got != tc.warning || (!tc.warning && len(resp.Warnings) != 0) {
				t.Errorf("warnings %q, want the dry-run warning: %v", resp.Warnings, tc.warning)
			}
			if tc.calls == 0 {
				return
			}
			checkDecidedAsCreate(t, d.calls[0], tc.subject, tc.obj.Annotations)
		})
	}
}

// checkDecidedAsCreate: the pod as updated was decided as a create, for subject ("" =
// the pod's service account).
func checkDecidedAsCreate(t *testing.T, c call, subject string, annotations map[string]string) {
	t.Helper()
	switch {
	case subject == "" && c.subject != nil:
		t.Errorf("decided as %q, want the pod's service account", c.subject.Username)
	case subject != "" && (c.subject == nil || c.subject.Username != subject):
		t.Errorf("decided as %+v, want %q", c.subject, subject)
	}
	if c.input["operation"] != "create" {
		t.Errorf("input.operation %v, want create", c.input["operation"])
	}
	meta, _ := c.input["pod"].(map[string]any)["metadata"].(map[string]any)
	got, _ := meta["annotations"].(map[string]any)
	for k, v := range annotations {
		if got[k] != v {
			t.Errorf("decided pod's annotation %s = %v, want the updated %q", k, got[k], v)
		}
	}
}

func TestChangedVKAnnotations(t *testing.T) {
	pod := func(a map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: a}}
	}
	for _, tc := range []struct {
		name     string
		old, new map[string]string
		want     []string
	}{
		{"added", nil, map[string]string{preExec: "x"}, []string{preExec}},
		{"added empty", nil, map[string]string{wstunnel: ""}, []string{wstunnel}},
		{"changed", map[string]string{preExec: "x"}, map[string]string{preExec: "y"}, []string{preExec}},
		{"emptied", map[string]string{preExec: "x"}, map[string]string{preExec: ""}, []string{preExec}},
		{"removed", map[string]string{preExec: "x", wstunnel: "y"}, nil, nil},
		{"unchanged", map[string]string{preExec: "x"}, map[string]string{preExec: "x", "other": "1"}, nil},
		{"another key", nil, map[string]string{"slurm-job.vk.io/flags": "--time=1"}, nil},
		{"both, in message order", nil, map[string]string{wstunnel: "b", preExec: "a"}, []string{preExec, wstunnel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := changedVKAnnotations(pod(tc.old), pod(tc.new)); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestVKIdentitiesValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		vk   VKIdentities
		want string // "" = valid
	}{
		{"none", VKIdentities{}, ""},
		{"exact names", vkIdentity, ""},
		{"a namespace wildcard", VKIdentities{Users: []string{"system:serviceaccount:*:vk-1"}}, `--admission.vk-users: "system:serviceaccount:*:vk-1": names are exact, no wildcards`},
		{"a name wildcard", VKIdentities{Users: []string{"system:serviceaccount:interlink:*"}}, "no wildcards"},
		{"an empty user", VKIdentities{Users: []string{""}}, "--admission.vk-users: empty name"},
		{"a padded group", VKIdentities{Groups: []string{" vk"}}, `--admission.vk-groups: " vk" has leading or trailing space`},
		{"everyone", VKIdentities{Groups: []string{"system:authenticated"}}, `--admission.vk-groups: "system:authenticated" is everyone's group`},
		{"every service account", VKIdentities{Groups: []string{"system:serviceaccounts"}}, "is everyone's group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.vk.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("err %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
	opts := Options{DecisionPath: []string{"a"}, Identity: IdentityRequester, Targets: mustTargets(t, DefaultNodeSelector, DefaultTaintKey),
		VK: VKIdentities{Users: []string{"system:serviceaccount:*:vk"}}}
	if _, err := New(&fakeDecider{}, testCluster(), opts); err == nil || !strings.Contains(err.Error(), "no wildcards") {
		t.Errorf("New with a wildcard: err %v", err)
	}
}

func TestVKAnnotationMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := vkHandler(t, &fakeDecider{result: denyResult("no")}, IdentityRequester, reg)
	onVirtual := testPod(corev1.PodSpec{NodeName: "vk-1"})
	meshed := annotated(onVirtual, map[string]string{preExec: meshScript})
	post(t, h, ValidatePath, newRequest(t, admissionv1.Update, "", meshed, onVirtual, asUser(vkUser)))
	post(t, h, ValidatePath, newRequest(t, admissionv1.Update, "", meshed, onVirtual))
	post(t, h, ValidatePath, newRequest(t, admissionv1.Update, "", onVirtual, meshed))
	want := `
# HELP sar_bridge_admission_requests_total AdmissionReviews answered, by webhook (validate, mutate) and result (skipped: not aimed at a virtual node, allowed, denied, error).
# TYPE sar_bridge_admission_requests_total counter
sar_bridge_admission_requests_total{result="allowed",webhook="validate"} 1
sar_bridge_admission_requests_total{result="denied",webhook="validate"} 1
sar_bridge_admission_requests_total{result="skipped",webhook="validate"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sar_bridge_admission_requests_total"); err != nil {
		t.Error(err)
	}
}
