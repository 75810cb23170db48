package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	k8sauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
	"github.com/sar-bridge/sar-bridge/policies"
)

// fakeView is a ClusterView over fixed objects.
type fakeView struct {
	namespaces map[string]*corev1.Namespace
	nodes      map[string]*corev1.Node
	nsErr      error
	unsynced   atomic.Bool
}

func (v *fakeView) Synced() bool { return !v.unsynced.Load() }

func (v *fakeView) Namespace(_ context.Context, name string) (*corev1.Namespace, error) {
	if v.nsErr != nil {
		return nil, v.nsErr
	}
	if ns, ok := v.namespaces[name]; ok {
		return ns, nil
	}
	return nil, fmt.Errorf("namespace %q: %w", name, kube.ErrNamespaceNotFound)
}

func (v *fakeView) Node(name string) (*corev1.Node, bool) {
	n, ok := v.nodes[name]
	return n, ok
}

func newView() *fakeView {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		// UID and resourceVersion as an informer's objects have them.
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, UID: types.UID("uid-" + name), ResourceVersion: "1"}}
	}
	return &fakeView{
		namespaces: map[string]*corev1.Namespace{
			"team-a":   ns("team-a", map[string]string{"interlink.io/tenant": "team-a", "interlink.io/billing-project": "proj-7"}),
			"labelled": ns("labelled", map[string]string{"interlink.io/tenant": "tenant-b"}),
			"orphan":   ns("orphan", nil),
		},
		nodes: map[string]*corev1.Node{
			"vk-a": {ObjectMeta: metav1.ObjectMeta{Name: "vk-a", Labels: map[string]string{"interlink.io/tenant": "team-a"}, UID: "uid-vk-a", ResourceVersion: "1"},
				Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}},
			"vk-b": {ObjectMeta: metav1.ObjectMeta{Name: "vk-b", Labels: map[string]string{"interlink.io/tenant": "tenant-b"}}},
		},
	}
}

// rbacByVerb allows exactly the listed "user verb resource.group" tuples.
func rbacByVerb(allowed ...string) func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	return func(s authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		a := s.ResourceAttributes
		key := fmt.Sprintf("%s %s %s.%s", s.User, a.Verb, a.Resource, a.Group)
		for _, k := range allowed {
			if k == key {
				return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "RBAC: allowed by RoleBinding \"team-a/offload\""}, nil
			}
		}
		return authorizationv1.SubjectAccessReviewStatus{}, nil
	}
}

const saRunner = "system:serviceaccount:team-a:runner"

