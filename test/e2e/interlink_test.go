package e2e

// The interLink plugin relay (--interlink.listen): requests shaped exactly as interLink
// 0.6.x sends them to its plugin go through the real bridge binary to a stand-in plugin,
// over TCP and over unix sockets on both sides.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// interLink 0.6.x's plugin wire types (pkg/interlink/types.go), re-declared: the suite
// does not depend on interLink.
type retrievedContainer struct {
	Name                string             `json:"name"`
	ConfigMaps          []corev1.ConfigMap `json:"configMaps"`
	ProjectedVolumeMaps []corev1.ConfigMap `json:"projectedvolumemaps"`
	Secrets             []corev1.Secret    `json:"secrets"`
	EmptyDirs           []string           `json:"emptyDirs"`
}

type retrievedPodData struct {
	Pod        corev1.Pod           `json:"pod"`
	Containers []retrievedContainer `json:"container"`
	JobConfig  map[string]any       `json:"jobConfig"`
	JobScript  string               `json:"jobScript,omitempty"`
}

type logRequest struct {
	Namespace, PodUID, PodName, ContainerName string
	Opts                                      map[string]any
}

// The namespace of these tests: tenant team-a (group interlink.io) with a billing
// project, so an allowed create gets the billing annotation and default limits.
const interlinkNS = "interlink-e2e"

const interlinkFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: interlink-e2e
  labels:
    interlink.io/tenant: team-a
    interlink.io/billing-project: proj-7
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: interlink-e2e
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: interlink-e2e}
  - {kind: ServiceAccount, name: late, namespace: interlink-e2e}
`

// secretValue is the Secret's content: it must appear in no log line.
const secretValue = "hunter2-interlink-e2e-secret"

func applyInterlinkFixtures(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, interlinkFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	for _, sa := range []string{"runner", "late"} {
		attrs := authorizationv1.ResourceAttributes{Namespace: interlinkNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
		if err := suite.cluster.WaitForAccess(ctx, sa0(sa), cluster.ServiceAccountGroups(interlinkNS), attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func sa0(name string) string { return cluster.ServiceAccountUser(interlinkNS, name) }

// vkPod is a pod as the Virtual Kubelet hands it to interLink: scheduled on the virtual
// node, with a uid, status, owner, managed fields, and volumes from a ConfigMap and a
// Secret. "main" sets no limits; "sidecar" does.
func vkPod(sa, name string) corev1.Pod {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	limits := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	return corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: interlinkNS, UID: "0b5e3c9a-2222-4a2b-9c3d-000000000002", ResourceVersion: "4711",
			CreationTimestamp: created, Labels: map[string]string{"app": "job"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/default-container": "main"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "job", UID: "0b5e3c9a-3333-4a2b-9c3d-000000000003"}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1", Time: &created, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:containers":{}}}`)}}},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa, NodeName: "vk-1", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: "main", Image: "busybox:1.36", Command: []string{"sh", "-c", "cat /etc/app/config /etc/app/secret"},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app/config"}, {Name: "secret", MountPath: "/etc/app/secret"}}},
				{Name: "sidecar", Image: "busybox:1.36", Resources: corev1.ResourceRequirements{Requests: limits, Limits: limits}},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-secret"}}},
			},
			Tolerations: []corev1.Toleration{{Key: "virtual-node.interlink/no-schedule", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: created}}},
	}
}

