package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
)

// RBAC is the cluster's authorization objects who-can reads.
type RBAC struct {
	Roles               []rbacv1.Role
	ClusterRoles        []rbacv1.ClusterRole
	RoleBindings        []rbacv1.RoleBinding
	ClusterRoleBindings []rbacv1.ClusterRoleBinding
}

// ListRBAC lists the RBAC objects of the cluster (or of one namespace's Roles and
// RoleBindings when namespace is set).
func ListRBAC(ctx context.Context, client kubernetes.Interface, namespace string) (RBAC, error) {
	var r RBAC
	rbac := client.RbacV1()
	roles, err := rbac.Roles(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("listing Roles: %w", err)
	}
	clusterRoles, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("listing ClusterRoles: %w", err)
	}
	bindings, err := rbac.RoleBindings(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("listing RoleBindings: %w", err)
	}
	clusterBindings, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("listing ClusterRoleBindings: %w", err)
	}
	return RBAC{roles.Items, clusterRoles.Items, bindings.Items, clusterBindings.Items}, nil
}

// Target is a namespace whose pods offload under an API group.
type Target struct {
	Namespace string
	Group     string
}

// Targets are the namespaces whose tenant maps to a group; unmapped ones are skipped,
// since nothing RBAC grants lets them offload.
func Targets(namespaces []corev1.Namespace, groups authorizer.TenantGroups, tenantLabel string) []Target {
	var out []Target
	for _, ns := range namespaces {
		if g, ok := groups.Group(mapping.Tenant(ns.Name, ns.Labels, tenantLabel)); ok {
			out = append(out, Target{Namespace: ns.Name, Group: g})
		}
	}
	return out
}

// Subject kinds of RBAC.
const (
	KindUser           = rbacv1.UserKind
	KindGroup          = rbacv1.GroupKind
	KindServiceAccount = rbacv1.ServiceAccountKind
)

// Row is one subject that may offload in a namespace, and the bindings that say so.
type Row struct {
	Namespace string   `json:"namespace"`
	Kind      string   `json:"kind"`
	Subject   string   `json:"subject"` // namespace/name for a ServiceAccount
	Group     string   `json:"group"`
	Via       []string `json:"via"`
}

// Candidates are the subjects bound to a rule granting verb on pods in each target's
// group, per target namespace, sorted; the bindings say nothing about other
// authorizers, so each one still needs a review (Confirm).
func Candidates(r RBAC, targets []Target, verb string) []Row {
	roles := map[string][]rbacv1.PolicyRule{}
	for _, role := range r.Roles {
		roles["Role/"+role.Namespace+"/"+role.Name] = role.Rules
	}
	for _, role := range r.ClusterRoles {
		roles["ClusterRole/"+role.Name] = role.Rules
	}
	byKey := map[string]*Row{}
	add := func(t Target, subjects []rbacv1.Subject, bindingNS, via string) {
		for _, s := range subjects {
			kind, name, ok := subjectName(s, bindingNS)
			if !ok {
				continue
			}
			key := t.Namespace + "\x00" + kind + "\x00" + name
			row := byKey[key]
			if row == nil {
				row = &Row{Namespace: t.Namespace, Kind: kind, Subject: name, Group: t.Group}
				byKey[key] = row
			}
			if !slices.Contains(row.Via, via) {
				row.Via = append(row.Via, via)
			}
		}
	}
	for _, t := range targets {
		for _, b := range r.RoleBindings {
			ref := "ClusterRole/" + b.RoleRef.Name
			if b.RoleRef.Kind == "Role" {
				ref = "Role/" + b.Namespace + "/" + b.RoleRef.Name
			}
			if b.Namespace == t.Namespace && grants(roles[ref], verb, t.Group) {
				add(t, b.Subjects, b.Namespace, fmt.Sprintf("RoleBinding/%s (%s/%s)", b.Name, b.RoleRef.Kind, b.RoleRef.Name))
			}
		}
		for _, b := range r.ClusterRoleBindings {
			if b.RoleRef.Kind == "ClusterRole" && grants(roles["ClusterRole/"+b.RoleRef.Name], verb, t.Group) {
				add(t, b.Subjects, "", fmt.Sprintf("ClusterRoleBinding/%s (ClusterRole/%s)", b.Name, b.RoleRef.Name))
			}
		}
	}
	rows := make([]Row, 0, len(byKey))
	for _, row := range byKey {
		sort.Strings(row.Via)
		rows = append(rows, *row)
	}
	sortRows(rows)
	return rows
}