func newTestAuthorizer(t testing.TB, cfg Config, rev *fakeReviewer, view *fakeView) *Authorizer {
	t.Helper()
	eval, err := policies.New(context.Background(), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TenantLabel == "" {
		cfg.TenantLabel = "interlink.io/tenant"
	}
	if cfg.Mappings == nil {
		cfg.Mappings, _ = mapping.Parse([]string{"team-a=interlink.io", "tenant-b=tenant-b.interlink.io"})
	}
	cr := NewCachingReviewer(rev, cache.NewMemory(100), CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
	return New(cfg, cr, view, eval, nil, nil)
}

func podInput(op, ns, sa string, extra string) string {
	return fmt.Sprintf(`{"operation": %q, "pod": {"metadata": {"name": "p1", "namespace": %q}, "spec": {"serviceAccountName": %q, "containers": [{"name": "main"}]}}%s}`, op, ns, sa, extra)
}

var decisionPath = []string{"interlink", "authz", "decision"}

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		rbac        []string
		input       string
		wantAllowed bool
		wantReason  string // substring
		wantSpecs   []authorizationv1.ResourceAttributes
		wantUser    string
	}{
		{
			name: "service account allowed; create review has no name",
			rbac: []string{saRunner + " create pods.interlink.io"}, input: podInput("create", "team-a", "runner", ""),
			wantAllowed: true, wantReason: `RoleBinding "team-a/offload"`, wantUser: saRunner,
			wantSpecs: []authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}},
		},
		{
			name: "operation defaults to create",
			rbac: []string{saRunner + " create pods.interlink.io"}, input: podInput("", "team-a", "runner", ""),
			wantAllowed: true, wantUser: saRunner,
			wantSpecs: []authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}},
		},
		{
			name: "default service account denied with an actionable reason",
			rbac: []string{saRunner + " create pods.interlink.io"}, input: podInput("create", "team-a", "", ""),
			wantReason: `system:serviceaccount:team-a:default may not create pods.interlink.io in namespace "team-a"`,
			wantUser:   "system:serviceaccount:team-a:default",
			wantSpecs:  []authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}},
		},
		{
			name: "delete reviews verb delete with the pod name",
			rbac: []string{saRunner + " delete pods.interlink.io"}, input: podInput("delete", "team-a", "runner", ""),
			wantAllowed: true, wantUser: saRunner,
			wantSpecs: []authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "delete", Group: "interlink.io", Resource: "pods", Name: "p1"}},
		},
		{
			name: "status reviews verb get",
			rbac: []string{saRunner + " create pods.interlink.io"}, input: podInput("status", "team-a", "runner", ""),
			wantReason: `may not get pods.interlink.io "p1" in namespace "team-a"`, wantUser: saRunner,
			wantSpecs: []authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "get", Group: "interlink.io", Resource: "pods", Name: "p1"}},
		},
		{
			name: "namespace label picks the tenant's group",
			rbac: []string{"system:serviceaccount:labelled:runner create pods.tenant-b.interlink.io"}, input: podInput("create", "labelled", "runner", ""),
			wantAllowed: true,
			wantSpecs:   []authorizationv1.ResourceAttributes{{Namespace: "labelled", Verb: "create", Group: "tenant-b.interlink.io", Resource: "pods"}},
		},
		{
			name:       "caller-supplied namespace labels are ignored",
			rbac:       []string{"system:serviceaccount:labelled:runner create pods.interlink.io"},
			input:      podInput("create", "labelled", "runner", `, "namespace": {"name": "labelled", "labels": {"interlink.io/tenant": "team-a"}}`),
			wantReason: "may not create pods.tenant-b.interlink.io",
			wantSpecs:  []authorizationv1.ResourceAttributes{{Namespace: "labelled", Verb: "create", Group: "tenant-b.interlink.io", Resource: "pods"}},
		},
		{
			name: "unmapped tenant: denied, no review", rbac: []string{"system:serviceaccount:orphan:runner create pods.interlink.io"},
			input: podInput("create", "orphan", "runner", ""), wantReason: `tenant "orphan" (namespace "orphan") has no API group mapping`,
		},
		{
			name: "missing namespace: denied, no review", input: podInput("create", "ghost", "runner", ""),
			wantReason: `namespace "ghost" does not exist`,
		},
		{
			name: "node access: both reviews must allow", cfg: Config{NodeAccess: true},
			rbac:  []string{saRunner + " create pods.interlink.io"},
			input: podInput("create", "team-a", "runner", `, "node": {"name": "vk-a"}`), wantReason: `may not use nodes.interlink.io "vk-a" in namespace "team-a"`,
			wantSpecs: []authorizationv1.ResourceAttributes{
				{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"},
				{Namespace: "team-a", Verb: "use", Group: "interlink.io", Resource: "nodes", Name: "vk-a"},
			},
		},
		{
			name: "node access allowed", cfg: Config{NodeAccess: true},
			rbac:  []string{saRunner + " create pods.interlink.io", saRunner + " use nodes.interlink.io"},
			input: podInput("create", "team-a", "runner", `, "node": {"name": "vk-a"}`), wantAllowed: true,
			wantSpecs: []authorizationv1.ResourceAttributes{
				{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"},
				{Namespace: "team-a", Verb: "use", Group: "interlink.io", Resource: "nodes", Name: "vk-a"},
			},
		},
		{
			name: "node access without a target node is denied", cfg: Config{NodeAccess: true},
			rbac:  []string{saRunner + " create pods.interlink.io", saRunner + " use nodes.interlink.io"},
			input: podInput("create", "team-a", "runner", ""), wantReason: "node access review needs a target node",
			wantSpecs: []authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}},
		},
		{
			name:       "another tenant's node (labels from the cluster, not the request)",
			rbac:       []string{saRunner + " create pods.interlink.io"},
			input:      podInput("create", "team-a", "runner", `, "node": {"name": "vk-b", "labels": {"interlink.io/tenant": "team-a"}}`),
			wantReason: `target node "vk-b" belongs to tenant "tenant-b", not the pod's tenant "team-a"`,
			wantSpecs:  []authorizationv1.ResourceAttributes{{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := &fakeReviewer{answer: rbacByVerb(tt.rbac...)}
			a := newTestAuthorizer(t, tt.cfg, rev, newView())
			d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: json.RawMessage(tt.input)})
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			res, ok := jsonOf(d.Result).(map[string]any)
			if !d.Defined || !ok {
				t.Fatalf("result = %#v (defined %v), want an object", jsonOf(d.Result), d.Defined)
			}
			if res["allowed"] != tt.wantAllowed {
				t.Errorf("allowed = %v, want %v (reason %q)", res["allowed"], tt.wantAllowed, res["reason"])
			}
			if reason, _ := res["reason"].(string); !strings.Contains(reason, tt.wantReason) {
				t.Errorf("reason = %q, want it to contain %q", reason, tt.wantReason)
			}
			if d.ID == "" {
				t.Error("no decision id")
			}
			if len(rev.specs) != len(tt.wantSpecs) {
				t.Fatalf("reviews = %d, want %d", len(rev.specs), len(tt.wantSpecs))
			}
			for i, s := range rev.specs {
				if *s.ResourceAttributes != tt.wantSpecs[i] {
					t.Errorf("review %d attributes = %+v, want %+v", i, *s.ResourceAttributes, tt.wantSpecs[i])
				}
				if tt.wantUser != "" && s.User != tt.wantUser {
					t.Errorf("review %d user = %q, want %q", i, s.User, tt.wantUser)
				}
			}
		})
	}
}

