package app

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	flag "github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/kube"
)

// Names in opa-openshift's own validation: a Rego package and rule.
var (
	opaPackagePattern = regexp.MustCompile(`^[_A-Za-z]\w*(\.[_A-Za-z]\w*)*$`)
	opaRulePattern    = regexp.MustCompile(`^[_A-Za-z]\w*$`)
)

// openshiftOptions configure the opa-openshift compatibility (--opa.*).
type openshiftOptions struct {
	pkg         string
	rule        string
	matcher     string
	skipTenants string
	adminGroups string

	// Filled by the flags, then by validate.
	config authorizer.OpenShiftConfig
}

func (o *openshiftOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.pkg, "opa.package", "", "opa-openshift compatibility: Rego package whose --opa.rule answers opa-openshift's request shape, e.g. lokistack (served at /v1/data/lokistack/allow). Empty: not served.")
	fs.StringVar(&o.rule, "opa.rule", "allow", "opa-openshift compatibility: the rule of --opa.package.")
	fs.StringVar(&o.matcher, "opa.matcher", "", "opa-openshift compatibility: comma-separated label names; read answers then carry a matcher listing the namespaces the subject may read.")
	fs.StringVar(&o.config.MatcherOp, "opa.matcher-op", "", "opa-openshift compatibility: matcherOp of the answer (and|or); empty leaves it out.")
	fs.StringVar(&o.skipTenants, "opa.skip-tenants", "", "opa-openshift compatibility: comma-separated tenants answered without a matcher.")
	fs.StringVar(&o.adminGroups, "opa.admin-groups", "", "opa-openshift compatibility: comma-separated groups whose members get no matcher.")
	fs.BoolVar(&o.config.SSAR, "opa.ssar", false, "opa-openshift compatibility: review with the caller's X-Forwarded-Access-Token (SelfSubjectAccessReview) instead of the body's subject and groups.")
	fs.BoolVar(&o.config.ViaQToOTelMigration, "opa.viaq-to-otel-migration", false, "opa-openshift compatibility: --opa.matcher names both kubernetes_namespace_name and k8s_namespace_name; each request keeps the one its selectors use.")
	// Bounds what one opa-openshift request costs the Kubernetes API.
	fs.IntVar(&o.config.MaxSelectorNamespaces, "opa.max-selector-namespaces", authorizer.DefaultMaxSelectorNamespaces,
		"opa-openshift compatibility: most distinct namespaces one request may name in extras.selectors; more is a 400. Only namespaces the bridge's informer knows are reviewed.")
}

// validate checks the flags and turns them into the compatibility settings.
func (o *openshiftOptions) validate() error {
	switch {
	case o.pkg != "" && !opaPackagePattern.MatchString(o.pkg):
		return fmt.Errorf("--opa.package %q is not a Rego package name", o.pkg)
	case !opaRulePattern.MatchString(o.rule):
		return fmt.Errorf("--opa.rule %q is not a Rego rule name", o.rule)
	case o.pkg == "" && (o.matcher != "" || o.config.SSAR || o.skipTenants != "" || o.adminGroups != ""):
		return errors.New("--opa.matcher, --opa.ssar, --opa.skip-tenants and --opa.admin-groups need --opa.package")
	}
	if o.pkg != "" {
		o.config.Path = append(strings.Split(o.pkg, "."), o.rule)
	}
	o.config.Matchers = splitList(o.matcher)
	o.config.SkipTenants = splitList(o.skipTenants)
	o.config.AdminGroups = splitList(o.adminGroups)
	switch {
	case o.config.ViaQToOTelMigration && (!slices.Contains(o.config.Matchers, "kubernetes_namespace_name") || !slices.Contains(o.config.Matchers, "k8s_namespace_name")):
		return errors.New("--opa.viaq-to-otel-migration needs --opa.matcher to name both kubernetes_namespace_name and k8s_namespace_name")
	case o.config.MaxSelectorNamespaces < 1:
		return errors.New("--opa.max-selector-namespaces must be at least 1")
	}
	return nil
}

// enableOpenShift serves opa-openshift's request shape when --opa.package is set. It
// refuses a route that overlaps a document of the pod-decision policy (docs), and
// under --opa.ssar builds the bridge's one SelfSubjectAccessReview client and the
// TokenReview that names each forwarded token's bearer.
func enableOpenShift(o serveOptions, authz *authorizer.Authorizer, view *kube.ClusterView, client kubernetes.Interface, restConfig *rest.Config, docs [][]string) error {
	path := o.openshift.config.Path
	if path == nil {
		return nil
	}
	if doc, ok := overlappingDocument(path, docs); ok {
		return fmt.Errorf("--opa.package=%s --opa.rule=%s: opa-openshift requests on data.%s would share a route with data.%s of the pod-decision policy, "+
			"and opa-openshift bodies name their own subject: a caller allowed the policy's path could decide as anyone, without the impersonation check. "+
			"Choose a package the policy does not define (e.g. --opa.package=lokistack)",
			strings.Join(path[:len(path)-1], "."), path[len(path)-1], strings.Join(path, "."), strings.Join(doc, "."))
	}
	var ssar authorizer.OpenShiftSSAR
	if o.openshift.config.SSAR {
		reviewer, err := kube.NewSelfSubjectAccessReviewer(restConfig, kube.DefaultRetryBackoff)
		if err != nil {
			return fmt.Errorf("--opa.ssar: %w", err)
		}
		ssar = authorizer.OpenShiftSSAR{Reviewer: reviewer, Tokens: kube.NewTokenAuthenticator(client, kube.TokenReviewOptions{
			Audiences: o.authn.audiences, SuccessTTL: o.authn.cacheSuccess, FailureTTL: o.authn.cacheFailure,
			Backoff: kube.DefaultRetryBackoff,
		})}
	}
	authz.EnableOpenShift(o.openshift.config, view, ssar)
	return nil
}

// overlappingDocument returns a document of docs that path equals, lies under, or
// contains: the path itself when the policy defines it, else the longest such document,
// so the refusal names the closest one.
func overlappingDocument(path []string, docs [][]string) ([]string, bool) {
	var found []string
	for _, doc := range docs {
		if !hasPrefix(path, doc) && !hasPrefix(doc, path) {
			continue
		}
		if slices.Equal(doc, path) {
			return doc, true
		}
		if len(doc) > len(found) {
			found = doc
		}
	}
	return found, found != nil
}

func hasPrefix(s, prefix []string) bool {
	return len(prefix) <= len(s) && slices.Equal(s[:len(prefix)], prefix)
}
