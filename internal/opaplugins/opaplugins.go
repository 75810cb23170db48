// Package opaplugins runs OPA's own plugin manager inside the bridge, configured by
// a file in OPA's format (services, bundles, decision_logs, status, keys, labels),
// so that an OPA user's configuration works as it is: bundles are downloaded from
// HTTP services or OCI registries, polled with ETags, verified with signatures and
// persisted by OPA's bundle plugin.
//
// What a bundle activates is the bridge's policy, not OPA's: the bundle plugin's
// activation goes through Activator, which layers the bundle over the embedded
// policy and the --policies files (policies.Reloader.ActivateBundles), compiled and
// checked exactly as a file reload is, and only then lets OPA activate it into the
// manager's store as OPA would. A bundle that fails either is refused: the bundle
// plugin reports the error and the last good policy keeps deciding.
package opaplugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/google/uuid"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/plugins"
	bundleplugin "github.com/open-policy-agent/opa/v1/plugins/bundle"
	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/plugins/status"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sar-bridge/sar-bridge/policies"
)

// Target is the policy bundles are activated into (policies.Reloader).
type Target interface {
	ActivateBundles(ctx context.Context, bundles []policies.Bundle, accept func(*policies.Evaluator) error) error
}

// Options configures Start.
type Options struct {
	// Config is OPA's configuration, as JSON (ReadConfigFile).
	Config []byte
	// ID names this instance to the services (OPA's --id); a random UUID when empty.
	ID string
	// Target receives the bundles.
	Target Target
	// Logger receives OPA's plugin logs; Debug lets its debug lines through.
	Logger log.Logger
	Debug  bool
	// Registerer receives the plugins' metrics (the status plugin's with
	// status.prometheus: true).
	Registerer prometheus.Registerer
	// PrivateCopy runs the plugins in a copy of the configuration's persistence
	// directory, removed by Stop: a one-shot command given a server's configuration
	// starts from the bundles the server persisted (so it decides by what the server
	// last activated) but never writes where the server writes, nor reads OPA's OCI
	// download cache there, which a write cut short leaves broken.
	PrivateCopy bool
	// Console receives the decision log events of decision_logs.console, one JSON
	// object a line in OPA's format whatever the bridge's log format (console.go);
	// nil: os.Stderr.
	Console io.Writer
}

// Plugins is the running plugin manager.
type Plugins struct {
	manager    *plugins.Manager
	logger     log.Logger
	activation *activation
	bundles    bool         // bundles are configured: readiness waits for their activation
	privateDir string       // PrivateCopy's persistence directory; "" when none
	logs       *logs.Plugin // nil: decision_logs not configured
}

// Start parses the configuration, starts the plugins it turns on and returns at
// once; bundles are downloaded in the background (Ready, WaitReady).
func Start(ctx context.Context, opts Options) (_ *Plugins, err error) {
	if opts.Target == nil {
		return nil, errors.New("opaplugins: no target for bundles")
	}
	logger := opts.Logger
	if logger == nil {
		logger = log.NewNopLogger()
	}
	opaLogger := newKitLogger(logger, opts.Debug)
	store := inmem.New()
	mask, err := initFiles()
	if err != nil {
		return nil, err
	}
	managerOpts := []func(*plugins.Manager){
		plugins.Logger(opaLogger),
		plugins.ConsoleLogger(newConsoleLogger(opts.Console)),
		plugins.WithParserOptions(ast.ParserOptions{RegoVersion: ast.RegoV1}),
		plugins.WithEnableTelemetry(false),
		plugins.InitFiles(mask),
	}
	if opts.Registerer != nil {
		managerOpts = append(managerOpts, plugins.WithPrometheusRegister(opts.Registerer))
	}
	id := opts.ID
	if id == "" {
		id = uuid.NewString() // as OPA's runtime does
	}
	config, privateDir := opts.Config, ""
	if opts.PrivateCopy {
		if config, privateDir, err = withPrivatePersistence(config); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			removeDir(privateDir)
		}
	}()
	m, err := plugins.New(config, id, store, managerOpts...)
	if err != nil {
		return nil, fmt.Errorf("OPA configuration: %w", err)
	}
	if m.Config.Discovery != nil {
		return nil, errors.New("OPA configuration: discovery is not supported (its plugins would replace the bridge's configuration); configure bundles, decision_logs and status directly")
	}
	if m.Config.Bundle != nil { //nolint:staticcheck // the deprecated key is refused, not read
		return nil, errors.New(`OPA configuration: "bundle" is OPA's deprecated single-bundle key; use "bundles"`)
	}
	p := &Plugins{manager: m, logger: logger, activation: &activation{target: opts.Target, logger: logger}, privateDir: privateDir}
	if err := p.register(); err != nil {
		return nil, err
	}
	activators.add(store, p.activation)
	if err := startManager(ctx, m); err != nil {
		activators.remove(store)
		return nil, fmt.Errorf("starting OPA's plugins: %w", err)
	}
	level.Info(logger).Log("component", "opa-plugins", "msg", "OPA plugins started", "plugins", fmt.Sprint(m.Plugins()))
	return p, nil
}

