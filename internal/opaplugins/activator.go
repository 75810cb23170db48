package opaplugins

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/server"
	"github.com/open-policy-agent/opa/v1/storage"

	"github.com/sar-bridge/sar-bridge/policies"
)

// activatorID names the bridge's activator to OPA's bundle package, which calls
// the default extension activator for every bundle activation of the process.
const activatorID = "sar-bridge"

func init() {
	bundle.RegisterActivator(activatorID, activators)
	bundle.RegisterDefaultBundleActivator(activatorID)
}

// activators routes an activation to the policy of the manager whose store it
// writes: OPA's activator registry is global, the managers are not.
var activators = &activatorSet{byStore: map[storage.Store]*activation{}}

type activatorSet struct {
	mu      sync.Mutex
	byStore map[storage.Store]*activation
}

func (s *activatorSet) add(store storage.Store, a *activation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byStore[store] = a
}

func (s *activatorSet) remove(store storage.Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byStore, store)
}

// Activate is OPA's bundle.Activator: an activation of a bridge's manager goes
// to its policy first; any other (none in the bridge) is OPA's own.
func (s *activatorSet) Activate(opts *bundle.ActivateOpts) error {
	s.mu.Lock()
	a := s.byStore[opts.Store]
	s.mu.Unlock()
	if a == nil {
		return (&bundle.DefaultActivator{}).Activate(opts)
	}
	return a.activate(opts)
}

// activation is one manager's: the bundles in force, and where they go.
type activation struct {
	target Target
	logger log.Logger

	mu     sync.Mutex
	active map[string]policies.Bundle // by bundle name
}

// activate puts the policy with opts' bundles in force when the bridge's build of
// it and OPA's own activation both succeed; otherwise nothing changes.
func (a *activation) activate(opts *bundle.ActivateOpts) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	next := make(map[string]policies.Bundle, len(a.active)+len(opts.Bundles))
	for name, b := range a.active {
		next[name] = b
	}
	var names []string
	for name, b := range opts.Bundles {
		if b.Type() == bundle.DeltaBundleType {
			return fmt.Errorf("bundle %s: delta bundles are not supported: serve snapshot bundles", name)
		}
		converted, err := convert(name, b)
		if err != nil {
			return err
		}
		next[name] = converted
		names = append(names, name)
	}
	sort.Strings(names)
	ctx := opts.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	err := a.target.ActivateBundles(ctx, sorted(next), func(ev *policies.Evaluator) error {
		// OPA's activation compiles the bundle with the modules it does not
		// replace and the cluster built-ins, so that OPA's store and compiler (the
		// decision log mask, data.system.bundles) hold what the bridge decides by.
		extra := ev.BaseModules()
		mask, err := maskModules()
		if err != nil {
			return err
		}
		for name, m := range mask {
			extra[name] = m
		}
		opts.ExtraModules = extra
		opts.Compiler = opts.Compiler.WithBuiltins(policies.CompilerBuiltins())
		if err := (&bundle.DefaultActivator{}).Activate(opts); err != nil {
			return fmt.Errorf("OPA's activation: %w", err)
		}
		return nil
	})
	if err != nil {
		level.Error(a.logger).Log("component", "opa-plugins", "msg", "bundle refused; the last good policy keeps deciding",
			"bundles", fmt.Sprint(names), "revisions", revisions(opts.Bundles), "err", err)
		return errors.Join(errors.New("refused by sar-bridge"), err)
	}
	a.active = next
	level.Info(a.logger).Log("component", "opa-plugins", "msg", "bundle activated", "bundles", fmt.Sprint(names), "revisions", revisions(opts.Bundles))
	return nil
}

// convert takes what the bridge's policy needs of an OPA bundle. The bundle plugin
// reads bundles lazily: their data files are still raw (b.Raw), not in b.Data.
func convert(name string, b *bundle.Bundle) (policies.Bundle, error) {
	out := policies.Bundle{Name: name, Revision: b.Manifest.Revision, Data: b.Data}
	if b.Manifest.Roots != nil {
		out.Roots = append(out.Roots, *b.Manifest.Roots...)
	}
	for _, m := range b.Modules {
		out.Modules = append(out.Modules, policies.BundleModule{Path: m.Path, Text: string(m.Raw)})
	}
	for _, raw := range b.Raw {
		if err := out.AddDataFile(raw.Path, raw.Value); err != nil {
			return policies.Bundle{}, fmt.Errorf("bundle %s: %w", name, err)
		}
	}
	return out, nil
}

func sorted(bundles map[string]policies.Bundle) []policies.Bundle {
	out := make([]policies.Bundle, 0, len(bundles))
	for _, b := range bundles {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func revisions(bundles map[string]*bundle.Bundle) string {
	names := make([]string, 0, len(bundles))
	for name := range bundles {
		names = append(names, name)
	}
	sort.Strings(names)
	out := ""
	for i, name := range names {
		if i > 0 {
			out += ","
		}
		out += name + "=" + bundles[name].Manifest.Revision
	}
	return out
}

// revisions returns the revision of every bundle in force, for decision log events.
func (a *activation) revisions() map[string]server.BundleInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.active) == 0 {
		return nil
	}
	out := make(map[string]server.BundleInfo, len(a.active))
	for name, b := range a.active {
		out[name] = server.BundleInfo{Revision: b.Revision}
	}
	return out
}
