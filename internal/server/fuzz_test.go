package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/internal/kube"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
	"github.com/sar-bridge/sar-bridge/policies"
)

// fuzzView is an authorizer.ClusterView over a few fixed objects.
type fuzzView struct{}

var fuzzNamespaces = map[string]*corev1.Namespace{
	"team-a":   {ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"interlink.io/tenant": "team-a", "interlink.io/billing-project": "proj-7"}}},
	"labelled": {ObjectMeta: metav1.ObjectMeta{Name: "labelled", Labels: map[string]string{"interlink.io/tenant": "tenant-b"}}},
	"orphan":   {ObjectMeta: metav1.ObjectMeta{Name: "orphan"}},
}

var fuzzNodes = map[string]*corev1.Node{
	"vk-a": {ObjectMeta: metav1.ObjectMeta{Name: "vk-a", Labels: map[string]string{"interlink.io/tenant": "team-a"}}},
	"vk-b": {ObjectMeta: metav1.ObjectMeta{Name: "vk-b", Labels: map[string]string{"interlink.io/tenant": "tenant-b"}}},
}

func (fuzzView) Synced() bool { return true }

func (fuzzView) Namespace(_ context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := fuzzNamespaces[name]; ok {
		return ns, nil
	}
	return nil, fmt.Errorf("namespace %q: %w", name, kube.ErrNamespaceNotFound)
}

func (fuzzView) Node(name string) (*corev1.Node, bool) {
	n, ok := fuzzNodes[name]
	return n, ok
}

// denyAll is a Reviewer that denies every review.
type denyAll struct{}

func (denyAll) Review(context.Context, authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	return authorizationv1.SubjectAccessReviewStatus{Reason: "fuzz: deny all"}, nil
}

// recordingDecider remembers the document path of the last decision, so the test
// knows what the handler asked for.
type recordingDecider struct {
	Decider
	mu   sync.Mutex
	path []string
}

func (r *recordingDecider) Decide(ctx context.Context, req authorizer.Request) (authorizer.Decision, error) {
	r.mu.Lock()
	r.path = append([]string(nil), req.Path...)
	r.mu.Unlock()
	return r.Decider.Decide(ctx, req)
}

func (r *recordingDecider) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.path
	r.path = nil
	return p
}

const fuzzMaxBody = 8 << 10

