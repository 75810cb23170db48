package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	flag "github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/sar-bridge/sar-bridge/clusterdata"
	"github.com/sar-bridge/sar-bridge/policies"
)

// clusterConfig configures the cluster built-ins (--cluster.*): the resources policies
// may read with k8s.get and k8s.list, each watched by an informer.
type clusterConfig struct {
	resources []string
	resync    time.Duration
}

func (c *clusterConfig) addFlags(fs *flag.FlagSet) {
	fs.StringSliceVar(&c.resources, "cluster.resources", nil, "Resources policies may read with k8s.get and k8s.list, as kubectl names them (e.g. pods,configmaps,resourcequotas,deployments.apps; repeatable or comma-separated). Each is watched by an informer and read from memory; the bridge needs list and watch on them. Empty: the built-ins fail.")
	fs.DurationVar(&c.resync, "cluster.resync", 10*time.Minute, "Resync period of the --cluster.resources informers.")
}

// validate checks the flags; the resources themselves are resolved at start.
func (c *clusterConfig) validate() error {
	for _, r := range c.resources {
		if strings.TrimSpace(r) == "" {
			return errors.New("--cluster.resources: empty resource name")
		}
	}
	if c.resync < 0 {
		return errors.New("--cluster.resync must not be negative")
	}
	return nil
}

// clusterData is the running informers of --cluster.resources; nil when none are
// declared (every method then behaves as "nothing watched").
type clusterData struct{ reader *clusterdata.Reader }

// start resolves --cluster.resources through discovery and starts their informers. An
// unknown resource fails start-up.
func (c *clusterConfig) start(ctx context.Context, restConfig func() (*rest.Config, error), logger log.Logger) (*clusterData, error) {
	if len(c.resources) == 0 {
		return nil, nil
	}
	cfg, err := restConfig()
	if err != nil {
		return nil, err
	}
	reader, err := clusterdata.NewForConfig(cfg, c.resources, c.resync)
	if err != nil {
		return nil, fmt.Errorf("--cluster.resources: %w", err)
	}
	reader.Start(ctx)
	go func() {
		if reader.WaitForSync(ctx) {
			level.Info(logger).Log("msg", "cluster resources synced", "resources", strings.Join(reader.Resources(), ","))
		}
	}()
	return &clusterData{reader: reader}, nil
}

// policyReader is what serves k8s.get and k8s.list: nil (a nil interface, so the
// built-ins report that nothing is watched) without --cluster.resources.
func (d *clusterData) policyReader() policies.ClusterReader {
	if d == nil {
		return nil
	}
	return d.reader
}

// ready fails until every informer of --cluster.resources has its first list.
func (d *clusterData) ready() error {
	if d == nil || d.reader.Synced() {
		return nil
	}
	return errors.New("--cluster.resources informers not synced")
}
