package client

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: "team-a"},
		Spec:       corev1.PodSpec{ServiceAccountName: "runner", NodeName: "vk-1", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

// bridge is a stand-in Data API that records requests and answers status and body.
type bridge struct {
	mu     sync.Mutex
	auth   []string
	bodies []string
	paths  []string
	status int
	body   string
	delay  time.Duration
}

func (b *bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.auth = append(b.auth, r.Header.Get("Authorization"))
	b.bodies = append(b.bodies, string(data))
	b.paths = append(b.paths, r.URL.Path)
	b.mu.Unlock()
	time.Sleep(b.delay)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(b.status)
	_, _ = io.WriteString(w, b.body)
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		want    Decision
		wantErr any // nil, **UnavailableError or **ResponseError
		errText string
	}{
		{name: "allowed with modifications", status: 200,
			body: `{"result": {"allowed": true, "reason": "RBAC: allowed", "modifications": {"pod_annotations": {"interlink.io/billing-project": "p-7"}, "resource_limits": {"main": {"cpu": "1", "memory": "1Gi"}}}}, "decision_id": "d-1"}`,
			want: Decision{Allowed: true, Reason: "RBAC: allowed", ID: "d-1", Modifications: Modifications{
				PodAnnotations: map[string]string{"interlink.io/billing-project": "p-7"},
				ResourceLimits: map[string]corev1.ResourceList{"main": {corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
			}}},
		{name: "allowed with run_as_user", status: 200,
			body: `{"result": {"allowed": true, "reason": "RBAC: allowed", "modifications": {"pod_annotations": {"slurm-job.vk.io/flags": "--account=proj-a"}, "resource_limits": {}, "run_as_user": 20001}}, "decision_id": "d-1"}`,
			want: Decision{Allowed: true, Reason: "RBAC: allowed", ID: "d-1", Modifications: Modifications{
				PodAnnotations: map[string]string{"slurm-job.vk.io/flags": "--account=proj-a"},
				ResourceLimits: map[string]corev1.ResourceList{},
				RunAsUser:      ptr(20001),
			}}},
		{name: "run_as_user 0", status: 200, body: `{"result": {"allowed": true, "modifications": {"run_as_user": 0}}}`,
			want: Decision{Allowed: true, Modifications: Modifications{RunAsUser: ptr(0)}}},
		{name: "run_as_user a string", status: 200, body: `{"result": {"allowed": true, "modifications": {"run_as_user": "20001"}}}`,
			wantErr: new(*ResponseError), errText: "answer is not a decision"},
		{name: "run_as_user a fraction", status: 200, body: `{"result": {"allowed": true, "modifications": {"run_as_user": 20001.5}}}`,
			wantErr: new(*ResponseError), errText: "answer is not a decision"},
		{name: "run_as_user negative", status: 200, body: `{"result": {"allowed": true, "modifications": {"run_as_user": -1}}}`,
			wantErr: new(*ResponseError), errText: "answer is not a decision: modifications: run_as_user: uid -1: must be between 0 and 2147483647"},
		{name: "run_as_user over Kubernetes' range", status: 200, body: `{"result": {"allowed": true, "modifications": {"run_as_user": 2147483648}}}`,
			wantErr: new(*ResponseError), errText: "answer is not a decision: modifications: run_as_user: uid 2147483648: must be between 0 and 2147483647"},
		{name: "denied", status: 200, body: `{"result": {"allowed": false, "reason": "no binding"}, "decision_id": "d-2"}`,
			want: Decision{Reason: "no binding", ID: "d-2"}},
		{name: "API unreachable", status: 503, body: `{"code": "internal_error", "message": "subject access review failed: refused"}`,
			wantErr: new(*UnavailableError), errText: "sar-bridge unavailable: HTTP 503: subject access review failed: refused"},
		{name: "bad input", status: 400, body: `{"code": "invalid_parameter", "message": "input.pod.metadata.namespace is required"}`,
			wantErr: new(*ResponseError), errText: "sar-bridge: HTTP 400 invalid_parameter: input.pod.metadata.namespace is required"},
		{name: "not authorized", status: 403, body: `forbidden`, wantErr: new(*ResponseError), errText: "sar-bridge: HTTP 403: forbidden"},
		{name: "undefined document", status: 200, body: `{}`, wantErr: new(*ResponseError), errText: "no result.allowed"},
		{name: "boolean document", status: 200, body: `{"result": true}`, wantErr: new(*ResponseError), errText: "answer is not a decision"},
		{name: "allowed not a boolean", status: 200, body: `{"result": {"allowed": "true"}}`, wantErr: new(*ResponseError), errText: "answer is not a decision"},
		{name: "bad quantity", status: 200, body: `{"result": {"allowed": true, "modifications": {"resource_limits": {"main": {"cpu": "lots"}}}}}`,
			wantErr: new(*ResponseError), errText: "answer is not a decision"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(&bridge{status: tt.status, body: tt.body})
			defer srv.Close()
			c, err := New(Options{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Decide(context.Background(), Input{Operation: "create", Pod: testPod()})
			if tt.wantErr != nil {
				if err == nil || !errors.As(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("want %T containing %q, got %v", tt.wantErr, tt.errText, err)
				}
				if got.Allowed {
					t.Fatal("an error came with allowed=true")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, got), mustJSON(t, tt.want); g != w {
				t.Fatalf("got %s\nwant %s", g, w)
			}
		})
	}
}

func ptr(n int64) *int64 { return &n }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDecideSendsTheDataAPIInput(t *testing.T) {
	b := &bridge{status: 200, body: `{"result": {"allowed": true}}`}
	srv := httptest.NewServer(b)
	defer srv.Close()
	c, err := New(Options{URL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Operation: "delete", Pod: testPod(), Node: "vk-2", User: &User{Username: "alice", Groups: []string{"dev"}}}
	if _, err := c.Decide(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Input map[string]json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal([]byte(b.bodies[0]), &sent); err != nil {
		t.Fatal(err)
	}
	if b.paths[0] != DefaultPath || string(sent.Input["operation"]) != `"delete"` || string(sent.Input["node"]) != `{"name":"vk-2"}` ||
		string(sent.Input["user"]) != `{"username":"alice","groups":["dev"]}` || len(sent.Input["pod"]) == 0 {
		t.Fatalf("sent %s to %s", b.bodies[0], b.paths[0])
	}
	if _, err := c.Decide(context.Background(), Input{Operation: "create"}); err == nil {
		t.Fatal("a nil pod was sent")
	}
}

func TestDecideUnreachable(t *testing.T) {
	srv := httptest.NewServer(&bridge{status: 200})
	url := srv.URL
	srv.Close()
	c, err := New(Options{URL: url, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Decide(context.Background(), Input{Operation: "create", Pod: testPod()})
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || unavailable.StatusCode != 0 {
		t.Fatalf("want *UnavailableError, got %T %v", err, err)
	}
}

func TestDecideTimeout(t *testing.T) {
	srv := httptest.NewServer(&bridge{status: 200, body: `{"result": {"allowed": true}}`, delay: 2 * time.Second})
	defer srv.Close()
	c, err := New(Options{URL: srv.URL, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	d, err := c.Decide(context.Background(), Input{Operation: "create", Pod: testPod()})
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || d.Allowed {
		t.Fatalf("want *UnavailableError, got %v %+v", err, d)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("gave up after %s", took)
	}
}

// The token is read again when the file is replaced, as kubelet rotates it.
func TestTokenFileRotation(t *testing.T) {
	b := &bridge{status: 200, body: `{"result": {"allowed": true}}`}
	srv := httptest.NewServer(b)
	defer srv.Close()
	dir := t.TempDir()
	tokenPath := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenPath, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{URL: srv.URL, TokenFile: tokenPath})
	if err != nil {
		t.Fatal(err)
	}
	decide := func() {
		t.Helper()
		if _, err := c.Decide(context.Background(), Input{Operation: "create", Pod: testPod()}); err != nil {
			t.Fatal(err)
		}
	}
	decide()
	// Replace the file as kubelet does (a new file renamed over the old one).
	next := filepath.Join(dir, "token.new")
	if err := os.WriteFile(next, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, tokenPath); err != nil {
		t.Fatal(err)
	}
	decide()
	if b.auth[0] != "Bearer first" || b.auth[1] != "Bearer second-token" {
		t.Fatalf("Authorization headers %q", b.auth)
	}
	if err := os.Remove(tokenPath); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Decide(context.Background(), Input{Operation: "create", Pod: testPod()}); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Fatalf("a missing token file: %v", err)
	}
	if _, err := New(Options{URL: srv.URL, TokenFile: filepath.Join(dir, "absent")}); err == nil {
		t.Fatal("New accepted a missing token file")
	}
}

func TestCAFile(t *testing.T) {
	srv := httptest.NewTLSServer(&bridge{status: 200, body: `{"result": {"allowed": true}}`})
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{URL: srv.URL, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := c.Decide(context.Background(), Input{Operation: "create", Pod: testPod()}); err != nil || !d.Allowed {
		t.Fatalf("with the CA: %+v %v", d, err)
	}
	// Without it the certificate is not trusted: no decision.
	c, err = New(Options{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	var unavailable *UnavailableError
	if _, err := c.Decide(context.Background(), Input{Operation: "create", Pod: testPod()}); !errors.As(err, &unavailable) {
		t.Fatalf("untrusted certificate: %v", err)
	}
	if err := os.WriteFile(ca, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{URL: srv.URL, CAFile: ca}); err == nil {
		t.Fatal("New accepted a CA file without certificates")
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "sar-bridge:8080", "ftp://x", "http://"} {
		if _, err := New(Options{URL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}
