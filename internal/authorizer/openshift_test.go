package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
)

type namespaceList []string

func (n namespaceList) NamespaceNames() ([]string, error) { return n, nil }

// logsRBAC allows "user verb namespace" triples on logs of the application tenant in
// loki.grafana.com; namespace "" is a cluster-wide grant, which covers every namespace.
func logsRBAC(grants ...string) func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	return func(s authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		a := s.ResourceAttributes
		if a.Group != "loki.grafana.com" || (a.Resource != "application" && a.Resource != "audit") || a.Name != "logs" {
			return authorizationv1.SubjectAccessReviewStatus{}, nil
		}
		for _, g := range grants {
			if g == fmt.Sprintf("%s %s %s", s.User, a.Verb, a.Namespace) || g == fmt.Sprintf("%s %s ", s.User, a.Verb) {
				return authorizationv1.SubjectAccessReviewStatus{Allowed: true}, nil
			}
		}
		return authorizationv1.SubjectAccessReviewStatus{}, nil
	}
}

func newOpenShiftAuthorizer(t *testing.T, cfg OpenShiftConfig, rev *fakeReviewer, ssar OpenShiftSSAR) *Authorizer {
	t.Helper()
	mappings, err := mapping.Parse([]string{"application=loki.grafana.com", "audit=loki.grafana.com"})
	if err != nil {
		t.Fatal(err)
	}
	cr := NewCachingReviewer(rev, cache.NewMemory(100), CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
	a := New(Config{Mappings: mappings, TenantLabel: "interlink.io/tenant"}, cr, newView(), nil, nil, nil)
	if cfg.Path == nil {
		cfg.Path = []string{"lokistack", "allow"}
	}
	a.EnableOpenShift(cfg, namespaceList{"kube-system", "ns1", "ns2", "ns3"}, ssar)
	return a
}

func lokiInput(subject, permission, tenant, extras string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"groups":["system:authenticated"],"permission":%q,"resource":"logs","subject":%q,"tenant":%q,"tenantID":%q,"token":"","extras":{%s}}`,
		permission, subject, tenant, tenant, extras))
}

func matcherJSON(value, op string, names ...string) map[string]any {
	data := matcherData{MatcherOp: op}
	for _, n := range names {
		data.Matchers = append(data.Matchers, matcher{Type: 2, Name: n, Value: value})
	}
	b, _ := json.Marshal(data)
	allowed := "false"
	if value != "" {
		allowed = "true"
	}
	return map[string]any{"allowed": allowed, "data": string(b)}
}

func TestOpenShiftDecisions(t *testing.T) {
	const ns = "kubernetes_namespace_name"
	loki := OpenShiftConfig{Matchers: []string{ns}, SkipTenants: []string{"audit"}, AdminGroups: []string{"cluster-admin"}}
	tests := []struct {
		name   string
		cfg    OpenShiftConfig
		grants []string
		input  json.RawMessage
		want   any
		// wantReviews lists the namespaces reviewed, "" for cluster-wide.
		wantReviews []string
	}{
		{name: "no matcher: cluster-wide read allowed", grants: []string{"alice get "}, input: lokiInput("alice", "read", "application", ""),
			want: true, wantReviews: []string{""}},
		{name: "no matcher: denied", input: lokiInput("alice", "read", "application", ""), want: false, wantReviews: []string{""}},
		{name: "write is the cluster-wide create review alone", cfg: loki, grants: []string{"alice create "},
			input: lokiInput("alice", "write", "application", ""), want: true, wantReviews: []string{""}},
		{name: "write denied", cfg: loki, grants: []string{"alice get "}, input: lokiInput("alice", "write", "application", ""),
			want: false, wantReviews: []string{""}},
		{name: "matcher: cluster-wide reader gets every namespace", cfg: loki, grants: []string{"alice get "},
			input: lokiInput("alice", "read", "application", ""), want: matcherJSON("kube-system|ns1|ns2|ns3", "", ns), wantReviews: []string{""}},
		{name: "matcher: cluster-wide reader, selectors narrow to existing namespaces", cfg: loki, grants: []string{"alice get "},
			input: lokiInput("alice", "read", "application", `"selectors":{"kubernetes_namespace_name":["ns2","ghost","ns1"]}`),
			want:  matcherJSON("ns1|ns2", "", ns), wantReviews: []string{""}},
		{name: "matcher: namespace reader gets the allowed selected namespaces", cfg: loki, grants: []string{"bob get ns1", "bob get ns3"},
			input: lokiInput("bob", "read", "application", `"selectors":{"kubernetes_namespace_name":["ns1","ns2"]}`),
			want:  matcherJSON("ns1", "", ns), wantReviews: []string{"", "ns1", "ns2"}},
		{name: "matcher: no selected namespace allowed", cfg: loki, grants: []string{"bob get ns3"},
			input: lokiInput("bob", "read", "application", `"selectors":{"kubernetes_namespace_name":["ns1"]}`),
			want:  false, wantReviews: []string{"", "ns1"}},
		{name: "matcher: no selectors and no cluster-wide access", cfg: loki, grants: []string{"bob get ns3"},
			input: lokiInput("bob", "read", "application", ""), want: false, wantReviews: []string{""}},
		{name: "metadata-only without selectors reviews every namespace", cfg: loki, grants: []string{"bob get ns3"},
			input: lokiInput("bob", "read", "application", `"metadataOnly":true`), want: matcherJSON("ns3", "", ns),
			wantReviews: []string{"", "kube-system", "ns1", "ns2", "ns3"}},
		{name: "skip-tenant: no matcher", cfg: loki, grants: []string{"alice get "}, input: lokiInput("alice", "read", "audit", ""),
			want: true, wantReviews: []string{""}},
		{name: "admin group: no matcher", cfg: loki, grants: []string{"root get "},
			input: json.RawMessage(`{"subject":"root","groups":["cluster-admin"],"permission":"read","resource":"logs","tenant":"application"}`),
			want:  true, wantReviews: []string{""}},
		{name: "namespace access without matcher is a plain true", grants: []string{"bob get ns1"},
			input: lokiInput("bob", "read", "application", `"selectors":{"kubernetes_namespace_name":["ns1"]}`), want: true,
			wantReviews: []string{"", "ns1"}},
		{name: "matcher op and two names", cfg: OpenShiftConfig{Matchers: []string{"SrcK8S_Namespace", "DstK8S_Namespace"}, MatcherOp: "or"},
			grants: []string{"bob get ns2"}, input: lokiInput("bob", "read", "application", `"selectors":{"SrcK8S_Namespace":["ns2"],"DstK8S_Namespace":["ns1"]}`),
			want: matcherJSON("ns2", "or", "SrcK8S_Namespace", "DstK8S_Namespace"), wantReviews: []string{"", "ns1", "ns2"}},
		{name: "migration keeps the OTel name when its selector is used",
			cfg:    OpenShiftConfig{Matchers: []string{ns, "k8s_namespace_name"}, ViaQToOTelMigration: true},
			grants: []string{"bob get ns1"}, input: lokiInput("bob", "read", "application", `"selectors":{"k8s_namespace_name":["ns1"]}`),
			want: matcherJSON("ns1", "", "k8s_namespace_name"), wantReviews: []string{"", "ns1"}},
		{name: "unmapped tenant: denied without review", cfg: loki, input: lokiInput("alice", "read", "network", ""), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := &fakeReviewer{answer: logsRBAC(tt.grants...)}
			a := newOpenShiftAuthorizer(t, tt.cfg, rev, OpenShiftSSAR{})
			d, err := a.Decide(context.Background(), Request{Path: []string{"lokistack", "allow"}, Input: tt.input})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Defined || d.ID != "" {
				t.Errorf("decision defined=%v id=%q; want defined, no decision id (opa-openshift sends none)", d.Defined, d.ID)
			}
			checkResult(t, jsonOf(d.Result), tt.want)
			checkReviewedNamespaces(t, rev.specs, tt.wantReviews)
		})
	}
}

// The byte-level answer observatorium's client type-asserts: strings for allowed and data.
func TestOpenShiftMatcherBytes(t *testing.T) {
	m := &openshiftMode{cfg: OpenShiftConfig{MatcherOp: "or"}}
	got, _ := json.Marshal(m.matcherResult([]string{"kubernetes_namespace_name"}, []string{"ns1", "ns2"}))
	want := `{"allowed":"true","data":"{\"matchers\":[{\"Type\":2,\"Name\":\"kubernetes_namespace_name\",\"Value\":\"ns1|ns2\"}],\"matcherOp\":\"or\"}"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	got, _ = json.Marshal((&openshiftMode{}).matcherResult([]string{"kubernetes_namespace_name"}, nil))
	want = `{"allowed":"false","data":"{\"matchers\":[{\"Type\":2,\"Name\":\"kubernetes_namespace_name\",\"Value\":\"\"}]}"}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestOpenShiftErrors(t *testing.T) {
	loki := OpenShiftConfig{Matchers: []string{"kubernetes_namespace_name", "k8s_namespace_name"}, ViaQToOTelMigration: true}
	apiDown := func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{}, errors.New("connection refused")
	}
	tests := []struct {
		name    string
		cfg     OpenShiftConfig
		token   string
		answer  func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
		tokens  authenticator.Token
		input   json.RawMessage
		wantErr any
		wantMsg string
	}{
		{name: "bad JSON types", input: json.RawMessage(`{"subject": 1}`), wantErr: &InputError{}, wantMsg: "input:"},
		{name: "unknown permission", input: lokiInput("a", "delete", "application", ""), wantErr: &InputError{}, wantMsg: `unknown permission "delete"`},
		{name: "missing resource", input: json.RawMessage(`{"subject":"a","permission":"read","tenant":"application"}`), wantErr: &InputError{}, wantMsg: "unknown resource"},
		{name: "missing subject", input: json.RawMessage(`{"permission":"read","resource":"logs","tenant":"application"}`), wantErr: &InputError{}, wantMsg: "input.subject is required"},
		{name: "wildcard with matcher", cfg: loki, input: lokiInput("a", "read", "application", `"wildcardSelectors":true`), wantErr: &InputError{}, wantMsg: "wildcard in query namespaces not allowed"},
		{name: "both migration selectors", cfg: loki, input: lokiInput("a", "read", "application", `"selectors":{"kubernetes_namespace_name":["a"],"k8s_namespace_name":["b"]}`), wantErr: &InputError{}, wantMsg: "selectors are not allowed"},
		{name: "ssar without token", cfg: OpenShiftConfig{SSAR: true}, input: lokiInput("a", "read", "application", ""), wantErr: &UnauthenticatedError{}, wantMsg: "missing forwarded access token"},
		{name: "API down", answer: apiDown, input: lokiInput("a", "read", "application", ""), wantErr: &UnavailableError{}, wantMsg: "subject access review failed"},
		{name: "token refused by the SSAR", cfg: OpenShiftConfig{SSAR: true}, token: "t1", tokens: testTokens,
			answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
				return authorizationv1.SubjectAccessReviewStatus{}, apierrors.NewUnauthorized("invalid bearer token")
			}, input: lokiInput("a", "read", "application", ""), wantErr: &UnauthenticatedError{}, wantMsg: "not accepted"},
		{name: "token refused by the TokenReview", cfg: OpenShiftConfig{SSAR: true}, token: "bad", tokens: testTokens,
			input: lokiInput("a", "read", "application", ""), wantErr: &UnauthenticatedError{}, wantMsg: "not accepted"},
		{name: "TokenReview unanswered", cfg: OpenShiftConfig{SSAR: true}, token: "t1",
			tokens: fakeTokens{err: errors.New("connection refused")}, input: lokiInput("a", "read", "application", ""),
			wantErr: &UnavailableError{}, wantMsg: "reviewing the forwarded access token: connection refused"},
		{name: "ssar without a token reviewer", cfg: OpenShiftConfig{SSAR: true}, token: "t1",
			input: lokiInput("a", "read", "application", ""), wantErr: &UnavailableError{}, wantMsg: "without a token reviewer"},
		{name: "more selector namespaces than allowed", cfg: OpenShiftConfig{MaxSelectorNamespaces: 2},
			input:   lokiInput("a", "read", "application", `"selectors":{"kubernetes_namespace_name":["ns1","ns2"],"k8s_namespace_name":["ns3"]}`),
			wantErr: &InputError{}, wantMsg: "selectors name 3 namespaces; at most 2 are allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer := tt.answer
			if answer == nil {
				answer = allowAll
			}
			rev := &fakeReviewer{answer: answer}
			a := newOpenShiftAuthorizer(t, tt.cfg, rev, OpenShiftSSAR{Reviewer: rev, Tokens: tt.tokens})
			_, err := a.Decide(context.Background(), Request{Path: []string{"lokistack", "allow"}, Input: tt.input, AccessToken: tt.token})
			if err == nil || !errorsAsType(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %T %v, want %T containing %q", err, err, tt.wantErr, tt.wantMsg)
			}
		})
	}
}

func errorsAsType(err error, target any) bool {
	switch target.(type) {
	case *InputError:
		var e *InputError
		return errors.As(err, &e)
	case *UnauthenticatedError:
		var e *UnauthenticatedError
		return errors.As(err, &e)
	case *UnavailableError:
		var e *UnavailableError
		return errors.As(err, &e)
	}
	return false
}

// fakeTokens is a TokenReview: token → user, or err for every token.
type fakeTokens struct {
	users map[string]*user.DefaultInfo
	err   error
	calls *int
}

func (f fakeTokens) AuthenticateToken(_ context.Context, token string) (*authenticator.Response, bool, error) {
	if f.calls != nil {
		*f.calls++
	}
	if f.err != nil {
		return nil, false, f.err
	}
	u, ok := f.users[token]
	if !ok {
		return nil, false, nil
	}
	return &authenticator.Response{User: u}, true, nil
}

var testTokens = fakeTokens{users: map[string]*user.DefaultInfo{
	"t1":    {Name: "bob", Groups: []string{"system:authenticated"}},
	"t2":    {Name: "carol", Groups: []string{"system:authenticated"}},
	"admin": {Name: "root", Groups: []string{"system:authenticated", "cluster-admin"}},
}}

// tokenRBAC answers SSARs as logsRBAC answers the user testTokens gives the context's
// bearer token; a review without a token fails, as the real client does.
func tokenRBAC(grants ...string) Reviewer {
	rbac := logsRBAC(grants...)
	return reviewerFunc(func(ctx context.Context, s authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		token := kube.BearerTokenFrom(ctx)
		u, ok := testTokens.users[token]
		if !ok {
			return authorizationv1.SubjectAccessReviewStatus{}, apierrors.NewUnauthorized("no such token " + token)
		}
		s.User = u.Name
		return rbac(s)
	})
}

type reviewerFunc func(context.Context, authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)

func (f reviewerFunc) Review(ctx context.Context, s authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	return f(ctx, s)
}

// Under SSAR the token is the whole identity: the admin-group exemption follows the
// TokenReview's groups, never the body's, and reviews carry the token in the context.
func TestOpenShiftSSARIdentity(t *testing.T) {
	const ns = "kubernetes_namespace_name"
	cfg := OpenShiftConfig{SSAR: true, Matchers: []string{ns}, AdminGroups: []string{"cluster-admin"}}
	adminBody := func(subject string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"subject":%q,"groups":["cluster-admin"],"permission":"read","resource":"logs","tenant":"application",`+
			`"extras":{"selectors":{%q:["ns1","ns2"]}}}`, subject, ns))
	}
	tests := []struct {
		name  string
		token string
		input json.RawMessage
		want  any
	}{
		{"body's admin group does not lift the matcher", "t1", adminBody("root"), matcherJSON("ns1", "", ns)},
		{"body's admin group does not make a stranger a reader", "t2", adminBody("root"), false},
		{"token's admin group lifts the matcher", "admin", lokiInput("root", "read", "application", `"selectors":{"kubernetes_namespace_name":["ns1"]}`), true},
		{"body's subject is ignored", "t1", lokiInput("root", "read", "application", `"selectors":{"kubernetes_namespace_name":["ns1","ns2"]}`),
			matcherJSON("ns1", "", ns)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mappings, _ := mapping.Parse([]string{"application=loki.grafana.com"})
			cr := NewCachingReviewer(&fakeReviewer{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
				t.Error("the bridge's own SubjectAccessReview was used under SSAR")
				return authorizationv1.SubjectAccessReviewStatus{Allowed: true}, nil
			}}, cache.NewMemory(100), CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
			a := New(Config{Mappings: mappings}, cr, newView(), nil, nil, nil)
			a.EnableOpenShift(withPath(cfg), namespaceList{"ns1", "ns2", "ns3"},
				OpenShiftSSAR{Reviewer: tokenRBAC("bob get ns1", "root get "), Tokens: testTokens})
			d, err := a.Decide(context.Background(), Request{Path: []string{"lokistack", "allow"}, Input: tt.input, AccessToken: tt.token})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(jsonOf(d.Result))
			want, _ := json.Marshal(tt.want)
			if string(got) != string(want) {
				t.Errorf("result = %s\nwant     %s", got, want)
			}
		})
	}
}

