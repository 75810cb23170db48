package policies

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/hotreload"
)

// DefaultReloadInterval is how often a Reloader checks its files when
// ReloaderOptions.Interval is not set.
const DefaultReloadInterval = hotreload.DefaultInterval

// ReloaderOptions configures NewReloader.
type ReloaderOptions struct {
	Options
	// Interval is how often the policy files are checked; DefaultReloadInterval
	// when zero or negative.
	Interval time.Duration
	// Logger receives one line per reload and per rejected change; nil
	// discards them.
	Logger log.Logger
	// Registerer, when set, registers sar_bridge_policy_reloads_total and
	// sar_bridge_policy_last_reload_success.
	Registerer prometheus.Registerer
}

// guardedDocuments are the documents callers depend on. When the running
// policy defines one of them (for an empty input), a reload that no longer
// does, or fails to evaluate it, is rejected: a typo in a replaced authz.rego
// must not turn every decision into "undefined".
var guardedDocuments = [][]string{
	decisionapi.PathParts(),
	{"interlink", "authz", "allow"},
}

// Reloader evaluates with the last good policy and rebuilds it when the files
// it was built from change. It is safe for concurrent use.
//
// Changes are found by polling: every Interval the *.rego files of Dir and
// the DataFile are read and hashed, so an in-place edit, a rename over the
// file and a Kubernetes ConfigMap's symlink swap are all seen, whatever the
// file times say. A changed set is compiled with the same rules as New; a
// set that fails to read, parse or compile, or that drops a guarded
// document, is rejected: it is logged and counted, and the last good policy
// keeps serving. Never is an empty or partial policy swapped in.
type Reloader struct {
	opts    ReloaderOptions
	v       *hotreload.Value[*loadedPolicy]
	bundles atomic.Pointer[[]Bundle] // in force, layered over the files (ActivateBundles)
}

// loadedPolicy is a compiled policy and what it was built from.
type loadedPolicy struct {
	ev      *Evaluator
	guarded [][]string                   // guarded documents ev defines
	files   map[string][sha256.Size]byte // per-file hashes, to name what a reload changes
}

// NewReloader loads the policy as New does and watches its files until ctx is
// done. An error of the initial load is returned: start-up fails rather than
// serving without a policy.
func NewReloader(ctx context.Context, opts ReloaderOptions) (*Reloader, error) {
	r := &Reloader{opts: opts}
	r.bundles.Store(&[]Bundle{})
	v, err := hotreload.New(ctx, hotreload.Options[*loadedPolicy]{
		Name:            "policy",
		ReloadsHelp:     "Policy reloads after a change of the policy files or an OPA bundle, by result (success, failure).",
		LastSuccessHelp: "1 when the policy files last seen were loaded, 0 when they were rejected and an older policy is serving.",
		Interval:        opts.Interval,
		Logger:          opts.Logger,
		Component:       "policy-reloader",
		Reloaded:        "policy reloaded",
		Rejected:        "policy reload rejected; the last good policy keeps serving",
		Restored:        "policy files are back to the serving version",
		Registerer:      opts.Registerer,
		Settle:          true,
		Static:          opts.Dir == "" && opts.DataFile == "", // only the embedded policy: no file can change
	}, func(serving *loadedPolicy) (hotreload.Snapshot[*loadedPolicy], error) {
		return r.load(*r.bundles.Load())(serving)
	})
	if err != nil {
		return nil, err
	}
	r.v = v
	return r, nil
}

// load reads the files and layers bundles over them.
func (r *Reloader) load(bundles []Bundle) hotreload.LoadFunc[*loadedPolicy] {
	opts := r.opts
	return func(serving *loadedPolicy) (hotreload.Snapshot[*loadedPolicy], error) {
		snap, err := readSnapshot(opts.Options)
		if err != nil {
			return hotreload.Snapshot[*loadedPolicy]{}, err
		}
		if err := snap.addBundles(bundles); err != nil {
			return hotreload.Snapshot[*loadedPolicy]{}, err
		}
		fp, files := snap.fingerprint()
		out := hotreload.Snapshot[*loadedPolicy]{Fingerprint: fp}
		if serving != nil {
			out.Keyvals = []any{"changed", strings.Join(changedFiles(serving.files, files), ",")}
		}
		out.Build = func(ctx context.Context) (*loadedPolicy, error) {
			ev, err := snap.build()
			if err != nil {
				return nil, err
			}
			if off := ev.FastPathOff(); off != "" && opts.Logger != nil {
				// Not an error: the general rules decide, as fast as a policy without
				// the fast path; the line says how to keep it.
				_ = level.Info(opts.Logger).Log("component", "policy-reloader", "msg",
					"the default policy's fast path is off: decisions take the general rules; put site rules in package interlink.site.<name> to keep it", "why", off)
			}
			if serving != nil {
				if err := verify(ctx, serving.guarded, ev); err != nil {
					return nil, err
				}
			}
			return &loadedPolicy{ev: ev, guarded: definedGuarded(ctx, ev), files: files}, nil
		}
		return out, nil
	}
}

