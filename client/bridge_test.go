package client

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// EnvBridgeURL names a running sar-bridge (real binary, real kube-apiserver) with the
// RBAC of manifests/examples applied; the end-to-end suite sets it and runs
// TestAgainstBridge (test/e2e/interlink_test.go). Without it the test is skipped.
const EnvBridgeURL = "SAR_BRIDGE_CLIENT_E2E_URL"

func TestAgainstBridge(t *testing.T) {
	url := os.Getenv(EnvBridgeURL)
	if url == "" {
		t.Skipf("%s not set: run by the end-to-end suite", EnvBridgeURL)
	}
	c, err := New(Options{URL: url, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("allow", func(t *testing.T) {
		d, err := c.Decide(ctx, Input{Operation: "create", Pod: testPod(), Node: "vk-1"})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || !strings.Contains(d.Reason, `RoleBinding "offload/team-a"`) || d.ID == "" {
			t.Fatalf("want an allow by RoleBinding offload/team-a, got %+v", d)
		}
		if l := d.Modifications.ResourceLimits["main"]; l.Cpu().String() != "1" || l.Memory().String() != "1Gi" {
			t.Errorf("default limits for main: %v", l)
		}
	})

	t.Run("deny", func(t *testing.T) {
		pod := testPod()
		pod.Spec.ServiceAccountName = "nobody"
		d, err := c.Decide(ctx, Input{Operation: "create", Pod: pod})
		if err != nil {
			t.Fatal(err)
		}
		want := `system:serviceaccount:team-a:nobody may not create pods.interlink.io in namespace "team-a"`
		if d.Allowed || !strings.Contains(d.Reason, want) {
			t.Fatalf("want a deny containing %q, got %+v", want, d)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		pod := testPod()
		pod.Namespace = ""
		_, err := c.Decide(ctx, Input{Operation: "create", Pod: pod})
		var refused *ResponseError
		if !errors.As(err, &refused) || refused.StatusCode != 400 || refused.Code != "invalid_parameter" {
			t.Fatalf("want a 400 *ResponseError, got %v", err)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + ln.Addr().String()
		_ = ln.Close()
		down, err := New(Options{URL: closed, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		d, err := down.Decide(ctx, Input{Operation: "create", Pod: testPod()})
		var unavailable *UnavailableError
		if !errors.As(err, &unavailable) || d.Allowed {
			t.Fatalf("want *UnavailableError, got %T %v (%+v)", err, err, d)
		}
	})
}
