package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/internal/mapping"
)

func rule(verbs, groups, resources []string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
}

func list(s ...string) []string { return s }

func roleBinding(ns, name, kind, role string, subjects ...rbacv1.Subject) rbacv1.RoleBinding {
	return rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, RoleRef: rbacv1.RoleRef{Kind: kind, Name: role}, Subjects: subjects}
}

func sa(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: KindServiceAccount, Namespace: ns, Name: name}
}

func TestCandidates(t *testing.T) {
	targets := []Target{{Namespace: "a", Group: "g.io"}, {Namespace: "b", Group: "h.io"}}
	clusterRoles := []rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "offloader"}, Rules: []rbacv1.PolicyRule{rule(list("create"), list("g.io", "h.io"), list("pods"))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "admin"}, Rules: []rbacv1.PolicyRule{rule(list("*"), list("*"), list("*"))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "core-pods"}, Rules: []rbacv1.PolicyRule{rule(list("create"), list(""), list("pods"))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "status"}, Rules: []rbacv1.PolicyRule{rule(list("create"), list("g.io"), list("pods/status"))}},
	}
	cases := []struct {
		name string
		rbac RBAC
		verb string
		want []Row
	}{
		{name: "a RoleBinding counts in its namespace only, with the group of that namespace",
			rbac: RBAC{ClusterRoles: clusterRoles, RoleBindings: []rbacv1.RoleBinding{roleBinding("a", "rb", "ClusterRole", "offloader", sa("", "runner"))}},
			verb: "create",
			want: []Row{{Namespace: "a", Kind: KindServiceAccount, Subject: "a/runner", Group: "g.io", Via: list("RoleBinding/rb (ClusterRole/offloader)")}}},
		{name: "a ClusterRoleBinding counts everywhere; wildcards match",
			rbac: RBAC{ClusterRoles: clusterRoles, ClusterRoleBindings: []rbacv1.ClusterRoleBinding{{
				ObjectMeta: metav1.ObjectMeta{Name: "crb"}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "admin"},
				Subjects: []rbacv1.Subject{{Kind: KindGroup, Name: "admins"}, {Kind: KindUser, Name: "root"}}}}},
			verb: "delete",
			want: []Row{
				{Namespace: "a", Kind: KindGroup, Subject: "admins", Group: "g.io", Via: list("ClusterRoleBinding/crb (ClusterRole/admin)")},
				{Namespace: "a", Kind: KindUser, Subject: "root", Group: "g.io", Via: list("ClusterRoleBinding/crb (ClusterRole/admin)")},
				{Namespace: "b", Kind: KindGroup, Subject: "admins", Group: "h.io", Via: list("ClusterRoleBinding/crb (ClusterRole/admin)")},
				{Namespace: "b", Kind: KindUser, Subject: "root", Group: "h.io", Via: list("ClusterRoleBinding/crb (ClusterRole/admin)")},
			}},
		{name: "a Role of the binding's namespace; bindings of one subject merge",
			rbac: RBAC{
				Roles: []rbacv1.Role{
					{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "r"}, Rules: []rbacv1.PolicyRule{rule(list("get", "create"), list("g.io"), list("pods"))}},
					{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "r"}, Rules: []rbacv1.PolicyRule{rule(list("create"), list("g.io"), list("pods"))}},
				},
				ClusterRoles: clusterRoles,
				RoleBindings: []rbacv1.RoleBinding{
					roleBinding("a", "one", "Role", "r", sa("a", "x")),
					roleBinding("a", "two", "ClusterRole", "offloader", sa("a", "x")),
					roleBinding("b", "three", "Role", "r", sa("b", "y")), // b maps to h.io
				}},
			verb: "create",
			want: []Row{{Namespace: "a", Kind: KindServiceAccount, Subject: "a/x", Group: "g.io", Via: list("RoleBinding/one (Role/r)", "RoleBinding/two (ClusterRole/offloader)")}}},
		{name: "other verbs, the core group, subresources and missing roles grant nothing",
			rbac: RBAC{ClusterRoles: clusterRoles, RoleBindings: []rbacv1.RoleBinding{
				roleBinding("a", "v", "ClusterRole", "offloader", sa("a", "v")),
				roleBinding("a", "c", "ClusterRole", "core-pods", sa("a", "c")),
				roleBinding("a", "s", "ClusterRole", "status", sa("a", "s")),
				roleBinding("a", "m", "Role", "missing", sa("a", "m")),
			}},
			verb: "get"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Candidates(tc.rbac, targets, tc.verb)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	m, err := mapping.Parse([]string{"t=g.io"})
	if err != nil {
		t.Fatal(err)
	}
	namespaces := []corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: map[string]string{"tenant": "t"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "t"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "unmapped"}},
	}
	want := []Target{{"labelled", "g.io"}, {"t", "g.io"}}
	if got := Targets(namespaces, m, "tenant"); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// fakeReviewer allows the specs whose description is in allow, and fails on fail.
