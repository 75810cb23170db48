// Package hotreload serves a value built from files and rebuilds it when the
// files change, keeping the last good value when a change is broken.
//
// Changes are found by polling: every interval the files are read and
// fingerprinted, so an in-place edit, a rename over a file and a Kubernetes
// ConfigMap's symlink swap are all seen, whatever the file times say. A
// change that fails to read or build is rejected: it is logged and counted
// once per distinct broken state, and the last good value keeps serving.
package hotreload

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultInterval is how often the files are checked when Options.Interval is
// not positive.
const DefaultInterval = 5 * time.Second

// buildTimeout bounds the Build of a reload.
const buildTimeout = 30 * time.Second

// Options configures New.
type Options[T any] struct {
	// Name names the metrics: sar_bridge_<Name>_reloads_total (a counter by
	// result, success or failure) and sar_bridge_<Name>_last_reload_success
	// (a gauge).
	Name string
	// ReloadsHelp and LastSuccessHelp are the help texts of the two metrics.
	ReloadsHelp, LastSuccessHelp string
	// Interval is how often the files are checked; DefaultInterval when not
	// positive.
	Interval time.Duration
	// Logger receives one line per reload, per rejected change and per return
	// to the serving version; nil discards them. Each line carries
	// component=Component and, after its msg, LogKeyvals.
	Logger     log.Logger
	Component  string
	LogKeyvals []any
	// Reloaded, Rejected and Restored are the messages of those lines.
	Reloaded, Rejected, Restored string
	// Describe, when set, adds key-values describing a value just swapped in
	// to its Reloaded line.
	Describe func(T) []any
	// Registerer, when set, registers the metrics.
	Registerer prometheus.Registerer
	// Settle builds a change only from files that read the same twice in a
	// row: a writer may be half-way through a multi-file update. A change
	// still under way is left to the next check.
	Settle bool
	// Static means there is nothing to watch: the value is loaded once and
	// never changes. The metrics are registered all the same.
	Static bool
}

// Snapshot is one reading of the files, not yet built.
type Snapshot[T any] struct {
	// Fingerprint identifies what was read: the value is rebuilt only when
	// it differs from the serving value's.
	Fingerprint [sha256.Size]byte
	// Keyvals describe the change, for the log line of its reload or its
	// rejection.
	Keyvals []any
	// Build turns what was read into a value; an error rejects the change.
	// When reloading, ctx is not cancelled with New's: shutting down must not
	// turn a good change into a rejected one.
	Build func(ctx context.Context) (T, error)
}

// LoadFunc reads the files. serving is the value in use, the zero T at the
// first load. An error rejects the change as a Build error does.
type LoadFunc[T any] func(serving T) (Snapshot[T], error)

// Value is the last good value built from the files. It is safe for
// concurrent use.
type Value[T any] struct {
	opts    Options[T]
	load    LoadFunc[T]
	logger  log.Logger
	current atomic.Pointer[T]
	gen     atomic.Uint64

	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge

	// mu serialises the watch loop's checks and Apply; it guards what follows.
	mu     sync.Mutex
	goodFP [sha256.Size]byte // fingerprint of the serving value
	failed string            // last rejected state, reported once

	done chan struct{} // closed when the watch loop has stopped
}

// New loads and builds the value and, unless opts.Static, checks the files
// every opts.Interval until ctx is done. An error of the first load or build
// is returned as is: start-up fails rather than serving without a value.
func New[T any](ctx context.Context, opts Options[T], load LoadFunc[T]) (*Value[T], error) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	logger := opts.Logger
	if logger == nil {
		logger = log.NewNopLogger()
	}
	v := &Value[T]{
		opts:   opts,
		load:   load,
		logger: log.With(logger, "component", opts.Component),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_" + opts.Name + "_reloads_total",
			Help: opts.ReloadsHelp,
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sar_bridge_" + opts.Name + "_last_reload_success",
			Help: opts.LastSuccessHelp,
		}),
		done: make(chan struct{}),
	}
	// Both series exist from the start, so a rate() or an alert sees the first failure.
	v.reloads.WithLabelValues("success")
	v.reloads.WithLabelValues("failure")

	var zero T
	snap, err := load(zero)
	if err != nil {
		return nil, err
	}
	val, err := snap.Build(ctx)
	if err != nil {
		return nil, err
	}
	v.current.Store(&val)
	v.goodFP = snap.Fingerprint
	v.lastSuccess.Set(1)
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{v.reloads, v.lastSuccess} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("registering %s reload metrics: %w", opts.Name, err)
			}
		}
	}
	if opts.Static {
		close(v.done)
		return v, nil
	}
	go v.watch(ctx)
	return v, nil
}

