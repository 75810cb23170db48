package authorizer

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/sar-bridge/sar-bridge/internal/cache"
)

func spec(user string, groups []string, verb, ns string) authorizationv1.SubjectAccessReviewSpec {
	return authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "interlink.io", Resource: "pods"},
	}
}

func TestReviewKey(t *testing.T) {
	base := spec("alice", []string{"a", "b"}, "create", "ns1")
	key := func(s authorizationv1.SubjectAccessReviewSpec) string {
		t.Helper()
		k, err := ReviewKey(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	baseKey := key(base)
	if len(baseKey) > 250 || len(baseKey) != len("sarb2-")+64 {
		t.Fatalf("key %q: want sarb2- and 64 hex characters", baseKey)
	}
	with := func(mut func(*authorizationv1.SubjectAccessReviewSpec)) authorizationv1.SubjectAccessReviewSpec {
		s := *base.DeepCopy()
		mut(&s)
		return s
	}
	tests := []struct {
		name string
		spec authorizationv1.SubjectAccessReviewSpec
		same bool
	}{
		{"identical", with(func(*authorizationv1.SubjectAccessReviewSpec) {}), true},
		{"group order", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"b", "a"} }), true},
		{"user", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.User = "bob" }), false},
		{"uid", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.UID = "1" }), false},
		{"groups", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"a"} }), false},
		{"group split differently", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"a,b"} }), false},
		{"verb", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Verb = "delete" }), false},
		{"namespace", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Namespace = "ns2" }), false},
		{"api group", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Group = "x.io" }), false},
		{"resource", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Resource = "nodes" }), false},
		{"name", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Name = "p" }), false},
		{"extra", with(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.Extra = map[string]authorizationv1.ExtraValue{"k": {"v"}}
		}), false},
		{"extra key and value split differently", with(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.Extra = map[string]authorizationv1.ExtraValue{"kv": {""}}
		}), false},
		{"version", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Version = "v1" }), false},
		{"subresource", with(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Subresource = "binding" }), false},
		{"label selector", with(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.ResourceAttributes.LabelSelector = &authorizationv1.LabelSelectorAttributes{RawSelector: "a=b"}
		}), false},
		{"field selector", with(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.ResourceAttributes.FieldSelector = &authorizationv1.FieldSelectorAttributes{RawSelector: "a=b"}
		}), false},
		{"non-resource instead", with(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.ResourceAttributes = nil
			s.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}
		}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := key(tt.spec) == baseKey; got != tt.same {
				t.Errorf("same key = %v, want %v", got, tt.same)
			}
		})
	}
	t.Run("extra value order", func(t *testing.T) {
		a, b := base.DeepCopy(), base.DeepCopy()
		a.Extra = map[string]authorizationv1.ExtraValue{"k": {"1", "2"}, "j": {"x"}}
		b.Extra = map[string]authorizationv1.ExtraValue{"j": {"x"}, "k": {"2", "1"}}
		if key(*a) != key(*b) {
			t.Error("extra value order changed the key")
		}
		if a.Extra["k"][0] != "1" {
			t.Error("ReviewKey modified its argument")
		}
	})
}

// TestReviewKeyCoversEveryField fails when k8s.io/api adds a field ReviewKey does not
// hash: two specs differing only there would share a cached answer.
func TestReviewKeyCoversEveryField(t *testing.T) {
	for _, tt := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[authorizationv1.SubjectAccessReviewSpec](), []string{"ResourceAttributes", "NonResourceAttributes", "User", "Groups", "Extra", "UID"}},
		{reflect.TypeFor[authorizationv1.ResourceAttributes](), []string{"Namespace", "Verb", "Group", "Version", "Resource", "Subresource", "Name", "FieldSelector", "LabelSelector"}},
		{reflect.TypeFor[authorizationv1.NonResourceAttributes](), []string{"Path", "Verb"}},
	} {
		var got []string
		for f := range tt.typ.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s has fields %v; ReviewKey hashes %v", tt.typ, got, tt.want)
		}
	}
}

// fakeReviewer answers with a fixed status or error and counts calls.
type fakeReviewer struct {
	mu      sync.Mutex
	calls   int
	specs   []authorizationv1.SubjectAccessReviewSpec
	answer  func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
	release chan struct{} // when set, every call waits for it
}

