package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestClusterFlags(t *testing.T) {
	o, err := parseFlags([]string{"--cluster.resources=pods,configmaps", "--cluster.resources", "deployments.apps"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.cluster.resources, ","); got != "pods,configmaps,deployments.apps" {
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
	called := false
	d, err := c.start(context.Background(), func() (*rest.Config, error) { called = true; return nil, errors.New("unused") }, nil)
	if err != nil || d != nil || called {
		t.Fatalf("start without resources = %v, %v (client built: %v)", d, err, called)
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
	_, err := c.start(context.Background(), func() (*rest.Config, error) { return &rest.Config{Host: "http://127.0.0.1:1"}, nil }, nil)
	if err == nil || !strings.Contains(err.Error(), "--cluster.resources") {
		t.Fatalf("err = %v", err)
	}
}
