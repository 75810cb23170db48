package e2e

// A bounded load test: 32 concurrent callers, mixed allow/deny over several tenants,
// every answer known in advance.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const loadFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: load-a
---
apiVersion: v1
kind: Namespace
metadata:
  name: load-b
  labels:
    interlink.io/tenant: load-tenant-b
    interlink.io/billing-project: proj-load-b
---
apiVersion: v1
kind: Namespace
metadata:
  name: load-c
---
apiVersion: v1
kind: Namespace
metadata:
  name: load-d
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: load-offloader
rules:
  - apiGroups: ["load-a.interlink.io", "load-b.interlink.io"]
    resources: ["pods"]
    verbs: ["create", "delete", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: load-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: load-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: load-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: load-b
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: load-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: load-b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-reader
  namespace: load-b
rules:
  - apiGroups: ["load-b.interlink.io"]
    resources: ["pods"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: watcher
  namespace: load-b
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
  - {kind: ServiceAccount, name: watcher, namespace: load-b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: load-c
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: load-c}
---
# load-d is not mapped: this binding must never matter.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: load-d
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: load-d}
`

const loadPolicyData = `{
  "interlink": {
    "default_limits": {"cpu": "1", "memory": "1Gi"},
    "limits": {
      "system:serviceaccounts:team-a": {"cpu": "2", "memory": "4Gi"},
      "system:serviceaccounts:load-a": {"cpu": "2", "memory": "4Gi"},
      "system:serviceaccounts:load-c": {"cpu": "500m", "memory": "1Gi"}
    },
    "protected_taints": [
      {"key": "hpc.example/gpu", "value": "a100", "allowed_users": [], "allowed_groups": ["system:serviceaccounts:load-b"]}
    ]
  }
}
`

var loadMappings = []string{
	"--openshift.mappings=team-a=interlink.io",
	"--openshift.mappings=load-a=load-a.interlink.io",
	"--openshift.mappings=load-tenant-b=load-b.interlink.io",
	"--openshift.mappings=load-c=interlink.io",
}

// loadCase is one kind of request with its answer known in advance.
type loadCase struct {
	name    string
	bodies  [][]byte // one is picked per request (several: distinct reviews)
	allowed bool
	reason  string // a fragment of result.reason
}

func loadBody(t *testing.T, in map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"input": in})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadCases(t *testing.T) []loadCase {
	gpuEqual := corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpEqual, Value: "a100", Effect: corev1.TaintEffectNoSchedule}
	gpuExists := corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	one := func(in map[string]any) [][]byte { return [][]byte{loadBody(t, in)} }
	// 300 pod names: delete reviews carry the name, so these are 300 distinct reviews
	// (each asked once, then cached).
	var deletes [][]byte
	for i := range 300 {
		deletes = append(deletes, loadBody(t, input("delete", newPod("load-a", "runner", fmt.Sprintf("job-%d", i)))))
	}
	return []loadCase{
		{"load-a runner small", one(input("create", newPod("load-a", "runner", "small", onlyContainers(container("main", "1", "1Gi"))))), true, `RoleBinding "offload/load-a"`},
		{"load-a runner over the cpu cap", one(input("create", newPod("load-a", "runner", "big", onlyContainers(container("hog", "3", "1Gi"))))), false, `container "hog"`},
		{"load-a intruder", one(input("create", newPod("load-a", "intruder", "x"))), false, "may not create pods.load-a.interlink.io"},
		{"load-a runner deletes", deletes, true, `RoleBinding "offload/load-a"`},
		{"load-b runner with the protected toleration", one(input("create", newPod("load-b", "runner", "gpu", withToleration(gpuEqual)))), true, `RoleBinding "offload/load-b"`},
		{"load-b runner with Exists on a protected key", one(input("create", newPod("load-b", "runner", "gpu-any", withToleration(gpuExists)))), false, "hpc.example/gpu"},
		{"load-b watcher status", one(input("status", newPod("load-b", "watcher", "job-1"))), true, `RoleBinding "watcher/load-b"`},
		{"load-b watcher create", one(input("create", newPod("load-b", "watcher", "job-1"))), false, "may not create pods.load-b.interlink.io"},
		{"load-c runner small", one(input("create", newPod("load-c", "runner", "tiny", onlyContainers(container("main", "250m", "256Mi"))))), true, `RoleBinding "offload/load-c"`},
		{"load-c runner over the cpu cap", one(input("create", newPod("load-c", "runner", "mid", onlyContainers(container("mid", "1", "256Mi"))))), false, `container "mid"`},
		{"load-c runner with the protected toleration", one(input("create", newPod("load-c", "runner", "gpu", withToleration(gpuEqual)))), false, "hpc.example/gpu"},
		{"load-d unmapped create", one(input("create", newPod("load-d", "runner", "x"))), false, `tenant "load-d"`},
		{"load-d unmapped delete", one(input("delete", newPod("load-d", "runner", "x"))), false, `tenant "load-d"`},
		{"team-a runner", one(input("create", newPod("team-a", "runner", "job-1"))), true, `RoleBinding "offload/team-a"`},
	}
}

// TestLoad: 32 callers for 30s (or at most loadMaxRequests) against one bridge with
// healthy dependencies: no wrong decision, no error. Reports throughput, latency and RSS.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test skipped in -short mode")
	}
	const (
		callers         = 32
		duration        = 30 * time.Second
		loadMaxRequests = 1_000_000
	)
	ctx := context.Background()
	objs, err := suite.cluster.ApplyYAML(ctx, loadFixtures)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), objs) })
	for _, a := range []struct{ ns, sa, verb, group string }{
		{"load-a", "runner", "create", "load-a.interlink.io"},
		{"load-b", "runner", "create", "load-b.interlink.io"},
		{"load-b", "watcher", "get", "load-b.interlink.io"},
		{"load-c", "runner", "create", "interlink.io"},
	} {
		if err := suite.cluster.WaitForAccess(ctx, sa(a.ns, a.sa), cluster.ServiceAccountGroups(a.ns),
			authorizationv1.ResourceAttributes{Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: "pods"}, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	dataFile := filepath.Join(t.TempDir(), "load-data.json")
	if err := os.WriteFile(dataFile, []byte(loadPolicyData), 0o644); err != nil {
		t.Fatal(err)
	}
	// Decisions are logged at info, as in production; denied reviews are re-asked every
	// 2s so the API keeps being asked during the run.
	args := append(append([]string{}, loadMappings...), "--policies.data="+dataFile, "--log.level=info", "--cache.denied-ttl=2s")
	if suite.policyDir != "" {
		args = append(args, "--policies="+suite.policyDir)
	}
	b := startTestBridge(t, suite.kubeconfig, args...)
	cases := loadCases(t)

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: callers * 2, MaxIdleConns: callers * 4}}
	defer client.CloseIdleConnections()
	url := b.URL + cluster.DecisionPath
	// check sends one request: its latency, and a problem (kind: 'e' transport error,
	// '5' a 5xx, 'w' anything else that is not the expected answer).
	check := func(c loadCase, body []byte) (time.Duration, byte, string) {
		r, _, err := postDecision(client, url, body)
		if err != nil {
			return 0, 'e', fmt.Sprintf("%s: %v", c.name, err)
		}
		switch {
		case r.Status >= 500:
			return r.Elapsed, '5', fmt.Sprintf("%s: %s", c.name, r)
		case r.Status != http.StatusOK || r.Result == nil || r.Result.Allowed == nil || r.Allowed() != c.allowed || !strings.Contains(r.Reason(), c.reason) || r.DecisionID == "":
			return r.Elapsed, 'w', fmt.Sprintf("%s: want allowed=%v with %q, got %s", c.name, c.allowed, c.reason, r)
		}
		return r.Elapsed, 0, ""
	}
	// Every case once, sequentially: the expectations hold before any load.
	for _, c := range cases {
		if _, _, p := check(c, c.bodies[0]); p != "" {
			t.Errorf("before the load: %s", p)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	rssBefore, err := b.RSSKiB()
	if err != nil {
		t.Fatal(err)
	}
	reviewsBefore := metric(t, b, reviewsTotal, nil)

	var (
		issued, wrong, errs, fiveXX atomic.Int64
		mu                          sync.Mutex
		problems                    []string
		latencies                   = make([][]time.Duration, callers)
	)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 8192)
			for i := w; ; i++ {
				if time.Since(start) >= duration || issued.Add(1) > loadMaxRequests {
					break
				}
				c := cases[i%len(cases)]
				body := c.bodies[(i/len(cases)+w*7)%len(c.bodies)]
				d, kind, p := check(c, body)
				lat = append(lat, d)
				if p != "" {
					switch kind {
					case 'e':
						errs.Add(1)
					case '5':
						fiveXX.Add(1)
					default:
						wrong.Add(1)
					}
					mu.Lock()
					if len(problems) < 20 {
						problems = append(problems, p)
					}
					mu.Unlock()
				}
			}
			latencies[w] = lat
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rssAfter, err := b.RSSKiB()
	if err != nil {
		t.Fatal(err)
	}

	var all []time.Duration
	for _, l := range latencies {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(float64(len(all))*p))]
	}
	reviews := metric(t, b, reviewsTotal, nil) - reviewsBefore
	t.Logf("LOAD: %d requests by %d callers in %s = %.0f req/s; latency p50 %s p99 %s max %s; wrong %d, 5xx %d, errors %d; reviews sent %d; RSS %.1f MiB before, %.1f MiB after",
		len(all), callers, elapsed.Round(time.Millisecond), float64(len(all))/elapsed.Seconds(),
		pct(0.50).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond),
		wrong.Load(), fiveXX.Load(), errs.Load(), int(reviews), float64(rssBefore)/1024, float64(rssAfter)/1024)
	for _, p := range problems {
		t.Error(p)
	}
	if wrong.Load()+fiveXX.Load()+errs.Load() != 0 {
		t.Errorf("%d wrong decisions, %d 5xx and %d transport errors under load", wrong.Load(), fiveXX.Load(), errs.Load())
	}
	if len(all) < callers {
		t.Errorf("only %d requests completed", len(all))
	}
	if got := metric(t, b, "sar_bridge_http_requests_total", nil) - metric(t, b, "sar_bridge_http_requests_total", map[string]string{"code": "200"}); got > 0 {
		// The bridge's own count agrees: every answer was a 200 (the /metrics scrapes
		// are not counted there, or are 200 as well).
		t.Errorf("sar_bridge_http_requests_total counts %v non-200 answers", got)
	}
	// The bridge is still healthy and answers as before.
	for _, c := range cases {
		if _, _, p := check(c, c.bodies[0]); p != "" {
			t.Errorf("after the load: %s", p)
		}
	}
}