func (f *fakeReviewer) Review(ctx context.Context, s authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	f.mu.Lock()
	f.calls++
	f.specs = append(f.specs, s)
	f.mu.Unlock()
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return authorizationv1.SubjectAccessReviewStatus{}, ctx.Err()
		}
	}
	return f.answer(s)
}

func (f *fakeReviewer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func allowAll(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "RBAC: allowed"}, nil
}

// recordingCache is a cache.Cache that remembers the TTL of every Set and can fail.
type recordingCache struct {
	cache.Cache
	mu   sync.Mutex
	ttls []time.Duration
	fail error
}

func (c *recordingCache) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if c.fail != nil {
		return nil, false, c.fail
	}
	return c.Cache.Get(ctx, key)
}

func (c *recordingCache) Set(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	c.mu.Lock()
	c.ttls = append(c.ttls, ttl)
	c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	return c.Cache.Set(ctx, key, v, ttl)
}

func TestCachingReviewer(t *testing.T) {
	const allowedTTL, deniedTTL = time.Minute, 10 * time.Second
	errAPI := errors.New("connection refused")
	tests := []struct {
		name      string
		status    authorizationv1.SubjectAccessReviewStatus
		err       error
		cacheFail error
		wantCalls int // after two identical reviews
		wantTTLs  []time.Duration
		wantHit2  bool
	}{
		{name: "allowed cached for allowed TTL", status: authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "ok"},
			wantCalls: 1, wantTTLs: []time.Duration{allowedTTL}, wantHit2: true},
		{name: "denied cached for denied TTL", status: authorizationv1.SubjectAccessReviewStatus{Reason: ""},
			wantCalls: 1, wantTTLs: []time.Duration{deniedTTL}, wantHit2: true},
		{name: "explicit deny cached for denied TTL", status: authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "no"},
			wantCalls: 1, wantTTLs: []time.Duration{deniedTTL}, wantHit2: true},
		{name: "errors never cached", err: errAPI, wantCalls: 2},
		{name: "partial evaluation never cached", status: authorizationv1.SubjectAccessReviewStatus{EvaluationError: "role not found"},
			wantCalls: 2},
		{name: "failing cache bypassed", status: authorizationv1.SubjectAccessReviewStatus{Allowed: true},
			cacheFail: errors.New("memcached down"), wantCalls: 2, wantTTLs: []time.Duration{allowedTTL, allowedTTL}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := &fakeReviewer{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
				return tt.status, tt.err
			}}
			rc := &recordingCache{Cache: cache.NewMemory(10), fail: tt.cacheFail}
			cr := NewCachingReviewer(rev, rc, CachingReviewerOptions{AllowedTTL: allowedTTL, DeniedTTL: deniedTTL})
			s := spec("alice", []string{"g"}, "create", "ns")
			var hit bool
			for i := 0; i < 2; i++ {
				got, h, err := cr.Review(context.Background(), s)
				hit = h
				if !errors.Is(err, tt.err) {
					t.Fatalf("review %d: err = %v, want %v", i, err, tt.err)
				}
				if err == nil && (got.Allowed != tt.status.Allowed || got.Denied != tt.status.Denied || got.Reason != tt.status.Reason) {
					t.Fatalf("review %d = %+v, want %+v", i, got, tt.status)
				}
			}
			if rev.count() != tt.wantCalls {
				t.Errorf("API calls = %d, want %d", rev.count(), tt.wantCalls)
			}
			if hit != tt.wantHit2 {
				t.Errorf("second review hit = %v, want %v", hit, tt.wantHit2)
			}
			if len(rc.ttls) != len(tt.wantTTLs) {
				t.Fatalf("cache sets with TTLs %v, want %v", rc.ttls, tt.wantTTLs)
			}
			for i := range rc.ttls {
				if rc.ttls[i] != tt.wantTTLs[i] {
					t.Errorf("TTL %d = %v, want %v", i, rc.ttls[i], tt.wantTTLs[i])
				}
			}
		})
	}
}

func TestCachingReviewerUndecodableEntryIsMiss(t *testing.T) {
	c := cache.NewMemory(10)
	s := spec("alice", nil, "create", "ns")
	key, _ := ReviewKey(s)
	_ = c.Set(context.Background(), key, []byte(`{"v":99,"a":true}`), time.Minute)
	rev := &fakeReviewer{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: false}, nil
	}}
	cr := NewCachingReviewer(rev, c, CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
	got, hit, err := cr.Review(context.Background(), s)
	if err != nil || hit || got.Allowed || rev.count() != 1 {
		t.Fatalf("Review = %+v, hit %v, err %v, calls %d; want a live deny", got, hit, err, rev.count())
	}
}