// Current returns the value in force.
func (v *Value[T]) Current() T { return *v.current.Load() }

// Generation counts the successful reloads since New.
func (v *Value[T]) Generation() uint64 { return v.gen.Load() }

// Done is closed when the watch loop has stopped: once ctx is done, or at once
// when opts.Static.
func (v *Value[T]) Done() <-chan struct{} { return v.done }

// Metrics returns the collectors New registers: the reload counter by result
// and the last-reload-success gauge.
func (v *Value[T]) Metrics() (reloads *prometheus.CounterVec, lastSuccess prometheus.Gauge) {
	return v.reloads, v.lastSuccess
}

func (v *Value[T]) watch(ctx context.Context) {
	defer close(v.done)
	t := time.NewTicker(v.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.check(ctx)
		}
	}
}

// check rebuilds the value when the files differ from the serving version.
func (v *Value[T]) check(ctx context.Context) {
	v.mu.Lock()
	defer v.mu.Unlock()
	serving := v.Current()
	snap, err := v.load(serving)
	if err != nil {
		// Report a read error once, not every Interval.
		v.reject("read:"+err.Error(), nil, err)
		return
	}
	if snap.Fingerprint == v.goodFP {
		if v.failed != "" {
			// The rejected change was undone: the serving value matches the files again.
			v.failed = ""
			v.lastSuccess.Set(1)
			v.log(level.Info, v.opts.Restored)
		}
		return
	}
	key := fmt.Sprintf("%x", snap.Fingerprint)
	if key == v.failed {
		return // already rejected; wait for the next change
	}
	if v.opts.Settle {
		again, err := v.load(serving)
		if err != nil {
			v.reject("read:"+err.Error(), nil, err)
			return
		}
		if again.Fingerprint != snap.Fingerprint {
			return // still changing: the next check sees the settled files
		}
	}

	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildTimeout)
	defer cancel()
	val, err := snap.Build(bctx)
	if err != nil {
		v.reject(key, snap.Keyvals, err)
		return
	}
	v.failed = ""
	v.swap(val, snap)
}

// Apply builds a value now from what load reads, for a change that comes from
// elsewhere than the files (an OPA bundle downloaded), and swaps it in when it
// builds and accept, called with it, returns nil: accept is where the caller
// makes load's reading what the watch loop reads from then on. The watch loop
// waits meanwhile, so the two never interleave. An error leaves everything as
// it was and is returned, not logged: the caller reports it where it belongs.
func (v *Value[T]) Apply(ctx context.Context, load LoadFunc[T], accept func(T) error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	snap, err := load(v.Current())
	if err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), buildTimeout)
	defer cancel()
	val, err := snap.Build(bctx)
	if err != nil {
		return err
	}
	if err := accept(val); err != nil {
		return err
	}
	v.swap(val, snap)
	return nil
}

// swap puts val in force; v.mu is held.
func (v *Value[T]) swap(val T, snap Snapshot[T]) {
	v.current.Store(&val)
	v.goodFP = snap.Fingerprint
	// Metrics first, the generation last: whoever sees the new generation (a test, a
	// readiness check) also sees the reload counted.
	v.reloads.WithLabelValues("success").Inc()
	if v.failed == "" { // an Apply does not vouch for rejected files
		v.lastSuccess.Set(1)
	}
	gen := v.gen.Add(1)
	kv := append([]any{"generation", gen}, snap.Keyvals...)
	if v.opts.Describe != nil {
		kv = append(kv, v.opts.Describe(val)...)
	}
	v.log(level.Info, v.opts.Reloaded, kv...)
}

// reject keeps the serving value and reports a rejected state once.
func (v *Value[T]) reject(key string, keyvals []any, err error) {
	if key == v.failed {
		return
	}
	v.failed = key
	v.lastSuccess.Set(0) // before the counter, which is what watchers wait on
	v.reloads.WithLabelValues("failure").Inc()
	kv := append([]any{"generation", v.gen.Load()}, keyvals...)
	v.log(level.Error, v.opts.Rejected, append(kv, "err", err)...)
}

// log writes msg, opts.LogKeyvals and keyvals at a level.
func (v *Value[T]) log(lvl func(log.Logger) log.Logger, msg string, keyvals ...any) {
	kv := append([]any{"msg", msg}, v.opts.LogKeyvals...)
	_ = lvl(v.logger).Log(append(kv, keyvals...)...)
}
