package e2e

// Inert by default (docs/hpc.md, "Inert by default"): the strings interLink's plugins write
// into what runs on the HPC side, judged for the plugin that serves the target node, through
// both front doors of one real bridge: the interLink relay (POST /create as interLink sends
// it, decided as the pod's service account) and the admission webhooks (a pod created in the
// real API server, decided as the user who creates it). Each case asserts the exact status
// and reason. Also: a /create body's volume-map keys and jobScript (judged by the relay before
// any decision), a memory limit under 1Mi, GPU pods without a flavor, what a pod holds of an
// OffloadTenant quota (whole cores), and interLink's mesh pod, still allowed and masked in the
// decision log.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	inertNS     = "inert-e2e"    // tenant inert-team: ivy (a user) and runner (the pods' ServiceAccount) offload
	inertTenant = "inert-team"   // its HPC settings: flavors [gpu]; data.interlink.hpc.auto_flavors unset
	inertSlurm  = "inert-slurm"  // a virtual node without interlink.io/plugin: the SLURM plugin's
	inertCondor = "inert-condor" // a virtual node labelled interlink.io/plugin=htcondor
	inertUser   = "inert-ivy"
	inertLabel  = "sar-bridge-e2e/inert"
	inertConfig = "sar-bridge-e2e-inert"
	// OffloadTenants named like their namespaces (lgTenant), hard: {cpu: "2", memory: 2Gi}.
	inertQuotaRelay = "inert-quota-relay"
	inertQuotaAdm   = "inert-quota-adm" // labelled inertLabel=on: the webhooks judge its pods
)

var inertFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: inert-e2e
  labels:
    interlink.io/tenant: inert-team
    sar-bridge-e2e/inert: "on"
---
apiVersion: v1
kind: Node
metadata:
  name: inert-slurm
  labels:
    virtual-node.interlink/type: virtual-kubelet
spec:
  taints:
    - {key: virtual-node.interlink/no-schedule, value: "true", effect: NoSchedule}
---
apiVersion: v1
kind: Node
metadata:
  name: inert-condor
  labels:
    virtual-node.interlink/type: virtual-kubelet
    interlink.io/plugin: htcondor
spec:
  taints:
    - {key: virtual-node.interlink/no-schedule, value: "true", effect: NoSchedule}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: inert-e2e}
---
` + podEditor("inert-e2e", []rule{podRule("create", "get")}, userSubject("inert-ivy")) + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: inert-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: inert-ivy, apiGroup: rbac.authorization.k8s.io}
  - {kind: ServiceAccount, name: runner, namespace: inert-e2e}
`

// inertQuotaGrants let ivy create pods in the webhooks' quota namespace and offload them.
var inertQuotaGrants = podEditor("inert-quota-adm", []rule{podRule("create", "get")}, userSubject("inert-ivy")) + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload-ivy, namespace: inert-quota-adm}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: inert-ivy, apiGroup: rbac.authorization.k8s.io}
`

// The rules' texts (package scriptbound), as the bridge's messages name them.
const (
	inertWord         = "a plain word (letters, digits and _ . , : / = @ + -)"
	inertRelativePath = "a relative path of plain segments (letters, digits and _ . -, no . or .. segment)"
)

// inertFinding is hpc.rego's refusal of a script-bound string: package scriptbound's
// message for a field the plugin writes unquoted, and the data that would open it.
func inertFinding(field, problem, plugin, rule string) string {
	return inertBodyFinding(field, problem, plugin, rule) + " (data.interlink.hpc.tenants: open_fields)"
}

// inertBodyFinding is the relay's refusal of a /create body's string (no policy data
// opens those).
func inertBodyFinding(field, problem, plugin, rule string) string {
	return fmt.Sprintf("%s %s: %s writes it unquoted into the job script; allowed: %s", field, problem, plugin, rule)
}

// inertPodIP is the restricted annotations rule's refusal of an interlink.eu/pod-ip value to subject: it says
// why, never the value.
func inertPodIP(why, subject string) string {
	const key = "interlink.eu/pod-ip"
	return fmt.Sprintf(`annotation %q %s: the SLURM plugin writes it unquoted into the job script (export POD_IP=...); annotation %q is restricted: subject %q is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)`,
		key, why, key, subject)
}

const (
	inertMemory    = "spec.containers[0].resources.limits.memory is refused: 1Ki is under 1Mi: the SLURM plugin would write --mem=0, which sbatch reads as all of the node's memory"
	inertGPU       = `the pod's containers ask for 1 GPUs (nvidia.com/gpu, amd.com/gpu limits) and it names no flavor: the SLURM plugin would pick a GPU flavor itself (data.interlink.hpc.auto_flavors: not configured), not all of which tenant "inert-team" may use; name one of its flavors in annotation "slurm-job.vk.io/flavor": allowed gpu (data.interlink.hpc.tenants)`
	inertJobScript = "jobScript is set: the SLURM plugin writes it to jobScript.sh and runs it on the HPC host as it is (--interlink.allow-job-script lets it through)"
)

