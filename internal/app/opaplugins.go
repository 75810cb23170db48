package app

import (
	"context"
	"fmt"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/internal/opaplugins"
	"github.com/sar-bridge/sar-bridge/policies"
)

// opaPluginOptions are --config-file and what goes with it: OPA's plugin manager
// (bundles, decision logs, status), configured as OPA is (opaplugins).
type opaPluginOptions struct {
	configFile  string
	id          string
	bundlesWait time.Duration
}

func (o *opaPluginOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.configFile, "config-file", "", "OPA configuration file (OPA's format: services, bundles, decision_logs, status, keys, labels, persistence_directory; ${VAR} substituted from the environment). Bundles' policy and data are layered over the embedded policy and --policies/--policies.data; see docs/operations.md, \"OPA bundles, decision logs and status\".")
	fs.StringVar(&o.id, "config.id", "", "This instance's id in status and decision logs (OPA's --id); default a random UUID.")
	fs.DurationVar(&o.bundlesWait, "bundles.wait", 2*time.Minute, "With bundles configured, how long start-up waits for every bundle's first activation (downloaded, or read from its persisted copy) before it fails; nothing is decided before.")
}

// start runs OPA's plugins when --config-file is set and waits for the bundles'
// first activation: a bridge that decided with the embedded policy while a site's
// bundle is on its way could allow what the bundle refuses. nil when not set.
func (o opaPluginOptions) start(ctx context.Context, target *policies.Reloader, privateCopy bool, reg prometheus.Registerer, logger log.Logger) (*opaplugins.Plugins, error) {
	if o.configFile == "" {
		return nil, nil
	}
	raw, err := opaplugins.ReadConfigFile(o.configFile)
	if err != nil {
		return nil, err
	}
	p, err := opaplugins.Start(ctx, opaplugins.Options{Config: raw, ID: o.id, Target: target, Logger: logger, Registerer: reg, PrivateCopy: privateCopy})
	if err != nil {
		return nil, err
	}
	if !p.Ready() {
		level.Info(logger).Log("msg", "waiting for the first activation of every configured bundle", "at_most", o.bundlesWait)
	}
	if err := p.WaitReady(ctx, o.bundlesWait); err != nil {
		p.Stop(context.Background())
		return nil, fmt.Errorf("--config-file: %w", err)
	}
	return p, nil
}
