package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-kit/log"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sar-bridge/sar-bridge/internal/admission"
)

func TestAdmissionFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults"},
		{name: "serviceaccount identity", args: []string{"--admission.identity=serviceaccount"}},
		{name: "custom selector", args: []string{"--admission.node-selector=type=virtual-kubelet", "--admission.taint-key=vk/taint"}},
		{name: "unknown identity", args: []string{"--admission.identity=root"}, wantErr: `--admission.identity: "root": want requester or serviceaccount`},
		{name: "selector a pod cannot name", args: []string{"--admission.node-selector=!worker"}, wantErr: "needs a requirement a pod can select on"},
		{name: "bad selector", args: []string{"--admission.node-selector=a=b=c"}, wantErr: "--admission.node-selector"},
		{name: "empty taint key", args: []string{"--admission.taint-key="}, wantErr: "taint key must not be empty"},
		{name: "bad decision path", args: []string{"--admission.decision-path=a//b"}, wantErr: "is not a document path"},
		{name: "zero timeout", args: []string{"--admission.timeout=0s"}, wantErr: "--admission.timeout must be positive"},
		{name: "the Virtual Kubelet's identities", args: []string{"--admission.vk-users=system:serviceaccount:interlink:vk-1",
			"--admission.vk-users=system:serviceaccount:interlink:vk-2", "--admission.vk-groups=interlink:virtual-kubelets"}},
		{name: "a VK user with a namespace wildcard", args: []string{"--admission.vk-users=system:serviceaccount:*:vk-1"}, wantErr: "--admission.vk-users: \"system:serviceaccount:*:vk-1\": names are exact, no wildcards"},
		{name: "an empty VK user", args: []string{"--admission.vk-users="}, wantErr: "--admission.vk-users: empty name"},
		{name: "everyone as the VK", args: []string{"--admission.vk-groups=system:authenticated"}, wantErr: "is everyone's group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.admission.targets.IsVirtual(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
				"virtual-node.interlink/type": "virtual-kubelet", "type": "virtual-kubelet",
			}}}) {
				t.Error("a virtual node is not recognised")
			}
		})
	}
}

type fakeView map[string]*corev1.Node

func (v fakeView) Node(name string) (*corev1.Node, bool) { n, ok := v[name]; return n, ok }

func TestAdmissionCluster(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}},
	)
	c := &admissionCluster{view: fakeView{"cached": {ObjectMeta: metav1.ObjectMeta{Name: "cached"}}}, client: client}
	for _, tc := range []struct{ name, want string }{{"cached", "cached"}, {"new", "new"}, {"missing", ""}} {
		n, err := c.Node(ctx, tc.name)
		if err != nil {
			t.Fatalf("Node(%s): %v", tc.name, err)
		}
		if got := ""; n != nil {
			got = n.Name
			if got != tc.want {
				t.Errorf("Node(%s) = %q, want %q", tc.name, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("Node(%s) = nil, want %q", tc.name, tc.want)
		}
	}
	if p, err := c.Pod(ctx, "ns", "p"); err != nil || p == nil || p.Name != "p" {
		t.Errorf("Pod(ns/p) = %v, %v", p, err)
	}
	if p, err := c.Pod(ctx, "ns", "gone"); err != nil || p != nil {
		t.Errorf("Pod(ns/gone) = %v, %v; want nil, nil", p, err)
	}
}

func TestAdmissionHandlerWiring(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "who are you", http.StatusUnauthorized) })
	}
	h, err := admissionHandler(cfg, nil, fakeView{}, fake.NewClientset(), false, refuse, nil, log.NewNopLogger())
	if err != nil || h != nil {
		t.Fatalf("without TLS: handler %v, err %v; want none", h, err)
	}
	for _, tc := range []struct {
		name     string
		anyone   bool
		authn    func(http.Handler) http.Handler
		wantCode int
	}{
		{"callers authenticated like the Data API", false, refuse, http.StatusUnauthorized},
		{"any caller when asked", true, refuse, http.StatusMethodNotAllowed},
		{"no caller authentication configured", false, nil, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg.admission.insecureAnyCaller = tc.anyone
			h, err := admissionHandler(cfg, nil, fakeView{}, fake.NewClientset(), true, tc.authn, nil, log.NewNopLogger())
			if err != nil || h == nil {
				t.Fatalf("handler %v, err %v", h, err)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, admission.ValidatePath, nil))
			if rec.Code != tc.wantCode {
				t.Errorf("GET %s: HTTP %d, want %d", admission.ValidatePath, rec.Code, tc.wantCode)
			}
		})
	}
}

// Each --admission.vk-users is one name, taken whole: a comma is part of it (a client
// certificate's CN may hold one), never a separator.
func TestAdmissionVKUsersAreExactNames(t *testing.T) {
	cfg, err := parseFlags([]string{"--admission.vk-users=CN=vk,O=interlink", "--admission.vk-users=system:serviceaccount:interlink:vk-1", "--admission.vk-groups=vk"})
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.admission.vk()
	if want := []string{"CN=vk,O=interlink", "system:serviceaccount:interlink:vk-1"}; strings.Join(got.Users, "|") != strings.Join(want, "|") || len(got.Groups) != 1 || got.Groups[0] != "vk" {
		t.Errorf("VK identities %+v, want users %q and group vk", got, want)
	}
}
