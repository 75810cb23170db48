package e2e

// Caller authentication (--authn.mode token and mtls), vouched identities (input.user
// needs impersonate rights), and the public listener's TLS (min version, cipher suites,
// certificate reload). Everything goes through real TokenReviews and
// SubjectAccessReviews against the suite's kube-apiserver.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// authnNS holds the callers' ServiceAccounts of these tests.
const authnNS = "e2e-authn"

// authnFixtures: the callers (ServiceAccounts), interLink's ServiceAccount that the
// example ClusterRoleBinding sar-bridge-caller-interlink names, the callers' grants,
// and the impersonation grants. Bindings that a test creates itself (to see a 403
// turn into a 200) are not here.
const authnFixtures = `
apiVersion: v1
kind: Namespace
metadata: {name: e2e-authn}
---
apiVersion: v1
kind: Namespace
metadata: {name: interlink}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: interlink, namespace: interlink}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: stranger, namespace: e2e-authn}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: late, namespace: e2e-authn}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: plain, namespace: e2e-authn}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: impersonator, namespace: e2e-authn}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-authn-callers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sar-bridge-caller}
subjects:
  - {kind: ServiceAccount, name: plain, namespace: e2e-authn}
  - {kind: ServiceAccount, name: impersonator, namespace: e2e-authn}
  - {kind: Group, name: e2e-authn-callers, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-authn-impersonate-alice}
rules:
  - {apiGroups: [""], resources: ["users"], verbs: ["impersonate"], resourceNames: ["alice"]}
  - {apiGroups: [""], resources: ["groups"], verbs: ["impersonate"], resourceNames: ["devs"]}
  - {apiGroups: ["authentication.k8s.io"], resources: ["userextras/scopes"], verbs: ["impersonate"], resourceNames: ["view"]}
  - {apiGroups: ["authentication.k8s.io"], resources: ["uids"], verbs: ["impersonate"], resourceNames: ["u-alice"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-authn-impersonate-alice}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-authn-impersonate-alice}
subjects:
  - {kind: ServiceAccount, name: impersonator, namespace: e2e-authn}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: e2e-authn-impersonate-runner, namespace: team-a}
rules:
  - {apiGroups: [""], resources: ["serviceaccounts"], verbs: ["impersonate"], resourceNames: ["runner"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e-authn-impersonate-runner, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: e2e-authn-impersonate-runner}
subjects:
  - {kind: ServiceAccount, name: impersonator, namespace: e2e-authn}
`

// The example tenant's runner, allowed by manifests/examples.
const authnOffloadA = `RBAC: allowed by RoleBinding "offload/team-a" of ClusterRole "interlink-offloader" to ServiceAccount "runner/team-a"`

// authnTokenArgs start a token-mode bridge whose refusals are not kept long, so a
// binding created during a test is seen within about a second.
var authnTokenArgs = []string{"--authn.mode=token", "--authn.denied-cache-ttl=1s", "--cache.denied-ttl=1s"}

