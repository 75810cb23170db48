package authorizer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-kit/log/level"
	"golang.org/x/sync/errgroup"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// SSAR reviews with the caller's X-Forwarded-Access-Token instead of the body's subject.
	SSAR bool
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

// TokenReviewerFactory returns a Reviewer that reviews as the bearer of token.
type TokenReviewerFactory func(token string) (Reviewer, error)

// UnauthenticatedError is a request that lacks the credential it needs (401).
type UnauthenticatedError struct{ msg string }

func (e *UnauthenticatedError) Error() string { return e.msg }

// NewUnauthenticatedError returns an UnauthenticatedError with a message for the caller.
func NewUnauthenticatedError(msg string) *UnauthenticatedError {
	return &UnauthenticatedError{msg: msg}
}

type accessTokenKey struct{}

// WithAccessToken stores the caller's forwarded access token for opa-openshift's SSAR mode.
func WithAccessToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, accessTokenKey{}, token)
}

func accessTokenFrom(ctx context.Context) string {
	token, _ := ctx.Value(accessTokenKey{}).(string)
	return token
}

// EnableOpenShift serves opa-openshift's request shape on cfg.Path.
func (a *Authorizer) EnableOpenShift(cfg OpenShiftConfig, namespaces NamespaceLister, tokenReviewer TokenReviewerFactory) {
	a.openshift = &openshiftMode{cfg: cfg, namespaces: namespaces, tokenReviewer: tokenReviewer}
}

type openshiftMode struct {
	cfg           OpenShiftConfig
	namespaces    NamespaceLister
	tokenReviewer TokenReviewerFactory
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

func (a *Authorizer) decideOpenShift(ctx context.Context, raw json.RawMessage) (Decision, error) {
	start := time.Now()
	m := a.openshift
	logFields := []any{"path", strings.Join(m.cfg.Path, "/"), "shape", "opa-openshift"}
	outcome := "error"
	defer func() {
		a.metrics.decisions.WithLabelValues(outcome).Inc()
		a.metrics.decisionDuration.Observe(time.Since(start).Seconds())
	}()

	var in openshiftInput
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&in); err != nil {
		return Decision{}, inputErrorf("input: %v", err)
	}
	if err := a.waitForSync(ctx); err != nil {
		return Decision{}, err
	}
	logFields = append(logFields, "subject", in.Subject, "tenant", in.Tenant, "permission", in.Permission, "resource", in.Resource)
	deny := func(reason string) (Decision, error) {
		outcome = "denied"
		level.Info(a.logger).Log(append(logFields, "msg", "decision", "outcome", "denied", "reason", reason, "duration", time.Since(start))...)
		return Decision{Defined: true, Result: false}, nil
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

	reviewer, extra, err := m.reviewerFor(ctx, in)
	if err != nil {
		return Decision{}, err
	}
	keys := m.matcherKeys(in)
	if in.Extras.WildcardSelectors && len(keys) > 0 {
		return Decision{}, inputErrorf("wildcard in query namespaces not allowed")
	}
	if m.cfg.ViaQToOTelMigration && len(in.Extras.Selectors[viaqNamespaceLabel]) > 0 && len(in.Extras.Selectors[otelNamespaceLabel]) > 0 {
		return Decision{}, inputErrorf("queries with both %q and %q selectors are not allowed", viaqNamespaceLabel, otelNamespaceLabel)
	}

	review := func(ctx context.Context, namespace string) (bool, error) {
		spec := authorizationv1.SubjectAccessReviewSpec{
			User: in.Subject, Groups: in.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Group: group, Resource: in.Tenant, Name: in.Resource,
			},
		}
		if m.cfg.SSAR {
			spec.User, spec.Groups = "", nil // the token is the identity
		}
		r, _, err := a.reviewer.ReviewWith(ctx, reviewer, spec)
		if err != nil {
			if apierrors.IsUnauthorized(err) {
				return false, NewUnauthenticatedError("the forwarded access token was not accepted by the Kubernetes API")
			}
			return false, NewUnavailableError(fmt.Errorf("subject access review failed: %w", err))
		}
		return r.Allowed, nil
	}

	result, reason, err := m.decide(ctx, in, verb, keys, review)
	if err != nil {
		level.Error(a.logger).Log(append(logFields, "msg", "decision failed", "err", err)...)
		return Decision{}, err
	}
	outcome = "denied"
	if allowedResult(result) {
		outcome = "allowed"
	}
	level.Info(a.logger).Log(append(logFields, "msg", "decision", "outcome", outcome, "reason", reason, "duration", time.Since(start))...)
	return Decision{Defined: true, Result: result}, nil
}

// reviewerFor picks the reviewer: the bridge's own SubjectAccessReviews for the body's
// subject, or SelfSubjectAccessReviews with the caller's token. extra tells cached
// reviews of different tokens apart.
func (m *openshiftMode) reviewerFor(ctx context.Context, in openshiftInput) (Reviewer, map[string]authorizationv1.ExtraValue, error) {
	if !m.cfg.SSAR {
		if in.Subject == "" && len(in.Groups) == 0 {
			return nil, nil, inputErrorf("input.subject is required")
		}
		return nil, nil, nil // nil: the CachingReviewer's own
	}
	token := accessTokenFrom(ctx)
	if token == "" {
		return nil, nil, NewUnauthenticatedError("missing forwarded access token: --opa.ssar needs the X-Forwarded-Access-Token header")
	}
	reviewer, err := m.tokenReviewer(token)
	if err != nil {
		return nil, nil, NewUnavailableError(err)
	}
	sum := sha256.Sum256([]byte(token))
	return reviewer, map[string]authorizationv1.ExtraValue{"sar-bridge.io/token-sha256": {hex.EncodeToString(sum[:])}}, nil
}

// matcherKeys are the label names the answer restricts, none for skipped tenants and
// admin groups.
func (m *openshiftMode) matcherKeys(in openshiftInput) []string {
	if len(m.cfg.Matchers) == 0 || slices.Contains(m.cfg.SkipTenants, in.Tenant) {
		return nil
	}
	for _, g := range in.Groups {
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
func (m *openshiftMode) decide(ctx context.Context, in openshiftInput, verb string, keys []string,
	review func(context.Context, string) (bool, error)) (result any, reason string, err error) {
	clusterWide, err := review(ctx, "")
	if err != nil {
		return nil, "", err
	}
	if verb == "create" {
		return clusterWide, "cluster-wide review", nil
	}
	selected := selectedNamespaces(in.Extras.Selectors)
	if clusterWide {
		if len(keys) == 0 {
			return true, "cluster-wide review", nil
		}
		all, err := m.namespaces.NamespaceNames()
		if err != nil {
			return nil, "", NewUnavailableError(err)
		}
		readable := all
		if len(selected) > 0 {
			readable = intersect(selected, all)
		}
		return m.matcherResult(keys, readable), "cluster-wide review, matcher over the namespaces", nil
	}
	if in.Extras.MetadataOnly && len(selected) == 0 {
		if selected, err = m.namespaces.NamespaceNames(); err != nil {
			return nil, "", NewUnavailableError(err)
		}
	}
	allowed, err := reviewNamespaces(ctx, selected, review)
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
