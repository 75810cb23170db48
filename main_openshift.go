package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	flag "github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sar-bridge/sar-bridge/authn"
	"github.com/sar-bridge/sar-bridge/authorizer"
	"github.com/sar-bridge/sar-bridge/kube"
)

// addOpenShiftFlags registers the flags that bound what one opa-openshift request, or
// a stream of pod decisions for a missing namespace, costs the Kubernetes API.
func (cfg *config) addOpenShiftFlags(fs *flag.FlagSet) {
	fs.IntVar(&cfg.openshift.MaxSelectorNamespaces, "opa.max-selector-namespaces", authorizer.DefaultMaxSelectorNamespaces,
		"opa-openshift compatibility: most distinct namespaces one request may name in extras.selectors; more is a 400. Only namespaces the bridge's informer knows are reviewed.")
	fs.DurationVar(&cfg.notFoundTTL, "informer.not-found-ttl", kube.DefaultNotFoundTTL,
		"How long a namespace the Kubernetes API reported missing is answered as missing without asking again (forgotten at once when the informer sees it created). 0: ask every time.")
}

// checkOpenShiftFlags validates the flags of addOpenShiftFlags.
func (cfg *config) checkOpenShiftFlags() error {
	switch {
	case cfg.openshift.MaxSelectorNamespaces < 1:
		return errors.New("--opa.max-selector-namespaces must be at least 1")
	case cfg.notFoundTTL < 0:
		return errors.New("--informer.not-found-ttl must not be negative")
	}
	return nil
}

// callerAudiences are the audiences of callers' own tokens. Under --opa.ssar the
// forwarded tokens use --authn.audiences too, so the flag is legitimate without
// --authn.mode=token; the caller filter then gets none.
func (cfg *config) callerAudiences() []string {
	if cfg.openshift.SSAR && cfg.authnMode != string(authn.ModeToken) {
		return nil
	}
	return cfg.authnAudiences
}

// enableOpenShift serves opa-openshift's request shape when --opa.package is set. It
// refuses a route that overlaps a document of the pod-decision policy (docs), and
// under --opa.ssar builds the bridge's one SelfSubjectAccessReview client and the
// TokenReview that names each forwarded token's bearer.
func enableOpenShift(cfg config, authz *authorizer.Authorizer, view *kube.ClusterView, client kubernetes.Interface, restConfig *rest.Config, docs [][]string) error {
	path := cfg.openshift.Path
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
	if cfg.openshift.SSAR {
		reviewer, err := kube.NewSelfSubjectAccessReviewer(restConfig, kube.DefaultRetryBackoff)
		if err != nil {
			return fmt.Errorf("--opa.ssar: %w", err)
		}
		ssar = authorizer.OpenShiftSSAR{Reviewer: reviewer, Tokens: kube.NewTokenAuthenticator(client, kube.TokenReviewOptions{
			Audiences: cfg.authnAudiences, SuccessTTL: cfg.callerCacheSuccess, FailureTTL: cfg.callerCacheFailure,
			Backoff: kube.DefaultRetryBackoff,
		})}
	}
	authz.EnableOpenShift(cfg.openshift, view, ssar)
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
