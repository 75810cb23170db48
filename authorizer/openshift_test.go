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

	"github.com/sar-bridge/sar-bridge/cache"
	"github.com/sar-bridge/sar-bridge/mapping"
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

func newOpenShiftAuthorizer(t *testing.T, cfg OpenShiftConfig, rev *fakeReviewer, tokens TokenReviewerFactory) *Authorizer {
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
	a.EnableOpenShift(cfg, namespaceList{"kube-system", "ns1", "ns2", "ns3"}, tokens)
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
			a := newOpenShiftAuthorizer(t, tt.cfg, rev, nil)
			d, err := a.Decide(context.Background(), []string{"lokistack", "allow"}, tt.input)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Defined || d.ID != "" {
				t.Errorf("decision defined=%v id=%q; want defined, no decision id (opa-openshift sends none)", d.Defined, d.ID)
			}
			got, _ := json.Marshal(d.Result)
			want, _ := json.Marshal(tt.want)
			if string(got) != string(want) {
				t.Errorf("result = %s\nwant     %s", got, want)
			}
			var reviewed []string
			for _, s := range rev.specs {
				reviewed = append(reviewed, s.ResourceAttributes.Namespace)
			}
			slices.Sort(reviewed)
			if !slices.Equal(reviewed, tt.wantReviews) {
				t.Errorf("reviewed namespaces %q, want %q", reviewed, tt.wantReviews)
			}
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
		ctx     context.Context
		answer  func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
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
		{name: "token refused by the API", cfg: OpenShiftConfig{SSAR: true}, ctx: WithAccessToken(context.Background(), "bad"),
			answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
				return authorizationv1.SubjectAccessReviewStatus{}, apierrors.NewUnauthorized("invalid bearer token")
			}, input: lokiInput("a", "read", "application", ""), wantErr: &UnauthenticatedError{}, wantMsg: "not accepted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer := tt.answer
			if answer == nil {
				answer = allowAll
			}
			rev := &fakeReviewer{answer: answer}
			a := newOpenShiftAuthorizer(t, tt.cfg, rev, func(string) (Reviewer, error) { return rev, nil })
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			_, err := a.Decide(ctx, []string{"lokistack", "allow"}, tt.input)
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

// SSAR reviews carry no user; each token has its own cache entries.
func TestOpenShiftSSARTokens(t *testing.T) {
	var tokens []string
	rev := &fakeReviewer{answer: allowAll}
	a := newOpenShiftAuthorizer(t, OpenShiftConfig{SSAR: true}, rev, func(token string) (Reviewer, error) {
		tokens = append(tokens, token)
		return rev, nil
	})
	for _, token := range []string{"t1", "t1", "t2"} {
		d, err := a.Decide(WithAccessToken(context.Background(), token), []string{"lokistack", "allow"}, lokiInput("ignored", "read", "application", ""))
		if err != nil || d.Result != true {
			t.Fatalf("token %s: %v %v", token, d.Result, err)
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
	if !slices.Equal(tokens, []string{"t1", "t1", "t2"}) {
		t.Errorf("reviewers made for %v", tokens)
	}
}

// A pod on the opa-openshift path is still a pod decision.
func TestOpenShiftPathKeepsPodDecisions(t *testing.T) {
	rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
	a := newTestAuthorizer(t, Config{}, rev, newView())
	a.EnableOpenShift(OpenShiftConfig{Path: []string{"interlink", "authz", "decision"}}, namespaceList{}, nil)
	d, err := a.Decide(context.Background(), decisionPath, json.RawMessage(podInput("create", "team-a", "runner", "")))
	if err != nil || d.Result.(map[string]any)["allowed"] != true {
		t.Fatalf("pod decision on the opa-openshift path = %v, %v", d.Result, err)
	}
}