// inertData is the suite's policy data plus inert-team's HPC settings: the flavor gpu and
// nothing else; data.interlink.hpc.auto_flavors stays unset, as in the suite's data.
func inertData(t *testing.T) string {
	t.Helper()
	var data map[string]map[string]any
	if err := json.Unmarshal([]byte(policyData), &data); err != nil {
		t.Fatal(err)
	}
	data["interlink"]["hpc"] = map[string]any{"tenants": map[string]any{inertTenant: map[string]any{"flavors": []string{"gpu"}}}}
	path := filepath.Join(t.TempDir(), "inert-data.json")
	if err := os.WriteFile(path, []byte(mustMarshal(t, data)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// applyInertFixtures applies inertFixtures (removed at the end but for the namespace and
// the nodes, which the bridges' informers may still hold) and waits until RBAC lets ivy
// and runner offload.
func applyInertFixtures(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	objs, err := suite.cluster.ApplyYAML(ctx, inertFixtures)
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		zero := int64(0)
		_ = suite.cluster.Client.CoreV1().Pods(inertNS).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = suite.cluster.Delete(ctx, cluster.Filter(objs, cluster.SkipKinds("Namespace", "Node")))
	})
	offload := authorizationv1.ResourceAttributes{Namespace: inertNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	for _, u := range []struct {
		name   string
		groups []string
	}{{inertUser, nil}, {sa(inertNS, "runner"), cluster.ServiceAccountGroups(inertNS)}} {
		if err := suite.cluster.WaitForAccess(ctx, u.name, u.groups, offload, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

var inertUIDs atomic.Int64

// inertPod is a pod of ns for node, running as runner with one container "main" and no
// resources, with edit applied. A pod sent to the relay gets a UID of its own (a charge
// is keyed by it); one created in the API server gets the server's.
func inertPod(ns, name, node string, relay bool, edit func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: "runner", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
		},
	}
	if relay {
		p.UID = types.UID(fmt.Sprintf("7e1a2b3c-0000-4000-8000-%012d", inertUIDs.Add(1)))
	}
	if edit != nil {
		edit(p)
	}
	return p
}

// inertDoors are the two front doors of one bridge.
type inertDoors struct {
	bridge *cluster.Bridge
	plugin *cluster.Plugin
	relay  *http.Client
	base   string
	ivy    kubernetes.Interface // the webhooks' requester
	logs   *decisionLogReceiver
}

// relayCreate sends a /create body as interLink does and returns the answer's status and
// body, and how many requests reached the plugin meanwhile.
func (d *inertDoors) relayCreate(t *testing.T, body []byte) (int, string, int) {
	t.Helper()
	before := len(d.plugin.Requests())
	res, got := send(t, d.relay, http.MethodPost, d.base+"/create", body)
	return res.StatusCode, string(got), len(d.plugin.Requests()) - before
}

func inertBody(t *testing.T, pod *corev1.Pod) []byte {
	t.Helper()
	return []byte(mustMarshal(t, retrievedPodData{Pod: *pod, Containers: []retrievedContainer{{Name: "main"}}, JobConfig: map[string]any{}}))
}

// wantRelay checks a relay answer: deny "" is allowed and forwarded once with the plugin's
// answer, else a 403 with exactly the reason and nothing forwarded.
func wantRelay(t *testing.T, status int, got string, forwarded int, deny string) {
	t.Helper()
	if deny == "" {
		if status != http.StatusOK || got != cluster.PluginCreateAnswer || forwarded != 1 {
			t.Errorf("relay: HTTP %d %q, %d forwarded; want allowed and forwarded once", status, got, forwarded)
		}
		return
	}
	if want := "sar-bridge: denied: " + deny; status != http.StatusForbidden || got != want || forwarded != 0 {
		t.Errorf("relay: HTTP %d %q, %d forwarded; want 403 %q and nothing forwarded", status, got, forwarded, want)
	}
}

// wantAdmission checks the API server's answer to a create: deny "" is created, else
// refused by the validating webhook with exactly the reason, and not stored.
func wantAdmission(t *testing.T, pod *corev1.Pod, err error, deny string) {
	t.Helper()
	if deny == "" {
		if err != nil {
			t.Errorf("webhooks: creating %s: %v; want it created", pod.Name, err)
		}
		return
	}
	want := fmt.Sprintf("admission webhook %q denied the request: %s", podsHook, deny)
	if !apierrors.IsForbidden(err) || err == nil || err.Error() != want {
		t.Errorf("webhooks: creating %s: %v; want Forbidden %q", pod.Name, err, want)
	}
	if _, gerr := suite.cluster.Client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(gerr) {
		t.Errorf("webhooks: the refused pod %s is stored (%v)", pod.Name, gerr)
	}
}

// inertCase is a pod change and the reason both front doors must refuse it with, for a
// subject ("" = allowed).
type inertCase struct {
	name string
	node string
	edit func(*corev1.Pod)
	deny func(subject string) string
}

func inertFixed(msg string) func(string) string { return func(string) string { return msg } }

// run sends the case through the relay (as runner) and the webhooks (as ivy).
func (d *inertDoors) run(t *testing.T, i int, c inertCase) {
	t.Helper()
	denyFor := func(subject string) string {
		if c.deny == nil {
			return ""
		}
		return c.deny(subject)
	}
	t.Run(c.name, func(t *testing.T) {
		t.Run("relay", func(t *testing.T) {
			pod := inertPod(inertNS, fmt.Sprintf("r-%s-%d", c.node, i), c.node, true, c.edit)
			status, got, forwarded := d.relayCreate(t, inertBody(t, pod))
			wantRelay(t, status, got, forwarded, denyFor(sa(inertNS, "runner")))
		})
		t.Run("webhooks", func(t *testing.T) {
			pod := inertPod(inertNS, fmt.Sprintf("a-%s-%d", c.node, i), c.node, false, c.edit)
			_, err := d.ivy.CoreV1().Pods(inertNS).Create(context.Background(), pod, metav1.CreateOptions{})
			wantAdmission(t, pod, err, denyFor(inertUser))
		})
	})
}

func withPodIP(v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{"interlink.eu/pod-ip": v} }
}

// withInertVolume adds v as volume 0, mounted at /etc/inert.
func withInertVolume(v corev1.VolumeSource) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append([]corev1.Volume{{Name: "inert-vol", VolumeSource: v}}, p.Spec.Volumes...)
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "inert-vol", MountPath: "/etc/inert"})
	}
}

