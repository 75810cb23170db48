package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// What an opa-openshift bridge trusts and what one request may cost the API server:
// identity from the token under --opa.ssar, no route shared with the pod policy,
// bounded selector fan-out, a negative namespace cache, and one rate-limited SSAR client.

// boundsFixtures: a ServiceAccount that may read logs in log-c only, and one whose
// namespace group (system:serviceaccounts:log-admins) is an admin group with a
// cluster-wide grant.
const boundsFixtures = `
apiVersion: v1
kind: Namespace
metadata: {name: log-admins}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: one-ns-reader, namespace: log-c}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: auditor, namespace: log-admins}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: one-ns-reader, namespace: log-c}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-logs-reader}
subjects:
  - {kind: ServiceAccount, name: one-ns-reader, namespace: log-c}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lokistack-admin-group-readers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-logs-reader}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:serviceaccounts:log-admins"}
`

// adminGroupFlag adds the auditor's namespace group to the Loki operator's admin groups.
const adminGroupFlag = "--opa.admin-groups=system:cluster-admins,cluster-admin,dedicated-admin,system:serviceaccounts:log-admins"

var boundsSetup struct {
	once sync.Once
	err  error
}

func setupBounds(t *testing.T) {
	t.Helper()
	setupLoki(t)
	boundsSetup.once.Do(func() {
		ctx := context.Background()
		c := suite.cluster
		if _, err := c.ApplyYAML(ctx, boundsFixtures); err != nil {
			boundsSetup.err = err
			return
		}
		read := func(ns string) authorizationv1.ResourceAttributes {
			return authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: "loki.grafana.com", Resource: "application", Name: "logs"}
		}
		for _, w := range []struct {
			ns, name string
			attrs    authorizationv1.ResourceAttributes
		}{{"log-c", "one-ns-reader", read("log-c")}, {"log-admins", "auditor", read("")}} {
			if err := c.WaitForAccess(ctx, sa(w.ns, w.name), cluster.ServiceAccountGroups(w.ns), w.attrs, true, 30*time.Second); err != nil {
				boundsSetup.err = err
				return
			}
		}
	})
	if boundsSetup.err != nil {
		t.Fatalf("fixtures: %v", boundsSetup.err)
	}
}

func saToken(t *testing.T, ns, name string) string {
	t.Helper()
	token, err := suite.cluster.ServiceAccountToken(context.Background(), ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// (1) Under --opa.ssar the admin-group exemption follows the token's groups (a
// TokenReview), never the body's.
func TestOpenShiftSSARAdminGroupFromToken(t *testing.T) {
	setupBounds(t)
	b := newLokiBridge(t, "--opa.ssar", adminGroupFlag)
	oneNS := saToken(t, "log-c", "one-ns-reader")
	auditor := saToken(t, "log-admins", "auditor")
	admins := []string{"system:authenticated", "cluster-admin", "system:serviceaccounts:log-admins"}
	selectors := readExtras([]string{"log-a", "log-b", "log-c"}, false)
	runLokiCases(t, b, []lokiCase{
		{"one-namespace token claiming admin groups in the body", lokiBody("ops-admin", admins, "read", "application", selectors),
			oneNS, 200, matcherAnswer(viaq, "log-c")},
		{"one-namespace token claiming admin groups, metadata query", lokiBody("ops-admin", admins, "read", "application", readExtras(nil, true)),
			oneNS, 200, matcherAnswer(viaq, "log-c")},
		{"admin-group member's token, body without groups", lokiBody("nobody", []string{}, "read", "application", selectors),
			auditor, 200, answerTrue},
	})
	// The same body without --opa.ssar is opa-openshift's trust in its caller: no matcher.
	plain := newLokiBridge(t, adminGroupFlag)
	runLokiCases(t, plain, []lokiCase{
		{"without --opa.ssar the caller's groups count", lokiBody("ops-admin", admins, "read", "application", selectors), "", 200, answerTrue},
	})
}

// (2) A route that shares a document with the pod-decision policy is refused at start.
func TestOpenShiftRefusesOverlappingRoute(t *testing.T) {
	setupLoki(t)
	tests := []struct {
		flags []string
		doc   string
	}{
		{[]string{"--opa.package=interlink.authz", "--opa.rule=decision"}, "data.interlink.authz.decision"},
		{[]string{"--opa.package=interlink.authz"}, "data.interlink.authz.allow"},
		{[]string{"--opa.package=interlink", "--opa.rule=authz"}, "data.interlink.authz"},
		{[]string{"--opa.package=interlink.authz.decision", "--opa.rule=x"}, "data.interlink.authz.decision"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.flags, " "), func(t *testing.T) {
			name := strings.NewReplacer("/", "_", " ", "_", "=", "_").Replace(t.Name())
			args := append(append([]string{}, baseMappings...), tt.flags...)
			b, err := startBridge(name, args...)
			if b != nil {
				defer b.Stop()
			}
			if err == nil {
				t.Fatalf("sar-bridge with %v started; want it refused", tt.flags)
			}
			log := b.Log()
			for _, want := range []string{"would share a route with " + tt.doc + " of the pod-decision policy", "without the impersonation check"} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, tail(log, 20))
				}
			}
		})
	}
}

// madeUpNamespaces are n namespace names no cluster has.
func madeUpNamespaces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("made-up-%05d", i)
	}
	return out
}

