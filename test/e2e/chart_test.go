package e2e

// charts/sar-bridge: helm lint, renderings applied to the real kube-apiserver (server-side
// apply, so the API server validates every object), schema errors for bad values, the
// same objects as manifests/base (no drift), and a bridge running with exactly the
// chart's RBAC deciding allow and deny.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

var chartHelm struct {
	once    sync.Once
	h       *cluster.Helm
	kubectl string
	err     error
}

// helm returns the pinned helm (hack/helm.sh or $SAR_BRIDGE_HELM) with a private home.
func helm(t *testing.T) *cluster.Helm {
	t.Helper()
	chartHelm.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		bin, err := cluster.HelmBinary(ctx, suite.root)
		if err != nil {
			chartHelm.err = err
			return
		}
		chartHelm.h = &cluster.Helm{Binary: bin, Home: filepath.Join(suite.workDir, "helm-home")}
		chartHelm.kubectl, chartHelm.err = cluster.KubectlBinary(ctx, suite.root)
	})
	if chartHelm.err != nil {
		t.Fatal(chartHelm.err)
	}
	return chartHelm.h
}

// kubectl is the pinned kubectl hack/helm.sh builds (or $SAR_BRIDGE_KUBECTL).
func kubectl(t *testing.T) string {
	t.Helper()
	helm(t)
	return chartHelm.kubectl
}

func chartDir() string { return filepath.Join(suite.root, "charts", "sar-bridge") }

func chartValues(name string) string { return filepath.Join(chartDir(), "ci", name) }

// renderChart renders the chart as release in namespace with extra helm flags.
func renderChart(t *testing.T, release, namespace string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := helm(t).Template(context.Background(), chartDir(), release, namespace, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// findIn is find for a rendering that is not manifests/base.
func findIn[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			out := new(T)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return out
		}
	}
	t.Fatalf("the rendering has no %s %s", kind, name)
	return nil
}

func inventory(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			id = o.GetKind() + " " + ns + "/" + o.GetName()
		}
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func namespaceObj(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}}
}