func downwardItem(path string) corev1.VolumeSource {
	return corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
		DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: path, FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
	}}}}
}

func withLimits(l corev1.ResourceList) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Limits = l }
}

func inertCases() []inertCase {
	slurm := func(field, problem, rule string) func(string) string {
		return inertFixed(inertFinding(field, problem, "the SLURM plugin", rule))
	}
	condor := func(field, problem string) func(string) string {
		return inertFixed(inertFinding(field, problem, "the HTCondor plugin", inertWord))
	}
	podIP := func(v string) func(string) string { return func(s string) string { return inertPodIP(v, s) } }
	env := func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "GREETING", Value: "$(touch owned)"}}
	}
	args := func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"$(touch owned)"} }
	gpu := withLimits(corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
	return []inertCase{
		// 1. interlink.eu/pod-ip: export POD_IP=<value>, unquoted.
		{name: "pod-ip with a zone holding shell", node: inertSlurm, edit: withPodIP("fe80::1%$(touch${IFS}owned)"), deny: podIP("has a zone (%…): its text would reach the job script")},
		{name: "pod-ip with a zone holding a #PBS line", node: inertSlurm, edit: withPodIP("fe80::1%x\n#PBS -A other-project"), deny: podIP("has a zone (%…): its text would reach the job script")},
		{name: "pod-ip an address", node: inertSlurm, edit: withPodIP("10.0.0.7")},
		// 2. Volume item paths: file names in the plugins' --bind specs.
		{name: "projected downwardAPI item path with shell", node: inertSlurm, edit: withInertVolume(downwardItem("x$(touch owned)")),
			deny: slurm("spec.volumes[0].projected.sources[0].downwardAPI.items[0].path", `contains '$' (byte 1)`, inertRelativePath)},
		{name: "projected serviceAccountToken path with a ;", node: inertSlurm,
			edit: withInertVolume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "tok;id"},
			}}}}),
			deny: slurm("spec.volumes[0].projected.sources[0].serviceAccountToken.path", `contains ';' (byte 3)`, inertRelativePath)},
		{name: "configMap item path with shell", node: inertSlurm,
			edit: withInertVolume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Items: []corev1.KeyToPath{{Key: "k", Path: "cm$(id)"}},
			}}),
			deny: slurm("spec.volumes[0].configMap.items[0].path", `contains '$' (byte 2)`, inertRelativePath)},
		{name: "projected downwardAPI item path plain", node: inertSlurm, edit: withInertVolume(downwardItem("sub/ok.txt"))},
		// 3. HTCondor writes env values and args unquoted; SLURM single-quotes them.
		{name: "HTCondor: shell in an env value", node: inertCondor, edit: env, deny: condor("spec.containers[0].env[0].value", `contains '$' (byte 0)`)},
		{name: "HTCondor: shell in args", node: inertCondor, edit: args, deny: condor("spec.containers[0].args[0]", `contains '$' (byte 0)`)},
		{name: "SLURM: shell in an env value", node: inertSlurm, edit: env},
		{name: "SLURM: shell in args", node: inertSlurm, edit: args},
		// 4. --mem=0 is all of the node's memory.
		{name: "memory limit 1Ki", node: inertSlurm, edit: withLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Ki")}), deny: inertFixed(inertMemory)},
		// 5. GPUs without a flavor: the SLURM plugin would pick one itself.
		{name: "GPU without a flavor", node: inertSlurm, edit: gpu, deny: inertFixed(inertGPU)},
		{name: "GPU with the tenant's flavor", node: inertSlurm, edit: func(p *corev1.Pod) {
			gpu(p)
			p.Annotations = map[string]string{"slurm-job.vk.io/flavor": "gpu"}
		}},
	}
}