func TestDecideModificationsAndAllowDocument(t *testing.T) {
	rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
	a := newTestAuthorizer(t, Config{}, rev, newView())
	d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: json.RawMessage(podInput("create", "team-a", "runner", ""))})
	if err != nil {
		t.Fatal(err)
	}
	mods := jsonOf(d.Result).(map[string]any)["modifications"].(map[string]any)
	if got := mods["pod_annotations"].(map[string]any)["interlink.io/billing-project"]; got != "proj-7" {
		t.Errorf("billing annotation = %v, want proj-7 from the namespace label", got)
	}
	d, err = a.Decide(context.Background(), Request{Path: []string{"interlink", "authz", "allow"}, Input: json.RawMessage(podInput("create", "team-a", "runner", ""))})
	if err != nil || !d.Defined || jsonOf(d.Result) != true {
		t.Fatalf("allow document = %#v, %v, %v; want true", jsonOf(d.Result), d.Defined, err)
	}
	d, err = a.Decide(context.Background(), Request{Path: []string{"interlink", "nothing"}, Input: json.RawMessage(podInput("create", "team-a", "runner", ""))})
	if err != nil || d.Defined {
		t.Fatalf("undefined document = %#v, %v, %v; want undefined", jsonOf(d.Result), d.Defined, err)
	}
}

