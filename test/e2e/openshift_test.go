package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// lokiFlags are opa-openshift's flags exactly as the Loki operator passes them to the
// LokiStack gateway's opa container.
var lokiFlags = []string{
	"--opa.package=lokistack",
	"--opa.skip-tenants=audit,infrastructure",
	"--opa.admin-groups=system:cluster-admins,cluster-admin,dedicated-admin",
	"--opa.matcher=kubernetes_namespace_name,k8s_namespace_name",
	"--opa.viaq-to-otel-migration=true",
	"--openshift.mappings=application=loki.grafana.com",
	"--openshift.mappings=infrastructure=loki.grafana.com",
	"--openshift.mappings=audit=loki.grafana.com",
	"--log.level=warn",
}

const lokiPath = "/v1/data/lokistack/allow"

// lokiFixtures: ClusterRoles as the Loki operator's docs grant log access (resource =
// tenant, resourceName = logs), bound cluster-wide and in log-a and log-b only; and a
// namespace of tenant "application" for pod decisions.
const lokiFixtures = `
apiVersion: v1
kind: Namespace
metadata: {name: log-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: log-b}
---
apiVersion: v1
kind: Namespace
metadata: {name: log-c}
---
apiVersion: v1
kind: Namespace
metadata:
  name: log-pods
  labels: {interlink.io/tenant: application}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: log-reader, namespace: log-a}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: log-nobody, namespace: log-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lokistack-logs-reader}
rules:
  - apiGroups: [loki.grafana.com]
    resources: [application, audit, infrastructure]
    resourceNames: [logs]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lokistack-logs-writer}
rules:
  - apiGroups: [loki.grafana.com]
    resources: [application, audit, infrastructure]
    resourceNames: [logs]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lokistack-cluster-readers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-logs-reader}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: cluster-reader}
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: cluster-admin}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: lokistack-cluster-writers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-logs-writer}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: log-writer}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: logs-reader, namespace: log-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-logs-reader}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: ns-reader}
  - {kind: ServiceAccount, name: log-reader, namespace: log-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: logs-reader, namespace: log-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-logs-reader}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: ns-reader}
  - {kind: ServiceAccount, name: log-reader, namespace: log-a}
---
# create in one namespace only: opa-openshift answers writes with the cluster-wide review.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: logs-writer, namespace: log-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-logs-writer}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: ns-writer}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: offload, namespace: log-pods}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: lokistack-pod-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: log-pods}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: lokistack-pod-offloader}
rules:
  - apiGroups: [loki.grafana.com]
    resources: [pods]
    verbs: [create, delete, get]
`

var lokiSetup struct {
	once sync.Once
	err  error
}

// setupLoki applies lokiFixtures once per suite and waits until the API server's
// authorizer sees every grant.
func setupLoki(t *testing.T) {
	t.Helper()
	lokiSetup.once.Do(func() {
		ctx := context.Background()
		c := suite.cluster
		if _, err := c.ApplyYAML(ctx, lokiFixtures); err != nil {
			lokiSetup.err = err
			return
		}
		logs := func(verb, tenant, ns string) authorizationv1.ResourceAttributes {
			return authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "loki.grafana.com", Resource: tenant, Name: "logs"}
		}
		for _, w := range []struct {
			user   string
			groups []string
			attrs  authorizationv1.ResourceAttributes
		}{
			{"cluster-reader", nil, logs("get", "application", "")},
			{"ops-admin", []string{"cluster-admin"}, logs("get", "application", "")},
			{"log-writer", nil, logs("create", "application", "")},
			{"ns-reader", nil, logs("get", "application", "log-a")},
			{"ns-reader", nil, logs("get", "application", "log-b")},
			{"ns-writer", nil, logs("create", "application", "log-a")},
			{sa("log-a", "log-reader"), cluster.ServiceAccountGroups("log-a"), logs("get", "application", "log-b")},
			{sa("log-pods", "runner"), cluster.ServiceAccountGroups("log-pods"),
				authorizationv1.ResourceAttributes{Namespace: "log-pods", Verb: "create", Group: "loki.grafana.com", Resource: "pods"}},
		} {
			if err := c.WaitForAccess(ctx, w.user, w.groups, w.attrs, true, 30*time.Second); err != nil {
				lokiSetup.err = err
				return
			}
		}
	})
	if lokiSetup.err != nil {
		t.Fatalf("opa-openshift fixtures: %v", lokiSetup.err)
	}
}