// createBody is a /create body as interLink 0.6.x sends it, with a ConfigMap and a Secret.
func createBody(t *testing.T, sa, name string) []byte {
	t.Helper()
	body, err := json.Marshal(retrievedPodData{
		Pod: vkPod(sa, name),
		Containers: []retrievedContainer{{
			Name:       "main",
			ConfigMaps: []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: interlinkNS}, Data: map[string]string{"config": "mode=fast <&>"}}},
			Secrets:    []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "app-secret", Namespace: interlinkNS}, Data: map[string][]byte{"secret": []byte(secretValue)}}},
			EmptyDirs:  []string{},
		}, {Name: "sidecar"}},
		JobConfig: map[string]any{"SingularityHubProxy": map[string]any{"Server": "", "MasterToken": "", "CacheValidity": 0},
			"ApptainerOptions": map[string]any{"Executable": "apptainer"}, "Volumes": map[string]any{"ScratchArea": "/tmp"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// relayBridge starts a stand-in plugin and a bridge relaying to it. listenUnix and
// pluginUnix choose unix sockets over loopback TCP on each side.
func relayBridge(t *testing.T, listenUnix, pluginUnix bool, extra ...string) (*cluster.Bridge, *cluster.Plugin, *http.Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sb-il-") // short: a socket path has a ~100 byte limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var plugin *cluster.Plugin
	if pluginUnix {
		plugin, err = cluster.StartPlugin("unix", filepath.Join(dir, "plugin.sock"))
	} else {
		plugin, err = cluster.StartPlugin("tcp", "")
	}
	if err != nil {
		t.Fatalf("starting the stand-in plugin: %v", err)
	}
	t.Cleanup(func() { _ = plugin.Close() })
	listen := "unix://" + filepath.Join(dir, "bridge.sock")
	if !listenUnix {
		port, err := cluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		listen = fmt.Sprintf("127.0.0.1:%d", port)
	}
	args := append([]string{"--interlink.listen=" + listen, "--interlink.plugin-url=" + plugin.URL}, extra...)
	b := newBridge(t, args...)
	client, base := cluster.InterlinkClient(listen)
	return b, plugin, client, base
}

// send makes a request as interLink does: JSON body (GET included) and a session header.
func send(t *testing.T, client *http.Client, method, url string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Interlink-Http-Session", "e2e-session-1")
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, data
}

func TestInterlinkRelay(t *testing.T) {
	applyInterlinkFixtures(t)
	for _, tc := range []struct {
		name                   string
		listenUnix, pluginUnix bool
	}{
		{"tcp", false, false},
		{"unix", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, plugin, client, base := relayBridge(t, tc.listenUnix, tc.pluginUnix)
			allowedCreate(t, plugin, client, base)
			deniedCreate(t, plugin, client, base)
			relayedRoutes(t, plugin, client, base)
			refusedRequests(t, plugin, client, base)
			streamedLogs(t, plugin, client, base)
			checkRelayMetrics(t, b)
			checkRelayLog(t, b)
		})
	}
}

// An allowed create reaches the plugin with the billing annotation and default limits
// applied, everything else as sent; the plugin's answer comes back byte for byte.
func allowedCreate(t *testing.T, plugin *cluster.Plugin, client *http.Client, base string) {
	t.Helper()
	sent := createBody(t, "runner", "job-allowed")
	res, body := send(t, client, http.MethodPost, base+"/create", sent)
	if res.StatusCode != http.StatusOK || string(body) != cluster.PluginCreateAnswer || res.Header.Get("X-Plugin") != "stand-in" {
		t.Fatalf("allowed create: HTTP %d %q (headers %v), want the plugin's answer", res.StatusCode, body, res.Header)
	}
	got := plugin.Requests()
	if len(got) != 1 {
		t.Fatalf("the plugin received %d requests, want 1", len(got))
	}
	r := got[0]
	if r.Method != http.MethodPost || r.Path != "/create" || r.Header.Get("Interlink-Http-Session") != "e2e-session-1" {
		t.Errorf("forwarded as %s %s session %q", r.Method, r.Path, r.Header.Get("Interlink-Http-Session"))
	}
	var in, out map[string]json.RawMessage
	if err := json.Unmarshal(sent, &in); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		t.Fatalf("forwarded body: %v", err)
	}
	for _, k := range []string{"container", "jobConfig"} {
		if !bytes.Equal(in[k], out[k]) {
			t.Errorf("%s changed on the way:\nsent      %s\nforwarded %s", k, in[k], out[k])
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out["pod"], &pod); err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{"kubectl.kubernetes.io/default-container": "main", "interlink.io/billing-project": "proj-7"}
	if fmt.Sprint(pod.Annotations) != fmt.Sprint(wantAnn) {
		t.Errorf("annotations %v, want %v", pod.Annotations, wantAnn)
	}
	if l := pod.Spec.Containers[0].Resources.Limits; l.Cpu().String() != "1" || l.Memory().String() != "1Gi" {
		t.Errorf("main's limits %v, want the default cpu 1, memory 1Gi", l)
	}
	if l := pod.Spec.Containers[1].Resources.Limits; l.Cpu().String() != "250m" || l.Memory().String() != "256Mi" {
		t.Errorf("sidecar's own limits changed: %v", l)
	}
	// Apart from those two changes the pod is the one sent.
	orig := vkPod("runner", "job-allowed")
	pod.Annotations, orig.Annotations = nil, nil
	pod.Spec.Containers[0].Resources, orig.Spec.Containers[0].Resources = corev1.ResourceRequirements{}, corev1.ResourceRequirements{}
	if a, b := mustMarshal(t, pod), mustMarshal(t, orig); a != b {
		t.Errorf("the pod changed beyond the modifications:\nsent      %s\nforwarded %s", b, a)
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A denied create is a 403 with one readable line; the plugin sees nothing.
func deniedCreate(t *testing.T, plugin *cluster.Plugin, client *http.Client, base string) {
	t.Helper()
	before := len(plugin.Requests())
	res, body := send(t, client, http.MethodPost, base+"/create", createBody(t, "intruder", "job-denied"))
	want := `sar-bridge: denied: system:serviceaccount:interlink-e2e:intruder may not create pods.interlink.io in namespace "interlink-e2e"`
	if res.StatusCode != http.StatusForbidden || string(body) != want || res.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("denied create: HTTP %d %q (%s), want 403 %q", res.StatusCode, body, res.Header.Get("Content-Type"), want)
	}
	if n := len(plugin.Requests()) - before; n != 0 {
		t.Errorf("the plugin received %d requests for a denied create", n)
	}
}

// /delete and /status (a GET with a body; the node ping's [] too) are relayed unchanged.
func relayedRoutes(t *testing.T, plugin *cluster.Plugin, client *http.Client, base string) {
	t.Helper()
	pod := vkPod("runner", "job-allowed")
	for _, c := range []struct {
		method, path string
		body         []byte
		status       int
		answer       string
	}{
		{http.MethodPost, "/delete", []byte(mustMarshal(t, pod)), http.StatusOK, ""},
		{http.MethodGet, "/status", []byte(mustMarshal(t, []corev1.Pod{pod})), http.StatusOK, cluster.PluginStatusAnswer},
		{http.MethodGet, "/status", []byte(`[]`), http.StatusOK, cluster.PluginStatusAnswer},
	} {
		before := len(plugin.Requests())
		res, body := send(t, client, c.method, base+c.path, c.body)
		if res.StatusCode != c.status || string(body) != c.answer {
			t.Errorf("%s %s: HTTP %d %q, want %d %q", c.method, c.path, res.StatusCode, body, c.status, c.answer)
		}
		got := plugin.Requests()
		if len(got) != before+1 {
			t.Errorf("%s %s: the plugin received %d requests", c.method, c.path, len(got)-before)
			continue
		}
		r := got[before]
		if r.Method != c.method || r.Path != c.path || !bytes.Equal(r.Body, c.body) || r.Header.Get("Interlink-Http-Session") != "e2e-session-1" {
			t.Errorf("%s %s reached the plugin as %s %s %q", c.method, c.path, r.Method, r.Path, r.Body)
		}
	}
}

// A spelling of /create that is not interLink's, and a protocol upgrade, are refused
// by the bridge: neither decided nor forwarded.
func refusedRequests(t *testing.T, plugin *cluster.Plugin, client *http.Client, base string) {
	t.Helper()
	before := len(plugin.Requests())
	res, body := send(t, client, http.MethodPost, base+"/create/", createBody(t, "runner", "job-variant"))
	const notFound = `sar-bridge: not found: "/create/" is not a route of interLink's plugin API`
	if res.StatusCode != http.StatusNotFound || !strings.HasPrefix(string(body), notFound) {
		t.Errorf("POST /create/: HTTP %d %q, want 404 starting %q", res.StatusCode, body, notFound)
	}
	req, err := http.NewRequest(http.MethodGet, base+"/status", strings.NewReader("[]"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "h2c")
	res, err = client.Do(req)
	if err != nil {
		t.Fatalf("GET /status with an upgrade: %v", err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	const upgrade = "sar-bridge: bad request: protocol upgrades are not relayed"
	if res.StatusCode != http.StatusBadRequest || !strings.HasPrefix(string(data), upgrade) {
		t.Errorf("GET /status with an upgrade: HTTP %d %q, want 400 starting %q", res.StatusCode, data, upgrade)
	}
	if n := len(plugin.Requests()) - before; n != 0 {
		t.Errorf("the plugin received %d refused requests", n)
	}
}

// /getLogs streams: the first line arrives while the plugin is still writing.
func streamedLogs(t *testing.T, plugin *cluster.Plugin, client *http.Client, base string) {
	t.Helper()
	body, _ := json.Marshal(logRequest{Namespace: interlinkNS, PodUID: "0b5e3c9a-2222-4a2b-9c3d-000000000002", PodName: "job-allowed",
		ContainerName: "main", Opts: map[string]any{"Tail": 0, "Bytes": 0, "Timestamps": true, "Follow": true}})
	req, err := http.NewRequest(http.MethodGet, base+"/getLogs", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Interlink-Http-Session", "e2e-session-1")
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /getLogs: %v", err)
	}
	defer res.Body.Close()
	lines := make(chan string, 1)
	r := bufio.NewReader(res.Body)
	go func() {
		l, _ := r.ReadString('\n')
		lines <- l
	}()
	select {
	case l := <-lines:
		if l != cluster.LogFirstLine {
			t.Fatalf("first log line %q, want %q", l, cluster.LogFirstLine)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first log line did not arrive while the plugin was still writing")
	}
	plugin.ReleaseLogs()
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != cluster.LogRest {
		t.Fatalf("rest of the log %q, %v", rest, err)
	}
}

func checkRelayMetrics(t *testing.T, b *cluster.Bridge) {
	t.Helper()
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sar_bridge_interlink_creates_total", map[string]string{"outcome": "allowed"}, 1},
		{"sar_bridge_interlink_creates_total", map[string]string{"outcome": "denied"}, 1},
		{"sar_bridge_interlink_requests_total", map[string]string{"route": "create", "code": "200"}, 1},
		{"sar_bridge_interlink_requests_total", map[string]string{"route": "create", "code": "403"}, 1},
		{"sar_bridge_interlink_requests_total", map[string]string{"route": "status", "code": "200"}, 2},
		{"sar_bridge_interlink_requests_total", map[string]string{"route": "delete", "code": "200"}, 1},
		{"sar_bridge_interlink_requests_total", map[string]string{"route": "getLogs", "code": "200"}, 1},
		{"sar_bridge_interlink_requests_total", map[string]string{"route": "refused", "code": "404"}, 1},
		{"sar_bridge_interlink_requests_total", map[string]string{"route": "refused", "code": "400"}, 1},
	} {
		// A request is counted when its handler returns, which may be just after the
		// client has read the answer.
		var got float64
		poll(2*time.Second, 20*time.Millisecond, func() bool {
			got = metric(t, b, c.name, c.labels)
			return got == c.want
		})
		if got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// The Secret's value is in no log line, in clear or base64; each create decision is one
// decision line carrying route=create.
func checkRelayLog(t *testing.T, b *cluster.Bridge) {
	t.Helper()
	logText := b.Log()
	for _, s := range []string{secretValue, base64.StdEncoding.EncodeToString([]byte(secretValue))} {
		if strings.Contains(logText, s) {
			t.Errorf("the bridge log holds the Secret (%q)", s)
		}
	}
	var decisions []string
	for _, l := range strings.Split(logText, "\n") {
		if strings.Contains(l, "msg=decision") && strings.Contains(l, "route=create") {
			decisions = append(decisions, l)
		}
	}
	if len(decisions) != 2 {
		t.Errorf("want 2 decision lines with route=create, got %d:\n%s", len(decisions), strings.Join(decisions, "\n"))
	}
	for _, l := range decisions {
		t.Logf("decision line: %s", l)
	}
}

// With kube-apiserver stopped, an uncached create is 503 and never forwarded, while
// /status, /getLogs and /delete of admitted pods are still relayed.
func TestInterlinkAPIServerDown(t *testing.T) {
	applyInterlinkFixtures(t)
	b, plugin, client, base := relayBridge(t, true, false, "--review.timeout=2s")
	c := suite.cluster
	if err := c.StopAPIServer(2 * time.Second); err != nil {
		t.Fatalf("stopping kube-apiserver: %v", err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := c.StartAPIServer(); err != nil {
				t.Errorf("restarting kube-apiserver: %v", err)
			}
		}
	})

	// "late" has never been decided, so no cached review can answer.
	start := time.Now()
	res, body := send(t, client, http.MethodPost, base+"/create", createBody(t, "late", "job-outage"))
	const prefix = "sar-bridge: unavailable: subject access review failed: "
	if res.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(string(body), prefix) || strings.Contains(string(body), "\n") {
		t.Errorf("create during the outage: HTTP %d %q, want 503 starting %q", res.StatusCode, body, prefix)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("503 after %s", took)
	}
	if n := len(plugin.Requests()); n != 0 {
		t.Fatalf("the plugin received %d requests for a create the bridge could not decide", n)
	}

	pod := vkPod("late", "job-outage")
	res, body = send(t, client, http.MethodGet, base+"/status", []byte(mustMarshal(t, []corev1.Pod{pod})))
	if res.StatusCode != http.StatusOK || string(body) != cluster.PluginStatusAnswer {
		t.Errorf("/status during the outage: HTTP %d %q", res.StatusCode, body)
	}
	plugin.ReleaseLogs() // this plugin answers /getLogs at once
	res, body = send(t, client, http.MethodGet, base+"/getLogs", []byte(`{"Namespace":"interlink-e2e","PodUID":"u","PodName":"job-outage","ContainerName":"main","Opts":{}}`))
	if res.StatusCode != http.StatusOK || string(body) != cluster.LogFirstLine+cluster.LogRest {
		t.Errorf("/getLogs during the outage: HTTP %d %q", res.StatusCode, body)
	}
	res, body = send(t, client, http.MethodPost, base+"/delete", []byte(mustMarshal(t, pod)))
	if res.StatusCode != http.StatusOK || len(body) != 0 {
		t.Errorf("/delete during the outage: HTTP %d %q", res.StatusCode, body)
	}
	var paths []string
	for _, r := range plugin.Requests() {
		paths = append(paths, r.Method+" "+r.Path)
	}
	if got := strings.Join(paths, ", "); got != "GET /status, GET /getLogs, POST /delete" {
		t.Errorf("the plugin received %s", got)
	}
	if got := metric(t, b, "sar_bridge_interlink_creates_total", map[string]string{"outcome": "unavailable"}); got != 1 {
		t.Errorf("creates_total{outcome=unavailable} = %v", got)
	}

	if err := c.StartAPIServer(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	restarted = true
	if err := b.WaitReady(45 * time.Second); err != nil {
		t.Errorf("bridge not ready after the API server came back: %v", err)
	}
}

// The Go client package's own tests, run against the suite's real bridge: allow, deny,
// a refused input, and an unreachable bridge as a typed error.
func TestInterlinkGoClient(t *testing.T) {
	b := shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-run", "^TestAgainstBridge$", "./client/")
	cmd.Dir = suite.root
	cmd.Env = append(os.Environ(), "GOWORK=off", "SAR_BRIDGE_CLIENT_E2E_URL="+b.URL)
	out, err := cmd.CombinedOutput()
	t.Logf("go test ./client/ -run TestAgainstBridge:\n%s", out)
	if err != nil {
		t.Fatalf("the client's tests against the bridge failed: %v", err)
	}
	for _, sub := range []string{"allow", "deny", "bad_input", "unreachable"} {
		if !strings.Contains(string(out), "--- PASS: TestAgainstBridge/"+sub+" ") {
			t.Errorf("subtest %s did not pass", sub)
		}
	}
}
