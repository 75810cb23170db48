package e2e

// The admission webhooks (issue 14) with the real kube-apiserver calling the bridge over
// HTTPS: the webhook configurations are the ones manifests/admission ships, pointed at
// the test bridge (url, test CA in caBundle) and narrowed to this test's namespace.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	admNS        = "adm-team"
	admVK        = "adm-vk-1"
	admWorker    = "adm-worker"
	admLabel     = "sar-bridge-e2e/admission"
	admConfig    = "sar-bridge-e2e-admission"
	admBilling   = "proj-adm"
	podsHook     = "pods.sar-bridge.interlink.io"
	bindingHook  = "bindings.sar-bridge.interlink.io"
	workloadHook = "workloads.sar-bridge.interlink.io"
	admittedHook = "sar_bridge_admission_requests_total"
	decisionsTot = "sar_bridge_decisions_total"
	gpuKey       = "hpc.example/gpu" // the suite policy data's protected taint
)

// admFixtures: a tenant namespace of team-a (group interlink.io) with a billing project,
// a virtual node and an ordinary one, and the users' rights. alice may create pods but
// not offload; bob may do both; team-a's runner ServiceAccount too, and it is in the
// group the protected taint allows. The namespace's default ServiceAccount may not offload.
var admFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: adm-team
  labels:
    interlink.io/tenant: team-a
    interlink.io/billing-project: proj-adm
    sar-bridge-e2e/admission: "on"
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: adm-team}
---
apiVersion: v1
kind: Node
metadata:
  name: adm-vk-1
  labels:
    virtual-node.interlink/type: virtual-kubelet
spec:
  taints:
    - {key: virtual-node.interlink/no-schedule, value: "true", effect: NoSchedule}
---
apiVersion: v1
kind: Node
metadata:
  name: adm-worker
  labels:
    kubernetes.io/os: linux
---
` + podEditor("adm-team", []rule{
	podRule("create", "get", "list", "update", "patch"),
	{group: "batch", resources: []string{"jobs", "cronjobs"}, verbs: []string{"create", "get", "update", "patch"}},
	{group: "apps", resources: []string{"deployments"}, verbs: []string{"create", "get", "update", "patch"}},
}, userSubject("alice"), userSubject("bob"), saSubject("team-a", "runner")) + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: adm-team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: bob, apiGroup: rbac.authorization.k8s.io}
  - {kind: ServiceAccount, name: runner, namespace: team-a}
`

// admUser is someone who runs kubectl and client-go against the API server.
type admUser struct {
	name       string
	kubeconfig string
	client     kubernetes.Interface
}

func newAdmUser(t *testing.T, name string, cfg *rest.Config, kubeconfig []byte) *admUser {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &admUser{name: name, kubeconfig: path, client: cs}
}

// certUser is a user of the API server's client CA (envtest).
func certUser(t *testing.T, name string, groups ...string) *admUser {
	t.Helper()
	u, err := suite.cluster.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	return newAdmUser(t, name, u.Config(), kc)
}

// saUser is a ServiceAccount with a TokenRequest token.
func saUser(t *testing.T, ns, name string) *admUser {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	cfg, err := suite.cluster.WriteServiceAccountKubeconfig(context.Background(), path, ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return newAdmUser(t, cluster.ServiceAccountUser(ns, name), cfg, kc)
}

// kubectlCreate runs `kubectl create -f -` with the pod as the user.
func (u *admUser) kubectlCreate(t *testing.T, pod *corev1.Pod) (stdout, stderr string, code int) {
	t.Helper()
	body, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return runCmd(t, string(body), kubectlPath(t), "--kubeconfig", u.kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(u.kubeconfig), "cache"), "create", "-f", "-")
}

// addToleration patches a toleration onto a pod as the user (kubectl patch, a JSON patch).
func (u *admUser) addToleration(t *testing.T, pod string, tol corev1.Toleration) (stdout, stderr string, code int) {
	t.Helper()
	return u.kubectlPatch(t, "pod", pod, fmt.Sprintf(`[{"op":"add","path":"/spec/tolerations/-","value":%s}]`, toJSON(t, tol)))
}

