package e2e

// Enforcement actions (issue 42): a rule in warn lets `kubectl apply` through with the
// warning printed by the real kubectl; in audit the Data API allows silently while the
// metric and the decision log count it; a bundle that switches the rule to deny refuses
// the next pod with the rule's message.

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	enfNS    = "enf-team"
	enfVK    = "enf-vk-1"
	enfLabel = "sar-bridge-e2e/enforcement"
	// enfGroup is the suite data's capped group (cpu 2): carol is in it.
	enfGroup = "system:serviceaccounts:team-a"
)

// enfFixtures: a namespace of tenant team-a watched by this test's webhooks, a virtual
// node, and carol's rights to make pods and to offload them.
var enfFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: enf-team
  labels:
    interlink.io/tenant: team-a
    sar-bridge-e2e/enforcement: "on"
---
apiVersion: v1
kind: Node
metadata:
  name: enf-vk-1
  labels:
    virtual-node.interlink/type: virtual-kubelet
spec:
  taints:
    - {key: virtual-node.interlink/no-schedule, value: "true", effect: NoSchedule}
---
` + podEditor(enfNS, []rule{podRule("create", "get", "list", "update", "patch")}, userSubject("carol")) + `---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: enf-team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: carol, apiGroup: rbac.authorization.k8s.io}
`

// bundleServer serves one bundle tarball at /bundle.tar.gz, replaced with set.
type bundleServer struct {
	mu      sync.Mutex
	tarball []byte
}

func (s *bundleServer) set(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tarball = b
}

func (s *bundleServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path != "/bundle.tar.gz" || s.tarball == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(s.tarball)
}

// enforcementBundle builds a bundle (the real opa build) whose only data is
// data.interlink.enforcement.
func enforcementBundle(t *testing.T, dir, rev, enforcement string) []byte {
	t.Helper()
	src := filepath.Join(dir, "enforcement-src-"+rev)
	files := map[string]string{
		"interlink/enforcement/data.json": enforcement,
		".manifest":                       `{"roots": ["interlink/enforcement"]}`,
	}
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return buildBundle(t, dir, src, rev, cluster.BuildOptions{})
}

func TestEnforcementActions(t *testing.T) {
	ctx := context.Background()
	c := suite.cluster
	dir := testWorkDir(t)
	fixtures, err := c.ApplyYAML(ctx, enfFixtures)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), fixtures) })
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: enfNS, Verb: "create", Resource: "pods"},
		{Namespace: enfNS, Verb: "create", Group: "interlink.io", Resource: "pods"},
	} {
		if err := c.WaitForAccess(ctx, "carol", []string{enfGroup}, attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	carol := certUser(t, "carol", enfGroup)

	// r1: caps warns at the webhooks and audits elsewhere.
	opaBundleTools(t)
	bundles := &bundleServer{}
	bundles.set(enforcementBundle(t, dir, "r1", `{"caps": {"default": "audit", "admission": "warn"}}`))
	bundleService := httptest.NewServer(bundles)
	defer bundleService.Close()
	logs := &decisionLogReceiver{}
	logService := httptest.NewServer(logs)
	defer logService.Close()
	cfg, _ := json.Marshal(map[string]any{
		"services": map[string]any{"bundles": map[string]any{"url": bundleService.URL}, "logs": map[string]any{"url": logService.URL}},
		"bundles": map[string]any{"enforcement": map[string]any{"service": "bundles", "resource": "/bundle.tar.gz",
			"polling": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}}},
		"decision_logs": map[string]any{"service": "logs", "resource": "/logs", "reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}},
	})
	configFile := filepath.Join(dir, "opa-config.json")
	if err := os.WriteFile(configFile, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ca, certFile, keyFile := webhookServing(t, "e2e-enforcement CA")
	b := newBridge(t, "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile, "--config-file="+configFile)
	registerScopedWebhooks(t, b.HTTPSURL(), ca.CertPEM, "sar-bridge-e2e-enforcement", enfLabel)
	// The public listener serves TLS (the webhooks need it): the Data API is asked over it.
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.CertPEM) {
		t.Fatal("the test CA's PEM does not parse")
	}
	dataAPI := cluster.NewCaller(b.HTTPSURL(), cluster.ClientTLSConfig(roots), "")
	defer dataAPI.Close()
	decideTLS := func(in map[string]any) (*cluster.Response, error) {
		body, err := json.Marshal(map[string]any{"input": in})
		if err != nil {
			return nil, err
		}
		r, _, err := dataAPI.Send(cluster.DecisionPath, body)
		return r, err
	}

	overCap := func(ns, sa, name string) *corev1.Pod {
		p := newPod(ns, sa, name, withNodeName(enfVK), withLimits(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}))
		p.UID = ""
		return p
	}
	capsMsg := fmt.Sprintf("container \"main\" sets cpu limit 3 over the cap 2 for group %q", enfGroup)
	otherTenant := `nodeSelector interlink.io/tenant=tenant-b selects tenant "tenant-b", not the pod's tenant "team-a"`

	// The API server loads webhook configurations asynchronously: wait until a dry run
	// that tenant isolation refuses (deny) is refused by this bridge.
	var last error
	if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
		p := newPod(enfNS, "", "probe", withNodeName(enfVK))
		p.UID = ""
		p.Spec.NodeSelector = map[string]string{"interlink.io/tenant": "tenant-b"}
		_, last = carol.client.CoreV1().Pods(enfNS).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), otherTenant)
	}); !ok {
		t.Fatalf("the webhooks are not in force: last dry run: %v", last)
	}
	metric := func(action, door string) float64 {
		t.Helper()
		s, err := b.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		return s.Sum("sar_bridge_policy_violations_total", map[string]string{"rule": "caps", "tenant": "team-a", "action": action, "front_door": door})
	}
	apply := func(pod *corev1.Pod) (stdout, stderr string, code int) {
		t.Helper()
		body, err := yaml.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		return runCmd(t, string(body), kubectlPath(t), "--kubeconfig", carol.kubeconfig, "--cache-dir", filepath.Join(dir, "kubectl-cache"), "apply", "-f", "-")
	}

	t.Run("warn: kubectl apply goes through and kubectl prints the warning", func(t *testing.T) {
		stdout, stderr, code := apply(overCap(enfNS, "", "enf-warn"))
		wantStderr := "Warning: sar-bridge: caps (warn): " + capsMsg + "\n"
		if code != 0 || stdout != "pod/enf-warn created\n" || stderr != wantStderr {
			t.Fatalf("kubectl apply: exit %d, stdout %q, stderr %q; want 0, %q, %q", code, stdout, stderr, "pod/enf-warn created\n", wantStderr)
		}
		if _, err := c.Client.CoreV1().Pods(enfNS).Get(ctx, "enf-warn", metav1.GetOptions{}); err != nil {
			t.Fatalf("the warned pod was not stored: %v", err)
		}
		// Decided twice, by the mutating and the validating webhook.
		if n := metric("warn", "admission"); n != 2 {
			t.Errorf("sar_bridge_policy_violations_total{rule=caps,tenant=team-a,action=warn,front_door=admission} = %v, want 2", n)
		}
	})

	var auditID string
	t.Run("audit: the Data API allows silently; the metric and the decision log count it", func(t *testing.T) {
		r, err := decideTLS(input("create", overCap("team-a", "runner", "enf-audit")))
		if err != nil {
			t.Fatalf("POST decision: %v", err)
		}
		checkDecision(t, r, allow(`RoleBinding "offload/team-a"`))
		auditID = r.DecisionID
		var doc struct {
			Result struct {
				Violations []map[string]string `json:"violations"`
			} `json:"result"`
		}
		if err := json.Unmarshal(r.Body, &doc); err != nil {
			t.Fatal(err)
		}
		want := []map[string]string{{"rule": "caps", "message": capsMsg, "action": "audit"}}
		if !reflect.DeepEqual(doc.Result.Violations, want) {
			t.Errorf("violations %v, want %v", doc.Result.Violations, want)
		}
		if n := metric("audit", "data_api"); n != 1 {
			t.Errorf("sar_bridge_policy_violations_total{rule=caps,tenant=team-a,action=audit,front_door=data_api} = %v, want 1", n)
		}
		event := logs.byID(t, []string{auditID})[auditID][0]
		result, _ := event["result"].(map[string]any)
		wouldDeny, _ := json.Marshal(result["would_deny"])
		wantWould, _ := json.Marshal(want)
		if result["allowed"] != true || string(wouldDeny) != string(wantWould) {
			t.Errorf("logged result: allowed %v, would_deny %s; want true, %s", result["allowed"], wouldDeny, wantWould)
		}
		if input, _ := event["input"].(map[string]any); input["front_door"] != "data_api" {
			t.Errorf("logged input.front_door %v, want data_api", input["front_door"])
		}
	})

	t.Run("deny through a bundle: the next pod is refused with the rule's message", func(t *testing.T) {
		bundles.set(enforcementBundle(t, dir, "r2", `{"caps": "deny"}`))
		var r *cluster.Response
		if _, ok := poll(30*time.Second, 200*time.Millisecond, func() bool {
			r, err = decideTLS(input("create", overCap("team-a", "runner", "enf-poll")))
			return err == nil && r.Result != nil && !r.Allowed()
		}); !ok {
			t.Fatalf("caps does not deny 30s after the bundle r2 (last answer %v, %v)", r, err)
		}
		if r.Reason() != capsMsg {
			t.Errorf("Data API reason %q, want %q", r.Reason(), capsMsg)
		}
		_, stderr, code := apply(overCap(enfNS, "", "enf-deny"))
		wantDenied(t, "kubectl apply after the switch to deny", stderr, code, podsHook, capsMsg)
		if n := metric("deny", "admission"); n < 1 {
			t.Errorf("sar_bridge_policy_violations_total{rule=caps,action=deny,front_door=admission} = %v, want at least 1", n)
		}
	})
}
