// Package webhookmatch runs the API server's own webhook matching (k8s.io/apiserver: the
// rules, then the matchConditions compiled and evaluated by its CEL matcher) on the
// webhook configurations the repository ships, manifests/admission and the chart as
// rendered, without a control plane: which requests reach the bridge at all. A request
// the bridge is never called for is a request it cannot refuse.
//
//	cd test && go test ./webhookmatch/
//
// The chart is rendered with helm ($SAR_BRIDGE_HELM, else what hack/helm.sh builds).
package webhookmatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	podsHook      = "pods.sar-bridge.interlink.io"
	bindingsHook  = "bindings.sar-bridge.interlink.io"
	workloadsHook = "workloads.sar-bridge.interlink.io"
	virtualLabel  = "virtual-node.interlink/type"
	virtualTaint  = "virtual-node.interlink/no-schedule"
)

// hook is one webhook of a shipped configuration: "validating <name>" or "mutating <name>".
type hook struct {
	id       string
	rules    []admissionregistrationv1.RuleWithOperations
	accessor webhook.WebhookAccessor
}

// called reports whether the API server calls the webhook for a request: a rule
// matches and no matchCondition is false. A condition that fails to compile or
// evaluate is a test failure (failurePolicy Fail would refuse the request outright).
func (h hook) called(t *testing.T, attr *admission.VersionedAttributes) bool {
	t.Helper()
	if !slices.ContainsFunc(h.rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return (&rules.Matcher{Rule: r, Attr: attr}).Matches()
	}) {
		return false
	}
	res := h.accessor.GetCompiledMatcher(compiler()).Match(context.Background(), attr, nil, nil)
	if res.Error != nil {
		t.Fatalf("%s: matchConditions: %v", h.id, res.Error)
	}
	return res.Matches
}

// compiler is the API server's: the base CEL environment of this Kubernetes version.
var compiler = sync.OnceValue(func() celplugin.ConditionCompiler {
	return celplugin.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true))
})

// hooksOf returns every webhook of a rendering's two sar-bridge configurations.
func hooksOf(t *testing.T, objs []*unstructured.Unstructured) []hook {
	t.Helper()
	var hooks []hook
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration":
			var c admissionregistrationv1.ValidatingWebhookConfiguration
			fromUnstructured(t, o, &c)
			for i := range c.Webhooks {
				w := &c.Webhooks[i]
				hooks = append(hooks, hook{"validating " + w.Name, w.Rules, webhook.NewValidatingWebhookAccessor(w.Name, c.Name, w)})
			}
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			fromUnstructured(t, o, &c)
			for i := range c.Webhooks {
				w := &c.Webhooks[i]
				hooks = append(hooks, hook{"mutating " + w.Name, w.Rules, webhook.NewMutatingWebhookAccessor(w.Name, c.Name, w)})
			}
		}
	}
	if len(hooks) == 0 {
		t.Fatal("the rendering has no webhook configuration")
	}
	return hooks
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// renderings are the shipped configurations: manifests/admission and the chart rendered
// as TestChartAdmissionMatchesManifests renders it.
func renderings(t *testing.T) map[string][]hook {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	manifests, err := cluster.Render(filepath.Join(root, "manifests", "admission"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin, err := cluster.HelmBinary(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	h := &cluster.Helm{Binary: bin, Home: t.TempDir()}
	chart, err := h.Template(ctx, filepath.Join(root, "charts", "sar-bridge"), "sar-bridge", "sar-bridge",
		"--set", "admission.enabled=true,fullnameOverride=sar-bridge",
		"--set-string", "tls.secretName=sar-bridge-webhook-tls,admission.certManager.certificate=sar-bridge-webhook")
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]hook{"manifests/admission": hooksOf(t, manifests), "charts/sar-bridge": hooksOf(t, chart)}
}

var (
	podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	t0      = corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpEqual, Value: "a100", Effect: corev1.TaintEffectNoSchedule}
	tVirt   = corev1.Toleration{Key: virtualTaint, Operator: corev1.TolerationOpExists}
)

func pod(f func(*corev1.PodSpec)) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	if f != nil {
		f(&p.Spec)
	}
	return p
}