// kubectlPatch runs `kubectl patch --type=json` on an object of admNS as the user.
func (u *admUser) kubectlPatch(t *testing.T, kind, name, patch string) (stdout, stderr string, code int) {
	t.Helper()
	return runCmd(t, "", kubectlPath(t), "--kubeconfig", u.kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(u.kubeconfig), "cache"),
		"-n", admNS, "patch", kind, name, "--type=json", "-p", patch)
}

// kubectlCreateObject runs `kubectl create -f -` with any object as the user.
func (u *admUser) kubectlCreateObject(t *testing.T, obj any, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	body, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return runCmd(t, string(body), kubectlPath(t), append([]string{"--kubeconfig", u.kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(u.kubeconfig), "cache"),
		"create", "-f", "-"}, args...)...)
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	value, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(value)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

// admJob is a Job of admNS whose pod template is admPod's with opts.
func admJob(name string, opts ...podOpt) *batchv1.Job {
	p := admPod(name, opts...)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Namespace: admNS, Name: name},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: p.Spec}},
	}
}

// admPod is a pod of admNS with one container "main" and no resources.
func admPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: admNS, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// kubectlPath is the pinned kubectl ($SAR_BRIDGE_KUBECTL, else hack/helm.sh's).
func kubectlPath(t *testing.T) string {
	t.Helper()
	discoveryKubectl.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		discoveryKubectl.path, discoveryKubectl.err = cluster.KubectlBinary(ctx, suite.root)
	})
	if discoveryKubectl.err != nil {
		t.Fatal(discoveryKubectl.err)
	}
	return discoveryKubectl.path
}

// webhookServing is a CA and a serving certificate for 127.0.0.1 it signed, written to
// files for the bridge's --tls.server.cert-file and --tls.server.key-file.
func webhookServing(t *testing.T, caName string) (ca *cluster.CA, certFile, keyFile string) {
	t.Helper()
	ca, err := cluster.NewCA(caName)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.ServerCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := serving.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return ca, certFile, keyFile
}

// registerScopedWebhooks creates manifests/admission's configurations under name, pointed
// at the bridge and called only for namespaces labelled label=on, until the test ends.
func registerScopedWebhooks(t *testing.T, bridgeURL string, caPEM []byte, name, label string) {
	t.Helper()
	ctx := context.Background()
	v, m := webhookConfigs(t, bridgeURL, caPEM)
	v.Name, m.Name = name, name
	only := &metav1.LabelSelector{MatchLabels: map[string]string{label: "on"}}
	for i := range v.Webhooks {
		v.Webhooks[i].NamespaceSelector = only
	}
	for i := range m.Webhooks {
		m.Webhooks[i].NamespaceSelector = only
	}
	reg := suite.cluster.Client.AdmissionregistrationV1()
	if _, err := reg.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := reg.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// webhookConfigs reads manifests/admission's two configurations and points them at the
// bridge: url instead of the Service, the test CA as caBundle, no cert-manager
// annotation, and only namespaces labelled admLabel=on (the API server is shared).
func webhookConfigs(t *testing.T, bridgeURL string, caPEM []byte) (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	objs, err := cluster.Render(filepath.Join(suite.root, "manifests", "admission"))
	if err != nil {
		t.Fatal(err)
	}
	v := findIn[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "sar-bridge")
	m := findIn[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, "MutatingWebhookConfiguration", "sar-bridge")
	point := func(cc *admissionregistrationv1.WebhookClientConfig, sel *metav1.LabelSelector) {
		if cc.Service == nil || cc.Service.Path == nil {
			t.Fatalf("manifests/admission: a webhook without a Service path: %+v", cc)
		}
		url := bridgeURL + *cc.Service.Path
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
		sel.MatchLabels = map[string]string{admLabel: "on"}
	}
	for i := range v.Webhooks {
		point(&v.Webhooks[i].ClientConfig, v.Webhooks[i].NamespaceSelector)
	}
	for i := range m.Webhooks {
		point(&m.Webhooks[i].ClientConfig, m.Webhooks[i].NamespaceSelector)
	}
	v.ObjectMeta = metav1.ObjectMeta{Name: admConfig}
	m.ObjectMeta = metav1.ObjectMeta{Name: admConfig}
	return v, m
}

// admissionRBAC is manifests/admission's ClusterRole and binding for the bridge (get
// pods, for bindings); the suite's bridge is that ServiceAccount.
func admissionRBAC(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := cluster.Render(filepath.Join(suite.root, "manifests", "admission"))
	if err != nil {
		t.Fatal(err)
	}
	return cluster.Filter(objs, func(o *unstructured.Unstructured) bool { return o.GetName() == "sar-bridge-admission" })
}

// applyAdmissionRBAC applies the webhooks' RBAC for one test and deletes it at its end.
func applyAdmissionRBAC(t *testing.T) {
	t.Helper()
	rbac := admissionRBAC(t)
	if err := suite.cluster.Apply(context.Background(), rbac); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), rbac) })
}