// TestInertByDefault runs every case through the relay and the webhooks of one bridge,
// then the create body's keys and jobScript, the quota, and the mesh pod with the decision
// log's mask.
func TestInertByDefault(t *testing.T) {
	ctx := context.Background()
	c := suite.cluster
	applyInertFixtures(t)
	lgTenant(t, inertQuotaRelay, nil, map[string]string{"cpu": "2", "memory": "2Gi"})
	lgTenant(t, inertQuotaAdm, map[string]string{inertLabel: "on"}, map[string]string{"cpu": "2", "memory": "2Gi"})
	grants, err := c.ApplyYAML(ctx, inertQuotaGrants)
	if err != nil {
		t.Fatal(err)
	}
	applyAdmissionRBAC(t)
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), grants)
	})
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: inertQuotaAdm, Verb: "create", Resource: "pods"},
		{Namespace: inertQuotaAdm, Verb: "create", Group: "interlink.io", Resource: "pods"},
		{Namespace: inertNS, Verb: "create", Resource: "pods"},
	} {
		if err := c.WaitForAccess(ctx, inertUser, nil, attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	applyMeshFixtures(t)

	// ivy, with a client-go limiter that lets a burst of creates through at once.
	u, err := c.Env.AddUser(envtest.User{Name: inertUser}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := u.Config()
	cfg.QPS, cfg.Burst = 500, 500
	ivy, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// Decision logs to a service of the test.
	logs := &decisionLogReceiver{}
	logService := httptest.NewServer(logs)
	t.Cleanup(logService.Close)
	configFile := filepath.Join(t.TempDir(), "opa-config.json")
	if err := os.WriteFile(configFile, []byte(mustMarshal(t, map[string]any{
		"services":      map[string]any{"logs": map[string]any{"url": logService.URL}},
		"decision_logs": map[string]any{"service": "logs", "resource": "/logs", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}},
	})), 0o644); err != nil {
		t.Fatal(err)
	}

	// One bridge: interLink's relay, the webhooks on its TLS listener, decision logs.
	ca, certFile, keyFile := webhookServing(t, "e2e-inert CA")
	b, plugin, client, base := relayBridge(t, false, false,
		"--openshift.mappings="+inertTenant+"=interlink.io", "--policies.data="+inertData(t),
		"--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile, "--config-file="+configFile)
	d := &inertDoors{bridge: b, plugin: plugin, relay: client, base: base, ivy: ivy, logs: logs}
	registerScopedWebhooks(t, b.HTTPSURL(), ca.CertPEM, inertConfig, inertLabel)
	// The API server loads webhook configurations asynchronously: wait until a dry run is
	// refused by the bridge.
	probe := inertPod(inertNS, "probe", inertSlurm, false, withLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Ki")}))
	var last error
	if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
		_, last = ivy.CoreV1().Pods(inertNS).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "is under 1Mi")
	}); !ok {
		t.Fatalf("the webhooks are not in force: last dry run: %v", last)
	}

	for i, tc := range inertCases() {
		d.run(t, i, tc)
	}
	t.Run("create body", func(t *testing.T) { inertCreateBody(t, d) })
	t.Run("quota", func(t *testing.T) { inertQuota(t, d) })
	t.Run("mesh pod", func(t *testing.T) { inertMesh(t, d) })
}