func TestChartLint(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"default values", nil},
		{"every optional part on", []string{"-f", chartValues("all-on-values.yaml")}},
		{"manifests/base's values", []string{"-f", chartValues("kustomize-base-values.yaml")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t).Run(context.Background(), append([]string{"lint", "--strict", chartDir()}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// Each rendering holds exactly the expected objects and the API server accepts every one
// of them (server-side apply, for real: CRDs before nothing depends on them).
func TestChartRenderingsApply(t *testing.T) {
	for _, tc := range []struct {
		name, release, namespace string
		args                     []string
		want                     []string
	}{
		{
			name: "default values", release: "dflt", namespace: "chart-default",
			want: []string{
				"ClusterRole dflt-sar-bridge",
				"ClusterRoleBinding dflt-sar-bridge",
				"ConfigMap chart-default/dflt-sar-bridge-mappings",
				"ConfigMap chart-default/dflt-sar-bridge-policy-data",
				"Deployment chart-default/dflt-sar-bridge",
				"PodDisruptionBudget chart-default/dflt-sar-bridge",
				"Role chart-default/dflt-sar-bridge",
				"RoleBinding chart-default/dflt-sar-bridge",
				"Service chart-default/dflt-sar-bridge",
				"ServiceAccount chart-default/dflt-sar-bridge",
				"ValidatingAdmissionPolicy dflt-sar-bridge-ledger-marks",
				"ValidatingAdmissionPolicyBinding dflt-sar-bridge-ledger-marks",
			},
		},
		{
			name: "every optional part on", release: "full", namespace: "chart-full",
			args: []string{"-f", chartValues("all-on-values.yaml")},
			want: []string{
				"ClusterRole full-sar-bridge",
				"ClusterRole full-sar-bridge-admission",
				"ClusterRoleBinding full-sar-bridge",
				"ClusterRoleBinding full-sar-bridge-admission",
				"ConfigMap chart-full/full-sar-bridge-mappings",
				"ConfigMap chart-full/full-sar-bridge-policy-data",
				"CustomResourceDefinition nodes.extra.interlink.io",
				"CustomResourceDefinition nodes.interlink.io",
				"CustomResourceDefinition nodes.shared.interlink.io",
				"CustomResourceDefinition nodes.tenant-b.interlink.io",
				"CustomResourceDefinition pods.extra.interlink.io",
				"CustomResourceDefinition pods.interlink.io",
				"CustomResourceDefinition pods.shared.interlink.io",
				"CustomResourceDefinition pods.tenant-b.interlink.io",
				"Deployment chart-full/full-sar-bridge",
				"Deployment chart-full/full-sar-bridge-memcached",
				"MutatingWebhookConfiguration full-sar-bridge",
				"NetworkPolicy chart-full/full-sar-bridge-interlink",
				"NetworkPolicy chart-full/full-sar-bridge-memcached",
				"PodDisruptionBudget chart-full/full-sar-bridge",
				"Role chart-full/full-sar-bridge",
				"RoleBinding chart-full/full-sar-bridge",
				"Secret chart-full/full-sar-bridge-memcached-hmac",
				"Service chart-full/full-sar-bridge",
				"Service chart-full/full-sar-bridge-memcached",
				"ServiceAccount chart-full/full-sar-bridge",
				"ValidatingAdmissionPolicy full-sar-bridge-ledger-marks",
				"ValidatingAdmissionPolicy sar-bridge-discovery.extra.interlink.io",
				"ValidatingAdmissionPolicy sar-bridge-discovery.interlink.io",
				"ValidatingAdmissionPolicy sar-bridge-discovery.shared.interlink.io",
				"ValidatingAdmissionPolicy sar-bridge-discovery.tenant-b.interlink.io",
				"ValidatingAdmissionPolicyBinding full-sar-bridge-ledger-marks",
				"ValidatingAdmissionPolicyBinding sar-bridge-discovery.extra.interlink.io",
				"ValidatingAdmissionPolicyBinding sar-bridge-discovery.interlink.io",
				"ValidatingAdmissionPolicyBinding sar-bridge-discovery.shared.interlink.io",
				"ValidatingAdmissionPolicyBinding sar-bridge-discovery.tenant-b.interlink.io",
				"ValidatingWebhookConfiguration full-sar-bridge",
			},
		},
		{
			name: "existing memcached and Secret, no CRDs, no ledger-marks policy, one replica (no PDB)", release: "ext", namespace: "chart-ext",
			args: []string{
				"--set-string", "mappings.team-a=interlink.io",
				"--set", "memcached.servers={mc-0.cache.svc:11211,mc-1.cache.svc:11211}",
				"--set-string", "memcached.hmac.existingSecret=shared-hmac",
				"--set", "crds.create=false,replicaCount=1,ledgerMarksPolicy.enabled=false",
			},
			want: []string{
				"ClusterRole ext-sar-bridge",
				"ClusterRoleBinding ext-sar-bridge",
				"ConfigMap chart-ext/ext-sar-bridge-mappings",
				"ConfigMap chart-ext/ext-sar-bridge-policy-data",
				"Deployment chart-ext/ext-sar-bridge",
				"Role chart-ext/ext-sar-bridge",
				"RoleBinding chart-ext/ext-sar-bridge",
				"Service chart-ext/ext-sar-bridge",
				"ServiceAccount chart-ext/ext-sar-bridge",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderChart(t, tc.release, tc.namespace, tc.args...)
			if got := inventory(objs); !slices.Equal(got, tc.want) {
				t.Fatalf("rendered objects:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			ctx := context.Background()
			all := append([]*unstructured.Unstructured{namespaceObj(tc.namespace)}, objs...)
			if err := suite.cluster.Apply(ctx, all); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// The discovery objects stay (as helm would keep them): other tests use them,
				// they store nothing, and manifests/base has the same interlink.io ones.
				_ = suite.cluster.Delete(context.Background(), cluster.Filter(all, func(o *unstructured.Unstructured) bool { return !isDiscoveryKind(o) }))
			})
		})
	}
}

// The image defaults to the chart's appVersion, which is the VERSION file's release and
// make image's repository.
func TestChartImage(t *testing.T) {
	release, err := os.ReadFile(filepath.Join(suite.root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(release)); chart.AppVersion != want {
		t.Errorf("Chart.yaml appVersion %q, VERSION %q", chart.AppVersion, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "ghcr.io/sar-bridge/sar-bridge:" + strings.TrimSpace(string(release))},
		{[]string{"--set-string", "image.tag=v9.9.9,image.repository=registry.example/sb"}, "registry.example/sb:v9.9.9"},
	} {
		d := findIn[appsv1.Deployment](t, renderChart(t, "img", "img", tc.args...), "Deployment", "img-sar-bridge")
		if got := d.Spec.Template.Spec.Containers[0].Image; got != tc.want {
			t.Errorf("%v: image %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestChartHubMember: tenants.clusterName and tenants.hubKubeconfigSecret make the bridge
// a member of a hub (docs/multicluster.md): its flags, and the Secret's kubeconfig
// mounted read-only; without them the bridge gets neither.
func TestChartHubMember(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantArgs []string
		mounted  bool
	}{
		{"no hub", nil, nil, false},
		{"the hub itself", []string{"--set-string", "tenants.clusterName=site-a"}, []string{"--tenants.cluster-name=site-a"}, false},
		{"a member", []string{"--set-string", "tenants.clusterName=site-b,tenants.hubKubeconfigSecret=hub"},
			[]string{"--tenants.kubeconfig=/etc/sar-bridge/hub/kubeconfig", "--tenants.cluster-name=site-b"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := findIn[appsv1.Deployment](t, renderChart(t, "hub", "hub", tc.args...), "Deployment", "hub-sar-bridge")
			c := d.Spec.Template.Spec.Containers[0]
			var got []string
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--tenants.") {
					got = append(got, a)
				}
			}
			if !slices.Equal(got, tc.wantArgs) {
				t.Errorf("--tenants.* args %q, want %q", got, tc.wantArgs)
			}
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.Name == "hub-kubeconfig" && m.MountPath == "/etc/sar-bridge/hub" && m.ReadOnly {
					mounted = true
				}
			}
			secret := false
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == "hub-kubeconfig" && v.Secret != nil && v.Secret.SecretName == "hub" {
					secret = true
				}
			}
			if mounted != tc.mounted || secret != tc.mounted {
				t.Errorf("hub kubeconfig mounted %v, its Secret a volume %v; want %v", mounted, secret, tc.mounted)
			}
		})
	}
}

// A wrong value is a helm error with a message that names it, before anything reaches a
// cluster.
func TestChartRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"replicas as a word", []string{"--set-string", "replicaCount=two"},
			[]string{"values don't meet the specifications of the schema", "replicaCount", "got string, want integer"}},
		{"zero replicas", []string{"--set", "replicaCount=0"},
			[]string{"replicaCount", "minimum: got 0, want 1"}},
		{"unknown identity mode", []string{"--set-string", "authn.mode=basic"},
			[]string{"authn.mode", `value must be one of 'token', 'mtls'`}},
		{"unknown top-level value", []string{"--set", "replicas=2"},
			[]string{"additional properties 'replicas' not allowed"}},
		{"mapping to a bad API group", []string{"--set-string", "mappings.team-a=Not A Group"},
			[]string{"mappings/team-a", "does not match pattern"}},
		{"bad duration", []string{"--set-string", "cache.allowedTTL=5 minutes"},
			[]string{"cache/allowedTTL", "does not match pattern"}},
		{"bad memcached server", []string{"--set", "memcached.servers={memcached}"},
			[]string{"memcached/servers/0", "does not match pattern"}},
		{"mtls without certificates", []string{"--set-string", "authn.mode=mtls"},
			[]string{"authn.mode=mtls needs tls.secretName"}},
		{"relay without a plugin", []string{"--set", "interlink.enabled=true"},
			[]string{"interlink.pluginURL is required when interlink.enabled is true"}},
		{"relay open to everyone", []string{"--set", "interlink.enabled=true", "--set-string", "interlink.pluginURL=http://plugin:4000"},
			[]string{"interlink.clients is required when interlink.enabled is true"}},
		{"admission webhooks without TLS", []string{"--set", "admission.enabled=true", "--set-string", "admission.caBundle=Zm9v"},
			[]string{"admission.enabled needs tls.secretName"}},
		{"admission webhooks without a CA", []string{"--set", "admission.enabled=true", "--set-string", "tls.secretName=tls"},
			[]string{"admission.enabled needs exactly one of admission.caBundle"}},
		{"admission CA bundle not base64", []string{"--set-string", "admission.caBundle=-----BEGIN CERTIFICATE-----"},
			[]string{"admission/caBundle", "does not match pattern"}},
		{"admission timeout over the API server's maximum", []string{"--set", "admission.timeoutSeconds=31"},
			[]string{"admission/timeoutSeconds", "maximum: got 31, want 30"}},
		{"unknown admission identity", []string{"--set", "admission.identity=user"},
			[]string{"admission/identity", "value must be one of"}},
		{"a Virtual Kubelet user with a wildcard", []string{"--set", "admission.vkUsers={system:serviceaccount:*:vk}"},
			[]string{"admission/vkUsers/0", "does not match pattern"}},
		{"everyone as the Virtual Kubelet", []string{"--set", "admission.vkGroups={system:authenticated}"},
			[]string{"admission/vkGroups/0"}},
		{"a hub without a cluster name", []string{"--set-string", "tenants.hubKubeconfigSecret=hub"},
			[]string{"tenants.hubKubeconfigSecret needs tenants.clusterName"}},
		{"a cluster name that is no DNS label", []string{"--set-string", "tenants.clusterName=Site_B"},
			[]string{"tenants/clusterName", "does not match pattern"}},
		{"relay to a plugin URL without a scheme", []string{"--set-string", "interlink.pluginURL=plugin:4000"},
			[]string{"interlink/pluginURL", "does not match pattern"}},
		{"relay to a https plugin (the relay speaks http)", []string{"--set-string", "interlink.pluginURL=https://plugin:4000"},
			[]string{"interlink/pluginURL", "does not match pattern"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helm(t).Template(context.Background(), chartDir(), "bad", "bad", tc.args...)
			if err == nil {
				t.Fatal("helm template accepted the values")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// podSpecForDrift returns the Deployment's pod spec without what legitimately differs
// between the chart and manifests/base: the mappings (a flag in the base, a ConfigMap file
// in the chart: compared separately) and the anti-affinity's label selector (checked to
// equal the Deployment's own selector).
func podSpecForDrift(t *testing.T, d *appsv1.Deployment) (corev1.PodSpec, []string) {
	t.Helper()
	pod := *d.Spec.Template.Spec.DeepCopy()
	var mappings []string
	c := &pod.Containers[0]
	var args []string
	for _, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--openshift.mappings="):
			mappings = append(mappings, strings.TrimPrefix(a, "--openshift.mappings="))
		case a == "--openshift.mappings-file=/etc/sar-bridge/mappings/mappings":
		default:
			args = append(args, a)
		}
	}
	c.Args = args
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "mappings" })
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "mappings" })
	if a := pod.Affinity; a != nil && a.PodAntiAffinity != nil {
		for i := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			term := &a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm
			if term.LabelSelector == nil || !reflect.DeepEqual(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("Deployment %s: anti-affinity selector %v is not the Deployment's selector %v", d.Name, term.LabelSelector, d.Spec.Selector.MatchLabels)
			}
			term.LabelSelector = nil
		}
	}
	return pod, mappings
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The chart, with values that say what manifests/base says, renders the same objects:
// the same pod spec (args, probes, securityContext, resources, volumes), the same
// ClusterRole rules, ledger-marks admission policy, Service ports, PDB, ServiceAccount
// and policy data, and the same tenant mappings. With memcached on it matches
// manifests/memcached the same way.
func TestChartMatchesKustomize(t *testing.T) {
	for _, tc := range []struct {
		name, dir string
		args      []string
		memcached bool
	}{
		{"manifests/base", "base", nil, false},
		{"manifests/memcached", "memcached", []string{"--set", "memcached.enabled=true"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kust, err := cluster.Render(filepath.Join(suite.root, "manifests", tc.dir))
			if err != nil {
				t.Fatal(err)
			}
			// Release "sar-bridge" in namespace "sar-bridge" gives the base's names.
			chart := renderChart(t, "sar-bridge", "sar-bridge", append([]string{"-f", chartValues("kustomize-base-values.yaml")}, tc.args...)...)

			kd := findIn[appsv1.Deployment](t, kust, "Deployment", "sar-bridge")
			cd := findIn[appsv1.Deployment](t, chart, "Deployment", "sar-bridge")
			if *kd.Spec.Replicas != *cd.Spec.Replicas {
				t.Errorf("replicas: kustomize %d, chart %d", *kd.Spec.Replicas, *cd.Spec.Replicas)
			}
			kpod, kmap := podSpecForDrift(t, kd)
			cpod, cmap := podSpecForDrift(t, cd)
			if k, c := asJSON(t, kpod), asJSON(t, cpod); k != c {
				t.Errorf("pod specs differ\nkustomize:\n%s\nchart:\n%s", k, c)
			}
			cm := findIn[corev1.ConfigMap](t, chart, "ConfigMap", "sar-bridge-mappings")
			var lines []string
			for _, l := range strings.Split(cm.Data["mappings"], "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					lines = append(lines, l)
				}
			}
			if len(cmap) != 0 || !slices.Equal(lines, kmap) {
				t.Errorf("mappings: kustomize flags %q, chart file lines %q (and flags %q)", kmap, lines, cmap)
			}

			kr := findIn[rbacv1.ClusterRole](t, kust, "ClusterRole", "sar-bridge")
			cr := findIn[rbacv1.ClusterRole](t, chart, "ClusterRole", "sar-bridge")
			if !reflect.DeepEqual(kr.Rules, cr.Rules) {
				t.Errorf("ClusterRole rules differ\nkustomize: %s\nchart: %s", asJSON(t, kr.Rules), asJSON(t, cr.Rules))
			}
			klr := findIn[rbacv1.Role](t, kust, "Role", "sar-bridge")
			clr := findIn[rbacv1.Role](t, chart, "Role", "sar-bridge")
			if !reflect.DeepEqual(klr.Rules, clr.Rules) || klr.Namespace != clr.Namespace {
				t.Errorf("leader election Roles differ\nkustomize: %s %s\nchart: %s %s", klr.Namespace, asJSON(t, klr.Rules), clr.Namespace, asJSON(t, clr.Rules))
			}
			klb := findIn[rbacv1.RoleBinding](t, kust, "RoleBinding", "sar-bridge")
			clb := findIn[rbacv1.RoleBinding](t, chart, "RoleBinding", "sar-bridge")
			if !reflect.DeepEqual(klb.RoleRef, clb.RoleRef) || !reflect.DeepEqual(klb.Subjects, clb.Subjects) || klb.Namespace != clb.Namespace {
				t.Errorf("leader election RoleBindings differ: kustomize %+v %+v, chart %+v %+v", klb.RoleRef, klb.Subjects, clb.RoleRef, clb.Subjects)
			}
			kvap := findIn[admissionregistrationv1.ValidatingAdmissionPolicy](t, kust, "ValidatingAdmissionPolicy", "sar-bridge-ledger-marks")
			cvap := findIn[admissionregistrationv1.ValidatingAdmissionPolicy](t, chart, "ValidatingAdmissionPolicy", "sar-bridge-ledger-marks")
			if !reflect.DeepEqual(kvap.Spec, cvap.Spec) {
				t.Errorf("ledger-marks policies differ\nkustomize: %s\nchart: %s", asJSON(t, kvap.Spec), asJSON(t, cvap.Spec))
			}
			kvb := findIn[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, kust, "ValidatingAdmissionPolicyBinding", "sar-bridge-ledger-marks")
			cvb := findIn[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, chart, "ValidatingAdmissionPolicyBinding", "sar-bridge-ledger-marks")
			if !reflect.DeepEqual(kvb.Spec, cvb.Spec) {
				t.Errorf("ledger-marks bindings differ: kustomize %s, chart %s", asJSON(t, kvb.Spec), asJSON(t, cvb.Spec))
			}
			kb := findIn[rbacv1.ClusterRoleBinding](t, kust, "ClusterRoleBinding", "sar-bridge")
			cb := findIn[rbacv1.ClusterRoleBinding](t, chart, "ClusterRoleBinding", "sar-bridge")
			if !reflect.DeepEqual(kb.RoleRef, cb.RoleRef) || !reflect.DeepEqual(kb.Subjects, cb.Subjects) {
				t.Errorf("ClusterRoleBindings differ: kustomize %+v %+v, chart %+v %+v", kb.RoleRef, kb.Subjects, cb.RoleRef, cb.Subjects)
			}
			ks := findIn[corev1.Service](t, kust, "Service", "sar-bridge")
			cs := findIn[corev1.Service](t, chart, "Service", "sar-bridge")
			if !reflect.DeepEqual(ks.Spec.Ports, cs.Spec.Ports) || ks.Spec.Type != cs.Spec.Type {
				t.Errorf("Services differ: kustomize %s %+v, chart %s %+v", ks.Spec.Type, ks.Spec.Ports, cs.Spec.Type, cs.Spec.Ports)
			}
			if !reflect.DeepEqual(cs.Spec.Selector, cd.Spec.Selector.MatchLabels) {
				t.Errorf("chart Service selector %v is not the Deployment's %v", cs.Spec.Selector, cd.Spec.Selector.MatchLabels)
			}
			kp := findIn[policyv1.PodDisruptionBudget](t, kust, "PodDisruptionBudget", "sar-bridge")
			cp := findIn[policyv1.PodDisruptionBudget](t, chart, "PodDisruptionBudget", "sar-bridge")
			if kp.Spec.MinAvailable.String() != cp.Spec.MinAvailable.String() || !reflect.DeepEqual(cp.Spec.Selector.MatchLabels, cd.Spec.Selector.MatchLabels) {
				t.Errorf("PDBs differ: kustomize %s, chart %s %v", kp.Spec.MinAvailable.String(), cp.Spec.MinAvailable.String(), cp.Spec.Selector.MatchLabels)
			}
			ksa := findIn[corev1.ServiceAccount](t, kust, "ServiceAccount", "sar-bridge")
			csa := findIn[corev1.ServiceAccount](t, chart, "ServiceAccount", "sar-bridge")
			if !reflect.DeepEqual(ksa.AutomountServiceAccountToken, csa.AutomountServiceAccountToken) {
				t.Errorf("ServiceAccount automount: kustomize %v, chart %v", *ksa.AutomountServiceAccountToken, csa.AutomountServiceAccountToken)
			}
			var kdata, cdata any
			if err := yaml.Unmarshal([]byte(findIn[corev1.ConfigMap](t, kust, "ConfigMap", "sar-bridge-policy-data").Data["data.yaml"]), &kdata); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal([]byte(findIn[corev1.ConfigMap](t, chart, "ConfigMap", "sar-bridge-policy-data").Data["data.yaml"]), &cdata); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(kdata, cdata) {
				t.Errorf("policy data differs\nkustomize: %v\nchart: %v", kdata, cdata)
			}
			if !tc.memcached {
				return
			}
			km := findIn[appsv1.Deployment](t, kust, "Deployment", "sar-bridge-memcached")
			cmd := findIn[appsv1.Deployment](t, chart, "Deployment", "sar-bridge-memcached")
			if k, c := asJSON(t, km.Spec.Template.Spec), asJSON(t, cmd.Spec.Template.Spec); k != c {
				t.Errorf("memcached pod specs differ\nkustomize:\n%s\nchart:\n%s", k, c)
			}
			ksvc := findIn[corev1.Service](t, kust, "Service", "sar-bridge-memcached")
			csvc := findIn[corev1.Service](t, chart, "Service", "sar-bridge-memcached")
			if !reflect.DeepEqual(ksvc.Spec.Ports, csvc.Spec.Ports) || ksvc.Spec.ClusterIP != csvc.Spec.ClusterIP {
				t.Errorf("memcached Services differ: %+v / %+v", ksvc.Spec, csvc.Spec)
			}
			// The chart also makes the HMAC key the overlay leaves to the admin.
			sec := findIn[corev1.Secret](t, chart, "Secret", "sar-bridge-memcached-hmac")
			if key := sec.Data["hmac.key"]; len(key) != 64 {
				t.Errorf("generated hmac.key is %d bytes, want 64 hex digits (32 bytes)", len(key))
			}
		})
	}
}