func withPath(cfg OpenShiftConfig) OpenShiftConfig {
	cfg.Path = []string{"lokistack", "allow"}
	return cfg
}

// SSAR reviews carry no user; each token has its own cache entries.
func TestOpenShiftSSARTokens(t *testing.T) {
	var tokens []string
	rev := &fakeReviewer{answer: allowAll}
	recording := reviewerFunc(func(ctx context.Context, s authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		tokens = append(tokens, kube.BearerTokenFrom(ctx))
		return rev.Review(ctx, s)
	})
	tokenReviews := 0
	counted := testTokens
	counted.calls = &tokenReviews
	a := newOpenShiftAuthorizer(t, OpenShiftConfig{SSAR: true}, &fakeReviewer{answer: allowAll}, OpenShiftSSAR{Reviewer: recording, Tokens: counted})
	for _, token := range []string{"t1", "t1", "t2"} {
		d, err := a.Decide(context.Background(), Request{Path: []string{"lokistack", "allow"}, Input: lokiInput("ignored", "read", "application", ""), AccessToken: token})
		if err != nil || jsonOf(d.Result) != true {
			t.Fatalf("token %s: %v %v", token, jsonOf(d.Result), err)
		}
	}
	if rev.count() != 2 {
		t.Errorf("reviews = %d, want 2 (t1 cached, t2 its own)", rev.count())
	}
	for _, s := range rev.specs {
		if s.User != "" || len(s.Groups) != 0 {
			t.Errorf("SSAR spec carries user %q groups %v", s.User, s.Groups)
		}
	}
	if !slices.Equal(tokens, []string{"t1", "t2"}) {
		t.Errorf("reviews sent with tokens %v, want [t1 t2]", tokens)
	}
	if tokenReviews != 3 {
		t.Errorf("token reviews = %d, want one a request (caching is the TokenReview client's)", tokenReviews)
	}
}