// newLokiBridge starts a bridge with exactly lokiFlags plus extra (and the harness's
// kubeconfig and listeners), stopped at the end of the test.
func newLokiBridge(t *testing.T, extra ...string) *cluster.Bridge {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	b, err := startBridge(name, append(append([]string{}, lokiFlags...), extra...)...)
	stopAtCleanup(t, b)
	if err != nil {
		t.Fatalf("starting sar-bridge: %v", err)
	}
	return b
}

// lokiInput is observatorium/api's OPA input, fields in the order its client sends them.
type lokiInput struct {
	Groups     []string        `json:"groups"`
	Permission string          `json:"permission"`
	Resource   string          `json:"resource"`
	Subject    string          `json:"subject"`
	Tenant     string          `json:"tenant"`
	TenantID   string          `json:"tenantID"`
	Token      string          `json:"token"`
	Extras     json.RawMessage `json:"extras"`
}

// readExtras is a read request's extras.
func readExtras(selectors []string, metadataOnly bool) json.RawMessage {
	sel := map[string][]string{}
	if len(selectors) > 0 {
		sel["kubernetes_namespace_name"] = selectors
	}
	return extrasWith(sel, metadataOnly, false)
}

func extrasWith(selectors map[string][]string, metadataOnly, wildcard bool) json.RawMessage {
	var b strings.Builder
	s, _ := json.Marshal(selectors)
	fmt.Fprintf(&b, `{"selectors":%s`, s)
	if metadataOnly {
		b.WriteString(`,"metadataOnly":true`)
	}
	if wildcard {
		b.WriteString(`,"wildcardSelectors":true`)
	}
	b.WriteString("}")
	return json.RawMessage(b.String())
}

var writeExtras = json.RawMessage(`{}`)

func lokiBody(subject string, groups []string, permission, tenant string, extras json.RawMessage) []byte {
	if groups == nil {
		groups = []string{"system:authenticated"}
	}
	in := lokiInput{Groups: groups, Permission: permission, Resource: "logs", Subject: subject,
		Tenant: tenant, TenantID: tenant, Extras: extras}
	b, err := json.Marshal(map[string]any{"input": in})
	if err != nil {
		panic(err)
	}
	return b
}

// postLoki sends body as observatorium's OPA client does; token "" sends no
// X-Forwarded-Access-Token.
func postLoki(t *testing.T, b *cluster.Bridge, body []byte, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.URL+lokiPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Forwarded-Access-Token", token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", lokiPath, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	return res.StatusCode, strings.TrimSuffix(string(data), "\n")
}

// matcherAnswer is opa-openshift's answer with a matcher on label over namespaces.
func matcherAnswer(label string, namespaces ...string) string {
	data := fmt.Sprintf(`{"matchers":[{"Type":2,"Name":%q,"Value":%q}]}`, label, strings.Join(namespaces, "|"))
	quoted, _ := json.Marshal(data)
	return `{"result":{"allowed":"true","data":` + string(quoted) + `}}`
}

const (
	answerTrue  = `{"result":true}`
	answerFalse = `{"result":false}`
	viaq        = "kubernetes_namespace_name"
	otel        = "k8s_namespace_name"
)

type lokiCase struct {
	name   string
	body   []byte
	token  string
	status int
	want   string // exact body; for errors, the code
}

