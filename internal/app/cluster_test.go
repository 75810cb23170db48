package app

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestClusterFlags(t *testing.T) {
	o, err := parseFlags([]string{"--cluster.resources=pods,configmaps", "--cluster.resources", "deployments.apps"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.decision.cluster.resources, ","); got != "pods,configmaps,deployments.apps" {
		t.Fatalf("resources = %s", got)
	}
	for _, args := range [][]string{
		{"--cluster.resources=pods,,configmaps"},
		{"--cluster.resync=-1s"},
	} {
		if _, err := parseFlags(args); err == nil || !strings.Contains(err.Error(), "--cluster.") {
			t.Errorf("%v: err = %v, want a --cluster.* error", args, err)
		}
	}
}

func TestClusterDataNone(t *testing.T) {
	var c clusterConfig
	d, err := c.start(context.Background(), &rest.Config{Host: "http://127.0.0.1:1"}, nil)
	if err != nil || d != nil {
		t.Fatalf("start without resources = %v, %v", d, err)
	}
	if d.policyReader() != nil {
		t.Fatal("policyReader of no resources is not a nil interface")
	}
	if err := d.ready(); err != nil {
		t.Fatalf("ready = %v", err)
	}
}

func TestClusterStartFails(t *testing.T) {
	c := clusterConfig{resources: []string{"pods"}}
	_, err := c.start(context.Background(), &rest.Config{Host: "http://127.0.0.1:1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "--cluster.resources") {
		t.Fatalf("err = %v", err)
	}
}