func sortRows(rows []Row) {
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Subject < b.Subject
	})
}

// subjectName is a binding subject's kind and printed name; a ServiceAccount without a
// namespace is the binding's own, as RBAC reads it.
func subjectName(s rbacv1.Subject, bindingNS string) (kind, name string, ok bool) {
	switch s.Kind {
	case KindUser, KindGroup:
		return s.Kind, s.Name, s.Name != ""
	case KindServiceAccount:
		ns := s.Namespace
		if ns == "" {
			ns = bindingNS
		}
		return s.Kind, ns + "/" + s.Name, ns != "" && s.Name != ""
	}
	return "", "", false
}

// grants reports whether a rule allows verb on pods in group, wildcards included.
// resourceNames are not looked at here: the review that confirms each subject is
// sent without a name, as a create review is, so a rule limited to names drops out.
func grants(rules []rbacv1.PolicyRule, verb, group string) bool {
	for _, rule := range rules {
		if matches(rule.Verbs, verb) && matches(rule.APIGroups, group) && matches(rule.Resources, "pods") {
			return true
		}
	}
	return false
}

func matches(values []string, want string) bool {
	return slices.Contains(values, want) || slices.Contains(values, rbacv1.ResourceAll)
}

// Reviewer answers SubjectAccessReviews; kube.SubjectAccessReviewer is the real one.
type Reviewer interface {
	Review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
}

// ConfirmOptions are the reviews that confirm a candidate, as the server sends them.
type ConfirmOptions struct {
	Verb string
	// Node, when set, adds the review of "use" on that node (--review.node-access).
	Node string
}

// Confirm keeps the candidates every review allows: what RBAC's objects suggest is
// only believed once the API server's authorizer agrees.
func Confirm(ctx context.Context, reviewer Reviewer, candidates []Row, opts ConfirmOptions) ([]Row, error) {
	var out []Row
	for _, row := range candidates {
		ok, err := confirmOne(ctx, reviewer, row, opts)
		if err != nil {
			return nil, fmt.Errorf("reviewing %s %s in namespace %q: %w", row.Kind, row.Subject, row.Namespace, err)
		}
		if ok {
			out = append(out, row)
		}
	}
	return out, nil
}

func confirmOne(ctx context.Context, reviewer Reviewer, row Row, opts ConfirmOptions) (bool, error) {
	attrs := []*authorizationv1.ResourceAttributes{{Namespace: row.Namespace, Verb: opts.Verb, Group: row.Group, Resource: "pods"}}
	if opts.Node != "" {
		attrs = append(attrs, &authorizationv1.ResourceAttributes{Namespace: row.Namespace, Verb: "use", Group: row.Group, Resource: "nodes", Name: opts.Node})
	}
	for _, a := range attrs {
		spec := identity(row)
		spec.ResourceAttributes = a
		status, err := reviewer.Review(ctx, spec)
		if err != nil {
			return false, err
		}
		if !status.Allowed {
			return false, nil
		}
	}
	return true, nil
}

// identity is who a row's subject is in a review; a ServiceAccount is exactly the
// identity pod decisions use.
func identity(row Row) authorizationv1.SubjectAccessReviewSpec {
	switch row.Kind {
	case KindGroup:
		return authorizationv1.SubjectAccessReviewSpec{Groups: []string{row.Subject}}
	case KindServiceAccount:
		ns, name, _ := strings.Cut(row.Subject, "/")
		s := authorizer.ServiceAccountSubject(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: corev1.PodSpec{ServiceAccountName: name}})
		return authorizationv1.SubjectAccessReviewSpec{User: s.Username, Groups: s.Groups}
	}
	return authorizationv1.SubjectAccessReviewSpec{User: row.Subject}
}

// PrintTable writes the rows as kubectl does: aligned columns under a header.
func PrintTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tSUBJECT-KIND\tSUBJECT\tGROUP\tVIA")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Kind, r.Subject, r.Group, strings.Join(r.Via, ", "))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// PrintRowsJSON writes {"items": [...]}.
func PrintRowsJSON(w io.Writer, rows []Row) error {
	if rows == nil {
		rows = []Row{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"items": rows}); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