func runLokiCases(t *testing.T, b *cluster.Bridge, cases []lokiCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := postLoki(t, b, tc.body, tc.token)
			if status != tc.status {
				t.Fatalf("HTTP %d %s, want HTTP %d\nrequest: %s", status, body, tc.status, tc.body)
			}
			if status == http.StatusOK {
				if body != tc.want {
					t.Errorf("answer\n got: %s\nwant: %s\nrequest: %s", body, tc.want, tc.body)
				}
				return
			}
			var e cluster.OPAError
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != tc.want || e.Message == "" {
				t.Errorf("error answer %s, want code %q and a message\nrequest: %s", body, tc.want, tc.body)
			}
		})
	}
}

// allNamespaces lists the cluster's namespaces, sorted, with the admin client.
func allNamespaces(t *testing.T) []string {
	t.Helper()
	list, err := suite.cluster.Client.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	sort.Strings(names)
	return names
}

// opa-openshift's request shape, replayed as observatorium/api sends it, answered with
// opa-openshift's exact bytes.
func TestOpenShiftCompatLokiStack(t *testing.T) {
	setupLoki(t)
	b := newLokiBridge(t)
	read := func(subject string, selectors ...string) []byte {
		return lokiBody(subject, nil, "read", "application", readExtras(selectors, false))
	}
	cases := []lokiCase{
		{"cluster reader, selected namespaces", read("cluster-reader", "log-a", "log-b"), "", 200, matcherAnswer(viaq, "log-a", "log-b")},
		{"cluster reader, selectors sorted", read("cluster-reader", "log-b", "log-a", "log-b"), "", 200, matcherAnswer(viaq, "log-a", "log-b")},
		{"cluster reader, otel selector keeps k8s_namespace_name",
			lokiBody("cluster-reader", nil, "read", "application", extrasWith(map[string][]string{otel: {"log-b"}}, false, false)), "", 200,
			matcherAnswer(otel, "log-b")},
		{"namespace reader, one of two selected allowed", read("ns-reader", "log-a", "log-c"), "", 200, matcherAnswer(viaq, "log-a")},
		{"namespace reader, only an unbound namespace", read("ns-reader", "log-c"), "", 200, answerFalse},
		{"namespace reader, no selectors", read("ns-reader"), "", 200, answerFalse},
		{"namespace reader, metadata query without selectors",
			lokiBody("ns-reader", nil, "read", "application", readExtras(nil, true)), "", 200, matcherAnswer(viaq, "log-a", "log-b")},
		{"namespace reader, metadata query with selectors",
			lokiBody("ns-reader", nil, "read", "application", readExtras([]string{"log-b", "log-c"}, true)), "", 200, matcherAnswer(viaq, "log-b")},
		{"stranger", read("stranger", "log-a"), "", 200, answerFalse},
		// Writes: the cluster-wide review alone.
		{"cluster writer writes", lokiBody("log-writer", nil, "write", "application", writeExtras), "", 200, answerTrue},
		{"cluster reader may not write", lokiBody("cluster-reader", nil, "write", "application", writeExtras), "", 200, answerFalse},
		{"namespace writer may not write", lokiBody("ns-writer", nil, "write", "application", writeExtras), "", 200, answerFalse},
		{"namespace reader may not write", lokiBody("ns-reader", nil, "write", "application", writeExtras), "", 200, answerFalse},
		// Skipped tenants and admin groups: a boolean, no matcher.
		{"skip tenant audit, cluster reader", lokiBody("cluster-reader", nil, "read", "audit", readExtras([]string{"log-a"}, false)), "", 200, answerTrue},
		{"skip tenant infrastructure, no selectors", lokiBody("cluster-reader", nil, "read", "infrastructure", readExtras(nil, false)), "", 200, answerTrue},
		{"skip tenant audit, namespace reader in its namespace", lokiBody("ns-reader", nil, "read", "audit", readExtras([]string{"log-a"}, false)), "", 200, answerTrue},
		{"skip tenant audit, stranger", lokiBody("stranger", nil, "read", "audit", readExtras([]string{"log-a"}, false)), "", 200, answerFalse},
		{"admin group member", lokiBody("ops-admin", []string{"system:authenticated", "cluster-admin"}, "read", "application",
			readExtras([]string{"log-a", "log-b"}, false)), "", 200, answerTrue},
		{"admin group member without a grant", lokiBody("lonely-admin", []string{"system:authenticated", "dedicated-admin"}, "read", "application",
			readExtras([]string{"log-a"}, false)), "", 200, answerFalse},
		// sar-bridge's deliberate differences and input errors.
		{"unmapped tenant", lokiBody("cluster-reader", nil, "read", "network", readExtras([]string{"log-a"}, false)), "", 200, answerFalse},
		{"wildcard selectors with a matcher", lokiBody("cluster-reader", nil, "read", "application",
			extrasWith(map[string][]string{viaq: {"log-.*"}}, false, true)), "", 400, "invalid_parameter"},
		{"both namespace labels selected", lokiBody("cluster-reader", nil, "read", "application",
			extrasWith(map[string][]string{viaq: {"log-a"}, otel: {"log-b"}}, false, false)), "", 400, "invalid_parameter"},
		{"unknown permission", lokiBody("cluster-reader", nil, "delete", "application", writeExtras), "", 400, "invalid_parameter"},
		{"malformed JSON", []byte(`{"input":{"groups":["system:authenticated"],"permission":"read"`), "", 400, "invalid_parameter"},
		{"no resource", bytes.Replace(read("cluster-reader", "log-a"), []byte(`"resource":"logs"`), []byte(`"resource":""`), 1), "", 400, "invalid_parameter"},
		{"no X-Forwarded-Access-Token needed without --opa.ssar", read("cluster-reader", "log-a"), "", 200, matcherAnswer(viaq, "log-a")},
	}
	runLokiCases(t, b, cases)

	// A cluster-wide reader without selectors gets every namespace of the cluster.
	t.Run("cluster reader, no selectors", func(t *testing.T) {
		var want, got string
		_, ok := poll(5*time.Second, 200*time.Millisecond, func() bool {
			want = matcherAnswer(viaq, allNamespaces(t)...)
			var status int
			status, got = postLoki(t, b, read("cluster-reader"), "")
			return status == 200 && got == want
		})
		if !ok {
			t.Errorf("answer\n got: %s\nwant: %s", got, want)
		}
	})

	// An identical second request is answered from the review cache.
	t.Run("second identical request is cached", func(t *testing.T) {
		for _, body := range [][]byte{
			lokiBody("cluster-reader", []string{"system:authenticated", "cache-probe"}, "read", "application", readExtras([]string{"log-c"}, false)),
			lokiBody("ns-reader", []string{"system:authenticated", "readers"}, "read", "application", readExtras([]string{"log-a", "log-c"}, false)),
		} {
			before := metric(t, b, reviewsTotal, nil)
			_, first := postLoki(t, b, body, "")
			mid := metric(t, b, reviewsTotal, nil)
			if mid == before {
				t.Errorf("first request sent no review (%s = %v): the test needs a fresh request", reviewsTotal, mid)
			}
			_, second := postLoki(t, b, body, "")
			if got := metric(t, b, reviewsTotal, nil); got != mid {
				t.Errorf("second identical request sent %v review(s)", got-mid)
			}
			if first != second {
				t.Errorf("second answer %s differs from the first %s", second, first)
			}
		}
	})
}

