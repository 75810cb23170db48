package kube

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/flowcontrol"
)

// startedView is a synced ClusterView over client whose namespace GETs are counted.
func startedView(t *testing.T, client *fake.Clientset, opts ...ViewOption) (*ClusterView, *atomic.Int64) {
	t.Helper()
	var gets atomic.Int64
	client.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil
	})
	view := NewClusterView(client, 0, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	view.Start(ctx)
	if !view.WaitForSync(ctx) {
		t.Fatal("not synced")
	}
	return view, &gets
}

func TestNamespaceNegativeCache(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		ttl      time.Duration
		lookups  int
		parallel bool
		wantGets int64
	}{
		{name: "sequential lookups share one GET", ttl: time.Minute, lookups: 100, wantGets: 1},
		{name: "concurrent lookups share one GET", ttl: time.Minute, lookups: 100, parallel: true, wantGets: 1},
		{name: "TTL 0 asks every time", ttl: 0, lookups: 5, wantGets: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			view, gets := startedView(t, fake.NewClientset(), WithNotFoundTTL(tt.ttl))
			var wg sync.WaitGroup
			for range tt.lookups {
				lookup := func() {
					if _, err := view.Namespace(ctx, "ghost"); !errors.Is(err, ErrNamespaceNotFound) {
						t.Errorf("Namespace(ghost) err = %v, want ErrNamespaceNotFound", err)
					}
				}
				if tt.parallel {
					wg.Go(lookup)
				} else {
					lookup()
				}
			}
			wg.Wait()
			// Concurrent callers that arrive after the shared GET has answered use the
			// negative cache; a GET in flight is joined. Either way: one.
			if got := gets.Load(); got != tt.wantGets {
				t.Errorf("GETs = %d, want %d", got, tt.wantGets)
			}
		})
	}
}

// The informer forgets a negative entry as soon as the namespace appears; an expired
// entry asks again.
func TestNamespaceNegativeCacheInvalidation(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	view, gets := startedView(t, client, WithNotFoundTTL(time.Hour))
	if _, err := view.Namespace(ctx, "late"); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("Namespace(late) err = %v", err)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ns, err := view.Namespace(ctx, "late")
		if err == nil && ns.Name == "late" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace created after a negative lookup still missing: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, missing := view.notFound.Get("late"); missing {
		t.Error("negative entry kept after the informer saw the namespace")
	}

	view, gets = startedView(t, fake.NewClientset(), WithNotFoundTTL(20*time.Millisecond))
	for range 2 {
		_, _ = view.Namespace(ctx, "ghost")
		time.Sleep(40 * time.Millisecond)
	}
	if got := gets.Load(); got != 2 {
		t.Errorf("GETs after expiry = %d, want 2", got)
	}
}

// countingLimiter is a token bucket that counts the requests it admits.
type countingLimiter struct {
	flowcontrol.RateLimiter
	waits atomic.Int64
}

func (c *countingLimiter) Wait(ctx context.Context) error {
	c.waits.Add(1)
	return c.RateLimiter.Wait(ctx)
}

