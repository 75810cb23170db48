package policies

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultReloadInterval is how often a Reloader checks its files when
// ReloaderOptions.Interval is not set.
const DefaultReloadInterval = 5 * time.Second

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
	{"interlink", "authz", "decision"},
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
	logger  log.Logger
	current atomic.Pointer[Evaluator]
	gen     atomic.Uint64

	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge

	// Owned by the watch loop after NewReloader returns.
	goodFP   [sha256.Size]byte            // fingerprint of the serving snapshot
	goodHash map[string][sha256.Size]byte // per-file hashes of the serving snapshot
	failedFP string                       // last rejected state, reported once
	guarded  [][]string                   // guarded documents the serving policy defines

	done chan struct{} // closed when the watch loop has stopped
}

// NewReloader loads the policy as New does and watches its files until ctx is
// done. An error of the initial load is returned: start-up fails rather than
// serving without a policy.
func NewReloader(ctx context.Context, opts ReloaderOptions) (*Reloader, error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultReloadInterval
	}
	logger := opts.Logger
	if logger == nil {
		logger = log.NewNopLogger()
	}
	r := &Reloader{
		opts:   opts,
		logger: log.With(logger, "component", "policy-reloader"),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_policy_reloads_total",
			Help: "Policy reloads after a change of the policy files, by result (success, failure).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sar_bridge_policy_last_reload_success",
			Help: "1 when the policy files last seen were loaded, 0 when they were rejected and an older policy is serving.",
		}),
		done: make(chan struct{}),
	}
	// Both series exist from the start, so a rate() or an alert sees the first failure.
	r.reloads.WithLabelValues("success")
	r.reloads.WithLabelValues("failure")

	snap, err := readSnapshot(opts.Options)
	if err != nil {
		return nil, err
	}
	ev, err := snap.build()
	if err != nil {
		return nil, err
	}
	r.guarded = definedGuarded(ctx, ev)
	r.goodFP, r.goodHash = snap.fingerprint()
	r.current.Store(ev)
	r.lastSuccess.Set(1)
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(r.reloads); err != nil {
			return nil, fmt.Errorf("registering policy reload metrics: %w", err)
		}
		if err := opts.Registerer.Register(r.lastSuccess); err != nil {
			return nil, fmt.Errorf("registering policy reload metrics: %w", err)
		}
	}

	if opts.Dir == "" && opts.DataFile == "" {
		close(r.done) // only the embedded policy: nothing can change
		return r, nil
	}
	go r.watch(ctx)
	return r, nil
}

// Eval evaluates data.<path...> with the current policy; see Evaluator.Eval.
func (r *Reloader) Eval(ctx context.Context, path []string, input map[string]any) (any, bool, error) {
	return r.current.Load().Eval(ctx, path, input)
}

// Generation counts the successful reloads since NewReloader.
func (r *Reloader) Generation() uint64 { return r.gen.Load() }

func (r *Reloader) watch(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.check(ctx)
		}
	}
}

// check reloads when the files differ from the serving snapshot.
func (r *Reloader) check(ctx context.Context) {
	snap, err := readSnapshot(r.opts.Options)
	if err != nil {
		// Report a read error once, not every Interval.
		r.reject("read:"+err.Error(), nil, err)
		return
	}
	fp, hashes := snap.fingerprint()
	if fp == r.goodFP {
		if r.failedFP != "" {
			// The rejected change was undone: the serving policy matches the files again.
			r.failedFP = ""
			r.lastSuccess.Set(1)
			level.Info(r.logger).Log("msg", "policy files are back to the serving version")
		}
		return
	}
	fpKey := fmt.Sprintf("%x", fp)
	if fpKey == r.failedFP {
		return // already rejected; wait for the next change
	}
	// A writer may be half-way through a multi-file update (or a ConfigMap swap
	// between two reads): build only from a set that reads the same twice.
	if again, err := readSnapshot(r.opts.Options); err != nil {
		r.reject("read:"+err.Error(), nil, err)
		return
	} else if fp2, _ := again.fingerprint(); fp2 != fp {
		return // still changing: the next tick sees the settled files
	}
	changed := changedFiles(r.goodHash, hashes)

	// Shutting down must not turn a good change into a rejected one.
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ev, err := snap.build()
	if err == nil {
		err = r.verify(vctx, ev)
	}
	if err != nil {
		r.reject(fpKey, changed, err)
		return
	}
	r.current.Store(ev)
	r.guarded = definedGuarded(vctx, ev)
	r.goodFP, r.goodHash, r.failedFP = fp, hashes, ""
	gen := r.gen.Add(1)
	r.reloads.WithLabelValues("success").Inc()
	r.lastSuccess.Set(1)
	level.Info(r.logger).Log("msg", "policy reloaded", "generation", gen, "changed", strings.Join(changed, ","))
}

// reject keeps the serving policy and reports a rejected state once.
func (r *Reloader) reject(key string, changed []string, err error) {
	if key == r.failedFP {
		return
	}
	r.failedFP = key
	r.reloads.WithLabelValues("failure").Inc()
	r.lastSuccess.Set(0)
	level.Error(r.logger).Log("msg", "policy reload rejected; the last good policy keeps serving",
		"generation", r.gen.Load(), "changed", strings.Join(changed, ","), "err", err)
}

// verify checks that ev still defines every guarded document the serving
// policy defines, and evaluates it without error.
func (r *Reloader) verify(ctx context.Context, ev *Evaluator) error {
	for _, doc := range r.guarded {
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