// (3) Selector values are intersected with the namespaces the informer knows before
// any review; too many is a 400 without any review.
func TestOpenShiftSelectorFanOut(t *testing.T) {
	setupLoki(t)
	names := append(madeUpNamespaces(5000), "log-a", "log-c")
	body := lokiBody("ns-reader", nil, "read", "application", readExtras(names, false))

	b := newLokiBridge(t)
	before := metric(t, b, reviewsTotal, nil)
	runLokiCases(t, b, []lokiCase{{"5,002 namespaces over the default limit", body, "", 400, "invalid_parameter"}})
	if got := metric(t, b, reviewsTotal, nil) - before; got != 0 {
		t.Errorf("a refused request sent %v reviews", got)
	}

	wide := newLokiBridge(t, "--opa.max-selector-namespaces=10000")
	before = metric(t, wide, reviewsTotal, nil)
	runLokiCases(t, wide, []lokiCase{{"5,000 made-up namespaces and two real ones", body, "", 200, matcherAnswer(viaq, "log-a")}})
	// The cluster-wide review, then log-a and log-c: the made-up names cost nothing.
	reviews := metric(t, wide, reviewsTotal, nil) - before
	t.Logf("reviews for 5,000 made-up + 2 real selector namespaces: %v", reviews)
	if reviews != 3 {
		t.Errorf("%s grew by %v, want 3 (cluster-wide, log-a, log-c)", reviewsTotal, reviews)
	}
}

// apiRequests sums the API server's apiserver_request_total for resource and verb.
func apiRequests(t *testing.T, resource, verb string) float64 {
	t.Helper()
	raw, err := suite.cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	samples, err := cluster.ParseMetrics(string(raw))
	if err != nil {
		t.Fatalf("parsing kube-apiserver /metrics: %v", err)
	}
	return samples.Sum("apiserver_request_total", map[string]string{"resource": resource, "verb": verb})
}

// (4) Decisions for pods in a namespace that does not exist share one GET, sequential
// or concurrent, for --informer.not-found-ttl.
func TestOpenShiftMissingNamespaceGETs(t *testing.T) {
	setupLoki(t)
	b := newLokiBridge(t, "--informer.not-found-ttl=30s")
	for _, tt := range []struct {
		name       string
		namespace  string
		concurrent bool
	}{
		{"sequential", "no-such-ns-seq", false},
		{"concurrent", "no-such-ns-par", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := apiRequests(t, "namespaces", "GET")
			var wg sync.WaitGroup
			for i := range 100 {
				decideOne := func() {
					r, err := b.Decide(input("create", newPod(tt.namespace, "runner", fmt.Sprintf("job-%d", i))))
					if err != nil {
						t.Errorf("decision %d: %v", i, err)
						return
					}
					if r.Status != http.StatusOK || r.Allowed() || !strings.Contains(r.Reason(), `namespace "`+tt.namespace+`" does not exist`) {
						t.Errorf("decision %d: %s; want a deny naming the missing namespace", i, r)
					}
				}
				if tt.concurrent {
					wg.Go(decideOne)
				} else {
					decideOne()
				}
			}
			wg.Wait()
			gets := apiRequests(t, "namespaces", "GET") - before
			t.Logf("namespace GETs for 100 %s decisions in a missing namespace: %v", tt.name, gets)
			if gets < 1 || gets > 2 {
				t.Errorf("namespace GETs at the API server: %v, want 1 (at most 2)", gets)
			}
		})
	}
}

// postLokiAsync is postLoki for goroutines: errors are returned, not fatal.
func postLokiAsync(client *http.Client, url string, body []byte, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-Access-Token", token)
	res, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSuffix(string(data), "\n"), err
}

// (5) 200 concurrent SSAR requests, each needing its own review, reach the API server
// no faster than --kube.qps/--kube.burst allow: one client, one rate limiter.
func TestOpenShiftSSARRateLimit(t *testing.T) {
	setupLoki(t)
	const qps, burst, requests = 20, 10, 200
	b := newLokiBridge(t, "--opa.ssar", fmt.Sprintf("--kube.qps=%d", qps), fmt.Sprintf("--kube.burst=%d", burst),
		"--review.timeout=60s", "--web.request-timeout=60s")
	token := saToken(t, "log-a", "log-reader")
	client := &http.Client{Timeout: 90 * time.Second}

	before := apiRequests(t, "selfsubjectaccessreviews", "POST")
	start := time.Now()
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			// A distinct resource per request: a distinct review, nothing merged or cached.
			body := bytes.Replace(lokiBody(sa("log-a", "log-reader"), nil, "write", "application", writeExtras),
				[]byte(`"resource":"logs"`), []byte(fmt.Sprintf(`"resource":"logs-%d"`, i)), 1)
			status, answer, err := postLokiAsync(client, b.URL+lokiPath, body, token)
			if err != nil || status != http.StatusOK || answer != answerFalse {
				t.Errorf("request %d: HTTP %d %s %v; want 200 %s", i, status, answer, err, answerFalse)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	sent := apiRequests(t, "selfsubjectaccessreviews", "POST") - before
	// The token bucket admits burst at once, then qps a second; the TokenReview shares it.
	allowed := burst + qps*elapsed.Seconds()
	t.Logf("%v SelfSubjectAccessReviews in %s (%.1f/s); --kube.qps=%d --kube.burst=%d allow at most %.0f",
		sent, elapsed.Round(time.Millisecond), sent/elapsed.Seconds(), qps, burst, allowed)
	if sent < requests {
		t.Errorf("the API server saw %v SelfSubjectAccessReviews, want at least %d", sent, requests)
	}
	if sent > allowed {
		t.Errorf("%v SelfSubjectAccessReviews in %s exceed --kube.qps=%d --kube.burst=%d (at most %.0f)", sent, elapsed, qps, burst, allowed)
	}
}