// inertKeyBody is interLink's /create of a clean pod with a projected volume whose item
// path is plain, and a container whose projected volume map is keyed by key.
func inertKeyBody(t *testing.T, name, key string) []byte {
	t.Helper()
	pod := inertPod(inertNS, name, inertSlurm, true, withInertVolume(downwardItem("sub/ok.txt")))
	return []byte(mustMarshal(t, retrievedPodData{Pod: *pod, Containers: []retrievedContainer{{
		Name:                "main",
		ProjectedVolumeMaps: []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "inert-vol"}, Data: map[string]string{key: "inert-e2e"}}},
	}}, JobConfig: map[string]any{}}))
}

// inertCreateBody: the relay judges the /create body besides the pod (volume-map keys,
// jobScript) before any decision.
func inertCreateBody(t *testing.T, d *inertDoors) {
	const badKey = "x$(touch owned)"
	keyRefusal := inertBodyFinding(`container[0].projectedvolumemaps[0].data["x$(touch owned)"]`, `contains '$' (byte 1)`, "the SLURM plugin", inertRelativePath)
	decisions := metric(t, d.bridge, decisionsTot, nil)

	t.Run("a volume map key with shell, the pod clean", func(t *testing.T) {
		status, got, forwarded := d.relayCreate(t, inertKeyBody(t, "body-key", badKey))
		wantRelay(t, status, got, forwarded, keyRefusal)
	})
	t.Run("a plain volume map key", func(t *testing.T) {
		status, got, forwarded := d.relayCreate(t, inertKeyBody(t, "body-plain", "sub/ok.txt"))
		wantRelay(t, status, got, forwarded, "")
	})
	t.Run("a jobScript", func(t *testing.T) {
		pod := inertPod(inertNS, "body-job-script", inertSlurm, true, nil)
		body := mustMarshal(t, retrievedPodData{Pod: *pod, Containers: []retrievedContainer{{Name: "main"}}, JobConfig: map[string]any{}, JobScript: "#!/bin/bash\nhostname\n"})
		status, got, forwarded := d.relayCreate(t, []byte(body))
		wantRelay(t, status, got, forwarded, inertJobScript)
	})
	t.Run("both", func(t *testing.T) {
		var body map[string]any
		if err := json.Unmarshal(inertKeyBody(t, "body-both", badKey), &body); err != nil {
			t.Fatal(err)
		}
		body["jobScript"] = "hostname"
		status, got, forwarded := d.relayCreate(t, []byte(mustMarshal(t, body)))
		wantRelay(t, status, got, forwarded, keyRefusal+"; "+inertJobScript)
	})
	// Refused before the decision: only the plain body was decided.
	if got := metric(t, d.bridge, decisionsTot, nil) - decisions; got != 1 {
		t.Errorf("%v decisions for the 4 bodies, want 1 (a refused body is not decided)", got)
	}
}