type fakeReviewer struct {
	allow map[string]bool
	fail  string
	seen  []string
}

func describe(s authorizationv1.SubjectAccessReviewSpec) string {
	a := s.ResourceAttributes
	return fmt.Sprintf("%s%v %s %s.%s/%s in %s", s.User, s.Groups, a.Verb, a.Resource, a.Group, a.Name, a.Namespace)
}

func (f *fakeReviewer) Review(_ context.Context, s authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	d := describe(s)
	f.seen = append(f.seen, d)
	if d == f.fail {
		return authorizationv1.SubjectAccessReviewStatus{}, errors.New("API down")
	}
	return authorizationv1.SubjectAccessReviewStatus{Allowed: f.allow[d]}, nil
}

func TestConfirm(t *testing.T) {
	rows := []Row{
		{Namespace: "a", Kind: KindServiceAccount, Subject: "a/runner", Group: "g.io"},
		{Namespace: "a", Kind: KindGroup, Subject: "admins", Group: "g.io"},
		{Namespace: "a", Kind: KindUser, Subject: "alice", Group: "g.io"},
	}
	runner := "system:serviceaccount:a:runner[system:serviceaccounts system:serviceaccounts:a system:authenticated]"
	cases := []struct {
		name     string
		opts     ConfirmOptions
		reviewer *fakeReviewer
		want     []Row
		seen     []string
		err      string
	}{
		{name: "only what the reviews allow", opts: ConfirmOptions{Verb: "create"},
			reviewer: &fakeReviewer{allow: map[string]bool{
				runner + " create pods.g.io/ in a": true,
				"[admins] create pods.g.io/ in a":  true,
			}},
			want: rows[:2],
			seen: []string{runner + " create pods.g.io/ in a", "[admins] create pods.g.io/ in a", "alice[] create pods.g.io/ in a"}},
		{name: "node access needs both reviews", opts: ConfirmOptions{Verb: "create", Node: "vk-1"},
			reviewer: &fakeReviewer{allow: map[string]bool{
				runner + " create pods.g.io/ in a":   true,
				runner + " use nodes.g.io/vk-1 in a": true,
				"[admins] create pods.g.io/ in a":    true,
				"alice[] use nodes.g.io/vk-1 in a":   true,
			}},
			want: rows[:1],
			seen: []string{runner + " create pods.g.io/ in a", runner + " use nodes.g.io/vk-1 in a", "[admins] create pods.g.io/ in a",
				"[admins] use nodes.g.io/vk-1 in a", "alice[] create pods.g.io/ in a"}},
		{name: "a failed review fails the command", opts: ConfirmOptions{Verb: "create"},
			reviewer: &fakeReviewer{fail: "[admins] create pods.g.io/ in a"},
			err:      `reviewing Group admins in namespace "a": API down`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Confirm(context.Background(), tc.reviewer, rows, tc.opts)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if !reflect.DeepEqual(tc.reviewer.seen, tc.seen) {
				t.Errorf("reviews %q\nwant    %q", tc.reviewer.seen, tc.seen)
			}
		})
	}
}

func TestPrintTable(t *testing.T) {
	var out bytes.Buffer
	rows := []Row{{Namespace: "team-a", Kind: KindServiceAccount, Subject: "team-a/runner", Group: "g.io", Via: list("RoleBinding/x (Role/y)", "RoleBinding/z (Role/y)")}}
	if err := PrintTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	want := "NAMESPACE  SUBJECT-KIND    SUBJECT        GROUP  VIA\n" +
		"team-a     ServiceAccount  team-a/runner  g.io   RoleBinding/x (Role/y), RoleBinding/z (Role/y)\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if err := PrintRowsJSON(&out, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != "{\n  \"items\": []\n}\n" {
		t.Errorf("empty JSON: %q", out.String())
	}
}
