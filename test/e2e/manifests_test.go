package e2e

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

func renderBase(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := cluster.Render(filepath.Join(suite.root, "manifests", "base"))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	return findIn[T](t, objs, kind, name)
}

// Everything in manifests/base, including the Deployment and Service the suite does not
// run, passes the API server's validation (server-side dry run).
func TestManifestsBaseValidates(t *testing.T) {
	objs := renderBase(t)
	if err := suite.cluster.DryRunApply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	examples, err := cluster.Render(filepath.Join(suite.root, "manifests", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	if err := suite.cluster.DryRunApply(context.Background(), examples); err != nil {
		t.Fatal(err)
	}
}

// The Deployment is hardened and wired to the ServiceAccount, ConfigMap and probes.
func TestManifestsBaseDeployment(t *testing.T) {
	objs := renderBase(t)
	d := find[appsv1.Deployment](t, objs, "Deployment", "sar-bridge")
	if d.Namespace != "sar-bridge" {
		t.Errorf("Deployment namespace %q", d.Namespace)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != "sar-bridge" {
		t.Errorf("serviceAccountName %q", pod.ServiceAccountName)
	}
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("the pod needs its ServiceAccount token for in-cluster config")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("container has no securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot not set")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem not set")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Error("capabilities do not drop ALL")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("seccomp profile not RuntimeDefault")
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/live", "readiness": "/ready"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want {
			t.Errorf("%s probe is not GET %s", name, want)
			continue
		}
		port := p.HTTPGet.Port.IntValue()
		if port == 0 {
			for _, cp := range c.Ports {
				if cp.Name == p.HTTPGet.Port.String() {
					port = int(cp.ContainerPort)
				}
			}
		}
		if port != 8081 {
			t.Errorf("%s probe port %s is not 8081", name, p.HTTPGet.Port.String())
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("container has no cpu/memory requests")
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--web.listen=:8080", "--web.internal.listen=:8081", "--policies.data=/etc/sar-bridge/data/data.yaml", "--openshift.mappings="} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if strings.Contains(args, "--kubeconfig=/") || strings.Contains(args, "--trust-input-user") {
		t.Errorf("args %q: want in-cluster config and untrusted input.user", args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == "sar-bridge-policy-data" && m.MountPath == "/etc/sar-bridge/data" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Error("ConfigMap sar-bridge-policy-data is not mounted at /etc/sar-bridge/data")
	}
	svc := find[corev1.Service](t, objs, "Service", "sar-bridge")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service ports %+v, want 8080", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the pod template", k, v)
		}
	}
}

// The ClusterRole grants exactly what the bridge needs.
func TestManifestsBaseClusterRole(t *testing.T) {
	cr := find[rbacv1.ClusterRole](t, renderBase(t), "ClusterRole", "sar-bridge")
	got := map[string]bool{}
	for _, r := range cr.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule %+v", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got[g+"/"+res+"/"+v] = true
				}
			}
		}
	}
	want := []string{
		"authorization.k8s.io/subjectaccessreviews/create",
		"authentication.k8s.io/tokenreviews/create",
		"/namespaces/get", "/namespaces/list", "/namespaces/watch",
		"/nodes/get", "/nodes/list", "/nodes/watch",
		"/pods/list", "/pods/watch", // tenant offload quotas: usage on virtual nodes
		"/pods/get",   // who wrote the Virtual Kubelet's annotations (managedFields)
		"/pods/patch", // the quota reconciler labels the pods it confirmed charged
		// Tenants as cluster objects, and the quota ledger in their status.
		"sar-bridge.io/offloadtenants/get", "sar-bridge.io/offloadtenants/list", "sar-bridge.io/offloadtenants/watch",
		"sar-bridge.io/offloadtenants/status/get", "sar-bridge.io/offloadtenants/status/update", "sar-bridge.io/offloadtenants/status/patch",
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("ClusterRole lacks %s", w)
		}
		delete(got, w)
	}
	for extra := range got {
		t.Errorf("ClusterRole grants more than needed: %s", extra)
	}
}

// The quota reconciler's leader election may use Leases in the bridge's namespace, and
// nothing else: a Role bound to the bridge's ServiceAccount there.
func TestManifestsBaseLeaseRole(t *testing.T) {
	objs := renderBase(t)
	role := find[rbacv1.Role](t, objs, "Role", "sar-bridge")
	want := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}
	if role.Namespace != "sar-bridge" || !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("Role %s/%s rules %+v, want %+v in sar-bridge", role.Namespace, role.Name, role.Rules, want)
	}
	rb := find[rbacv1.RoleBinding](t, objs, "RoleBinding", "sar-bridge")
	wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "sar-bridge"}
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "sar-bridge", Namespace: "sar-bridge"}}
	if rb.Namespace != "sar-bridge" || rb.RoleRef != wantRef || !reflect.DeepEqual(rb.Subjects, wantSubjects) {
		t.Errorf("RoleBinding %s/%s %+v %+v", rb.Namespace, rb.Name, rb.RoleRef, rb.Subjects)
	}
}

// The Deployment's arguments are accepted by the binary as they are (listen addresses
// aside), with the ConfigMap's policy data (YAML through --policies.data), and the
// ConfigMap's team-a caps and protected taint apply.
func TestManifestsArgsAndPolicyData(t *testing.T) {
	objs := renderBase(t)
	cm := find[corev1.ConfigMap](t, objs, "ConfigMap", "sar-bridge-policy-data")
	data, ok := cm.Data["data.yaml"]
	if !ok {
		t.Fatal("ConfigMap sar-bridge-policy-data has no data.yaml")
	}
	path := filepath.Join(t.TempDir(), "data.yaml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	d := find[appsv1.Deployment](t, objs, "Deployment", "sar-bridge")
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--web.listen"), strings.HasPrefix(a, "--web.internal.listen"):
			// StartBridge picks free loopback ports.
		case strings.HasPrefix(a, "--authn.mode"):
			// Caller authentication has its own end-to-end tests.
		case strings.HasPrefix(a, "--policies.data="):
			args = append(args, "--policies.data="+path)
		default:
			args = append(args, a)
		}
	}
	// The shutdown delay only slows the test's teardown down.
	args = append(args, "--web.shutdown-delay=0s")
	b, err := startBridge("deployment-args", args...)
	stopAtCleanup(t, b)
	if err != nil {
		t.Fatalf("the Deployment's args %q: %v", args, err)
	}
	decide(t, b, input("create", newPod("team-a", "runner", "cm-1", withContainer("hog", "3", "1Gi"))), deny("hog"))
	decide(t, b, input("create", newPod("team-a", "runner", "cm-2")), allow(`RoleBinding "offload/team-a"`))
	decide(t, b, input("create", newPod("team-a", "runner", "cm-3", withToleration(corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpExists}))), deny("hpc.example/gpu"))
}

// The Deployment runs the image `make image` builds: the repository it writes and the
// release tag of the VERSION file, never a moving tag such as latest.
func TestManifestsBaseImage(t *testing.T) {
	release, err := os.ReadFile(filepath.Join(suite.root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/sar-bridge/sar-bridge:" + strings.TrimSpace(string(release))
	d := find[appsv1.Deployment](t, renderBase(t), "Deployment", "sar-bridge")
	if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("Deployment image %q, want %q (make image's repository and the VERSION file's tag)", got, want)
	}
}
