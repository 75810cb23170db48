package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// clusterPolicy decides as the default policy unless the ConfigMap
// cluster-e2e/offload-switch says offload: deny; it reads it with k8s.get, from the
// bridge's informer cache.
const clusterPolicy = `package e2e.cluster

import data.interlink.authz

decision := authz.decision if {
	not _switched_off
} else := {"allowed": false, "reason": "offloading is switched off by ConfigMap cluster-e2e/offload-switch"}

_switched_off if k8s.get("configmaps", "cluster-e2e", "offload-switch").data.offload == "deny"

# Secrets are not in --cluster.resources: an evaluation error, never a decision.
undeclared := k8s.get("secrets", "cluster-e2e", "x")

# The opa-kubernetes-api-client compatibility package, from the cache.
compat := data.kubernetes.api.client.query_name_ns("configmaps", "offload-switch", "cluster-e2e").body.data.offload
`

// clusterFixtures: the switch, and list/watch of ConfigMaps for the bridge's
// ServiceAccount (manifests/base leaves it out: it is needed only with
// --cluster.resources=configmaps).
const clusterFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: cluster-e2e
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: offload-switch
  namespace: cluster-e2e
data:
  offload: allow
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: sar-bridge-cluster-e2e
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: sar-bridge-cluster-e2e
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sar-bridge-cluster-e2e}
subjects:
  - {kind: ServiceAccount, name: sar-bridge, namespace: sar-bridge}
`

const clusterDecisionPath = "/v1/data/e2e/cluster/decision"

func TestClusterBuiltins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	objs, err := suite.cluster.ApplyYAML(ctx, clusterFixtures)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), objs) })
	attrs := authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps"}
	if err := suite.cluster.WaitForAccess(ctx, cluster.ServiceAccountUser("sar-bridge", "sar-bridge"), cluster.ServiceAccountGroups("sar-bridge"), attrs, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	b := newBridge(t, "--policies="+clusterPolicyDir(t), "--cluster.resources=configmaps")
	in := input("create", newPod("team-a", "runner", "cluster-1"))

	// Allowed while the switch says allow.
	if r := decideAt(t, b, clusterDecisionPath, in); r.Status != http.StatusOK || !r.Allowed() {
		t.Fatalf("with offload: allow, want an allow, got %s", r)
	}

	t.Run("flips within a second of kubectl edit", func(t *testing.T) {
		for _, to := range []struct{ from, to string }{{"allow", "deny"}, {"deny", "allow"}} {
			kubectlEditSwitch(t, to.from, to.to)
			took, ok := poll(time.Second, 20*time.Millisecond, func() bool {
				r := decideAt(t, b, clusterDecisionPath, in)
				return r.Status == http.StatusOK && r.Allowed() == (to.to == "allow")
			})
			if !ok {
				t.Fatalf("the decision did not follow offload: %s within a second", to.to)
			}
			t.Logf("offload: %s → the decision followed in %s", to.to, took.Round(time.Millisecond))
		}
	})

	t.Run("no API request per decision", func(t *testing.T) {
		const n = 50
		before := configMapReads(t)
		for range n {
			if r := decideAt(t, b, clusterDecisionPath, in); r.Status != http.StatusOK || !r.Allowed() {
				t.Fatalf("want an allow, got %s", r)
			}
		}
		after := configMapReads(t)
		t.Logf("API server configmaps GET+LIST: %v before, %v after %d decisions", before, after, n)
		if after-before >= n {
			t.Fatalf("configmaps GET+LIST grew by %v over %d decisions: the built-in reads the API server", after-before, n)
		}
	})

	t.Run("undeclared resource is a 500", func(t *testing.T) {
		r := decideAt(t, b, "/v1/data/e2e/cluster/undeclared", in)
		checkError(t, r, http.StatusInternalServerError, "internal_error")
		if !strings.Contains(r.Error.Message, `"secrets"`) || !strings.Contains(r.Error.Message, "--cluster.resources") {
			t.Errorf("message does not name the resource and the flag: %s", r)
		}
	})

	t.Run("compatibility package", func(t *testing.T) {
		code, body, err := b.Do(http.MethodPost, b.URL+"/v1/data/e2e/cluster/compat", "application/json", mustJSON(t, map[string]any{"input": in}))
		if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"result":"allow"`) {
			t.Fatalf("compat: HTTP %d %s %v", code, body, err)
		}
	})
}

// TestClusterBuiltinsUnknownResource: a resource the API server does not serve
// fails start-up, naming it.
func TestClusterBuiltinsUnknownResource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig=" + suite.kubeconfig, "--web.listen=127.0.0.1:0", "--web.internal.listen=127.0.0.1:0"},
		baseArgs("--cluster.resources=configmaps,frobnicators")...)
	out, err := exec.CommandContext(ctx, suite.binary, args...).CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() == 0 {
		t.Fatalf("want a non-zero exit, got %v; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "frobnicators") || !strings.Contains(string(out), "is not served by the API server") {
		t.Fatalf("the error does not name the resource:\n%s", out)
	}
}

// clusterPolicyDir is --policies for the test: the suite's own policy files, if any,
// and clusterPolicy.
func clusterPolicyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if suite.policyDir != "" {
		files, err := filepath.Glob(filepath.Join(suite.policyDir, "*.rego"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "e2e_cluster.rego"), []byte(clusterPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// kubectlEditSwitch changes offload: from → to with `kubectl edit`, its editor a
// script.
func kubectlEditSwitch(t *testing.T, from, to string) {
	t.Helper()
	dir := t.TempDir()
	editor := filepath.Join(dir, "editor.sh")
	script := fmt.Sprintf("#!/bin/sh\nexec sed -i 's/^  offload: %s$/  offload: %s/' \"$1\"\n", from, to)
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubectlPath(t), "--kubeconfig", adminKubeconfig(t), "edit", "configmap", "offload-switch", "--namespace", "cluster-e2e")
	cmd.Env = append(os.Environ(), "KUBE_EDITOR="+editor, "EDITOR="+editor)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "edited") {
		t.Fatalf("kubectl edit: %v\n%s", err, out)
	}
}

// configMapReads is the API server's count of GET and LIST requests on ConfigMaps.
func configMapReads(t *testing.T) float64 {
	t.Helper()
	raw, err := suite.cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("API server /metrics: %v", err)
	}
	s, err := cluster.ParseMetrics(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has("apiserver_request_total") {
		t.Fatal("the API server exposes no apiserver_request_total")
	}
	var sum float64
	for _, verb := range []string{"GET", "LIST"} {
		sum += s.Sum("apiserver_request_total", map[string]string{"resource": "configmaps", "verb": verb})
	}
	return sum
}

// decideAt posts {"input": in} to path and parses the answer.
func decideAt(t *testing.T, b *cluster.Bridge, path string, in map[string]any) *cluster.Response {
	t.Helper()
	start := time.Now()
	code, body, err := b.Do(http.MethodPost, b.URL+path, "application/json", mustJSON(t, map[string]any{"input": in}))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	r := &cluster.Response{Status: code, Body: body, Elapsed: time.Since(start)}
	var wire struct {
		Result     *cluster.Result `json:"result"`
		DecisionID string          `json:"decision_id"`
		cluster.OPAError
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		r.ParseError = err
		return r
	}
	r.Result, r.DecisionID, r.Error = wire.Result, wire.DecisionID, wire.OPAError
	return r
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
