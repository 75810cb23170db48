package authorizer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/sar-bridge/sar-bridge/internal/kube"
)

// OpenShiftConfig makes the bridge answer observatorium's opa-openshift requests
// ({"subject", "groups", "permission", "resource", "tenant", "extras"}) on one document
// path, with opa-openshift's translation and response shapes.
type OpenShiftConfig struct {
	// Path is the document of --opa.package and --opa.rule, e.g. [lokistack allow].
	Path []string
	// Matchers are the label names of --opa.matcher; empty answers plain booleans.
	Matchers    []string
	MatcherOp   string
	SkipTenants []string
	AdminGroups []string
	// SSAR reviews with the caller's X-Forwarded-Access-Token instead of the body's
	// subject; the token's groups (from a TokenReview) then decide AdminGroups.
	SSAR bool
	// MaxSelectorNamespaces refuses (400) a request whose selectors name more distinct
	// namespaces; 0 means DefaultMaxSelectorNamespaces.
	MaxSelectorNamespaces int
	// ViaQToOTelMigration keeps one of the two namespace label names per request.
	ViaQToOTelMigration bool
}

// Label names the ViaQ→OTel migration chooses between.
const (
	viaqNamespaceLabel = "kubernetes_namespace_name"
	otelNamespaceLabel = "k8s_namespace_name"
)

// NamespaceLister lists the namespaces of the cluster; kube.ClusterView is the real one.
type NamespaceLister interface {
	NamespaceNames() ([]string, error)
}

// DefaultMaxSelectorNamespaces bounds the namespaces one request may name in selectors.
const DefaultMaxSelectorNamespaces = 300

// OpenShiftSSAR is what --opa.ssar needs: one SelfSubjectAccessReview reviewer that
// authenticates with the token kube.WithBearerToken puts in the context, and a
// (cached) TokenReview that says whose the token is.
type OpenShiftSSAR struct {
	Reviewer Reviewer
	Tokens   authenticator.Token
}

// UnauthenticatedError is a request that lacks the credential it needs (401).
type UnauthenticatedError struct{ msg string }

func (e *UnauthenticatedError) Error() string { return e.msg }

// NewUnauthenticatedError returns an UnauthenticatedError with a message for the caller.
func NewUnauthenticatedError(msg string) *UnauthenticatedError {
	return &UnauthenticatedError{msg: msg}
}

// EnableOpenShift serves opa-openshift's request shape on cfg.Path. With cfg.SSAR, ssar
// must be complete: without it every request is refused (503), never reviewed as
// someone else.
func (a *Authorizer) EnableOpenShift(cfg OpenShiftConfig, namespaces NamespaceLister, ssar OpenShiftSSAR) {
	if cfg.MaxSelectorNamespaces <= 0 {
		cfg.MaxSelectorNamespaces = DefaultMaxSelectorNamespaces
	}
	a.openshift = &openshiftMode{cfg: cfg, namespaces: namespaces, ssar: ssar}
}

type openshiftMode struct {
	cfg        OpenShiftConfig
	namespaces NamespaceLister
	ssar       OpenShiftSSAR
}

// serves reports whether a request is opa-openshift's: on its path, without a pod.
func (m *openshiftMode) serves(path []string, raw json.RawMessage) bool {
	if m == nil || !slices.Equal(path, m.cfg.Path) {
		return false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return true // a broken body on this path is opa-openshift's to reject
	}
	_, hasPod := fields["pod"]
	return !hasPod
}

type openshiftInput struct {
	Subject    string   `json:"subject"`
	Groups     []string `json:"groups"`
	Permission string   `json:"permission"`
	Resource   string   `json:"resource"`
	Tenant     string   `json:"tenant"`
	Extras     struct {
		Selectors         map[string][]string `json:"selectors"`
		WildcardSelectors bool                `json:"wildcardSelectors"`
		MetadataOnly      bool                `json:"metadataOnly"`
	} `json:"extras"`
}

var permissionVerbs = map[string]string{"read": "get", "write": "create"}

// namespaceReviewConcurrency bounds the per-namespace reviews one request runs at once.
const namespaceReviewConcurrency = 8