func TestDecideErrors(t *testing.T) {
	apiDown := func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{}, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	}
	tests := []struct {
		name        string
		input       string
		view        func(*fakeView)
		answer      func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
		cfg         Config
		wantInput   bool // an InputError, else an UnavailableError
		wantMessage string
	}{
		{name: "not JSON object fields", input: `{"operation": 3, "pod": {}}`, wantInput: true, wantMessage: "input:"},
		{name: "unknown operation", input: `{"operation": "exec", "pod": {"metadata": {"namespace": "team-a"}}}`, wantInput: true, wantMessage: `input.operation "exec" is not one of create, delete, status`},
		{name: "missing pod", input: `{"operation": "create"}`, wantInput: true, wantMessage: "input.pod is required"},
		{name: "pod not an object", input: `{"pod": "p1"}`, wantInput: true, wantMessage: "input.pod is required and must be a JSON object"},
		{name: "pod null", input: `{"pod": null}`, wantInput: true, wantMessage: "input.pod is required"},
		{name: "pod fields of the wrong type", input: `{"pod": {"metadata": {"namespace": 7}}}`, wantInput: true, wantMessage: "input.pod is not a valid Pod"},
		{name: "pod field spelt in another case", input: `{"pod": {"metadata": {"namespace": "team-a"}, "Spec": {"containers": [{"name": "c"}]}}}`, wantInput: true, wantMessage: `unknown field "Spec"`},
		{name: "toleration operator folded", input: `{"pod": {"metadata": {"namespace": "team-a"}, "spec": {"tolerations": [{"key": "gpu", "ſperator": "Exists"}]}}}`, wantInput: true, wantMessage: "unknown field"},
		{name: "pod field given twice", input: `{"pod": {"metadata": {"namespace": "team-a"}, "spec": {}, "spec": {"nodeName": "x"}}}`, wantInput: true, wantMessage: `duplicate field "spec"`},
		{name: "request field given twice", input: `{"operation": "delete", "operation": "create", "pod": {"metadata": {"namespace": "team-a"}}}`, wantInput: true, wantMessage: `duplicate field "operation"`},
		{name: "Pod instead of pod", input: `{"Pod": {"metadata": {"namespace": "team-a"}}}`, wantInput: true, wantMessage: "input.pod is required"},
		{name: "no namespace", input: `{"pod": {"metadata": {"name": "p"}}}`, wantInput: true, wantMessage: "input.pod.metadata.namespace is required"},
		{name: "delete without name", input: `{"operation": "delete", "pod": {"metadata": {"namespace": "team-a"}}}`, wantInput: true, wantMessage: "input.pod.metadata.name is required for delete"},
		{name: "input.user without name", input: podInput("create", "team-a", "runner", `, "user": {"groups": ["x"]}`), wantInput: true, wantMessage: "input.user.username is required"},
		{name: "API down", input: podInput("create", "team-a", "runner", ""), answer: apiDown, wantMessage: "subject access review failed: dial tcp"},
		{name: "namespace read fails", input: podInput("create", "new-ns", "runner", ""), view: func(v *fakeView) { v.nsErr = errors.New("connection refused") }, wantMessage: "connection refused"},
		{name: "not synced within the deadline", input: podInput("create", "team-a", "runner", ""), view: func(v *fakeView) { v.unsynced.Store(true) }, wantMessage: "cluster view not synced"},
	}
	// Every input is valid JSON: refused alike when the caller (the Data API server)
	// says it checked the syntax (InputValid) and when the decision checks it.
	for _, tt := range tests {
		for _, valid := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/input valid %v", tt.name, valid), func(t *testing.T) {
				answer := tt.answer
				if answer == nil {
					answer = allowAll
				}
				view := newView()
				if tt.view != nil {
					tt.view(view)
				}
				a := newTestAuthorizer(t, tt.cfg, &fakeReviewer{answer: answer}, view)
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				d, err := a.Decide(ctx, Request{Path: decisionPath, Input: json.RawMessage(tt.input), InputValid: valid})
				var inputErr *InputError
				var unavailable *UnavailableError
				if tt.wantInput && !errors.As(err, &inputErr) || !tt.wantInput && !errors.As(err, &unavailable) {
					t.Fatalf("err = %T %v; want input error %v", err, err, tt.wantInput)
				}
				if !strings.Contains(err.Error(), tt.wantMessage) {
					t.Errorf("err = %q, want it to contain %q", err, tt.wantMessage)
				}
				if d.Defined || jsonOf(d.Result) != nil {
					t.Errorf("an error came with a result: %#v", jsonOf(d.Result))
				}
			})
		}
	}
}

func TestServiceAccountSubject(t *testing.T) {
	tests := []struct {
		name     string
		spec     corev1.PodSpec
		wantUser string
	}{
		{"named", corev1.PodSpec{ServiceAccountName: "runner"}, "system:serviceaccount:ns:runner"},
		{"deprecated field", corev1.PodSpec{DeprecatedServiceAccount: "old"}, "system:serviceaccount:ns:old"},
		{"default", corev1.PodSpec{}, "system:serviceaccount:ns:default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ServiceAccountSubject(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: tt.spec})
			if s.Username != tt.wantUser {
				t.Errorf("user = %q, want %q", s.Username, tt.wantUser)
			}
			want := []string{"system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"}
			if strings.Join(s.Groups, ",") != strings.Join(want, ",") {
				t.Errorf("groups = %v, want %v", s.Groups, want)
			}
		})
	}
}

// impersonable is a k8s authorizer allowing the listed "caller resource/subresource name" impersonations.
type impersonable []string

func (allowed impersonable) Authorize(_ context.Context, a k8sauthorizer.Attributes) (k8sauthorizer.Decision, string, error) {
	if a.GetVerb() != "impersonate" {
		return k8sauthorizer.DecisionNoOpinion, "", nil
	}
	resource := a.GetResource()
	if a.GetSubresource() != "" {
		resource += "/" + a.GetSubresource()
	}
	if a.GetNamespace() != "" {
		resource = a.GetNamespace() + ":" + resource
	}
	key := fmt.Sprintf("%s %s %s", a.GetUser().GetName(), resource, a.GetName())
	for _, k := range allowed {
		if k == key {
			return k8sauthorizer.DecisionAllow, "", nil
		}
	}
	if slices.Contains(allowed, "error") {
		return k8sauthorizer.DecisionNoOpinion, "", errors.New("connection refused")
	}
	return k8sauthorizer.DecisionNoOpinion, "", nil
}