// startManager starts the plugins. OPA's bundle plugin panics on some broken persisted
// copies (an empty OCI index in the persistence directory): that is an error of the
// configuration's directory, never a crash.
func startManager(ctx context.Context, m *plugins.Manager) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v (is a bundle's persisted copy under persistence_directory broken?)", r)
		}
	}()
	return m.Start(ctx)
}

// register creates the bundle, decision log and status plugins the configuration
// turns on, as OPA's runtime does.
func (p *Plugins) register() error {
	m := p.manager
	services := m.Services()
	bundles, err := bundleplugin.NewConfigBuilder().WithBytes(m.Config.Bundles).WithServices(services).
		WithKeyConfigs(m.PublicKeys()).Parse()
	if err != nil {
		return fmt.Errorf("OPA configuration, bundles: %w", err)
	}

	var names []string
	if bundles != nil {
		names = append(names, bundleplugin.Name)
	}
	logsConfig, err := boundDecisionLogBuffer(m.Config.DecisionLogs)
	if err != nil {
		return err
	}
	decisionLogs, err := logs.NewConfigBuilder().WithBytes(logsConfig).WithServices(services).
		WithPlugins(names).Parse()
	if err != nil {
		return fmt.Errorf("OPA configuration, decision_logs: %w", err)
	}
	statusConfig, err := status.NewConfigBuilder().WithBytes(m.Config.Status).WithServices(services).
		WithPlugins(names).Parse()
	if err != nil {
		return fmt.Errorf("OPA configuration, status: %w", err)
	}
	var bp *bundleplugin.Plugin
	if bundles != nil {
		bp = bundleplugin.New(bundles, m)
		m.Register(bundleplugin.Name, bp)
		p.bundles = true
	}
	if decisionLogs != nil {
		p.logs = logs.New(decisionLogs, m)
		m.Register(logs.Name, p.logs)
	}
	if statusConfig != nil {
		sp := status.New(statusConfig, m)
		m.Register(status.Name, sp)
		if bp != nil {
			bp.RegisterBulkListener("status", sp.BulkUpdateBundleStatus)
		}
	}
	return nil
}

// Ready reports whether every configured bundle has been activated once (at
// once when none is configured), as OPA's readiness does.
func (p *Plugins) Ready() bool {
	if !p.bundles {
		return true
	}
	s := p.manager.PluginStatus()[bundleplugin.Name]
	return s != nil && s.State == plugins.StateOK
}

// WaitReady waits until Ready, at most timeout.
func (p *Plugins) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !p.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no bundle activated within %v: %s", timeout, p.notActivated())
		case <-t.C:
		}
	}
	return nil
}

// notActivated names the bundles not activated yet, with their last errors.
func (p *Plugins) notActivated() string {
	bp := bundleplugin.Lookup(p.manager)
	if bp == nil {
		return "no bundle plugin"
	}
	return fmt.Sprintf("waiting for %v", bp.NotActivated())
}

// Stop stops the plugins (a last decision log upload included), within ctx.
func (p *Plugins) Stop(ctx context.Context) {
	p.manager.Stop(ctx)
	activators.remove(p.manager.Store)
	removeDir(p.privateDir)
}

// withPrivatePersistence is config with persistence_directory set to a new temporary
// directory, which it returns, holding a copy of the configured one's persisted bundles
// (bundles/; not OPA's OCI download cache, oci/).
func withPrivatePersistence(config []byte) (_ []byte, dir string, err error) {
	var doc map[string]any
	if err := json.Unmarshal(config, &doc); err != nil {
		return nil, "", fmt.Errorf("OPA configuration: %w", err)
	}
	if dir, err = os.MkdirTemp("", "sar-bridge-opa-*"); err != nil {
		return nil, "", fmt.Errorf("OPA plugins' persistence directory: %w", err)
	}
	defer func() {
		if err != nil {
			removeDir(dir)
		}
	}()
	if from, ok := doc["persistence_directory"].(string); ok && from != "" {
		if err := copyTree(filepath.Join(from, "bundles"), filepath.Join(dir, "bundles")); err != nil {
			return nil, "", fmt.Errorf("copying the persisted bundles of %s: %w", from, err)
		}
	}
	doc["persistence_directory"] = dir
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, "", fmt.Errorf("OPA configuration: %w", err)
	}
	return out, dir, nil
}

// copyTree copies the regular files under from to to; a missing from copies nothing.
func copyTree(from, to string) error {
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case !d.Type().IsRegular():
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func removeDir(dir string) {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
