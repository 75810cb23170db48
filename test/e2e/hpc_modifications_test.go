package e2e

// The run_as_user modification (issue 32: the tenant's one HPC uid, set when the pod sets
// no runAsUser) applied by both front doors of one bridge: the interLink relay writes it
// into the pod it forwards to the plugin, the mutating webhook patches it into the pod the
// API server stores. The securityContext's other fields are kept; a runAsUser of the pod's
// own is left as it is.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	modsNS     = "hpc-mods-e2e"
	modsLabel  = "sar-bridge-e2e/hpc-mods"
	modsConfig = "sar-bridge-e2e-hpc-mods"
	modsVK     = "mods-vk"
	modsUID    = int64(20001)
)

// modsFixtures: a namespace of tenant team-a where dave (a user) and the runner
// ServiceAccount may create pods and offload them, and a virtual node.
const modsFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: hpc-mods-e2e
  labels:
    interlink.io/tenant: team-a
    sar-bridge-e2e/hpc-mods: "on"
---
apiVersion: v1
kind: Node
metadata:
  name: mods-vk
  labels:
    virtual-node.interlink/type: virtual-kubelet
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: hpc-mods-e2e}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-creator, namespace: hpc-mods-e2e}
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["create", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-creators, namespace: hpc-mods-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-creator}
subjects:
  - {kind: User, name: dave, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: hpc-mods-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: dave, apiGroup: rbac.authorization.k8s.io}
  - {kind: ServiceAccount, name: runner, namespace: hpc-mods-e2e}
`

// modsData is the suite's policy data plus one uid for every tenant.
func modsData(t *testing.T) string {
	t.Helper()
	var data map[string]map[string]any
	if err := json.Unmarshal([]byte(policyData), &data); err != nil {
		t.Fatal(err)
	}
	data["interlink"]["hpc"] = map[string]any{"tenants": map[string]any{
		"*": map[string]any{"uid": modsUID, "uid_ranges": [][2]int64{{20000, 20999}}},
	}}
	path := filepath.Join(t.TempDir(), "mods-data.json")
	if err := os.WriteFile(path, []byte(mustMarshal(t, data)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// modsPod is a pod for modsVK whose containers set limits, so run_as_user is the only
// modification the policy can make.
func modsPod(name string, sc *corev1.PodSecurityContext) *corev1.Pod {
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: modsNS},
		Spec: corev1.PodSpec{
			NodeName: modsVK, ServiceAccountName: "runner", RestartPolicy: corev1.RestartPolicyNever, SecurityContext: sc,
			Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36", Resources: corev1.ResourceRequirements{Limits: limits}}},
		},
	}
}

// modsCase is a pod's securityContext and the one it must end up with.
type modsCase struct {
	name      string
	sc, want  *corev1.PodSecurityContext
	podSuffix string
}

func modsCases() []modsCase {
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	return []modsCase{
		{name: "no securityContext: created", podSuffix: "none",
			want: &corev1.PodSecurityContext{RunAsUser: modsPtr(modsUID)}},
		{name: "other securityContext fields kept", podSuffix: "other",
			sc:   &corev1.PodSecurityContext{RunAsNonRoot: modsPtr(true), SeccompProfile: seccomp},
			want: &corev1.PodSecurityContext{RunAsNonRoot: modsPtr(true), SeccompProfile: seccomp, RunAsUser: modsPtr(modsUID)}},
		{name: "the pod's own runAsUser left alone", podSuffix: "own",
			sc:   &corev1.PodSecurityContext{RunAsUser: modsPtr[int64](20500)},
			want: &corev1.PodSecurityContext{RunAsUser: modsPtr[int64](20500)}},
	}
}

func modsPtr[T any](v T) *T { return &v }

func TestHPCRunAsUserModification(t *testing.T) {
	ctx := context.Background()
	c := suite.cluster
	fixtures, err := c.ApplyYAML(ctx, modsFixtures)
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	applyAdmissionRBAC(t)
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), cluster.Filter(fixtures, cluster.SkipKinds("Namespace")))
	})
	offload := authorizationv1.ResourceAttributes{Namespace: modsNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	for _, u := range []struct {
		name   string
		groups []string
	}{{"dave", nil}, {cluster.ServiceAccountUser(modsNS, "runner"), cluster.ServiceAccountGroups(modsNS)}} {
		if err := c.WaitForAccess(ctx, u.name, u.groups, offload, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// One bridge serves both front doors: the relay and, on its TLS listener, the webhooks.
	ca, certFile, keyFile := webhookServing(t, "e2e-hpc-mods CA")
	b, plugin, client, base := relayBridge(t, false, false,
		"--policies.data="+modsData(t), "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile)

	t.Run("relay", func(t *testing.T) {
		for _, mc := range modsCases() {
			t.Run(mc.name, func(t *testing.T) {
				sent := modsPod("relay-"+mc.podSuffix, mc.sc)
				containers := `[{"name":"main","secrets":[{"data":{"k":"PD4m"}}]}]`
				body := fmt.Sprintf(`{"pod":%s,"container":%s,"jobConfig":{}}`, mustMarshal(t, sent), containers)
				before := len(plugin.Requests())
				res, got := send(t, client, http.MethodPost, base+"/create", []byte(body))
				forwarded := plugin.Requests()[before:]
				if res.StatusCode != http.StatusOK || len(forwarded) != 1 {
					t.Fatalf("HTTP %d %q, %d forwarded; want allowed and forwarded", res.StatusCode, got, len(forwarded))
				}
				var out struct {
					Pod       corev1.Pod      `json:"pod"`
					Container json.RawMessage `json:"container"`
				}
				if err := json.Unmarshal(forwarded[0].Body, &out); err != nil {
					t.Fatal(err)
				}
				want := sent.DeepCopy()
				want.Spec.SecurityContext = mc.want
				if !apiequality.Semantic.DeepEqual(&out.Pod, want) {
					t.Errorf("forwarded pod\n  %s\nwant\n  %s", mustMarshal(t, out.Pod), mustMarshal(t, want))
				}
				if string(out.Container) != containers {
					t.Errorf("container changed: %s", out.Container)
				}
			})
		}
	})

	t.Run("mutating webhook", func(t *testing.T) {
		registerScopedWebhooks(t, b.HTTPSURL(), ca.CertPEM, modsConfig, modsLabel)

		dave := certUser(t, "dave")
		// The API server loads webhook configurations asynchronously: wait until a dry run
		// comes back patched.
		var last *corev1.Pod
		if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
			last, err = dave.client.CoreV1().Pods(modsNS).Create(ctx, modsPod("probe", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil && last.Spec.SecurityContext != nil && last.Spec.SecurityContext.RunAsUser != nil
		}); !ok {
			t.Fatalf("the mutating webhook is not in force: last dry run: %v, %+v", err, last)
		}
		for _, mc := range modsCases() {
			t.Run(mc.name, func(t *testing.T) {
				name := "adm-" + mc.podSuffix
				stdout, stderr, code := dave.kubectlCreate(t, modsPod(name, mc.sc))
				wantCreated(t, mc.name, stdout, stderr, code, name)
				pod, err := c.Client.CoreV1().Pods(modsNS).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !apiequality.Semantic.DeepEqual(pod.Spec.SecurityContext, mc.want) {
					t.Errorf("securityContext %s, want %s", mustMarshal(t, pod.Spec.SecurityContext), mustMarshal(t, mc.want))
				}
			})
		}
	})
}