// chartRBACNS is where TestChartRBAC installs the chart.
const chartRBACNS = "chart-rbac"

// The bridge, started with the chart Deployment's own arguments, ConfigMaps and the
// chart's ServiceAccount token (not admin), decides allow and deny correctly and
// authenticates its caller with a TokenReview: the ClusterRole is sufficient. And its
// ServiceAccount can do exactly what the ClusterRole grants plus what every
// authenticated user can: the ClusterRole is not broader than needed.
func TestChartRBAC(t *testing.T) {
	ctx := context.Background()
	objs := renderChart(t, "rbac", chartRBACNS, "-f", chartValues("kustomize-base-values.yaml"))
	extra, err := cluster.ParseYAML(`
apiVersion: v1
kind: ServiceAccount
metadata: {name: caller, namespace: chart-rbac}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: chart-rbac-caller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sar-bridge-caller}
subjects:
  - {kind: ServiceAccount, name: caller, namespace: chart-rbac}
`)
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]*unstructured.Unstructured{namespaceObj(chartRBACNS)}, objs...), extra...)
	if err := suite.cluster.Apply(ctx, all); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = suite.cluster.Delete(context.Background(), cluster.Filter(all, cluster.SkipKinds("CustomResourceDefinition")))
	})

	self := cluster.ServiceAccountUser(chartRBACNS, "rbac-sar-bridge")
	callerUser := cluster.ServiceAccountUser(chartRBACNS, "caller")
	authnWaitCaller(t, callerUser, cluster.ServiceAccountGroups(chartRBACNS), "/v1/data/interlink/authz/decision", true)
	if err := suite.cluster.WaitForAccess(ctx, self, cluster.ServiceAccountGroups(chartRBACNS),
		authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if _, err := suite.cluster.WriteServiceAccountKubeconfig(ctx, kubeconfig, chartRBACNS, "rbac-sar-bridge", time.Hour); err != nil {
		t.Fatal(err)
	}

	t.Run("decides with the chart's RBAC", func(t *testing.T) {
		d := findIn[appsv1.Deployment](t, objs, "Deployment", "rbac-sar-bridge")
		files := map[string]string{
			"--openshift.mappings-file=": findIn[corev1.ConfigMap](t, objs, "ConfigMap", "rbac-sar-bridge-mappings").Data["mappings"],
			"--policies.data=":           findIn[corev1.ConfigMap](t, objs, "ConfigMap", "rbac-sar-bridge-policy-data").Data["data.yaml"],
		}
		var args []string
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			switch {
			case strings.HasPrefix(a, "--web.listen="), strings.HasPrefix(a, "--web.internal.listen="):
				// StartBridge picks free loopback ports.
			case strings.HasPrefix(a, "--web.shutdown-delay="):
				args = append(args, "--web.shutdown-delay=0s")
			default:
				replaced := false
				for flag, content := range files {
					if strings.HasPrefix(a, flag) {
						p := filepath.Join(dir, strings.Trim(flag, "-="))
						if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
							t.Fatal(err)
						}
						args, replaced = append(args, flag+p), true
					}
				}
				if !replaced {
					args = append(args, a)
				}
			}
		}
		if !slices.Contains(args, "--authn.mode=token") {
			t.Fatalf("the chart's args %q do not authenticate callers with tokens", args)
		}
		b, err := cluster.StartBridge(cluster.BridgeOptions{
			Binary: suite.binary, Kubeconfig: kubeconfig, Args: args,
			LogPath: filepath.Join(suite.workDir, "bridge-chart-rbac.log"),
		})
		stopAtCleanup(t, b)
		if err != nil {
			t.Fatalf("the chart's args %q: %v", args, err)
		}
		authnRefused(t, cluster.NewCaller(b.URL, nil, ""), input("create", newPod("team-a", "runner", "c-0")), 401, "missing bearer token")
		c := cluster.NewCaller(b.URL, nil, authnToken(t, chartRBACNS, "caller"))
		defer c.Close()
		for _, tc := range []struct {
			name string
			in   map[string]any
			want want
		}{
			{"granted service account", input("create", newPod("team-a", "runner", "c-1")), allow(`RoleBinding "offload/team-a"`)},
			{"service account without a grant", input("create", newPod("team-a", "intruder", "c-2")), deny("system:serviceaccount:team-a:intruder")},
			{"unmapped tenant", input("create", newPod("project-b", "runner", "c-3")), deny("tenant-b")},
			{"over the cap", input("create", newPod("team-a", "runner", "c-4", withContainer("hog", "3", "1Gi"))), deny("hog")},
			{"protected taint, informer-fed node", input("create", newPod("team-a", "runner", "c-5",
				withToleration(corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpExists}))), deny("hpc.example/gpu")},
			{"another tenant's node", input("create", newPod("team-a", "runner", "c-6"), onNode("vk-b")), deny("tenant-b")},
			// Reads the pod from the API (get pods) to see who wrote the annotation.
			{"a pre-exec not written by the Virtual Kubelet", input("create", newPod("team-a", "runner", "c-7",
				withAnnotations(map[string]string{"slurm-job.vk.io/pre-exec": e2eMeshScript}))), deny(`annotation "slurm-job.vk.io/pre-exec" is restricted`)},
		} {
			t.Run(tc.name, func(t *testing.T) { authnDecide(t, c, tc.in, tc.want) })
		}
	})

	t.Run("can-i --list is exactly the ClusterRole and the Role", func(t *testing.T) {
		cmd := exec.Command(kubectl(t), "--kubeconfig", kubeconfig, "auth", "can-i", "--list", "--namespace", chartRBACNS)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl auth can-i --list: %v\n%s", err, out)
		}
		got := canIRows(string(out))
		want := []string{
			// The chart's ClusterRole.
			"namespaces [] [] [get list watch]",
			"nodes [] [] [get list watch]",
			"pods [] [] [get list watch patch]",
			"offloadtenants.sar-bridge.io [] [] [get list watch]",
			"offloadtenants.sar-bridge.io/status [] [] [get update patch]",
			"subjectaccessreviews.authorization.k8s.io [] [] [create]",
			"tokenreviews.authentication.k8s.io [] [] [create]",
			// The chart's Role in its namespace: the reconciler's leader election.
			"leases.coordination.k8s.io [] [] [get create update]",
			// What every authenticated user may (system:basic-user, system:discovery,
			// system:public-info-viewer).
			"selfsubjectreviews.authentication.k8s.io [] [] [create]",
			"selfsubjectaccessreviews.authorization.k8s.io [] [] [create]",
			"selfsubjectrulesreviews.authorization.k8s.io [] [] [create]",
			"[/.well-known/openid-configuration/] [] [get]",
			"[/.well-known/openid-configuration] [] [get]",
			"[/api/*] [] [get]",
			"[/api] [] [get]",
			"[/apis/*] [] [get]",
			"[/apis] [] [get]",
			"[/healthz] [] [get]",
			"[/healthz] [] [get]",
			"[/livez] [] [get]",
			"[/livez] [] [get]",
			"[/openapi/*] [] [get]",
			"[/openapi] [] [get]",
			"[/openid/v1/jwks/] [] [get]",
			"[/openid/v1/jwks] [] [get]",
			"[/readyz] [] [get]",
			"[/readyz] [] [get]",
			"[/version/] [] [get]",
			"[/version/] [] [get]",
			"[/version] [] [get]",
			"[/version] [] [get]",
		}
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("kubectl auth can-i --list for %s:\n  %s\nwant:\n  %s\n(raw:\n%s)", self, strings.Join(got, "\n  "), strings.Join(want, "\n  "), out)
		}
	})
}