const (
	preExec  = "slurm-job.vk.io/pre-exec"
	wstunnel = "interlink.eu/wstunnel-client-commands"
)

// withAnnotations sets p's annotations from key, value pairs (none: no annotations).
func withAnnotations(p *corev1.Pod, kv ...string) *corev1.Pod {
	for i := 0; i+1 < len(kv); i += 2 {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[kv[i]] = kv[i+1]
	}
	return p
}

// pinned is a pod bound to a (virtual) node with annotations from key, value pairs.
func pinned(kv ...string) *corev1.Pod {
	return withAnnotations(pod(func(s *corev1.PodSpec) { s.NodeName = "vk-1" }), kv...)
}

func tolerating(tols ...corev1.Toleration) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) { s.Tolerations = tols }
}

func template(f func(*corev1.PodSpec)) corev1.PodTemplateSpec {
	p := pod(f)
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "pi"}}, Spec: p.Spec}
}

var (
	aimedSpec = func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{virtualLabel: "virtual-kubelet"} }
	wlMeta    = metav1.ObjectMeta{Name: "pi", Namespace: "team-a"}
)

func deployment(t corev1.PodTemplateSpec, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: wlMeta,
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Template: t}}
}

func cronJob(t corev1.PodTemplateSpec, schedule string) *batchv1.CronJob {
	return &batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"}, ObjectMeta: wlMeta,
		Spec: batchv1.CronJobSpec{Schedule: schedule, JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: t}}}}
}

// request builds the attributes the API server matches webhooks with.
func request(op admission.Operation, resource schema.GroupVersionResource, sub string, obj, old runtime.Object) *admission.VersionedAttributes {
	var gvk schema.GroupVersionKind
	for _, o := range []runtime.Object{obj, old} {
		if o != nil {
			gvk = o.GetObjectKind().GroupVersionKind()
		}
	}
	attr := admission.NewAttributesRecord(obj, old, gvk, "team-a", "p", resource, sub, op, nil, false, &user.DefaultInfo{Name: "alice"})
	return &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: obj, VersionedOldObject: old}
}