// wantDenied checks kubectl's failure: the webhook's name and exactly the bridge's reason.
func wantDenied(t *testing.T, what string, stderr string, code int, hook, reason string) {
	t.Helper()
	want := fmt.Sprintf("admission webhook %q denied the request: %s\n", hook, reason)
	if code == 0 || !strings.HasPrefix(stderr, "Error from server (Forbidden): ") || !strings.HasSuffix(stderr, want) {
		t.Errorf("%s: exit %d, stderr %q; want a Forbidden error ending in %q", what, code, stderr, want)
	}
}

func wantCreated(t *testing.T, what, stdout, stderr string, code int, name string) {
	t.Helper()
	if want := "pod/" + name + " created\n"; code != 0 || stdout != want || stderr != "" {
		t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", what, code, stdout, stderr, want)
	}
}

// admCounters are the bridge's decision, review and webhook counters.
type admCounters struct{ decisions, reviews, validateSkipped, mutateSkipped float64 }

func readCounters(t *testing.T, b *cluster.Bridge) admCounters {
	t.Helper()
	s, err := b.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return admCounters{
		decisions:       s.Sum(decisionsTot, nil),
		reviews:         s.Sum(reviewsTotal, nil),
		validateSkipped: s.Sum(admittedHook, map[string]string{"webhook": "validate", "result": "skipped"}),
		mutateSkipped:   s.Sum(admittedHook, map[string]string{"webhook": "mutate", "result": "skipped"}),
	}
}