// Eval evaluates data.<path...> with the current policy; see Evaluator.Eval.
func (r *Reloader) Eval(ctx context.Context, path []string, input map[string]any) (any, bool, error) {
	return r.v.Current().ev.Eval(ctx, path, input)
}

// Generation counts the successful reloads since NewReloader.
func (r *Reloader) Generation() uint64 { return r.v.Generation() }

// verify checks that ev still defines every guarded document the serving
// policy defines, and evaluates it without error.
func verify(ctx context.Context, guarded [][]string, ev *Evaluator) error {
	for _, doc := range guarded {
		_, defined, err := ev.Eval(ctx, doc, map[string]any{})
		if err != nil {
			return fmt.Errorf("new policy fails on data.%s: %w", strings.Join(doc, "."), err)
		}
		if !defined {
			return fmt.Errorf("new policy no longer defines data.%s", strings.Join(doc, "."))
		}
	}
	return nil
}

// definedGuarded lists the guarded documents ev defines for an empty input.
func definedGuarded(ctx context.Context, ev *Evaluator) [][]string {
	var out [][]string
	for _, doc := range guardedDocuments {
		if _, defined, err := ev.Eval(ctx, doc, map[string]any{}); err == nil && defined {
			out = append(out, doc)
		}
	}
	return out
}

// fingerprint hashes the snapshot (embedded modules included) and each file
// read from disk on its own, to name what changed.
func (s snapshot) fingerprint() ([sha256.Size]byte, map[string][sha256.Size]byte) {
	names := make([]string, 0, len(s.sources))
	for name := range s.sources {
		names = append(names, name)
	}
	sort.Strings(names)
	files := make(map[string][sha256.Size]byte, len(names)+1)
	all := sha256.New()
	for _, name := range names {
		src := s.sources[name]
		writeField(all, src.filename)
		writeField(all, src.text)
		if !strings.HasPrefix(src.filename, "embedded:") {
			files[src.filename] = sha256.Sum256([]byte(src.text))
		}
	}
	writeField(all, s.dataFile)
	writeField(all, string(s.data))
	for _, b := range s.bundles {
		// Its modules are among the sources; its data and roots are here.
		writeField(all, b.Name)
		writeField(all, b.Revision)
		writeField(all, strings.Join(b.Roots, "\x00"))
		data, _ := json.Marshal(b.Data) // sorted keys; JSON values always encode
		writeField(all, string(data))
	}
	if s.dataFile != "" {
		files[s.dataFile] = sha256.Sum256(s.data)
	}
	var fp [sha256.Size]byte
	copy(fp[:], all.Sum(nil))
	return fp, files
}

// writeField length-prefixes v so that distinct snapshots never hash alike.
func writeField(h io.Writer, v string) {
	_, _ = fmt.Fprintf(h, "%d:", len(v))
	_, _ = h.Write([]byte(v))
}

// changedFiles names the files added, removed or modified between two snapshots.
func changedFiles(old, cur map[string][sha256.Size]byte) []string {
	var out []string
	for f, h := range cur {
		if oh, ok := old[f]; !ok || oh != h {
			out = append(out, f)
		}
	}
	for f := range old {
		if _, ok := cur[f]; !ok {
			out = append(out, f+" (removed)")
		}
	}
	sort.Strings(out)
	return out
}

// EvalValue evaluates with the current policy; see Evaluator.EvalValue. A reload
// swaps in a new Evaluator and with it an empty memo.
func (r *Reloader) EvalValue(ctx context.Context, path []string, input ast.Value, m Memo) (Result, error) {
	return r.v.Current().ev.EvalValue(ctx, path, input, m)
}

// MemoStatus reports on the current policy; see Evaluator.MemoStatus.
func (r *Reloader) MemoStatus(ctx context.Context, path []string) (bool, string, error) {
	return r.v.Current().ev.MemoStatus(ctx, path)
}