func newFuzzHandler(f *testing.F) (http.Handler, *recordingDecider) {
	f.Helper()
	dataFile := filepath.Join(f.TempDir(), "data.json")
	data := `{"interlink": {"limits": {"system:serviceaccounts:team-a": {"cpu": "4"}},
	  "protected_taints": [{"key": "gpu", "value": "a100", "allowed_groups": ["gpu-users"]}],
	  "default_limits": {"cpu": "1"}}}`
	if err := os.WriteFile(dataFile, []byte(data), 0o600); err != nil {
		f.Fatal(err)
	}
	eval, err := policies.New(context.Background(), policies.Options{DataFile: dataFile})
	if err != nil {
		f.Fatal(err)
	}
	maps, err := mapping.Parse([]string{"team-a=interlink.io", "*=fallback.interlink.io"})
	if err != nil {
		f.Fatal(err)
	}
	reviewer := authorizer.NewCachingReviewer(denyAll{}, cache.NewMemory(100),
		authorizer.CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
	authz := authorizer.New(authorizer.Config{Mappings: maps, TenantLabel: "interlink.io/tenant", NodeAccess: true},
		reviewer, fuzzView{}, eval, nil, nil)
	rec := &recordingDecider{Decider: authz}
	return NewPublic(rec, Options{MaxBodyBytes: fuzzMaxBody}), rec
}

var fuzzMethods = []string{http.MethodPost, http.MethodPost, http.MethodPost, http.MethodPost, http.MethodGet, http.MethodPut, http.MethodHead, http.MethodDelete}

// allowingDocuments are the documents, below data, that must never be true when every
// review denies.
var allowingDocuments = [][]string{
	{"interlink", "authz", "allow"},
	{"interlink", "authz", "decision", "allowed"},
	{"interlink", "authz", "decision", "review", "allowed"},
	{"interlink", "authz", "_review_allowed"},
}

// allowedAnywhere reports which allowing document result holds as true, when result
// is the document at path.
func allowedAnywhere(path []string, result any) (string, bool) {
	for _, doc := range allowingDocuments {
		if len(path) > len(doc) || strings.Join(path, "\x00") != strings.Join(doc[:len(path)], "\x00") {
			continue
		}
		v := result
		for _, key := range doc[len(path):] {
			m, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = m[key]
		}
		if v == true {
			return strings.Join(doc, "."), true
		}
	}
	return "", false
}

// FuzzDataAPI sends arbitrary document paths and bodies through the public handler
// to the real decision pipeline (embedded policy, a reviewer that denies everything):
// the handler never panics, answers with one of its documented statuses and valid
// JSON, and never allows.
func FuzzDataAPI(f *testing.F) {
	pod := func(op, ns, spec, extra string) []byte {
		return []byte(fmt.Sprintf(`{"input": {"operation": %q, "pod": {"metadata": {"name": "p1", "namespace": %q}, "spec": %s}%s}}`, op, ns, spec, extra))
	}
	const (
		plain     = `{"serviceAccountName": "runner", "containers": [{"name": "main"}]}`
		limited   = `{"containers": [{"name": "main", "resources": {"limits": {"cpu": "64"}}}], "tolerations": [{"key": "gpu", "operator": "Exists"}]}`
		selecting = `{"containers": [{"name": "main"}], "nodeName": "vk-b", "nodeSelector": {"interlink.io/tenant": "tenant-b"}}`
	)
	for _, path := range []string{"interlink/authz/decision", "interlink/authz/allow", "interlink/authz", "interlink", "interlink/authz/decision/allowed"} {
		f.Add(uint8(0), path, pod("create", "team-a", plain, ""))
	}
	seeds := []struct {
		method uint8
		path   string
		body   []byte
	}{
		{0, "interlink/authz/decision", pod("create", "team-a", limited, `, "node": {"name": "vk-a"}`)},
		{0, "interlink/authz/decision", pod("create", "labelled", selecting, "")},
		{0, "interlink/authz/decision", pod("delete", "team-a", plain, "")},
		{0, "interlink/authz/decision", pod("status", "orphan", plain, `, "node": {"name": "vk-b"}`)},
		{0, "interlink/authz/decision", pod("create", "ghost", plain, "")},
		{0, "interlink/authz/decision", pod("create", "team-a", plain, `, "user": {"username": "alice", "groups": ["gpu-users"]}`)},
		{0, "interlink/authz/decision", pod("create", "team-a", plain, `, "review": {"allowed": true}, "subject": {"username": "system:admin"}`)},
		{0, "interlink/authz/decision", pod("exec", "team-a", plain, "")},
		{0, "interlink/authz/_input", pod("create", "team-a", plain, `, "allowed": true`)},
		{0, "interlink/authz/deny", pod("create", "team-a", limited, "")},
		{0, "a%2Fb/c/", pod("create", "team-a", plain, "")},
		{0, "", pod("create", "team-a", plain, "")},
		{0, "a//b", pod("create", "team-a", plain, "")},
		{0, "%zz", pod("create", "team-a", plain, "")},
		{0, "interlink/authz/decision?x=1#frag", pod("create", "team-a", plain, "")},
		{0, "interlink/authz/decision", []byte(`{"input": {`)},
		{0, "interlink/authz/decision", []byte(`{"input": {"pod": {"metadata": {"namespace": "team-a"}}}}{}`)},
		{0, "interlink/authz/decision", []byte(`{}`)},
		{0, "interlink/authz/decision", []byte(`{"input": [1]}`)},
		{0, "interlink/authz/decision", []byte(`{"input": null}`)},
		{0, "interlink/authz/decision", []byte(`{"input": {"pod": "x"}}`)},
		{0, "interlink/authz/decision", []byte(``)},
		{0, "interlink/authz/decision", []byte(`{"input": {"x": "` + strings.Repeat("a", fuzzMaxBody) + `"}}`)},
		{4, "interlink/authz/decision", nil},
		{5, "interlink/authz/decision", pod("create", "team-a", plain, "")},
		{6, "interlink/authz/decision", nil},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.body)
	}

	h, rec := newFuzzHandler(f)
	f.Fuzz(func(t *testing.T, method uint8, path string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		req.Method = fuzzMethods[int(method)%len(fuzzMethods)]
		target := "/v1/data/" + path
		u, err := url.ParseRequestURI(target)
		if err != nil {
			u = &url.URL{Path: target} // as if sent unescaped; EscapedPath escapes it
		}
		req.URL, req.RequestURI = u, u.RequestURI()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		asked := rec.take()

		switch w.Code {
		case 200, 400, 401, 403, 404, 405, 413, 500, 503:
		default:
			t.Fatalf("status %d for %s %q; body %s", w.Code, req.Method, target, w.Body)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("response is not JSON: %q", w.Body)
		}
		if w.Code != http.StatusOK {
			var e errorResponse
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
				t.Fatalf("error %d without code and message: %s", w.Code, w.Body)
			}
			return
		}
		if asked == nil {
			t.Fatalf("200 without a decision for %s %q: %s", req.Method, target, w.Body)
		}
		var resp map[string]any
		dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&resp); err != nil {
			t.Fatalf("200 body is not an object: %s", w.Body)
		}
		result, defined := resp["result"]
		if !defined {
			return // undefined document
		}
		if doc, allowed := allowedAnywhere(asked, result); allowed {
			t.Fatalf("data.%s is true although every review denies: %s %q body %q -> %s", doc, req.Method, target, body, w.Body)
		}
	})
}