// authnSetup applies the example caller ClusterRole (rendered from manifests/examples,
// checked to grant exactly create on /v1/data/interlink/authz/*) with its example
// binding, then the fixtures above, and waits until the API server's RBAC sees them.
func authnSetup(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	objs, err := cluster.Render(filepath.Join(suite.root, "manifests", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	role := find[rbacv1.ClusterRole](t, objs, "ClusterRole", "sar-bridge-caller")
	wantRules := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/v1/data/interlink/authz/*"}, Verbs: []string{"create"}}}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].NonResourceURLs, wantRules[0].NonResourceURLs) ||
		!slices.Equal(role.Rules[0].Verbs, wantRules[0].Verbs) || len(role.Rules[0].Resources) > 0 {
		t.Fatalf("manifests/examples ClusterRole sar-bridge-caller rules %+v, want %+v", role.Rules, wantRules)
	}
	binding := find[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "sar-bridge-caller-interlink")
	if binding.RoleRef.Name != "sar-bridge-caller" || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Namespace != "interlink" || binding.Subjects[0].Name != "interlink" {
		t.Fatalf("manifests/examples ClusterRoleBinding sar-bridge-caller-interlink: %+v", binding)
	}
	callerObjs := cluster.Filter(objs, func(o *unstructured.Unstructured) bool {
		return o.GetName() == "sar-bridge-caller" || o.GetName() == "sar-bridge-caller-interlink"
	})
	if err := suite.cluster.Apply(ctx, callerObjs); err != nil {
		t.Fatal(err)
	}
	if _, err := suite.cluster.ApplyYAML(ctx, authnFixtures); err != nil {
		t.Fatalf("authn fixtures: %v", err)
	}
	for _, u := range []string{sa("interlink", "interlink"), sa(authnNS, "plain"), sa(authnNS, "impersonator")} {
		authnWaitCaller(t, u, cluster.ServiceAccountGroups(strings.Split(u, ":")[2]), cluster.DecisionPath, true)
	}
	authnWaitCaller(t, "someone", []string{"e2e-authn-callers"}, cluster.DecisionPath, true)
	imp := sa(authnNS, "impersonator")
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "users", Name: "alice"},
		{Verb: "impersonate", Resource: "groups", Name: "devs"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: "scopes", Name: "view"},
		{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "team-a", Name: "runner"},
		{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "uids", Name: "u-alice"},
	} {
		if err := suite.cluster.WaitForAccess(ctx, imp, cluster.ServiceAccountGroups(authnNS), a, true, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// authnCanCall asks the API server whether user may create path (nonResourceURL).
func authnCanCall(ctx context.Context, user string, groups []string, path string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "create"},
	}}
	res, err := suite.cluster.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return res.Status.Allowed, nil
}

// authnWaitCaller waits until the API server's answer to authnCanCall is want.
func authnWaitCaller(t *testing.T, user string, groups []string, path string, want bool) {
	t.Helper()
	var last error
	if took, ok := poll(20*time.Second, 100*time.Millisecond, func() bool {
		got, err := authnCanCall(context.Background(), user, groups, path)
		last = err
		return err == nil && got == want
	}); !ok {
		t.Fatalf("create %s for %s did not become %v within %s (err %v)", path, user, want, took, last)
	}
}

// authnToken mints a TokenRequest token for a ServiceAccount.
func authnToken(t *testing.T, ns, name string) string {
	t.Helper()
	tok, err := suite.cluster.ServiceAccountToken(context.Background(), ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// authnApplyTemp applies YAML and deletes it at the end of the test.
func authnApplyTemp(t *testing.T, yaml string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := suite.cluster.ApplyYAML(context.Background(), yaml)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), objs) })
	return objs
}

// authnDeleteYAML deletes the objects of yaml if they exist (a rerun's leftovers).
func authnDeleteYAML(t *testing.T, yaml string) {
	t.Helper()
	objs, err := cluster.ParseYAML(yaml)
	if err != nil {
		t.Fatal(err)
	}
	if err := suite.cluster.Delete(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
}

// authnError checks an error answer: status, code "unauthorized", the exact message,
// and no decision.
func authnError(t *testing.T, r *cluster.Response, status int, message string) {
	t.Helper()
	if r.Status != status || r.Error.Code != "unauthorized" || r.Error.Message != message {
		t.Errorf("want HTTP %d {code: unauthorized, message: %q}, got %s", status, message, r)
	}
	if r.Result != nil || r.DecisionID != "" {
		t.Errorf("an error answer carries a decision: %s", r)
	}
}

// authnDecide posts input as c and checks the decision.
func authnDecide(t *testing.T, c *cluster.Caller, in map[string]any, w want) *cluster.Response {
	t.Helper()
	r, err := c.Decide(in)
	if err != nil {
		t.Fatalf("POST decision: %v", err)
	}
	checkDecision(t, r, w)
	return r
}

// authnRefused posts input as c and checks the error answer.
func authnRefused(t *testing.T, c *cluster.Caller, in map[string]any, status int, message string) http.Header {
	t.Helper()
	r, h, err := c.DecideAt(cluster.DecisionPath, in)
	if err != nil {
		t.Fatalf("POST decision: %v", err)
	}
	authnError(t, r, status, message)
	return h
}

// authnPollDecision posts input as c until the answer is a 200 with allowed == want
// (at most 15s) and returns it.
func authnPollDecision(t *testing.T, c *cluster.Caller, in map[string]any, allowed bool) (*cluster.Response, time.Duration) {
	t.Helper()
	var last *cluster.Response
	took, ok := poll(15*time.Second, 200*time.Millisecond, func() bool {
		r, err := c.Decide(in)
		if err != nil {
			t.Fatalf("POST decision: %v", err)
		}
		last = r
		return r.Status == http.StatusOK && r.Result != nil && r.Allowed() == allowed
	})
	if !ok {
		t.Fatalf("no 200 with allowed=%v within %s; last %s", allowed, took, last)
	}
	return last, took
}

// authnHealth checks that /health answers 200 {} as c.
func authnHealth(t *testing.T, c *cluster.Caller) {
	t.Helper()
	code, _, body, err := c.Do(http.MethodGet, "/health", "", nil)
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	if code != http.StatusOK || strings.TrimSpace(string(body)) != "{}" {
		t.Errorf("GET /health: HTTP %d %s, want 200 {}", code, body)
	}
}

func authnWithUser(u map[string]any) func(map[string]any) {
	return func(in map[string]any) { in["user"] = u }
}

// Case 1: --authn.mode=token. Callers need a token the API server accepts and "create"
// on the path they call; /health needs nothing.
func TestAuthnToken(t *testing.T) {
	authnSetup(t)
	b := newBridge(t, authnTokenArgs...)
	in := input("create", newPod("team-a", "runner", "authn-1"))

	t.Run("no Authorization header", func(t *testing.T) {
		h := authnRefused(t, cluster.NewCaller(b.URL, nil, ""), in, http.StatusUnauthorized, "missing bearer token")
		if got := h.Get("WWW-Authenticate"); got != "Bearer" {
			t.Errorf("WWW-Authenticate %q, want Bearer", got)
		}
	})
	t.Run("Basic credentials", func(t *testing.T) {
		c := cluster.NewCaller(b.URL, nil, "")
		c.Header = http.Header{"Authorization": {"Basic YWRtaW46YWRtaW4="}} // admin:admin
		authnRefused(t, c, in, http.StatusUnauthorized, "missing bearer token")
	})
	t.Run("garbage token", func(t *testing.T) {
		h := authnRefused(t, cluster.NewCaller(b.URL, nil, "not-a-token"), in, http.StatusUnauthorized, "invalid bearer token")
		if got := h.Get("WWW-Authenticate"); got != "Bearer" {
			t.Errorf("WWW-Authenticate %q, want Bearer", got)
		}
	})
	t.Run("token for another audience", func(t *testing.T) {
		// A genuine ServiceAccount token, but minted for another service: the
		// TokenReview (API server's audiences) must reject it.
		exp := int64(3600)
		tr, err := suite.cluster.Client.CoreV1().ServiceAccounts("interlink").CreateToken(context.Background(), "interlink",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"not-sar-bridge"}, ExpirationSeconds: &exp}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		authnRefused(t, cluster.NewCaller(b.URL, nil, tr.Status.Token), in, http.StatusUnauthorized, "invalid bearer token")
	})
	t.Run("valid token without the caller ClusterRole", func(t *testing.T) {
		user := sa(authnNS, "stranger")
		c := cluster.NewCaller(b.URL, nil, authnToken(t, authnNS, "stranger"))
		authnRefused(t, c, in, http.StatusForbidden, `caller "`+user+`" may not create `+cluster.DecisionPath)
		// The pod's own permissions do not matter: a caller without the grant learns nothing.
		authnRefused(t, c, input("create", newPod("team-a", "other", "authn-2")), http.StatusForbidden,
			`caller "`+user+`" may not create `+cluster.DecisionPath)
	})

	interlink := cluster.NewCaller(b.URL, nil, authnToken(t, "interlink", "interlink"))
	t.Run("interLink bound by manifests/examples", func(t *testing.T) {
		authnDecide(t, interlink, in, allow(authnOffloadA))
		authnDecide(t, interlink, input("delete", newPod("team-a", "runner", "authn-1")), allow(authnOffloadA))
		authnDecide(t, interlink, input("create", newPod("team-a", "other", "authn-3")),
			deny(mayNot(sa("team-a", "other"), "create", "pods.interlink.io", "team-a")...))
		// data.interlink.authz.allow is under the granted prefix too.
		r, _, err := interlink.DecideAt("/v1/data/interlink/authz/allow", in)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Result *bool `json:"result"`
		}
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &got) != nil || got.Result == nil || !*got.Result {
			t.Errorf("allow document: want 200 {\"result\": true}, got %s", r)
		}
	})
	t.Run("path outside the grant", func(t *testing.T) {
		for _, p := range []string{"/v1/data/system/main", "/v1/data/interlink/other/decision", "/v1/data/interlink/authz"} {
			r, _, err := interlink.DecideAt(p, in)
			if err != nil {
				t.Fatal(err)
			}
			authnError(t, r, http.StatusForbidden, `caller "`+sa("interlink", "interlink")+`" may not create `+p)
		}
	})
	t.Run("binding created while the bridge runs", func(t *testing.T) {
		const lateBinding = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-authn-late}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sar-bridge-caller}
subjects:
  - {kind: ServiceAccount, name: late, namespace: e2e-authn}
`
		user := sa(authnNS, "late")
		authnDeleteYAML(t, lateBinding)
		authnWaitCaller(t, user, cluster.ServiceAccountGroups(authnNS), cluster.DecisionPath, false)
		c := cluster.NewCaller(b.URL, nil, authnToken(t, authnNS, "late"))
		authnRefused(t, c, in, http.StatusForbidden, `caller "`+user+`" may not create `+cluster.DecisionPath)
		authnApplyTemp(t, lateBinding)
		authnWaitCaller(t, user, cluster.ServiceAccountGroups(authnNS), cluster.DecisionPath, true)
		r, took := authnPollDecision(t, c, in, true)
		checkDecision(t, r, allow(authnOffloadA))
		t.Logf("caller allowed %s after its ClusterRoleBinding reached the API server's RBAC", took.Round(time.Millisecond))
	})
	t.Run("front-proxy headers are no credentials", func(t *testing.T) {
		c := cluster.NewCaller(b.URL, nil, "")
		c.Header = http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}}
		authnRefused(t, c, in, http.StatusUnauthorized, "missing bearer token")
	})
	t.Run("/health needs no token", func(t *testing.T) {
		authnHealth(t, cluster.NewCaller(b.URL, nil, ""))
		authnHealth(t, cluster.NewCaller(b.URL, nil, "not-a-token"))
	})
}

// With no authenticated caller (authn none, the shared bridge on loopback) input.user
// is refused outright.
func TestImpersonationWithoutCaller(t *testing.T) {
	b := shared(t)
	r, err := b.Decide(input("create", newPod("team-a", "other", "imp-0"),
		authnWithUser(map[string]any{"username": "alice", "groups": []string{"devs"}})))
	if err != nil {
		t.Fatal(err)
	}
	authnError(t, r, http.StatusForbidden, "input.user needs an authenticated caller (--authn.mode token or mtls) that may impersonate it")
}

// Case 2: input.user is honoured only when the caller may impersonate the user, each
// group, each extra and the uid; then the user's own RBAC decides.
func TestImpersonation(t *testing.T) {
	authnSetup(t)
	b := newBridge(t, authnTokenArgs...)
	plainUser, impUser := sa(authnNS, "plain"), sa(authnNS, "impersonator")
	plain := cluster.NewCaller(b.URL, nil, authnToken(t, authnNS, "plain"))
	imp := cluster.NewCaller(b.URL, nil, authnToken(t, authnNS, "impersonator"))
	// The pod's ServiceAccount "other" may not offload: an allow can only be alice's.
	pod := newPod("team-a", "other", "imp-1")
	alice := map[string]any{"username": "alice", "groups": []string{"devs"}}

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			caller *cluster.Caller
			user   map[string]any
			msg    string
		}{
			{"caller without impersonate rights", plain, alice,
				`caller "` + plainUser + `" may not impersonate user "alice", group "devs"`},
			{"caller without impersonate rights, ServiceAccount user", plain, map[string]any{"username": sa("team-a", "runner")},
				`caller "` + plainUser + `" may not impersonate user "` + sa("team-a", "runner") + `"`},
			{"another user", imp, map[string]any{"username": "bob", "groups": []string{"devs"}},
				`caller "` + impUser + `" may not impersonate user "bob"`},
			{"another group", imp, map[string]any{"username": "alice", "groups": []string{"devs", "admins"}},
				`caller "` + impUser + `" may not impersonate group "admins"`},
			{"system:masters", imp, map[string]any{"username": "alice", "groups": []string{"system:masters"}},
				`caller "` + impUser + `" may not impersonate group "system:masters"`},
			{"extra value and uid", imp, map[string]any{"username": "alice", "groups": []string{"devs"}, "uid": "u-1",
				"extra": map[string][]string{"scopes": {"view", "admin"}}},
				`caller "` + impUser + `" may not impersonate extra scopes="admin", uid "u-1"`},
			{"another ServiceAccount", imp, map[string]any{"username": sa("team-a", "other")},
				`caller "` + impUser + `" may not impersonate user "` + sa("team-a", "other") + `"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				authnRefused(t, tc.caller, input("create", pod, authnWithUser(tc.user)), http.StatusForbidden, tc.msg)
			})
		}
	})

	t.Run("alice's own RBAC decides", func(t *testing.T) {
		const aliceBinding = `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e-authn-alice, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
`
		aliceCreate := authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}
		ctx := context.Background()
		authnDeleteYAML(t, aliceBinding)
		if err := suite.cluster.WaitForAccess(ctx, "alice", []string{"devs"}, aliceCreate, false, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		in := input("create", pod, authnWithUser(alice))
		authnDecide(t, imp, in, deny(mayNot("alice", "create", "pods.interlink.io", "team-a")...))

		authnApplyTemp(t, aliceBinding)
		if err := suite.cluster.WaitForAccess(ctx, "alice", []string{"devs"}, aliceCreate, true, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		r, took := authnPollDecision(t, imp, in, true)
		const aliceReason = `RBAC: allowed by RoleBinding "e2e-authn-alice/team-a" of ClusterRole "interlink-offloader" to User "alice"`
		checkDecision(t, r, allow(aliceReason))
		t.Logf("alice allowed %s after her RoleBinding reached the API server's RBAC", took.Round(time.Millisecond))
		// An extra value and a uid the caller may impersonate are vouched for too.
		authnDecide(t, imp, input("create", pod, authnWithUser(map[string]any{"username": "alice", "groups": []string{"devs"},
			"uid": "u-alice", "extra": map[string][]string{"scopes": {"view"}}})), allow(aliceReason))
		// alice is only bound in team-a.
		authnDecide(t, imp, input("create", newPod("project-b", "runner", "imp-2"), authnWithUser(alice)),
			deny(mayNot("alice", "create", "pods.tenant-b.interlink.io", "project-b")...))
	})

	t.Run("Kubernetes impersonation headers are not honoured", func(t *testing.T) {
		// The bridge's own impersonation is input.user; Impersonate-* headers must not
		// change the caller or the subject.
		c := cluster.NewCaller(b.URL, nil, authnToken(t, authnNS, "plain"))
		c.Header = http.Header{"Impersonate-User": {"alice"}, "Impersonate-Group": {"system:masters"}}
		authnDecide(t, c, input("create", pod), deny(mayNot(sa("team-a", "other"), "create", "pods.interlink.io", "team-a")...))
		authnRefused(t, c, input("create", pod, authnWithUser(alice)), http.StatusForbidden,
			`caller "`+plainUser+`" may not impersonate user "alice", group "devs"`)
	})

	t.Run("input.user without a username", func(t *testing.T) {
		r, err := imp.Decide(input("create", pod, authnWithUser(map[string]any{"groups": []string{"devs"}})))
		if err != nil {
			t.Fatal(err)
		}
		checkError(t, r, http.StatusBadRequest, "invalid_parameter")
	})

	t.Run("ServiceAccount user via serviceaccounts impersonation", func(t *testing.T) {
		authnDecide(t, imp, input("create", pod, authnWithUser(map[string]any{"username": sa("team-a", "runner")})), allow(authnOffloadA))
	})

	t.Run("without input.user the pod's ServiceAccount decides", func(t *testing.T) {
		for _, c := range []*cluster.Caller{plain, imp} {
			authnDecide(t, c, input("create", newPod("team-a", "runner", "imp-3")), allow(authnOffloadA))
			authnDecide(t, c, input("create", pod), deny(mayNot(sa("team-a", "other"), "create", "pods.interlink.io", "team-a")...))
		}
	})
}

// authnTLSFiles writes a fresh CA's server certificate for 127.0.0.1 into dir and
// returns the CA and the file names.
func authnTLSFiles(t *testing.T, dir string) (ca *cluster.CA, certFile, keyFile string, serving *cluster.KeyPair) {
	t.Helper()
	ca, err := cluster.NewCA("e2e-authn CA")
	if err != nil {
		t.Fatal(err)
	}
	serving, err = ca.ServerCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := serving.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return ca, certFile, keyFile, serving
}

func authnClientCert(t *testing.T, ca *cluster.CA, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	kp, err := ca.ClientCert(cn, orgs...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Case 3: --authn.mode=mtls. The client certificate names the caller (CN user, O
// groups); the caller still needs "create" on the path.
func TestMTLS(t *testing.T) {
	authnSetup(t)
	dir := t.TempDir()
	ca, certFile, keyFile, _ := authnTLSFiles(t, dir)
	caFile := filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBridge(t, "--authn.mode=mtls", "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile,
		"--tls.client-ca-file="+caFile, "--authn.denied-cache-ttl=1s", "--cache.denied-ttl=1s")
	in := input("create", newPod("team-a", "runner", "mtls-1"))
	url := b.HTTPSURL()

	t.Run("client certificate without a binding, then with one", func(t *testing.T) {
		const clientBinding = `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-authn-mtls-client}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sar-bridge-caller}
subjects:
  - {kind: User, name: interlink-client, apiGroup: rbac.authorization.k8s.io}
`
		authnDeleteYAML(t, clientBinding)
		authnWaitCaller(t, "interlink-client", []string{"callers"}, cluster.DecisionPath, false)
		c := cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool(), authnClientCert(t, ca, "interlink-client", "callers")), "")
		authnRefused(t, c, in, http.StatusForbidden, `caller "interlink-client" may not create `+cluster.DecisionPath)

		authnApplyTemp(t, clientBinding)
		authnWaitCaller(t, "interlink-client", []string{"callers"}, cluster.DecisionPath, true)
		r, took := authnPollDecision(t, c, in, true)
		checkDecision(t, r, allow(authnOffloadA))
		t.Logf("certificate caller allowed %s after its ClusterRoleBinding reached the API server's RBAC", took.Round(time.Millisecond))
		authnDecide(t, c, input("create", newPod("team-a", "other", "mtls-2")),
			deny(mayNot(sa("team-a", "other"), "create", "pods.interlink.io", "team-a")...))
	})
	t.Run("O is the caller's group", func(t *testing.T) {
		// Bound only through the group e2e-authn-callers (fixtures).
		c := cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool(), authnClientCert(t, ca, "group-member", "e2e-authn-callers")), "")
		authnDecide(t, c, in, allow(authnOffloadA))
		// The same user name without the group is refused.
		c = cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool(), authnClientCert(t, ca, "group-member", "nobody")), "")
		authnRefused(t, c, in, http.StatusForbidden, `caller "group-member" may not create `+cluster.DecisionPath)
	})
	t.Run("no client certificate", func(t *testing.T) {
		authnRefused(t, cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool()), ""), in, http.StatusUnauthorized, "missing client certificate")
	})
	t.Run("front-proxy headers instead of a certificate", func(t *testing.T) {
		c := cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool()), "")
		c.Header = http.Header{"X-Remote-User": {"interlink-client"}, "X-Remote-Group": {"e2e-authn-callers"}}
		authnRefused(t, c, in, http.StatusUnauthorized, "missing client certificate")
	})
	t.Run("bearer token instead of a certificate", func(t *testing.T) {
		// mtls mode ignores tokens, even one the API server accepts for a bound caller.
		c := cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool()), authnToken(t, "interlink", "interlink"))
		authnRefused(t, c, in, http.StatusUnauthorized, "missing client certificate")
	})
	t.Run("certificate from another CA", func(t *testing.T) {
		other, err := cluster.NewCA("e2e-authn foreign CA")
		if err != nil {
			t.Fatal(err)
		}
		// Same user and group as bound callers, signed by a CA the bridge does not trust.
		foreign := authnClientCert(t, other, "interlink-client", "e2e-authn-callers")
		// A client that sends it whatever CAs the server asks for: refused in the handshake.
		cfg := cluster.ClientTLSConfig(ca.Pool())
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreign, nil }
		if r, err := cluster.NewCaller(url, cfg, "").Decide(in); err == nil || !strings.Contains(err.Error(), "tls: unknown certificate authority") {
			t.Errorf("want the TLS handshake refused with unknown certificate authority, got error %v, answer %v", err, r)
		}
		// Go's default client sends no certificate the server's CA list does not name:
		// then it is a request without a certificate.
		authnRefused(t, cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool(), foreign), ""), in,
			http.StatusUnauthorized, "missing client certificate")
	})
	t.Run("/health needs no certificate", func(t *testing.T) {
		authnHealth(t, cluster.NewCaller(url, cluster.ClientTLSConfig(ca.Pool()), ""))
	})
	t.Run("client CA file replaced", func(t *testing.T) {
		// The bundle now holds only a new CA: its certificates are accepted without a
		// restart, the old CA's are refused. Both certificates name a bound group.
		next, err := cluster.NewCA("e2e-authn next client CA")
		if err != nil {
			t.Fatal(err)
		}
		forced := func(cert tls.Certificate) *cluster.Caller {
			cfg := cluster.ClientTLSConfig(ca.Pool())
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
			return cluster.NewCaller(url, cfg, "")
		}
		oldCert := authnClientCert(t, ca, "group-member", "e2e-authn-callers")
		newCert := authnClientCert(t, next, "group-member", "e2e-authn-callers")
		authnDecide(t, forced(oldCert), in, allow(authnOffloadA))
		if err := cluster.WriteFileAtomic(caFile, next.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		var lastErr error
		var last *cluster.Response
		took, ok := poll(10*time.Second, 200*time.Millisecond, func() bool {
			last, lastErr = forced(newCert).Decide(in)
			return lastErr == nil && last.Status == http.StatusOK
		})
		if !ok {
			t.Fatalf("certificate of the new client CA not accepted %s after the CA file was replaced: %v %v", took, lastErr, last)
		}
		checkDecision(t, last, allow(authnOffloadA))
		t.Logf("new client CA accepted %s after the file was replaced", took.Round(time.Millisecond))
		if r, err := forced(oldCert).Decide(in); err == nil || !strings.Contains(err.Error(), "tls: unknown certificate authority") {
			t.Errorf("certificate of the replaced CA: want the TLS handshake refused, got error %v, answer %v", err, r)
		}
	})
}

// When the API server cannot answer, callers get 503 internal_error, never a decision
// and never a pass: a token that is not cached cannot be reviewed, a cached caller's
// impersonation check or decision review cannot be made.
func TestAuthnAPIServerOutage(t *testing.T) {
	authnSetup(t)
	b := newBridge(t, append(authnTokenArgs, "--cache.allowed-ttl=1s", "--review.timeout=2s")...)
	c := suite.cluster
	imp := cluster.NewCaller(b.URL, nil, authnToken(t, authnNS, "impersonator"))
	fresh := cluster.NewCaller(b.URL, nil, authnToken(t, authnNS, "plain"))
	// The impersonator's token and path grant are now cached for --authn.cache-ttl (2m).
	authnDecide(t, imp, input("create", newPod("team-a", "runner", "outage-a")), allow(authnOffloadA))

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
	time.Sleep(1100 * time.Millisecond) // the warm-up review expires

	for _, tc := range []struct {
		name   string
		caller *cluster.Caller
		in     map[string]any
		prefix string
	}{
		{"token not cached", fresh, input("create", newPod("team-a", "runner", "outage-a")), "caller authentication is unavailable"},
		{"impersonation check", imp, input("create", newPod("team-a", "other", "outage-b"),
			authnWithUser(map[string]any{"username": "alice", "groups": []string{"devs"}})), "impersonation review failed:"},
		{"decision review", imp, input("create", newPod("team-a", "runner", "outage-a")), "subject access review failed:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.caller.Decide(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusServiceUnavailable || r.Error.Code != "internal_error" || !strings.HasPrefix(r.Error.Message, tc.prefix) {
				t.Errorf("want 503 internal_error %q..., got %s", tc.prefix, r)
			}
			if r.Result != nil || r.Elapsed > 5*time.Second {
				t.Errorf("answer %s after %s", r, r.Elapsed)
			}
		})
	}
	authnHealth(t, cluster.NewCaller(b.URL, nil, ""))

	if err := c.StartAPIServer(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	restarted = true
	var last *cluster.Response
	took, ok := poll(30*time.Second, 250*time.Millisecond, func() bool {
		r, err := fresh.Decide(input("create", newPod("team-a", "runner", "outage-a")))
		if err != nil {
			t.Fatalf("POST decision: %v", err)
		}
		last = r
		return r.Status == http.StatusOK
	})
	if !ok {
		t.Fatalf("no recovery %s after the API server came back; last %s", took, last)
	}
	checkDecision(t, last, allow(authnOffloadA))
	t.Logf("fresh caller answered %s after the API server was back", took.Round(time.Millisecond))
}

// Case 4: the public listener's certificate is re-read from disk; a new connection
// gets the new certificate without a restart, and a broken file keeps the last good one.
func TestTLSCertificateReload(t *testing.T) {
	dir := t.TempDir()
	ca, certFile, keyFile, first := authnTLSFiles(t, dir)
	b := newBridge(t, "--authn.mode=none", "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile, "--tls.reload-interval=1s")
	cfg := &tls.Config{RootCAs: ca.Pool()}
	serial := func() string {
		st, err := cluster.Handshake(b.PublicAddr(), cfg.Clone())
		if err != nil {
			t.Fatalf("TLS handshake: %v", err)
		}
		return st.PeerCertificates[0].SerialNumber.String()
	}
	if got := serial(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serving serial %s, want %s", got, first.Cert.SerialNumber)
	}
	in := input("create", newPod("team-a", "runner", "reload-1"))
	kept := cluster.NewCaller(b.HTTPSURL(), cluster.ClientTLSConfig(ca.Pool()), "")
	authnDecide(t, kept, in, allow(authnOffloadA))

	second, err := ca.ServerCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := second.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	want := second.Cert.SerialNumber.String()
	var last string
	took, ok := poll(8*time.Second, 100*time.Millisecond, func() bool { last = serial(); return last == want })
	if !ok {
		t.Fatalf("new certificate (serial %s) not served within %s; still %s", want, took, last)
	}
	t.Logf("new certificate served %s after it was written", took.Round(time.Millisecond))
	if b.Exited() {
		t.Fatal("the bridge exited")
	}
	authnDecide(t, cluster.NewCaller(b.HTTPSURL(), cluster.ClientTLSConfig(ca.Pool()), ""), in, allow(authnOffloadA))
	authnDecide(t, kept, in, allow(authnOffloadA))

	// A broken pair on disk: the last good certificate keeps serving.
	if err := cluster.WriteFileAtomic(certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if got := serial(); got != want {
		t.Errorf("after a broken certificate file: serving serial %s, want the last good %s", got, want)
	}
	authnDecide(t, cluster.NewCaller(b.HTTPSURL(), cluster.ClientTLSConfig(ca.Pool()), ""), in, allow(authnOffloadA))
	if b.Exited() {
		t.Fatal("the bridge exited after a broken certificate file")
	}
}

// Case 5: TLS 1.3 is the default minimum; a TLS 1.2-only client cannot connect.
func TestTLSMinVersion(t *testing.T) {
	dir := t.TempDir()
	ca, certFile, keyFile, _ := authnTLSFiles(t, dir)
	b := newBridge(t, "--authn.mode=none", "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile)
	_, err := cluster.Handshake(b.PublicAddr(), &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12})
	if err == nil || !strings.Contains(err.Error(), "protocol version not supported") {
		t.Errorf("TLS 1.2-only client: want the handshake refused (protocol version), got %v", err)
	}
	c := cluster.NewCaller(b.HTTPSURL(), &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12}, "")
	if r, err := c.Decide(input("create", newPod("team-a", "runner", "tls-1"))); err == nil {
		t.Errorf("TLS 1.2-only client got an answer: %s", r)
	}
	st, err := cluster.Handshake(b.PublicAddr(), &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != tls.VersionTLS13 {
		t.Errorf("negotiated %s, want TLS 1.3", tls.VersionName(st.Version))
	}
	authnDecide(t, cluster.NewCaller(b.HTTPSURL(), cluster.ClientTLSConfig(ca.Pool()), ""),
		input("create", newPod("team-a", "runner", "tls-2")), allow(authnOffloadA))
}

// --tls.min-version=VersionTLS12 with --tls.cipher-suites: TLS 1.2 clients get only the
// listed suites.
func TestTLSCipherSuites(t *testing.T) {
	dir := t.TempDir()
	ca, certFile, keyFile, _ := authnTLSFiles(t, dir) // ECDSA P-256 key
	b := newBridge(t, "--authn.mode=none", "--tls.server.cert-file="+certFile, "--tls.server.key-file="+keyFile,
		"--tls.min-version=VersionTLS12", "--tls.cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
	tls12 := func(suites ...uint16) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12, CipherSuites: suites}
	}
	st, err := cluster.Handshake(b.PublicAddr(), tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256))
	if err != nil {
		t.Fatalf("TLS 1.2 client offering the listed suite: %v", err)
	}
	if st.Version != tls.VersionTLS12 || st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {
		t.Errorf("negotiated %s %s, want TLS 1.2 TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite))
	}
	for _, s := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if _, err := cluster.Handshake(b.PublicAddr(), tls12(s)); err == nil || !strings.Contains(err.Error(), "handshake failure") {
			t.Errorf("TLS 1.2 client offering only %s: want a handshake failure, got %v", tls.CipherSuiteName(s), err)
		}
	}
	if st, err := cluster.Handshake(b.PublicAddr(), &tls.Config{RootCAs: ca.Pool()}); err != nil || st.Version != tls.VersionTLS13 {
		t.Errorf("TLS 1.3 client: %v (version %s)", err, tls.VersionName(st.Version))
	}
	authnDecide(t, cluster.NewCaller(b.HTTPSURL(), tls12(tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256), ""),
		input("create", newPod("team-a", "runner", "tls-3")), allow(authnOffloadA))
}