func (a *Authorizer) decideOpenShift(ctx context.Context, raw json.RawMessage, token string) (Decision, error) {
	m := a.openshift
	rec := a.beginDecision("path", strings.Join(m.cfg.Path, "/"), "shape", "opa-openshift")
	defer rec.end()

	var in openshiftInput
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&in); err != nil {
		return Decision{}, inputErrorf("input: %v", err)
	}
	if err := a.waitForSync(ctx); err != nil {
		return Decision{}, err
	}
	rec.add("subject", in.Subject, "tenant", in.Tenant, "permission", in.Permission, "resource", in.Resource)
	deny := func(reason string) (Decision, error) {
		rec.decided("denied", reason)
		return Decision{Defined: true, Result: ast.Boolean(false)}, nil
	}

	group, mapped := a.cfg.Mappings.Group(in.Tenant)
	verb, knownPermission := permissionVerbs[in.Permission]
	switch {
	case in.Resource == "":
		return Decision{}, inputErrorf("unknown resource: input.resource is required")
	case !knownPermission:
		return Decision{}, inputErrorf("unknown permission %q: want read or write", in.Permission)
	case !mapped:
		return deny(fmt.Sprintf("tenant %q has no API group mapping", in.Tenant))
	}

	// Bounded before any review: each named namespace may cost one.
	selected := selectedNamespaces(in.Extras.Selectors)
	if len(selected) > m.cfg.MaxSelectorNamespaces {
		return Decision{}, inputErrorf("selectors name %d namespaces; at most %d are allowed", len(selected), m.cfg.MaxSelectorNamespaces)
	}

	ctx, who, err := m.identify(ctx, in, token)
	if err != nil {
		return Decision{}, err
	}
	rec.add("identity", who.user) // under SSAR, the token's bearer
	keys := m.matcherKeys(in, who.groups)
	if in.Extras.WildcardSelectors && len(keys) > 0 {
		return Decision{}, inputErrorf("wildcard in query namespaces not allowed")
	}
	if m.cfg.ViaQToOTelMigration && len(in.Extras.Selectors[viaqNamespaceLabel]) > 0 && len(in.Extras.Selectors[otelNamespaceLabel]) > 0 {
		return Decision{}, inputErrorf("queries with both %q and %q selectors are not allowed", viaqNamespaceLabel, otelNamespaceLabel)
	}

	review := func(ctx context.Context, namespace string) (bool, error) {
		spec := authorizationv1.SubjectAccessReviewSpec{
			User: who.specUser, Groups: who.specGroups, Extra: who.extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Group: group, Resource: in.Tenant, Name: in.Resource,
			},
		}
		r, _, err := a.reviewer.ReviewWith(ctx, who.reviewer, spec)
		if err != nil {
			if apierrors.IsUnauthorized(err) {
				return false, NewUnauthenticatedError("the forwarded access token was not accepted by the Kubernetes API")
			}
			return false, NewUnavailableError(fmt.Errorf("subject access review failed: %w", err))
		}
		return r.Allowed, nil
	}

	result, reason, err := m.decide(ctx, in, selected, verb, keys, review)
	if err != nil {
		rec.failed(false, "decision failed", err)
		return Decision{}, err
	}
	value, err := ast.InterfaceToValue(result)
	if err != nil {
		rec.failed(false, "decision failed", err)
		return Decision{}, fmt.Errorf("converting the answer: %w", err)
	}
	rec.decided(allowedWord(allowedResult(result)), reason)
	return Decision{Defined: true, Result: value}, nil
}

// openshiftIdentity is whom a request is reviewed for and how.
type openshiftIdentity struct {
	user string // for the log
	// groups decide --opa.admin-groups: the body's, or the token's under SSAR.
	groups []string
	// specUser and specGroups go into the review spec; empty under SSAR, where the
	// token is the identity.
	specUser   string
	specGroups []string
	// extra tells cached reviews of different tokens apart (the key is the spec's hash).
	extra map[string]authorizationv1.ExtraValue
	// reviewer is nil for the CachingReviewer's own (SubjectAccessReviews).
	reviewer Reviewer
}

// identify returns the body's subject and groups, as opa-openshift trusts its caller
// to send them, or under SSAR the bearer of the forwarded token as a TokenReview
// names it: nothing in the body counts then. The returned context carries the token for
// the SelfSubjectAccessReview client.
func (m *openshiftMode) identify(ctx context.Context, in openshiftInput, token string) (context.Context, openshiftIdentity, error) {
	if !m.cfg.SSAR {
		if in.Subject == "" && len(in.Groups) == 0 {
			return ctx, openshiftIdentity{}, inputErrorf("input.subject is required")
		}
		return ctx, openshiftIdentity{user: in.Subject, groups: in.Groups, specUser: in.Subject, specGroups: in.Groups}, nil
	}
	if token == "" {
		return ctx, openshiftIdentity{}, NewUnauthenticatedError("missing forwarded access token: --opa.ssar needs the X-Forwarded-Access-Token header")
	}
	if m.ssar.Reviewer == nil || m.ssar.Tokens == nil {
		return ctx, openshiftIdentity{}, NewUnavailableError(errors.New("--opa.ssar is enabled without a token reviewer"))
	}
	resp, ok, err := m.ssar.Tokens.AuthenticateToken(ctx, token)
	switch {
	case err != nil:
		return ctx, openshiftIdentity{}, NewUnavailableError(fmt.Errorf("reviewing the forwarded access token: %w", err))
	case !ok || resp == nil || resp.User == nil:
		return ctx, openshiftIdentity{}, NewUnauthenticatedError("the forwarded access token was not accepted by the Kubernetes API")
	}
	sum := sha256.Sum256([]byte(token))
	return kube.WithBearerToken(ctx, token), openshiftIdentity{
		user:     resp.User.GetName(),
		groups:   resp.User.GetGroups(),
		extra:    map[string]authorizationv1.ExtraValue{"sar-bridge.io/token-sha256": {hex.EncodeToString(sum[:])}},
		reviewer: m.ssar.Reviewer,
	}, nil
}