// TestInertJobScriptAllowed: with --interlink.allow-job-script a jobScript is forwarded as
// it is; the body's keys are still judged.
func TestInertJobScriptAllowed(t *testing.T) {
	applyInertFixtures(t)
	_, plugin, client, base := relayBridge(t, false, false,
		"--openshift.mappings="+inertTenant+"=interlink.io", "--policies.data="+inertData(t), "--interlink.allow-job-script")
	d := &inertDoors{plugin: plugin, relay: client, base: base}
	const script = "#!/bin/bash\nhostname\n"
	pod := inertPod(inertNS, "job-script", inertSlurm, true, nil)
	status, got, forwarded := d.relayCreate(t, []byte(mustMarshal(t, retrievedPodData{Pod: *pod, Containers: []retrievedContainer{{Name: "main"}}, JobConfig: map[string]any{}, JobScript: script})))
	wantRelay(t, status, got, forwarded, "")
	if reqs := plugin.Requests(); len(reqs) == 1 {
		var sent retrievedPodData
		if err := json.Unmarshal(reqs[0].Body, &sent); err != nil {
			t.Fatal(err)
		}
		if sent.JobScript != script {
			t.Errorf("forwarded jobScript %q, want %q", sent.JobScript, script)
		}
	}
	status, got, forwarded = d.relayCreate(t, inertKeyBody(t, "job-script-key", "x$(touch owned)"))
	wantRelay(t, status, got, forwarded, inertBodyFinding(`container[0].projectedvolumemaps[0].data["x$(touch owned)"]`, `contains '$' (byte 1)`, "the SLURM plugin", inertRelativePath))
}