func TestDecideImpersonation(t *testing.T) {
	const claim = `, "user": {"username": "alice", "groups": ["devs"], "extra": {"scopes": ["s1"]}}`
	gw := &user.DefaultInfo{Name: "gateway"}
	all := impersonable{"gateway users alice", "gateway groups devs", "gateway userextras/scopes s1"}
	tests := []struct {
		name        string
		caller      *user.DefaultInfo
		allowed     impersonable
		input       string
		wantErr     string // "forbidden: ..." or "unavailable: ..." or "" for a decision
		wantSubject string
	}{
		{name: "no authenticated caller", allowed: all, input: podInput("create", "team-a", "runner", claim), wantErr: "forbidden: input.user needs an authenticated caller"},
		{name: "caller may impersonate all of it", caller: gw, allowed: all, input: podInput("create", "team-a", "runner", claim), wantSubject: "alice"},
		{name: "group not allowed", caller: gw, allowed: all[:1], input: podInput("create", "team-a", "runner", claim),
			wantErr: `forbidden: caller "gateway" may not impersonate group "devs", extra scopes="s1"`},
		{name: "service account user is checked as a service account", caller: gw, allowed: impersonable{"gateway team-a:serviceaccounts runner"},
			input: podInput("create", "team-a", "runner", `, "user": {"username": "system:serviceaccount:team-a:runner"}`), wantSubject: saRunner},
		{name: "uid is checked", caller: gw, allowed: impersonable{"gateway users alice"},
			input: podInput("create", "team-a", "runner", `, "user": {"username": "alice", "uid": "42"}`), wantErr: `forbidden: caller "gateway" may not impersonate uid "42"`},
		{name: "impersonation review fails", caller: gw, allowed: impersonable{"error"},
			input: podInput("create", "team-a", "runner", claim), wantErr: "unavailable: impersonation review failed"},
		{name: "no input.user: the pod's service account", caller: gw, input: podInput("create", "team-a", "runner", ""), wantSubject: saRunner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := &fakeReviewer{answer: rbacByVerb("alice create pods.interlink.io", saRunner+" create pods.interlink.io")}
			a := newTestAuthorizer(t, Config{}, rev, newView())
			a.SetImpersonationAuthorizer(tt.allowed)
			ctx := context.Background()
			if tt.caller != nil {
				ctx = request.WithUser(ctx, tt.caller)
			}
			d, err := a.Decide(ctx, Request{Path: decisionPath, Input: json.RawMessage(tt.input)})
			var forbidden *ForbiddenError
			var unavailable *UnavailableError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Decide: %v", err)
			case strings.HasPrefix(tt.wantErr, "forbidden: ") && (!errors.As(err, &forbidden) || !strings.Contains(err.Error(), strings.TrimPrefix(tt.wantErr, "forbidden: "))):
				t.Fatalf("err = %T %v, want %s", err, err, tt.wantErr)
			case strings.HasPrefix(tt.wantErr, "unavailable: ") && (!errors.As(err, &unavailable) || !strings.Contains(err.Error(), strings.TrimPrefix(tt.wantErr, "unavailable: "))):
				t.Fatalf("err = %T %v, want %s", err, err, tt.wantErr)
			}
			if tt.wantErr != "" {
				if len(rev.specs) != 0 || d.Defined {
					t.Errorf("a refused identity was reviewed (%d reviews) or decided", len(rev.specs))
				}
				return
			}
			if jsonOf(d.Result).(map[string]any)["allowed"] != true || len(rev.specs) != 1 || rev.specs[0].User != tt.wantSubject {
				t.Errorf("result %v, reviews %+v; want allowed for %s", jsonOf(d.Result), rev.specs, tt.wantSubject)
			}
		})
	}
}

// A decision that arrives before the first list waits for it rather than failing.
func TestDecideWaitsForFirstSync(t *testing.T) {
	view := newView()
	view.unsynced.Store(true)
	a := newTestAuthorizer(t, Config{}, &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}, view)
	time.AfterFunc(100*time.Millisecond, func() { view.unsynced.Store(false) })
	d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: json.RawMessage(podInput("create", "team-a", "runner", ""))})
	if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != true {
		t.Fatalf("decision before the first sync = %v, %v; want it to wait and allow", jsonOf(d.Result), err)
	}
}