func TestAdmission(t *testing.T) {
	ctx := context.Background()
	c := suite.cluster

	fixtures, err := c.ApplyYAML(ctx, admFixtures)
	if err != nil {
		t.Fatal(err)
	}
	applyAdmissionRBAC(t)
	t.Cleanup(func() {
		// Pods go with the namespace (no controller deletes them here; they are inert).
		_ = c.Delete(context.Background(), cluster.Filter(fixtures, cluster.SkipKinds("Namespace")))
	})
	for _, a := range []struct {
		user   string
		groups []string
		attrs  authorizationv1.ResourceAttributes
	}{
		{"alice", nil, authorizationv1.ResourceAttributes{Namespace: admNS, Verb: "create", Resource: "pods"}},
		{"alice", nil, authorizationv1.ResourceAttributes{Namespace: admNS, Verb: "patch", Group: "apps", Resource: "deployments"}},
		{"bob", nil, authorizationv1.ResourceAttributes{Namespace: admNS, Verb: "create", Group: "batch", Resource: "jobs"}},
		{"bob", nil, authorizationv1.ResourceAttributes{Namespace: admNS, Verb: "create", Group: "interlink.io", Resource: "pods"}},
		{sa("team-a", "runner"), cluster.ServiceAccountGroups("team-a"), authorizationv1.ResourceAttributes{Namespace: admNS, Verb: "create", Group: "interlink.io", Resource: "pods"}},
		{sa("team-a", "runner"), cluster.ServiceAccountGroups("team-a"), authorizationv1.ResourceAttributes{Namespace: admNS, Verb: "patch", Resource: "pods"}},
		{sa("sar-bridge", "sar-bridge"), nil, authorizationv1.ResourceAttributes{Namespace: admNS, Verb: "get", Resource: "pods"}},
	} {
		if err := c.WaitForAccess(ctx, a.user, a.groups, a.attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob, runner := certUser(t, "alice"), certUser(t, "bob"), saUser(t, "team-a", "runner")
	schedulerUser := certUser(t, "system:kube-scheduler")

	// The bridge serves the webhooks on its TLS public listener.
	ca, certFile, keyFile := webhookServing(t, "e2e-admission CA")
	// With a site's own rule (site_rules_test.go), which turns the fast path off and
	// must refuse through the webhooks too.
	b := newBridge(t, "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile, "--policies="+siteRulesDir(t))

	v, m := webhookConfigs(t, b.HTTPSURL(), ca.CertPEM)
	reg := c.Client.AdmissionregistrationV1()
	if _, err := reg.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.ValidatingWebhookConfigurations().Delete(context.Background(), admConfig, metav1.DeleteOptions{})
	})
	if _, err := reg.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.MutatingWebhookConfigurations().Delete(context.Background(), admConfig, metav1.DeleteOptions{})
	})

	aliceDenied := fmt.Sprintf("alice may not create pods.interlink.io in namespace %q", admNS)
	// The API server loads webhook configurations asynchronously: wait until a dry run
	// (decided like any request) is refused by the bridge.
	var last error
	if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
		_, last = alice.client.CoreV1().Pods(admNS).Create(ctx, admPod("probe", withNodeName(admVK)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), aliceDenied)
	}); !ok {
		t.Fatalf("the webhooks are not in force: last dry run: %v", last)
	}

	t.Run("a user without the RoleBinding is refused with the bridge's reason", func(t *testing.T) {
		_, stderr, code := alice.kubectlCreate(t, admPod("alice-1", withNodeName(admVK)))
		wantDenied(t, "alice, nodeName of a virtual node", stderr, code, podsHook, aliceDenied)
		if _, err := c.Client.CoreV1().Pods(admNS).Get(ctx, "alice-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the refused pod exists: %v", err)
		}
	})

	t.Run("with the RoleBinding the pod is created with the billing annotation and default limits", func(t *testing.T) {
		stdout, stderr, code := bob.kubectlCreate(t, admPod("bob-1", withNodeName(admVK)))
		wantCreated(t, "bob, nodeName of a virtual node", stdout, stderr, code, "bob-1")
		pod, err := c.Client.CoreV1().Pods(admNS).Get(ctx, "bob-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Annotations; !reflect.DeepEqual(got, map[string]string{"interlink.io/billing-project": admBilling}) {
			t.Errorf("annotations %v, want only the billing project %q", got, admBilling)
		}
		want := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
		if got := pod.Spec.Containers[0].Resources.Limits; !quantitiesEqual(got, want) {
			t.Errorf("limits %v, want the policy's default limits %v", got, want)
		}
	})

	t.Run("a site rule in --policies refuses the pod", func(t *testing.T) {
		_, stderr, code := bob.kubectlCreate(t, admPod("bob-site", withNodeName(admVK), withSiteForbidden))
		wantDenied(t, "bob, a pod the site rule refuses", stderr, code, podsHook, siteRuleMessage)
	})

	t.Run("a pod for an ordinary node is untouched and causes no review", func(t *testing.T) {
		before := readCounters(t, b)
		// nodeName: CEL cannot tell whether the node is virtual, so the webhooks are
		// called; the bridge lets the pod through without a decision.
		stdout, stderr, code := alice.kubectlCreate(t, admPod("ordinary-1", withNodeName(admWorker)))
		wantCreated(t, "alice, nodeName of an ordinary node", stdout, stderr, code, "ordinary-1")
		// Nothing aims at a virtual node: matchConditions skip the call altogether.
		stdout, stderr, code = alice.kubectlCreate(t, admPod("ordinary-2"))
		wantCreated(t, "alice, no placement", stdout, stderr, code, "ordinary-2")
		after := readCounters(t, b)
		want := before
		want.validateSkipped++
		want.mutateSkipped++
		if after != want {
			t.Errorf("counters %+v, want %+v (one skipped call per webhook, no decision, no review)", after, want)
		}
		for _, name := range []string{"ordinary-1", "ordinary-2"} {
			pod, err := c.Client.CoreV1().Pods(admNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(pod.Annotations) != 0 || len(pod.Spec.Containers[0].Resources.Limits) != 0 {
				t.Errorf("%s was changed: annotations %v, limits %v", name, pod.Annotations, pod.Spec.Containers[0].Resources.Limits)
			}
		}
	})

	t.Run("a keyless Exists toleration is refused for everyone", func(t *testing.T) {
		everything := corev1.Toleration{Operator: corev1.TolerationOpExists}
		for _, u := range []*admUser{bob, runner} {
			_, stderr, code := u.kubectlCreate(t, admPod("everything-"+strings.ReplaceAll(u.name, ":", "-"), withToleration(everything)))
			wantDenied(t, u.name+", keyless Exists", stderr, code, podsHook,
				fmt.Sprintf("toleration without key and operator Exists tolerates protected taints and is not allowed (subject %q)", u.name))
		}
	})

	t.Run("the pod-toleration policy's cases", func(t *testing.T) {
		a100 := corev1.Toleration{Key: gpuKey, Operator: corev1.TolerationOpEqual, Value: "a100", Effect: corev1.TaintEffectNoSchedule}
		h100 := corev1.Toleration{Key: gpuKey, Operator: corev1.TolerationOpEqual, Value: "h100", Effect: corev1.TaintEffectNoSchedule}
		exists := corev1.Toleration{Key: gpuKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
		for _, tc := range []struct {
			name   string
			user   *admUser
			tol    corev1.Toleration
			reason string // "" = created
		}{
			{"gpu-equal-allowed-group", runner, a100, ""},
			{"gpu-equal-other-user", bob, a100, fmt.Sprintf("toleration %q=%q of a protected taint is not allowed for subject %q", gpuKey, "a100", "bob")},
			{"gpu-exists-allowed-group", runner, exists, fmt.Sprintf("toleration %q with operator Exists covers protected taint %q and is not allowed for any subject (subject %q)", gpuKey, gpuKey, runner.name)},
			{"gpu-other-value", bob, h100, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				stdout, stderr, code := tc.user.kubectlCreate(t, admPod(tc.name, withNodeName(admVK), withToleration(tc.tol)))
				if tc.reason == "" {
					wantCreated(t, tc.name, stdout, stderr, code, tc.name)
					return
				}
				wantDenied(t, tc.name, stderr, code, podsHook, tc.reason)
			})
		}
	})

	t.Run("an UPDATE that adds a protected toleration is refused", func(t *testing.T) {
		a100 := corev1.Toleration{Key: gpuKey, Operator: corev1.TolerationOpEqual, Value: "a100", Effect: corev1.TaintEffectNoSchedule}
		_, stderr, code := bob.addToleration(t, "bob-1", a100)
		wantDenied(t, "bob adds a100", stderr, code, podsHook, fmt.Sprintf("toleration %q=%q of a protected taint is not allowed for subject %q", gpuKey, "a100", "bob"))
		// An update that adds no toleration is not judged (bob may label his pod).
		if _, err := bob.client.CoreV1().Pods(admNS).Patch(ctx, "bob-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("labelling bob-1: %v", err)
		}
		// The allowed group may add it.
		stdout, stderr, code := runner.addToleration(t, "bob-1", a100)
		if code != 0 || stdout != "pod/bob-1 patched\n" || stderr != "" {
			t.Errorf("runner adds a100: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		pod, err := c.Client.CoreV1().Pods(admNS).Get(ctx, "bob-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(pod.Spec.Tolerations); n == 0 || pod.Spec.Tolerations[n-1] != a100 {
			t.Errorf("tolerations %v, want a100 last", pod.Spec.Tolerations)
		}
	})

	t.Run("an UPDATE that swaps a duplicate toleration for the virtual one is refused", func(t *testing.T) {
		// [T0, T0] is a valid pod that aims nowhere (no call); an update may replace the
		// second T0 as long as every old toleration still appears. Same size, one new
		// toleration: the webhooks must be called and the bridge must judge it.
		t0 := corev1.Toleration{Key: "example.com/other", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
		virtual := corev1.Toleration{Key: "virtual-node.interlink/no-schedule", Operator: corev1.TolerationOpExists}
		stdout, stderr, code := alice.kubectlCreate(t, admPod("dup-1", withToleration(t0), withToleration(t0)))
		wantCreated(t, "alice, [T0, T0]", stdout, stderr, code, "dup-1")
		_, stderr, code = alice.kubectlPatch(t, "pod", "dup-1", fmt.Sprintf(`[{"op":"replace","path":"/spec/tolerations/1","value":%s}]`, toJSON(t, virtual)))
		wantDenied(t, "alice, [T0, T0] -> [T0, Tvirt]", stderr, code, podsHook, aliceDenied)
		stdout, stderr, code = alice.kubectlCreate(t, admPod("dup-2", withToleration(t0)))
		wantCreated(t, "alice, [T0]", stdout, stderr, code, "dup-2")
		_, stderr, code = alice.addToleration(t, "dup-2", virtual)
		wantDenied(t, "alice, [T0] -> [T0, Tvirt]", stderr, code, podsHook, aliceDenied)
		for _, name := range []string{"dup-1", "dup-2"} {
			pod, err := c.Client.CoreV1().Pods(admNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// (The API server's DefaultTolerationSeconds adds two NoExecute tolerations.)
			if slices.Contains(pod.Spec.Tolerations, virtual) {
				t.Errorf("%s: the refused update was stored: tolerations %v", name, pod.Spec.Tolerations)
			}
		}
		// bob may offload: the same swap is his to make.
		stdout, stderr, code = bob.kubectlCreate(t, admPod("dup-3", withToleration(t0), withToleration(t0)))
		wantCreated(t, "bob, [T0, T0]", stdout, stderr, code, "dup-3")
		stdout, stderr, code = bob.kubectlPatch(t, "pod", "dup-3", fmt.Sprintf(`[{"op":"replace","path":"/spec/tolerations/1","value":%s}]`, toJSON(t, virtual)))
		if code != 0 || stdout != "pod/dup-3 patched\n" || stderr != "" {
			t.Errorf("bob, [T0, T0] -> [T0, Tvirt]: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	t.Run("workloads aimed at virtual nodes are judged as the user who makes them", func(t *testing.T) {
		aimed := withNodeSelector(map[string]string{"virtual-node.interlink/type": "virtual-kubelet"})
		_, stderr, code := alice.kubectlCreateObject(t, admJob("alice-job", aimed))
		wantDenied(t, "alice, a Job aimed at virtual nodes", stderr, code, workloadHook, "pod template of job/alice-job: "+aliceDenied)
		if _, err := c.Client.BatchV1().Jobs(admNS).Get(ctx, "alice-job", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the refused Job exists: %v", err)
		}

		// A CronJob's template is in its jobTemplate; tolerating the virtual taint aims it.
		j := admJob("alice-cron", withToleration(corev1.Toleration{Key: "virtual-node.interlink/no-schedule", Operator: corev1.TolerationOpExists}))
		_, stderr, code = alice.kubectlCreateObject(t, &batchv1.CronJob{
			TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
			ObjectMeta: j.ObjectMeta,
			Spec:       batchv1.CronJobSpec{Schedule: "@daily", JobTemplate: batchv1.JobTemplateSpec{Spec: j.Spec}},
		})
		wantDenied(t, "alice, a CronJob tolerating the virtual taint", stderr, code, workloadHook, "pod template of cronjob/alice-cron: "+aliceDenied)

		stdout, stderr, code := bob.kubectlCreateObject(t, admJob("bob-job", aimed))
		if code != 0 || stdout != "job.batch/bob-job created\n" || stderr != "" {
			t.Errorf("bob, a Job aimed at virtual nodes: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// A dry run is decided like the real request, and says nothing is reserved.
		stdout, stderr, code = bob.kubectlCreateObject(t, admJob("bob-dry", aimed), "--dry-run=server")
		if want := "Warning: sar-bridge: dry run decided as the request would be; nothing is reserved\n"; code != 0 ||
			stdout != "job.batch/bob-dry created (server dry run)\n" || stderr != want {
			t.Errorf("bob, dry run: exit %d, stdout %q, stderr %q; want the warning %q", code, stdout, stderr, want)
		}

		// A workload aimed nowhere is not even sent to the bridge.
		before := readCounters(t, b)
		stdout, stderr, code = alice.kubectlCreateObject(t, &appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Namespace: admNS, Name: "alice-deploy"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "alice"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "alice"}}, Spec: admPod("x").Spec},
			},
		})
		if code != 0 || stdout != "deployment.apps/alice-deploy created\n" || stderr != "" {
			t.Fatalf("alice, a Deployment aimed nowhere: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if after := readCounters(t, b); after != before {
			t.Errorf("counters %+v, want %+v (no call, no decision)", after, before)
		}
		// Aiming its template at virtual nodes later is judged too.
		_, stderr, code = alice.kubectlPatch(t, "deployment", "alice-deploy",
			`[{"op":"add","path":"/spec/template/spec/tolerations","value":[{"key":"virtual-node.interlink/no-schedule","operator":"Exists"}]}]`)
		wantDenied(t, "alice, aiming a Deployment's template", stderr, code, workloadHook, "pod template of deployment/alice-deploy: "+aliceDenied)
		d, err := c.Client.AppsV1().Deployments(admNS).Get(ctx, "alice-deploy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tols := d.Spec.Template.Spec.Tolerations; len(tols) != 0 {
			t.Errorf("the refused update was stored: tolerations %v", tols)
		}
	})

	t.Run("a pods/binding to a virtual node of a denied pod is refused", func(t *testing.T) {
		// An unplaced pod (no call at creation); the scheduler binds it. Its service
		// account (adm-team's default) may not offload.
		if _, err := alice.client.CoreV1().Pods(admNS).Create(ctx, admPod("unplaced-1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := alice.client.CoreV1().Pods(admNS).Create(ctx, admPod("unplaced-2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		bind := func(pod, node string) error {
			return schedulerUser.client.CoreV1().Pods(admNS).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: admNS},
				Target:     corev1.ObjectReference{Kind: "Node", Name: node},
			}, metav1.CreateOptions{})
		}
		err := bind("unplaced-1", admVK)
		want := fmt.Sprintf("admission webhook %q denied the request: %s may not create pods.interlink.io in namespace %q", bindingHook, sa(admNS, "default"), admNS)
		if !apierrors.IsForbidden(err) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("binding unplaced-1 to %s: %v; want Forbidden ending in %q", admVK, err, want)
		}
		if err := bind("unplaced-2", admWorker); err != nil {
			t.Errorf("binding unplaced-2 to %s: %v", admWorker, err)
		}
		for pod, node := range map[string]string{"unplaced-1": "", "unplaced-2": admWorker} {
			p, err := c.Client.CoreV1().Pods(admNS).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.NodeName != node {
				t.Errorf("%s: nodeName %q, want %q", pod, p.Spec.NodeName, node)
			}
		}
	})

	t.Run("with the bridge stopped targeted pods are refused and ordinary ones admitted", func(t *testing.T) {
		b.Stop()
		_, stderr, code := bob.kubectlCreate(t, admPod("outage-vk", withNodeName(admVK)))
		// The mutating webhook is called first; the call fails, failurePolicy Fail refuses.
		want := fmt.Sprintf("Internal error occurred: failed calling webhook %q: failed to call webhook: Post %q", podsHook, b.HTTPSURL()+"/admission/mutate?timeout=10s")
		if code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("bob, nodeName of a virtual node, no bridge: exit %d, stderr %q; want %q", code, stderr, want)
		}
		_, stderr, code = bob.kubectlCreate(t, admPod("outage-tolerating", withToleration(corev1.Toleration{Key: "virtual-node.interlink/no-schedule", Operator: corev1.TolerationOpExists})))
		if code == 0 || !strings.Contains(stderr, "failed calling webhook") {
			t.Errorf("bob, tolerating the virtual node taint, no bridge: exit %d, stderr %q; want a failed webhook call", code, stderr)
		}
		stdout, stderr, code := bob.kubectlCreate(t, admPod("outage-ordinary", withNodeSelector(map[string]string{"kubernetes.io/os": "linux"})))
		wantCreated(t, "bob, ordinary pod, no bridge", stdout, stderr, code, "outage-ordinary")
	})
}

func withNodeSelector(sel map[string]string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = sel }
}