// canIRows turns `kubectl auth can-i --list` into sorted rows of single-space-separated
// columns (the header dropped).
func canIRows(out string) []string {
	var rows []string
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if i == 0 || strings.TrimSpace(l) == "" {
			continue
		}
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	sort.Strings(rows)
	return rows
}

// With the chart's CRDs, `kubectl auth can-i` knows pods.interlink.io and answers what
// the bridge will answer, without a "the server doesn't have a resource type" warning.
func TestChartCanI(t *testing.T) {
	ctx := context.Background()
	objs := renderChart(t, "cani", "chart-cani", "--set-string", "mappings.team-a=interlink.io")
	crds := cluster.Filter(objs, isDiscoveryKind)
	if got := inventory(crds); !slices.Equal(got, []string{
		"CustomResourceDefinition nodes.interlink.io",
		"CustomResourceDefinition pods.interlink.io",
		"ValidatingAdmissionPolicy sar-bridge-discovery.interlink.io",
		"ValidatingAdmissionPolicyBinding sar-bridge-discovery.interlink.io",
	}) {
		t.Fatalf("discovery objects %q", got)
	}
	if err := suite.cluster.Apply(ctx, crds); err != nil {
		t.Fatal(err)
	}
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := suite.cluster.WriteAdminKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "pods.interlink.io", "-n", "team-a", "--as", sa("team-a", "runner")}, "yes"},
		{[]string{"create", "pods.interlink.io", "-n", "team-a", "--as", sa("team-a", "intruder")}, "no"},
		{[]string{"delete", "pods.interlink.io/job-1", "-n", "team-a", "--as", sa("team-a", "cleaner")}, "yes"},
		{[]string{"use", "nodes.interlink.io/vk-1", "-n", "team-a", "--as", sa("team-a", "pinned")}, "yes"},
		{[]string{"use", "nodes.interlink.io/vk-2", "-n", "team-a", "--as", sa("team-a", "pinned")}, "no"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got, stderr string
			poll(20*time.Second, 200*time.Millisecond, func() bool {
				cmd := exec.Command(kubectl(t), append([]string{"--kubeconfig", admin, "auth", "can-i"}, tc.args...)...)
				var o, e strings.Builder
				cmd.Stdout, cmd.Stderr = &o, &e
				_ = cmd.Run() // exit 1 means "no"
				got, stderr = strings.TrimSpace(o.String()), e.String()
				return got == tc.want && stderr == ""
			})
			if got != tc.want || stderr != "" {
				t.Errorf("kubectl auth can-i %s: %q (stderr %q), want %q and no warning", strings.Join(tc.args, " "), got, stderr, tc.want)
			}
		})
	}
	// The CRDs are names only: the admission policy refuses every object.
	refused(t, kubectlCmd(t), "interlink.io", "pods", "OffloadPod")
}