// One SSAR client serves every token: each request carries its context's token and
// passes the bridge's rate limiter; a request without a token is never sent.
func TestSelfSubjectAccessReviewer(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path != "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" || r.Method != http.MethodPost {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		ssar := authorizationv1.SelfSubjectAccessReview{TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"}}
		ssar.Status.Allowed = r.Header.Get("Authorization") == "Bearer good"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ssar)
	}))
	defer api.Close()
	limiter := &countingLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(1000, 1000)}
	base := &rest.Config{Host: api.URL, BearerToken: "the-bridge's-own", RateLimiter: limiter}
	r, err := NewSelfSubjectAccessReviewer(base, fastBackoff)
	if err != nil {
		t.Fatal(err)
	}
	spec := authorizationv1.SubjectAccessReviewSpec{User: "ignored", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get"}}
	tests := []struct {
		token   string
		allowed bool
		wantErr error
	}{
		{token: "good", allowed: true},
		{token: "other"},
		{token: "", wantErr: ErrNoBearerToken},
	}
	for _, tt := range tests {
		status, err := r.Review(WithBearerToken(context.Background(), tt.token), spec)
		if !errors.Is(err, tt.wantErr) || status.Allowed != tt.allowed {
			t.Errorf("token %q: allowed %v, err %v; want %v, %v", tt.token, status.Allowed, err, tt.allowed, tt.wantErr)
		}
	}
	want := []string{"Bearer good", "Bearer other"}
	if len(seen) != len(want) || seen[0] != want[0] || seen[1] != want[1] {
		t.Errorf("Authorization headers sent %q, want %q (the bridge's own credential never)", seen, want)
	}
	if got := limiter.waits.Load(); got != 2 {
		t.Errorf("rate limiter admitted %d requests, want 2: the SSAR client must share the bridge's limiter", got)
	}
}

func TestSharedRateLimiter(t *testing.T) {
	own := flowcontrol.NewFakeAlwaysRateLimiter()
	tests := []struct {
		name    string
		cfg     rest.Config
		wantQPS float32
		wantNil bool
	}{
		{name: "flags", cfg: rest.Config{QPS: 7, Burst: 3}, wantQPS: 7},
		{name: "client-go defaults", cfg: rest.Config{}, wantQPS: rest.DefaultQPS},
		{name: "no limit", cfg: rest.Config{QPS: -1}, wantNil: true},
		{name: "a limiter already set is kept", cfg: rest.Config{RateLimiter: own}, wantQPS: own.QPS()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := sharedRateLimiter(&tt.cfg)
			if tt.wantNil {
				if l != nil {
					t.Errorf("limiter %v, want none", l)
				}
				return
			}
			if l == nil || l.QPS() != tt.wantQPS {
				t.Errorf("limiter %v, want QPS %v", l, tt.wantQPS)
			}
		})
	}
}

func TestTokenAuthenticator(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("no"))
	client := fake.NewClientset()
	calls := map[string]int{}
	var mu sync.Mutex
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		mu.Lock()
		calls[review.Spec.Token]++
		mu.Unlock()
		out := review.DeepCopy()
		switch review.Spec.Token {
		case "good":
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"obs"},
				User: authenticationv1.UserInfo{Username: "alice", Groups: []string{"admins"}}}
		case "other-audience":
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"api"}, User: authenticationv1.UserInfo{Username: "bob"}}
		case "broken":
			return true, nil, forbidden
		default:
			out.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, out, nil
	})
	tokens := NewTokenAuthenticator(client, TokenReviewOptions{Audiences: []string{"obs"}, SuccessTTL: time.Minute, FailureTTL: time.Minute, Backoff: fastBackoff})
	tests := []struct {
		token     string
		wantOK    bool
		wantErr   bool
		wantUser  string
		wantCalls int // after two lookups
	}{
		{token: "good", wantOK: true, wantUser: "alice", wantCalls: 1},
		{token: "garbage", wantCalls: 1},
		{token: "other-audience", wantCalls: 1},
		{token: "broken", wantErr: true, wantCalls: 2}, // errors are never cached
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			for range 2 {
				resp, ok, err := tokens.AuthenticateToken(context.Background(), tt.token)
				if ok != tt.wantOK || (err != nil) != tt.wantErr {
					t.Fatalf("ok %v err %v; want ok %v, error %v", ok, err, tt.wantOK, tt.wantErr)
				}
				if ok && (resp.User.GetName() != tt.wantUser || resp.User.GetGroups()[0] != "admins") {
					t.Errorf("user %+v", resp.User)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if calls[tt.token] != tt.wantCalls {
				t.Errorf("TokenReviews = %d, want %d", calls[tt.token], tt.wantCalls)
			}
		})
	}
}