// inertQuota: 50 pods of limits {cpu: 1m, memory: 1Mi} under hard {cpu: "2", memory:
// 2Gi}: each holds one whole core (as the SLURM plugin allocates), so exactly 2 are allowed,
// through the relay and through the webhooks alike; a memory limit of 1Ki is refused before
// any charge.
func inertQuota(t *testing.T, d *inertDoors) {
	const creates = 50
	tiny := withLimits(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Mi")})
	underMiB := withLimits(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Ki")})
	check := func(t *testing.T, tenant string, got tally, took time.Duration) {
		t.Helper()
		full := overQuota(tenant, 3, "cpu", 2, 2, 1)
		t.Logf("%d creates answered in %v: allowed %v", creates, took.Round(time.Millisecond), got.allowed)
		if len(got.allowed) != 2 || got.refused[full] != creates-2 || len(got.refused) != 1 || len(got.other)+len(got.unanswered) != 0 {
			t.Errorf("allowed %d %v, refused %v, other %v, unanswered %v; want exactly 2 allowed and %d refused with %q",
				len(got.allowed), got.allowed, got.refused, got.other, got.unanswered, creates-2, full)
		}
		if s := ledgerOf(t, tenant, "cpu", "memory", "pods"); s.used != "cpu=2,memory=2Mi,pods=2" {
			t.Errorf("the ledger: %v, want cpu=2,memory=2Mi,pods=2 used", s)
		}
	}

	t.Run("relay", func(t *testing.T) {
		pod := inertPod(inertQuotaRelay, "under-mib", inertSlurm, true, underMiB)
		status, got, forwarded := d.relayCreate(t, inertBody(t, pod))
		wantRelay(t, status, got, forwarded, inertMemory)
		if s := ledgerOf(t, inertQuotaRelay, "cpu", "pods"); s != (ledgerState{used: "cpu=0,pods=0"}) {
			t.Errorf("after the refused 1Ki pod: %v, want nothing charged", s)
		}
		var sends []func() outcome
		for i := range creates {
			p := inertPod(inertQuotaRelay, fmt.Sprintf("tiny-%02d", i), inertSlurm, true, tiny)
			sends = append(sends, func() outcome { return relayOutcome(d.relay, d.base, "relay", p) })
		}
		began := time.Now()
		got2 := tallyOf(burst(sends, nil))
		check(t, inertQuotaRelay, got2, time.Since(began))
	})

	t.Run("webhooks", func(t *testing.T) {
		ctx := context.Background()
		pod := inertPod(inertQuotaAdm, "under-mib", inertSlurm, false, underMiB)
		_, err := d.ivy.CoreV1().Pods(inertQuotaAdm).Create(ctx, pod, metav1.CreateOptions{})
		wantAdmission(t, pod, err, inertMemory)
		if s := ledgerOf(t, inertQuotaAdm, "cpu", "pods"); s != (ledgerState{used: "cpu=0,pods=0"}) {
			t.Errorf("after the refused 1Ki pod: %v, want nothing charged", s)
		}
		prefix := fmt.Sprintf("admission webhook %q denied the request: ", podsHook)
		var sends []func() outcome
		for i := range creates {
			p := inertPod(inertQuotaAdm, fmt.Sprintf("tiny-%02d", i), inertSlurm, false, tiny)
			sends = append(sends, func() outcome {
				_, err := d.ivy.CoreV1().Pods(inertQuotaAdm).Create(ctx, p, metav1.CreateOptions{})
				switch {
				case err == nil:
					return outcome{via: "webhooks", name: p.Name, status: http.StatusCreated, allowed: true}
				case apierrors.IsForbidden(err) && strings.HasPrefix(err.Error(), prefix):
					return outcome{via: "webhooks", name: p.Name, status: http.StatusForbidden, reason: strings.TrimPrefix(err.Error(), prefix)}
				}
				return outcome{via: "webhooks", name: p.Name, status: http.StatusInternalServerError, reason: err.Error()}
			})
		}
		began := time.Now()
		got := tallyOf(burst(sends, nil))
		check(t, inertQuotaAdm, got, time.Since(began))
		list, err := suite.cluster.Client.CoreV1().Pods(inertQuotaAdm).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 2 {
			t.Errorf("%d pods stored, want the 2 allowed", len(list.Items))
		}
	})
}

// The Virtual Kubelet's mesh annotations as interLink writes them: a WireGuard private key
// in pre-exec (the mesh script's WireGuard configuration) and in the client snippet, the
// wstunnel password in the client commands. Made-up values.
const (
	inertWGKey    = "kPj3nW8vXq2LmR7tYc5uZb1oHf4sAe6dGi9rNx0wEyQ="
	inertWSPasswd = "Zq7vK2mXw9LtR4pNe5sB"
)

var inertMeshScript = "cat <<'EOFMESH' > $TMPDIR/mesh.sh\n#!/bin/bash\nset -e\nset -m\n\nWG_IFACE=\"wg-inert\"\n" +
	"cat <<'EOFWG' > $WG_IFACE.conf\n[Interface]\nPrivateKey = " + inertWGKey + "\n\n[Peer]\nPublicKey = bXlwdWJsaWNrZXlvZnRoZXNlcnZlcmluZXJ0ZTJlMDE=\nAllowedIPs = 10.7.0.0/16\nEndpoint = 127.0.0.1:51821\nEOFWG\n" +
	"./wstunnel client -L 'udp://127.0.0.1:51821:127.0.0.1:51820?timeout_sec=0' --http-upgrade-path-prefix " + inertWSPasswd + " wss://mesh.example.org:443 &\n" +
	"./wireguard-go $WG_IFACE &\n\nEOFMESH"

// inertMesh: interLink's mesh pod (mesh_test.go's shape: pre-exec and the wstunnel
// commands patched in by the Virtual Kubelet) is still allowed through the relay, and its
// decision's logged event holds neither the WireGuard key nor the wstunnel password.
func inertMesh(t *testing.T, d *inertDoors) {
	const name = "inert-mesh"
	vk := newMeshWriter(t, meshVKNS, "vk", "vk", "")
	tenant := newMeshWriter(t, meshNS, "runner", "kubectl", "kubectl-patch")
	tenant.create(t, name, nil)
	t.Cleanup(func() {
		zero := int64(0)
		_ = suite.cluster.Client.CoreV1().Pods(meshNS).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	vk.patchAnnotations(t, name, func(a map[string]string) {
		a[meshPreExec] = inertMeshScript
		a["interlink.eu/wireguard-client-snippet"] = "[Interface]\nPrivateKey = " + inertWGKey + "\n"
		a[meshWstunnel] = "./wstunnel client -R tcp://0.0.0.0:8080:localhost:8080 --http-upgrade-path-prefix " + inertWSPasswd + " wss://job.example.org"
	})
	pod := storedPod(t, name)
	began := time.Now()
	status, got, forwarded := d.relayCreate(t, []byte(mustMarshal(t, retrievedPodData{Pod: pod, Containers: []retrievedContainer{{Name: "main"}}})))
	wantRelay(t, status, got, forwarded, "")
	if t.Failed() {
		t.Logf("field managers %v", managers(pod))
	}

	t.Run("decision log", func(t *testing.T) {
		var event map[string]any
		if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool {
			event = d.logs.eventOfPod(meshNS, name)
			return event != nil
		}); !ok {
			t.Fatalf("no decision log event for %s/%s within 30s of its decision (%d events)", meshNS, name, d.logs.count())
		}
		t.Logf("the event arrived %v after the decision", time.Since(began).Round(time.Millisecond))
		js := mustMarshal(t, event)
		for what, secret := range map[string]string{"the WireGuard private key": inertWGKey, "the wstunnel password": inertWSPasswd} {
			if strings.Contains(js, secret) {
				t.Errorf("the decision log event holds %s: %s", what, js)
			}
		}
		if result, _ := event["result"].(map[string]any); result["allowed"] != true {
			t.Errorf("the event's result: %v, want allowed", event["result"])
		}
		annotations, _ := event["input"].(map[string]any)["pod"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
		for _, key := range []string{meshPreExec, meshWstunnel, "interlink.eu/wireguard-client-snippet"} {
			if annotations[key] != "**masked**" {
				t.Errorf("annotation %q in the event: %q, want **masked**", key, annotations[key])
			}
		}
		logText := d.bridge.Log()
		for what, secret := range map[string]string{"the WireGuard private key": inertWGKey, "the wstunnel password": inertWSPasswd} {
			if strings.Contains(logText, secret) {
				t.Errorf("the bridge log holds %s", what)
			}
		}
	})
}

// eventOfPod is the last event of a decision about pod ns/name, nil when none arrived.
func (l *decisionLogReceiver) eventOfPod(ns, name string) map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found map[string]any
	for _, e := range l.events {
		in, _ := e["input"].(map[string]any)
		pod, _ := in["pod"].(map[string]any)
		meta, _ := pod["metadata"].(map[string]any)
		if meta["namespace"] == ns && meta["name"] == name {
			found = e
		}
	}
	return found
}

func (l *decisionLogReceiver) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}