// Selector values the informer does not know cost no review, however many there are.
func TestOpenShiftSelectorsIntersectNamespaces(t *testing.T) {
	const ns = "kubernetes_namespace_name"
	madeUp := make([]string, 0, 5000)
	for i := range 5000 {
		madeUp = append(madeUp, fmt.Sprintf("%q", fmt.Sprintf("ghost-%d", i)))
	}
	selectors := func(extra ...string) string {
		return fmt.Sprintf(`"selectors":{%q:[%s]}`, ns, strings.Join(append(madeUp, extra...), ","))
	}
	tests := []struct {
		name        string
		max         int
		extras      string
		want        any
		wantReviews []string
	}{
		{"only made-up namespaces", 10000, selectors(), false, []string{""}},
		{"made-up and real namespaces", 10000, selectors(`"ns2"`, `"ns1"`), matcherJSON("ns1", "", ns), []string{"", "ns1", "ns2"}},
		{"over the limit: refused before any review", 0, selectors(), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := &fakeReviewer{answer: logsRBAC("bob get ns1")}
			a := newOpenShiftAuthorizer(t, OpenShiftConfig{Matchers: []string{ns}, MaxSelectorNamespaces: tt.max}, rev, OpenShiftSSAR{})
			d, err := a.Decide(context.Background(), Request{Path: []string{"lokistack", "allow"}, Input: lokiInput("bob", "read", "application", tt.extras)})
			if tt.want == nil {
				var inputErr *InputError
				if !errors.As(err, &inputErr) || !strings.Contains(err.Error(), "selectors name 5000 namespaces; at most 300 are allowed") {
					t.Fatalf("err = %v, want an InputError naming the default limit", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				checkResult(t, jsonOf(d.Result), tt.want)
			}
			checkReviewedNamespaces(t, rev.specs, tt.wantReviews)
		})
	}
}

// A pod on the opa-openshift path is still a pod decision.
func TestOpenShiftPathKeepsPodDecisions(t *testing.T) {
	rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
	a := newTestAuthorizer(t, Config{}, rev, newView())
	a.EnableOpenShift(OpenShiftConfig{Path: []string{"interlink", "authz", "decision"}}, namespaceList{}, OpenShiftSSAR{})
	d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: json.RawMessage(podInput("create", "team-a", "runner", ""))})
	if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != true {
		t.Fatalf("pod decision on the opa-openshift path = %v, %v", jsonOf(d.Result), err)
	}
}

// checkResult compares a decision's result with want as JSON.
func checkResult(t *testing.T, result, want any) {
	t.Helper()
	got, _ := json.Marshal(result)
	wantJSON, _ := json.Marshal(want)
	if string(got) != string(wantJSON) {
		t.Errorf("result = %s\nwant     %s", got, wantJSON)
	}
}

// checkReviewedNamespaces compares the namespaces of the reviews sent, in any order.
func checkReviewedNamespaces(t *testing.T, specs []authorizationv1.SubjectAccessReviewSpec, want []string) {
	t.Helper()
	var reviewed []string
	for _, s := range specs {
		reviewed = append(reviewed, s.ResourceAttributes.Namespace)
	}
	slices.Sort(reviewed)
	if !slices.Equal(reviewed, want) {
		t.Errorf("reviewed namespaces %q, want %q", reviewed, want)
	}
}