func quantitiesEqual(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if w, ok := b[k]; !ok || q.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// The chart's webhooks are manifests/admission's: rendered with the names and namespace
// the manifests use, the two agree field for field.
func TestChartAdmissionMatchesManifests(t *testing.T) {
	manifests, err := cluster.Render(filepath.Join(suite.root, "manifests", "admission"))
	if err != nil {
		t.Fatal(err)
	}
	chart := renderChart(t, "sar-bridge", "sar-bridge", "--set", "admission.enabled=true,fullnameOverride=sar-bridge",
		"--set-string", "tls.secretName=sar-bridge-webhook-tls,admission.certManager.certificate=sar-bridge-webhook")
	for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		want := webhooksOf(t, manifests, kind, "sar-bridge")
		got := webhooksOf(t, chart, kind, "sar-bridge")
		if !reflect.DeepEqual(got, want) {
			gy, _ := yaml.Marshal(got)
			wy, _ := yaml.Marshal(want)
			t.Errorf("%s: the chart renders\n%s\nmanifests/admission has\n%s", kind, gy, wy)
		}
	}
	wantRules := find[rbacv1.ClusterRole](t, manifests, "ClusterRole", "sar-bridge-admission").Rules
	if got := findIn[rbacv1.ClusterRole](t, chart, "ClusterRole", "sar-bridge-admission").Rules; !reflect.DeepEqual(got, wantRules) {
		t.Errorf("chart ClusterRole rules %v, manifests %v", got, wantRules)
	}
}