// matcherKeys are the label names the answer restricts, none for skipped tenants and
// members of admin groups.
func (m *openshiftMode) matcherKeys(in openshiftInput, groups []string) []string {
	if len(m.cfg.Matchers) == 0 || slices.Contains(m.cfg.SkipTenants, in.Tenant) {
		return nil
	}
	for _, g := range groups {
		if slices.Contains(m.cfg.AdminGroups, g) {
			return nil
		}
	}
	if !m.cfg.ViaQToOTelMigration {
		return m.cfg.Matchers
	}
	drop := otelNamespaceLabel
	if len(in.Extras.Selectors[otelNamespaceLabel]) > 0 {
		drop = viaqNamespaceLabel
	}
	return slices.DeleteFunc(slices.Clone(m.cfg.Matchers), func(k string) bool { return k == drop })
}

// decide follows opa-openshift: a cluster-wide review first; writes answer with it alone;
// reads are narrowed to the namespaces the subject may read, listed from the informer
// where opa-openshift lists OpenShift projects.
//
// selected are the selectors' namespaces; only those the informer knows are reviewed,
// so made-up names cost no review and cannot crowd real entries out of the cache.
func (m *openshiftMode) decide(ctx context.Context, in openshiftInput, selected []string, verb string, keys []string,
	review func(context.Context, string) (bool, error)) (result any, reason string, err error) {
	clusterWide, err := review(ctx, "")
	if err != nil {
		return nil, "", err
	}
	if verb == "create" {
		return clusterWide, "cluster-wide review", nil
	}
	if clusterWide && len(keys) == 0 {
		return true, "cluster-wide review", nil
	}
	all, err := m.namespaces.NamespaceNames()
	if err != nil {
		return nil, "", NewUnavailableError(err)
	}
	existing := intersect(selected, all)
	if clusterWide {
		if len(selected) == 0 {
			existing = all
		}
		return m.matcherResult(keys, existing), "cluster-wide review, matcher over the namespaces", nil
	}
	if in.Extras.MetadataOnly && len(selected) == 0 {
		existing = all
	}
	allowed, err := reviewNamespaces(ctx, existing, review)
	if err != nil {
		return nil, "", err
	}
	switch {
	case len(allowed) == 0:
		return false, "no cluster-wide or namespace access", nil
	case len(keys) == 0:
		return true, "namespace access", nil
	}
	return m.matcherResult(keys, allowed), "namespace access, matcher over the allowed namespaces", nil
}

// reviewNamespaces reviews each namespace, a few at a time, and keeps the allowed ones
// in the order given.
func reviewNamespaces(ctx context.Context, namespaces []string, review func(context.Context, string) (bool, error)) ([]string, error) {
	ok := make([]bool, len(namespaces))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(namespaceReviewConcurrency)
	for i, ns := range namespaces {
		g.Go(func() error {
			allowed, err := review(gctx, ns)
			ok[i] = allowed
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var allowed []string
	for i, ns := range namespaces {
		if ok[i] {
			allowed = append(allowed, ns)
		}
	}
	return allowed, nil
}

// matcher is a Prometheus labels.Matcher as opa-openshift's clients decode it: no JSON
// tags, so the field names are capitalised, and Type 2 is a regular-expression match.
type matcher struct {
	Type  int
	Name  string
	Value string
}

type matcherData struct {
	Matchers  []matcher `json:"matchers"`
	MatcherOp string    `json:"matcherOp,omitempty"`
}

const matchRegexp = 2

// matcherResult is opa-openshift's object answer: "allowed" a string, "data" a JSON
// document in a string, as observatorium's client type-asserts them.
func (m *openshiftMode) matcherResult(keys, namespaces []string) map[string]any {
	value := strings.Join(namespaces, "|")
	data := matcherData{MatcherOp: m.cfg.MatcherOp}
	for _, k := range keys {
		data.Matchers = append(data.Matchers, matcher{Type: matchRegexp, Name: k, Value: value})
	}
	b, _ := json.Marshal(data) // strings and ints only: cannot fail
	allowed := "false"
	if len(namespaces) > 0 {
		allowed = "true"
	}
	return map[string]any{"allowed": allowed, "data": string(b)}
}

// selectedNamespaces is every value of every selector, once, sorted (opa-openshift's
// order is random; a stable one keeps answers comparable).
func selectedNamespaces(selectors map[string][]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, values := range selectors {
		for _, v := range values {
			if v != "" && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	sort.Strings(out)
	return out
}

func intersect(wanted, existing []string) []string {
	var out []string
	for _, w := range wanted {
		if _, found := slices.BinarySearch(existing, w); found {
			out = append(out, w)
		}
	}
	return out
}

func allowedResult(result any) bool {
	switch r := result.(type) {
	case bool:
		return r
	case map[string]any:
		return r["allowed"] == "true"
	}
	return false
}