func TestShippedWebhooksMatch(t *testing.T) {
	aimed, unaimed := template(aimedSpec), template(nil)
	relabelled := aimed.DeepCopy()
	relabelled.Labels["app"] = "pi-2"
	binding := &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a"},
		Target: corev1.ObjectReference{Kind: "Node", Name: "vk-1"}}
	gvr := func(group, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: "v1", Resource: resource}
	}
	labelled := func(p *corev1.Pod) *corev1.Pod { p.Labels = map[string]string{"x": "y"}; return p }
	for _, tc := range []struct {
		name string
		attr *admission.VersionedAttributes
		want []string // the webhooks called, sorted
	}{
		{"create: pod on no particular node", request(admission.Create, podsGVR, "", pod(tolerating(t0)), nil), nil},
		{"create: pod pinned to a node", request(admission.Create, podsGVR, "", pod(func(s *corev1.PodSpec) { s.NodeName = "vk-1" }), nil),
			[]string{"mutating " + podsHook, "validating " + podsHook}},
		{"create: pod tolerating the virtual taint twice", request(admission.Create, podsGVR, "", pod(tolerating(tVirt, tVirt)), nil),
			[]string{"mutating " + podsHook, "validating " + podsHook}},
		{"update: [T0] to [T0, Tvirt]", request(admission.Update, podsGVR, "", pod(tolerating(t0, tVirt)), pod(tolerating(t0))),
			[]string{"validating " + podsHook}},
		{"update: [T0, T0] to [T0, Tvirt] (a duplicate swapped)", request(admission.Update, podsGVR, "", pod(tolerating(t0, tVirt)), pod(tolerating(t0, t0))),
			[]string{"validating " + podsHook}},
		{"update: [] to [Tvirt]", request(admission.Update, podsGVR, "", pod(tolerating(tVirt)), pod(nil)),
			[]string{"validating " + podsHook}},
		{"update: tolerations unchanged (a label)", request(admission.Update, podsGVR, "", labelled(pod(tolerating(t0, tVirt))), pod(tolerating(t0, tVirt))), nil},
		{"update: no tolerations, pinned (a label)", request(admission.Update, podsGVR, "", labelled(pod(func(s *corev1.PodSpec) { s.NodeName = "vk-1" })), pod(func(s *corev1.PodSpec) { s.NodeName = "vk-1" })), nil},
		{"pod status", request(admission.Update, podsGVR, "status", pod(tolerating(tVirt)), pod(nil)), nil},
		// The annotations interLink's Virtual Kubelet writes as shell: any change is a call
		// (the bridge lets its identities through and lets a removal pass).
		{"update: pre-exec added", request(admission.Update, podsGVR, "", pinned(preExec, "echo x"), pinned()),
			[]string{"validating " + podsHook}},
		{"update: pre-exec added to other annotations", request(admission.Update, podsGVR, "", pinned("other", "1", preExec, "echo x"), pinned("other", "1")),
			[]string{"validating " + podsHook}},
		{"update: pre-exec changed", request(admission.Update, podsGVR, "", pinned(preExec, "echo y"), pinned(preExec, "echo x")),
			[]string{"validating " + podsHook}},
		{"update: pre-exec emptied", request(admission.Update, podsGVR, "", pinned(preExec, ""), pinned(preExec, "echo x")),
			[]string{"validating " + podsHook}},
		{"update: pre-exec removed", request(admission.Update, podsGVR, "", pinned("other", "1"), pinned("other", "1", preExec, "echo x")),
			[]string{"validating " + podsHook}},
		{"update: wstunnel commands added", request(admission.Update, podsGVR, "", pinned(wstunnel, "wstunnel client"), pinned()),
			[]string{"validating " + podsHook}},
		{"update: wstunnel commands changed", request(admission.Update, podsGVR, "", pinned(wstunnel, "b"), pinned(wstunnel, "a")),
			[]string{"validating " + podsHook}},
		{"update: wstunnel commands removed", request(admission.Update, podsGVR, "", pinned(), pinned(wstunnel, "a")),
			[]string{"validating " + podsHook}},
		{"update: another annotation, both keys unchanged", request(admission.Update, podsGVR, "",
			pinned(preExec, "echo x", wstunnel, "a", "other", "2"), pinned(preExec, "echo x", wstunnel, "a", "other", "1")), nil},
		{"update: another annotation added", request(admission.Update, podsGVR, "", pinned("slurm-job.vk.io/flags", "--time=1"), pinned()), nil},
		{"update: a key like pre-exec", request(admission.Update, podsGVR, "", pinned("slurm-job.vk.io/pre-exec-x", "echo x"), pinned()), nil},
		{"update: pre-exec added to a pod aimed nowhere", request(admission.Update, podsGVR, "", withAnnotations(pod(nil), preExec, "echo x"), pod(nil)), nil},
		{"pod status: pre-exec added", request(admission.Update, podsGVR, "status", pinned(preExec, "echo x"), pinned()), nil},
		{"binding", request(admission.Create, podsGVR, "binding", binding, nil), []string{"validating " + bindingsHook}},
		{"create: job aimed by nodeSelector", request(admission.Create, gvr("batch", "jobs"), "",
			&batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: wlMeta, Spec: batchv1.JobSpec{Template: aimed}}, nil),
			[]string{"validating " + workloadsHook}},
		{"create: job on no particular node", request(admission.Create, gvr("batch", "jobs"), "",
			&batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: wlMeta, Spec: batchv1.JobSpec{Template: unaimed}}, nil), nil},
		{"create: cronjob tolerating the virtual taint", request(admission.Create, gvr("batch", "cronjobs"), "", cronJob(template(tolerating(tVirt)), "@daily"), nil),
			[]string{"validating " + workloadsHook}},
		{"create: cronjob with a keyless Exists toleration", request(admission.Create, gvr("batch", "cronjobs"), "",
			cronJob(template(tolerating(corev1.Toleration{Operator: corev1.TolerationOpExists})), "@daily"), nil), []string{"validating " + workloadsHook}},
		{"create: deployment with a required node affinity", request(admission.Create, gvr("apps", "deployments"), "", deployment(template(func(s *corev1.PodSpec) {
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"vk-1"}}}}}}}}
		}), 1), nil), []string{"validating " + workloadsHook}},
		{"create: statefulset pinned", request(admission.Create, gvr("apps", "statefulsets"), "",
			&appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}, ObjectMeta: wlMeta,
				Spec: appsv1.StatefulSetSpec{Template: template(func(s *corev1.PodSpec) { s.NodeName = "vk-1" })}}, nil), []string{"validating " + workloadsHook}},
		{"create: daemonset aimed", request(admission.Create, gvr("apps", "daemonsets"), "",
			&appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}, ObjectMeta: wlMeta, Spec: appsv1.DaemonSetSpec{Template: aimed}}, nil),
			[]string{"validating " + workloadsHook}},
		{"create: replicaset aimed", request(admission.Create, gvr("apps", "replicasets"), "",
			&appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"}, ObjectMeta: wlMeta, Spec: appsv1.ReplicaSetSpec{Template: aimed}}, nil),
			[]string{"validating " + workloadsHook}},
		{"update: deployment scaled", request(admission.Update, gvr("apps", "deployments"), "", deployment(aimed, 3), deployment(aimed, 1)), nil},
		{"update: deployment's template aimed", request(admission.Update, gvr("apps", "deployments"), "", deployment(aimed, 1), deployment(unaimed, 1)),
			[]string{"validating " + workloadsHook}},
		{"update: aimed template relabelled", request(admission.Update, gvr("apps", "deployments"), "", deployment(*relabelled, 1), deployment(aimed, 1)),
			[]string{"validating " + workloadsHook}},
		{"update: cronjob's schedule", request(admission.Update, gvr("batch", "cronjobs"), "", cronJob(aimed, "@hourly"), cronJob(aimed, "@daily")), nil},
		{"update: cronjob's template aimed", request(admission.Update, gvr("batch", "cronjobs"), "", cronJob(aimed, "@daily"), cronJob(unaimed, "@daily")),
			[]string{"validating " + workloadsHook}},
		{"update: deployment/scale", request(admission.Update, gvr("apps", "deployments"), "scale", deployment(aimed, 3), deployment(aimed, 1)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, hooks := range rendered(t) {
				var got []string
				for _, h := range hooks {
					if h.called(t, tc.attr) {
						got = append(got, h.id)
					}
				}
				slices.Sort(got)
				if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
					t.Errorf("%s: calls %q, want %q", name, got, tc.want)
				}
			}
		})
	}
}