// webhooksOf returns a configuration's typed webhooks and its cert-manager annotation.
func webhooksOf(t *testing.T, objs []*unstructured.Unstructured, kind, name string) map[string]any {
	t.Helper()
	out := map[string]any{}
	switch kind {
	case "ValidatingWebhookConfiguration":
		c := findIn[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, kind, name)
		out["webhooks"], out["inject-ca-from"] = c.Webhooks, c.Annotations["cert-manager.io/inject-ca-from"]
	case "MutatingWebhookConfiguration":
		c := findIn[admissionregistrationv1.MutatingWebhookConfiguration](t, objs, kind, name)
		out["webhooks"], out["inject-ca-from"] = c.Webhooks, c.Annotations["cert-manager.io/inject-ca-from"]
	default:
		t.Fatalf("not a webhook configuration kind: %s", kind)
	}
	return out
}

// Everything manifests/admission adds to manifests/base passes the API server's validation
// (server-side dry run; the matchConditions compile), cert-manager's kinds aside (the test
// API server has no cert-manager).
func TestAdmissionManifestsValidate(t *testing.T) {
	objs, err := cluster.Render(filepath.Join(suite.root, "manifests", "admission"))
	if err != nil {
		t.Fatal(err)
	}
	if err := suite.cluster.DryRunApply(context.Background(), cluster.Filter(objs, cluster.SkipKinds("Issuer", "Certificate"))); err != nil {
		t.Fatal(err)
	}
	d := find[appsv1.Deployment](t, objs, "Deployment", "sar-bridge")
	args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--tls.server.cert-file=/etc/sar-bridge/tls/tls.crt", "--tls.server.key-file=/etc/sar-bridge/tls/tls.key", "--admission.identity=requester"} {
		if !strings.Contains(args, want) {
			t.Errorf("the Deployment's args %q lack %s", args, want)
		}
	}
}
