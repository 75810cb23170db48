package kube

import (
	"context"
	"fmt"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
)

// TokenReviewOptions configures NewTokenAuthenticator.
type TokenReviewOptions struct {
	// Audiences the token must be valid for; empty: the API server's.
	Audiences []string
	// SuccessTTL and FailureTTL are how long an accepted and a refused token are
	// remembered. API errors are never remembered.
	SuccessTTL, FailureTTL time.Duration
	Backoff                wait.Backoff
}

// NewTokenAuthenticator returns who the bearer of a token is, asked with a TokenReview
// and cached by a keyed hash of the token (k8s.io/apiserver's token cache, which also
// merges concurrent lookups of one token). ok is false for a token the API refuses;
// err is set only when the API could not answer.
func NewTokenAuthenticator(client kubernetes.Interface, opts TokenReviewOptions) authenticator.Token {
	reviewer := &tokenReviewer{client: client, audiences: opts.Audiences, backoff: opts.Backoff}
	return tokencache.New(reviewer, false, opts.SuccessTTL, opts.FailureTTL)
}

// tokenReviewer tells a refused token (ok false, no error: cacheable) from an API that
// did not answer (an error: never cached), unlike the webhook authenticator, which
// returns the API's refusal message as an error.
type tokenReviewer struct {
	client    kubernetes.Interface
	audiences []string
	backoff   wait.Backoff
}

func (r *tokenReviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: r.audiences}}
	status, err := withRetries(ctx, r.backoff, func(ctx context.Context) (authenticationv1.TokenReviewStatus, error) {
		got, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return authenticationv1.TokenReviewStatus{}, err
		}
		return got.Status, nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("token review: %w", err)
	}
	if !status.Authenticated || !audiencesMatch(r.audiences, status.Audiences) {
		return nil, false, nil
	}
	return &authenticator.Response{
		Audiences: status.Audiences,
		User: &user.DefaultInfo{
			Name: status.User.Username, UID: status.User.UID, Groups: status.User.Groups, Extra: extraOf(status.User.Extra),
		},
	}, true, nil
}

// audiencesMatch reports whether the token is valid for one of the wanted audiences. The
// API server answers with the audiences it checked; when none were asked for, any
// authenticated token is for the API server itself.
func audiencesMatch(want, got []string) bool {
	if len(want) == 0 {
		return true
	}
	for _, a := range got {
		if slices.Contains(want, a) {
			return true
		}
	}
	return false
}

func extraOf(in map[string]authenticationv1.ExtraValue) map[string][]string {
	if in == nil {
		return nil
	}
	out := make(map[string][]string, len(in))
	for k, v := range in {
		out[k] = append([]string(nil), v...)
	}
	return out
}