var renderOnce struct {
	sync.Once
	hooks map[string][]hook
}

// rendered renders the configurations once for every case.
func rendered(t *testing.T) map[string][]hook {
	t.Helper()
	renderOnce.Do(func() { renderOnce.hooks = renderings(t) })
	if renderOnce.hooks == nil {
		t.Fatal("rendering the shipped configurations failed")
	}
	return renderOnce.hooks
}

// Without cert-manager, the caBundle patches of manifests/admission must give every
// webhook the CA: a webhook without one cannot be called, and failurePolicy Fail then
// refuses everything it matches.
func TestCABundlePatchesCoverEveryWebhook(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "manifests", "admission")
	objs, err := cluster.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	for file, kind := range map[string]string{
		"cabundle-validating-patch.yaml": "ValidatingWebhookConfiguration",
		"cabundle-mutating-patch.yaml":   "MutatingWebhookConfiguration",
	} {
		body, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var ops []struct{ Op, Path string }
		if err := yaml.Unmarshal(body, &ops); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var want, got []string
		for _, o := range objs {
			if o.GetKind() != kind {
				continue
			}
			hooks, _ := o.Object["webhooks"].([]any)
			for i := range hooks {
				want = append(want, fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i))
			}
		}
		for _, op := range ops {
			if op.Op == "add" && strings.HasSuffix(op.Path, "/clientConfig/caBundle") {
				got = append(got, op.Path)
			}
		}
		if len(want) == 0 || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s sets %q, want %q (one per webhook of the %s)", file, got, want, kind)
		}
	}
}