// helm install and upgrade against the real API server: the HMAC key the chart generates
// survives an upgrade (lookup), and NOTES.txt says how to grant and check a tenant.
func TestChartInstallUpgrade(t *testing.T) {
	ctx := context.Background()
	admin := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := suite.cluster.WriteAdminKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	const ns = "chart-install"
	h := helm(t)
	common := []string{"--kubeconfig", admin, "--namespace", ns, "--set-string", "mappings.team-a=interlink.io",
		"--set", "memcached.enabled=true,crds.create=false"}
	out, err := h.Run(ctx, append([]string{"install", "inst", chartDir(), "--create-namespace"}, common...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = h.Run(context.Background(), "uninstall", "inst", "--kubeconfig", admin, "--namespace", ns)
		_ = suite.cluster.Delete(context.Background(), []*unstructured.Unstructured{
			{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "inst-sar-bridge-memcached-hmac", "namespace": ns}}},
			namespaceObj(ns),
		})
	})
	for _, w := range []string{
		"kubectl -n team-a create rolebinding offload --clusterrole=interlink-offloader --serviceaccount=team-a:runner",
		"kubectl auth can-i create pods.interlink.io -n team-a --as=system:serviceaccount:team-a:runner",
		"team-a=interlink.io",
		"kind: OffloadTenant",
		"kubectl get offloadtenants",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("helm install's notes lack %q:\n%s", w, out)
		}
	}
	key := func() []byte {
		s, err := suite.cluster.Client.CoreV1().Secrets(ns).Get(ctx, "inst-sar-bridge-memcached-hmac", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data["hmac.key"]
	}
	before := key()
	if len(before) != 64 {
		t.Fatalf("hmac.key is %d bytes, want 64 hex digits", len(before))
	}
	if _, err := h.Run(ctx, append([]string{"upgrade", "inst", chartDir(), "--set", "replicaCount=3"}, common...)...); err != nil {
		t.Fatal(err)
	}
	if after := key(); string(after) != string(before) {
		t.Errorf("helm upgrade replaced the HMAC key")
	}
	d, err := suite.cluster.Client.AppsV1().Deployments(ns).Get(ctx, "inst-sar-bridge", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 3 {
		t.Errorf("replicas %d after the upgrade, want 3", *d.Spec.Replicas)
	}
}

// rewriteArgs maps each arg through the first rule whose flag prefix matches: the rule
// returns the args to use instead (none drops it). Args no rule matches stay.
func rewriteArgs(args []string, rules map[string]func(value string) []string) []string {
	var out []string
	for _, a := range args {
		matched := false
		for prefix, f := range rules {
			if v, ok := strings.CutPrefix(a, prefix); ok {
				out, matched = append(out, f(v)...), true
				break
			}
		}
		if !matched {
			out = append(out, a)
		}
	}
	return out
}

// With every optional part on (memcached with its HMAC key, the interLink relay on a
// non-loopback listener, mTLS callers, node-access reviews), the chart's arguments and
// files start a bridge that decides over mTLS and through the relay.
func TestChartAllOnStarts(t *testing.T) {
	ctx := context.Background()
	objs := renderChart(t, "full", "chart-full", "-f", chartValues("all-on-values.yaml"))
	d := findIn[appsv1.Deployment](t, objs, "Deployment", "full-sar-bridge")
	dir, err := os.MkdirTemp("", "sb-chart-") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	mc, err := cluster.StartMemcached(filepath.Join(suite.workDir, "memcached-chart-all-on.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mc.Stop)
	plugin, err := cluster.StartPlugin("tcp", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugin.Close() })
	ca, err := cluster.NewCA("chart-all-on")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.ServerCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	secret := findIn[corev1.Secret](t, objs, "Secret", "full-sar-bridge-memcached-hmac")
	files := map[string]string{
		"/etc/sar-bridge/mappings/mappings":  write("mappings", findIn[corev1.ConfigMap](t, objs, "ConfigMap", "full-sar-bridge-mappings").Data["mappings"]),
		"/etc/sar-bridge/data/data.yaml":     write("data.yaml", findIn[corev1.ConfigMap](t, objs, "ConfigMap", "full-sar-bridge-policy-data").Data["data.yaml"]),
		"/etc/sar-bridge/memcached/hmac.key": write("hmac.key", string(secret.Data["hmac.key"])),
		"/etc/sar-bridge/tls/tls.crt":        write("tls.crt", string(server.CertPEM)),
		"/etc/sar-bridge/tls/tls.key":        write("tls.key", string(server.KeyPEM)),
		"/etc/sar-bridge/tls/ca.crt":         write("ca.crt", string(ca.CertPEM)),
	}
	file := func(flag string) func(string) []string {
		return func(v string) []string {
			p, ok := files[v]
			if !ok {
				t.Fatalf("%s%s: the test has no file for it", flag, v)
			}
			return []string{flag + p}
		}
	}
	rules := map[string]func(string) []string{
		"--web.listen=":              func(string) []string { return nil },
		"--web.internal.listen=":     func(string) []string { return nil },
		"--web.shutdown-delay=":      func(string) []string { return []string{"--web.shutdown-delay=0s"} },
		"--memcached=":               func(string) []string { return []string{"--memcached=" + mc.Addr} },
		"--interlink.listen=":        func(v string) []string { return []string{fmt.Sprintf("--interlink.listen=:%d", port)} },
		"--interlink.plugin-url=":    func(string) []string { return []string{"--interlink.plugin-url=" + plugin.URL} },
		"--openshift.mappings-file=": file("--openshift.mappings-file="),
		"--policies.data=":           file("--policies.data="),
		"--memcached.hmac-key-file=": file("--memcached.hmac-key-file="),
		"--tls.server.cert-file=":    file("--tls.server.cert-file="),
		"--tls.server.key-file=":     file("--tls.server.key-file="),
		"--tls.client-ca-file=":      file("--tls.client-ca-file="),
	}
	args := rewriteArgs(d.Spec.Template.Spec.Containers[0].Args, rules)
	for _, want := range []string{"--authn.mode=mtls", "--review.node-access", "--interlink.insecure-allow-any-caller", "--cache.size=20000", "--web.enable-pprof"} {
		if !slices.Contains(args, want) {
			t.Fatalf("the all-on args %q lack %s", args, want)
		}
	}
	// The caller, by its certificate's name, may ask for pod decisions.
	binding, err := suite.cluster.ApplyYAML(ctx, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: chart-all-on-caller}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sar-bridge-caller}
subjects:
  - {kind: User, name: chart-mtls-caller, apiGroup: rbac.authorization.k8s.io}
`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), binding) })
	authnWaitCaller(t, "chart-mtls-caller", nil, "/v1/data/interlink/authz/decision", true)

	b, err := cluster.StartBridge(cluster.BridgeOptions{Binary: suite.binary, Kubeconfig: suite.kubeconfig, Args: args,
		LogPath: filepath.Join(suite.workDir, "bridge-chart-all-on.log")})
	stopAtCleanup(t, b)
	if err != nil {
		t.Fatalf("the all-on args %q: %v", args, err)
	}
	// pprof.enabled: the internal listener serves profiles.
	if code, _, err := b.Get(b.InternalURL + "/debug/pprof/"); err != nil || code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ with pprof.enabled: %d %v", code, err)
	}
	client, err := ca.ClientCert("chart-mtls-caller")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := client.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.NewCaller(b.HTTPSURL(), cluster.ClientTLSConfig(ca.Pool(), cert), "")
	defer c.Close()
	// --review.node-access: a second review, `use` on the target virtual node.
	authnDecide(t, c, input("create", newPod("team-a", "runner", "all-on-1"), onNode("vk-1")), allow(`RoleBinding "offload/team-a"`))
	authnDecide(t, c, input("create", newPod("team-a", "intruder", "all-on-2"), onNode("vk-1")), deny("intruder"))
	authnDecide(t, c, input("create", newPod("team-a", "pinned", "all-on-3"), onNode("vk-1")), allow())
	authnDecide(t, c, input("create", newPod("team-a", "pinned", "all-on-4"), onNode("vk-2")), deny("vk-2"))
	// tenant-b's group is tenant-b.interlink.io (the chart's mappings file).
	authnDecide(t, c, input("create", newPod("project-b", "runner", "all-on-5"), onNode("vk-b")), allow("tenant-b-offloader"))

	// The relay, reachable on a non-loopback listener as the Service needs.
	hc, base := cluster.InterlinkClient(fmt.Sprintf("127.0.0.1:%d", port))
	pod := newPod("team-a", "runner", "all-on-6", withNodeName("vk-1"))
	body, err := json.Marshal(map[string]any{"pod": pod, "container": []any{map[string]any{"name": pod.Spec.Containers[0].Name}}, "jobConfig": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := hc.Post(base+"/create", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(got) != cluster.PluginCreateAnswer {
		t.Errorf("relayed create: HTTP %d %q", res.StatusCode, got)
	}
}

// By default the chart serves no profiles: the internal port answers the kubelet's probes
// on the pod's IP (manifests/base says the same: TestChartMatchesKustomize).
func TestChartProfilingOff(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--set", "pprof.enabled=false"}, false},
		{[]string{"--set", "pprof.enabled=true"}, true},
	} {
		d := findIn[appsv1.Deployment](t, renderChart(t, "prof", "prof", tc.args...), "Deployment", "prof-sar-bridge")
		c := d.Spec.Template.Spec.Containers[0]
		if got := slices.Contains(c.Args, "--web.enable-pprof"); got != tc.want || !slices.Contains(c.Args, "--web.internal.listen=:8081") {
			t.Errorf("%q: args %q, want --web.enable-pprof %v", tc.args, c.Args, tc.want)
		}
	}
}