// --opa.ssar: the forwarded token is the identity (SelfSubjectAccessReview).
func TestOpenShiftCompatSSAR(t *testing.T) {
	setupLoki(t)
	b := newLokiBridge(t, "--opa.ssar")
	ctx := context.Background()
	bound, err := suite.cluster.ServiceAccountToken(ctx, "log-a", "log-reader", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := suite.cluster.ServiceAccountToken(ctx, "log-a", "log-nobody", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// observatorium fills subject and groups from the token; the bridge must not trust them.
	subject := sa("log-a", "log-reader")
	groups := cluster.ServiceAccountGroups("log-a")
	read := func(selectors []string, metadataOnly bool) []byte {
		return lokiBody(subject, groups, "read", "application", readExtras(selectors, metadataOnly))
	}
	cases := []lokiCase{
		{"bound ServiceAccount", read([]string{"log-a", "log-b", "log-c"}, false), bound, 200, matcherAnswer(viaq, "log-a", "log-b")},
		{"bound ServiceAccount, metadata query", read(nil, true), bound, 200, matcherAnswer(viaq, "log-a", "log-b")},
		{"bound ServiceAccount, unbound namespace", read([]string{"log-c"}, false), bound, 200, answerFalse},
		{"bound ServiceAccount may not write", lokiBody(subject, groups, "write", "application", writeExtras), bound, 200, answerFalse},
		{"unbound ServiceAccount with the bound one's subject", read([]string{"log-a", "log-b"}, false), unbound, 200, answerFalse},
		{"garbage token", read([]string{"log-a"}, false), "not-a-token", 401, "unauthorized"},
		{"no X-Forwarded-Access-Token", read([]string{"log-a"}, false), "", 401, "unauthorized"},
		{"unmapped tenant", lokiBody(subject, groups, "read", "network", readExtras([]string{"log-a"}, false)), bound, 200, answerFalse},
	}
	runLokiCases(t, b, cases)

	t.Run("second identical request is cached", func(t *testing.T) {
		// A fresh token of the bound ServiceAccount: reviews are cached per token.
		fresh, err := suite.cluster.ServiceAccountToken(ctx, "log-a", "log-reader", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		body := read([]string{"log-b", "log-c"}, false)
		before := metric(t, b, reviewsTotal, nil)
		_, first := postLoki(t, b, body, fresh)
		if first != matcherAnswer(viaq, "log-b") {
			t.Errorf("answer %s, want %s", first, matcherAnswer(viaq, "log-b"))
		}
		mid := metric(t, b, reviewsTotal, nil)
		if mid != before+3 {
			t.Errorf("first request with a fresh token: %s %v -> %v, want +3 (cluster-wide, log-b, log-c)", reviewsTotal, before, mid)
		}
		_, second := postLoki(t, b, body, fresh)
		if got := metric(t, b, reviewsTotal, nil); got != mid {
			t.Errorf("second identical request sent %v review(s)", got-mid)
		}
		if second != first {
			t.Errorf("second answer %s differs from the first %s", second, first)
		}
		// Same body, another token: not the cached answer.
		if _, got := postLoki(t, b, body, unbound); got != answerFalse {
			t.Errorf("unbound token after a cached bound one: %s, want %s", got, answerFalse)
		}
	})
}

// interLink's pod decisions still work on a bridge started with opa-openshift's flags.
func TestOpenShiftCompatPodDecision(t *testing.T) {
	setupLoki(t)
	b := newLokiBridge(t)
	decide(t, b, input("create", newPod("log-pods", "runner", "job-1")),
		allow(`RoleBinding "offload/log-pods" of ClusterRole "lokistack-pod-offloader" to ServiceAccount "runner/log-pods"`))
	decide(t, b, input("status", newPod("log-pods", "runner", "job-1")), allow(`RoleBinding "offload/log-pods"`))
	decide(t, b, input("create", newPod("log-pods", "other", "job-1")),
		deny(mayNot(sa("log-pods", "other"), "create", "pods.loki.grafana.com", "log-pods")...))
	decide(t, b, input("create", newPod("team-a", "runner", "job-1")), deny(`tenant "team-a"`))
}