// N concurrent identical misses are one API call.
func TestCachingReviewerMergesConcurrentMisses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		rev := &fakeReviewer{answer: allowAll, release: make(chan struct{})}
		cr := NewCachingReviewer(rev, cache.NewMemory(10), CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
		var allowed atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, _, err := cr.Review(context.Background(), spec("alice", []string{"g"}, "create", "ns"))
				if err == nil && r.Allowed {
					allowed.Add(1)
				}
			}()
		}
		synctest.Wait() // every caller is now waiting on the one call in flight
		close(rev.release)
		wg.Wait()
		if rev.count() != 1 {
			t.Errorf("API calls = %d, want 1", rev.count())
		}
		if allowed.Load() != n {
			t.Errorf("allowed answers = %d, want %d", allowed.Load(), n)
		}
	})
}

// A waiter that gives up does not cancel the call the others wait for; the call itself
// is bounded by the timeout.
func TestCachingReviewerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rev := &fakeReviewer{answer: allowAll, release: make(chan struct{})}
		cr := NewCachingReviewer(rev, cache.NewMemory(10), CachingReviewerOptions{AllowedTTL: time.Minute, Timeout: 3 * time.Second})
		start := time.Now()
		_, _, err := cr.Review(context.Background(), spec("alice", nil, "create", "ns"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("gave up after %v, want 3s", d)
		}
	})
}

// Reviews beyond the in-flight cap wait for a slot; one that cannot get it in time fails.
func TestCachingReviewerInFlightCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rev := &fakeReviewer{answer: allowAll, release: make(chan struct{})}
		cr := NewCachingReviewer(rev, cache.NewMemory(10), CachingReviewerOptions{AllowedTTL: time.Minute, Timeout: 2 * time.Second, MaxInFlight: 1})
		go func() { _, _, _ = cr.Review(context.Background(), spec("alice", nil, "create", "ns")) }()
		synctest.Wait() // alice's review holds the only slot
		_, _, err := cr.Review(context.Background(), spec("bob", nil, "create", "ns"))
		if err == nil || !strings.Contains(err.Error(), "too many reviews in flight") {
			t.Fatalf("err = %v, want too many reviews in flight", err)
		}
		if rev.count() != 1 {
			t.Errorf("API calls = %d, want 1", rev.count())
		}
		close(rev.release)
	})
}

// TestDecodedReviews: a cached value decodes as decodeReview decodes it, again when it
// is read again, and never when it is not a review; the map stays bounded.
func TestDecodedReviews(t *testing.T) {
	var d decodedReviews
	allowed := ReviewResult{Allowed: true, Reason: `RBAC: allowed by RoleBinding "team-a/runner"`}
	denied := ReviewResult{Denied: true, Reason: "no"}
	for _, tc := range []struct {
		name  string
		value []byte
		want  ReviewResult
		ok    bool
	}{
		{"allowed", encodeReview(allowed), allowed, true},
		{"allowed again", encodeReview(allowed), allowed, true},
		{"denied", encodeReview(denied), denied, true},
		{"not JSON", []byte(`{"v":1,`), ReviewResult{}, false},
		{"other version", []byte(`{"v":2,"a":true}`), ReviewResult{}, false},
		{"other version again", []byte(`{"v":2,"a":true}`), ReviewResult{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := d.decode(tc.value)
			if got != tc.want || ok != tc.ok {
				t.Errorf("decode(%s) = %+v, %v; want %+v, %v", tc.value, got, ok, tc.want, tc.ok)
			}
		})
	}
	if n := len(d.byValue); n != 2 {
		t.Errorf("%d values kept, want 2 (the two reviews)", n)
	}
	for i := range decodedReviewsSize + 10 {
		if _, ok := d.decode(encodeReview(ReviewResult{Reason: strings.Repeat("x", i)})); !ok {
			t.Fatal("a review did not decode")
		}
	}
	if n := len(d.byValue); n > decodedReviewsSize {
		t.Errorf("%d values kept, want at most %d", n, decodedReviewsSize)
	}
}
