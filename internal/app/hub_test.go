package app

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

func TestHubConnect(t *testing.T) {
	own := &rest.Config{Host: "https://own:6443", QPS: 7, Burst: 9}
	ownClient := fake.NewClientset()
	// No hub: this cluster's own connection, nothing named.
	h, err := (&hubOptions{}).connect(own, ownClient)
	if err != nil || h.config != own || h.client != ownClient || h.where != "" {
		t.Fatalf("no hub: %+v, %v; want the own connection", h, err)
	}
	// A kubeconfig that cannot be read: the flag is named.
	_, err = (&hubOptions{kubeconfig: filepath.Join(t.TempDir(), "missing"), cluster: "b"}).connect(own, ownClient)
	if err == nil || !strings.Contains(err.Error(), "--tenants.kubeconfig") {
		t.Errorf("missing kubeconfig: %v, want an error naming --tenants.kubeconfig", err)
	}
}

func TestTenantsCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "release-cluster removes a member cluster"},
		{nil, 2, "want: tenants release-cluster NAME"},
		{[]string{"release-cluster"}, 2, "want: tenants release-cluster NAME"},
		{[]string{"forget", "b"}, 2, "want: tenants release-cluster NAME"},
		{[]string{"release-cluster", "Site_B"}, 2, `"Site_B" is not a DNS-1123 label`},
	} {
		var stdout, stderr bytes.Buffer
		code := Tenants(tc.args, nil, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("tenants %q: exit %d, output %q; want %d and %q", tc.args, code, stdout.String()+stderr.String(), tc.code, tc.want)
		}
	}
}
