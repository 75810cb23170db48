package authorizer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	k8sauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// ForbiddenError is a caller that may not ask what it asked (403).
type ForbiddenError struct{ msg string }

func (e *ForbiddenError) Error() string { return e.msg }

// NewForbiddenError returns a ForbiddenError with a message for the caller.
func NewForbiddenError(msg string) *ForbiddenError { return &ForbiddenError{msg: msg} }

// vouch checks that the authenticated caller may impersonate everything input.user
// claims, with the same checks Kubernetes runs for its Impersonate-* headers: the user
// (or the service account it names), each group, each extra value and the uid.
func (a *Authorizer) vouch(ctx context.Context, claimed Subject) error {
	caller, ok := request.UserFrom(ctx)
	if !ok || a.impersonation == nil {
		return NewForbiddenError("input.user needs an authenticated caller (--authn.mode token or mtls) that may impersonate it")
	}
	var refused []string
	check := func(what string, attrs k8sauthorizer.AttributesRecord) error {
		attrs.User, attrs.Verb, attrs.ResourceRequest = caller, "impersonate", true
		decision, _, err := a.impersonation.Authorize(ctx, attrs)
		if err != nil && decision != k8sauthorizer.DecisionAllow {
			return NewUnavailableError(fmt.Errorf("impersonation review failed: %w", err))
		}
		if decision != k8sauthorizer.DecisionAllow {
			refused = append(refused, what)
		}
		return nil
	}
	var userAttrs k8sauthorizer.AttributesRecord
	if ns, name, err := serviceaccount.SplitUsername(claimed.Username); err == nil {
		userAttrs = k8sauthorizer.AttributesRecord{Resource: "serviceaccounts", Namespace: ns, Name: name}
	} else {
		userAttrs = k8sauthorizer.AttributesRecord{Resource: "users", Name: claimed.Username}
	}
	checks := []error{check(fmt.Sprintf("user %q", claimed.Username), userAttrs)}
	for _, g := range claimed.Groups {
		checks = append(checks, check(fmt.Sprintf("group %q", g), k8sauthorizer.AttributesRecord{Resource: "groups", Name: g}))
	}
	keys := make([]string, 0, len(claimed.Extra))
	for k := range claimed.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range claimed.Extra[k] {
			checks = append(checks, check(fmt.Sprintf("extra %s=%q", k, v), k8sauthorizer.AttributesRecord{
				APIGroup: "authentication.k8s.io", Resource: "userextras", Subresource: k, Name: v}))
		}
	}
	if claimed.UID != "" {
		checks = append(checks, check(fmt.Sprintf("uid %q", claimed.UID), k8sauthorizer.AttributesRecord{
			APIGroup: "authentication.k8s.io", Resource: "uids", Name: claimed.UID}))
	}
	if err := errors.Join(checks...); err != nil {
		return err
	}
	if len(refused) > 0 {
		return NewForbiddenError(fmt.Sprintf("caller %q may not impersonate %s", caller.GetName(), strings.Join(refused, ", ")))
	}
	return nil
}

// callerName names the authenticated caller for logs, or "" without one.
func callerName(ctx context.Context) string {
	if u, ok := request.UserFrom(ctx); ok {
		return u.GetName()
	}
	return ""
}
