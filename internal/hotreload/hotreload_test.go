package hotreload_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/hotreload"
	"github.com/sar-bridge/sar-bridge/internal/hotreload/hotreloadtest"
)

// files stands in for watched files. A content starting with "missing" fails to
// read, one starting with "bad" reads but fails to build.
type files struct {
	mu      sync.Mutex
	content string
	reads   int
	flicker bool // every read sees another content, as while a writer is busy
}

func (f *files) set(content string, flicker bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.content, f.flicker = content, flicker
}

func (f *files) load(string) (hotreload.Snapshot[string], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	c := f.content
	if f.flicker {
		c += fmt.Sprintf("-%d", f.reads)
	}
	if strings.HasPrefix(c, "missing") {
		return hotreload.Snapshot[string]{}, fmt.Errorf("reading %s: no such file", c)
	}
	return hotreload.Snapshot[string]{
		Fingerprint: sha256.Sum256([]byte(c)),
		Keyvals:     []any{"content", c},
		Build: func(context.Context) (string, error) {
			if strings.HasPrefix(c, "bad") {
				return "", fmt.Errorf("%s does not build", c)
			}
			return c, nil
		},
	}, nil
}

func testOptions(logs *hotreloadtest.SyncBuffer, reg prometheus.Registerer) hotreload.Options[string] {
	return hotreload.Options[string]{
		Name:            "test",
		ReloadsHelp:     "Test reloads.",
		LastSuccessHelp: "1 when the test files last seen were loaded.",
		Interval:        5 * time.Millisecond,
		Logger:          log.NewLogfmtLogger(logs),
		Component:       "tester",
		LogKeyvals:      []any{"file", "f"},
		Reloaded:        "reloaded",
		Rejected:        "rejected",
		Restored:        "restored",
		Describe:        func(v string) []any { return []any{"value", v} },
		Registerer:      reg,
	}
}

// start serves the files, initially "v0", until the test ends.
func start(t *testing.T, opts hotreload.Options[string]) (*hotreload.Value[string], *files) {
	t.Helper()
	f := &files{content: "v0"}
	ctx, cancel := context.WithCancel(context.Background())
	v, err := hotreload.New(ctx, opts, f.load)
	if err != nil {
		cancel()
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { cancel(); <-v.Done() })
	return v, f
}

func TestReload(t *testing.T) {
	type step struct {
		content   string  // the files after the step
		value     string  // the value served after it
		gen       uint64  // Generation after it
		successes float64 // the reload counters after it
		failures  float64
		last      float64 // last_reload_success after it
		log       string  // a line the step writes once; "" for none
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "each change reloads",
			steps: []step{
				{content: "v1", value: "v1", gen: 1, successes: 1, last: 1,
					log: "level=info component=tester msg=reloaded file=f generation=1 content=v1 value=v1\n"},
				{content: "v2", value: "v2", gen: 2, successes: 2, last: 1,
					log: "level=info component=tester msg=reloaded file=f generation=2 content=v2 value=v2\n"},
			},
		},
		{
			name: "a broken change is rejected once; the last good value serves",
			steps: []step{
				{content: "v1", value: "v1", gen: 1, successes: 1, last: 1},
				{content: "bad1", value: "v1", gen: 1, successes: 1, failures: 1, last: 0,
					log: "level=error component=tester msg=rejected file=f generation=1 content=bad1 err=\"bad1 does not build\"\n"},
			},
		},
		{
			name: "each distinct broken state is reported",
			steps: []step{
				{content: "bad1", value: "v0", failures: 1, last: 0},
				{content: "bad2", value: "v0", failures: 2, last: 0, log: "err=\"bad2 does not build\"\n"},
				{content: "bad1", value: "v0", failures: 3, last: 0},
			},
		},
		{
			name: "a read error is rejected once; a fix reloads",
			steps: []step{
				{content: "missing", value: "v0", failures: 1, last: 0,
					log: "level=error component=tester msg=rejected file=f generation=0 err=\"reading missing: no such file\"\n"},
				{content: "v1", value: "v1", gen: 1, successes: 1, failures: 1, last: 1},
			},
		},
		{
			name: "reverting to the serving version clears the failure without a reload",
			steps: []step{
				{content: "bad1", value: "v0", failures: 1, last: 0},
				{content: "v0", value: "v0", failures: 1, last: 1, log: "level=info component=tester msg=restored file=f\n"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &hotreloadtest.SyncBuffer{}
			v, f := start(t, testOptions(logs, nil))
			hotreloadtest.CheckMetrics(t, v, 0, 0, 1)
			for i, st := range tt.steps {
				f.set(st.content, false)
				hotreloadtest.WaitFor(t, fmt.Sprintf("step %d (%s)", i, st.content), func() bool {
					return v.Generation() == st.gen && hotreloadtest.Failures(v) == st.failures && hotreloadtest.LastSuccess(v) == st.last
				}, logs)
				hotreloadtest.Settle() // nothing more happens: reported once, not every interval
				if got := v.Current(); got != st.value {
					t.Errorf("step %d: value = %q, want %q", i, got, st.value)
				}
				if got := v.Generation(); got != st.gen {
					t.Errorf("step %d: generation = %d, want %d", i, got, st.gen)
				}
				hotreloadtest.CheckMetrics(t, v, st.successes, st.failures, st.last)
				if st.log != "" {
					if n := strings.Count(logs.String(), st.log); n != 1 {
						t.Errorf("step %d: %d lines %q in logs:\n%s", i, n, st.log, logs)
					}
				}
			}
		})
	}
}

// TestSettle: with Settle, a change is built only once two reads agree.
func TestSettle(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("settle=%v", settle), func(t *testing.T) {
			opts := testOptions(&hotreloadtest.SyncBuffer{}, nil)
			opts.Settle = settle
			v, f := start(t, opts)
			f.set("v1", true)
			if settle {
				hotreloadtest.Settle()
				if v.Generation() != 0 || v.Current() != "v0" {
					t.Fatalf("built from files still changing: generation %d, value %q", v.Generation(), v.Current())
				}
				f.set("v1", false)
			}
			hotreloadtest.WaitFor(t, "a reload", func() bool { return v.Generation() > 0 }, nil)
			if got := v.Current(); !strings.HasPrefix(got, "v1") {
				t.Errorf("value = %q, want v1…", got)
			}
			if got := hotreloadtest.Failures(v); got != 0 {
				t.Errorf("failures = %v, want 0", got)
			}
		})
	}
}

func TestStatic(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := testOptions(&hotreloadtest.SyncBuffer{}, reg)
	opts.Static = true
	f := &files{content: "v0"}
	v, err := hotreload.New(context.Background(), opts, f.load)
	if err != nil {
		t.Fatal(err)
	}
	<-v.Done() // nothing to watch: no goroutine is left behind
	if v.Current() != "v0" || v.Generation() != 0 || f.reads != 1 {
		t.Errorf("value %q, generation %d, reads %d", v.Current(), v.Generation(), f.reads)
	}
	want := `
# HELP sar_bridge_test_last_reload_success 1 when the test files last seen were loaded.
# TYPE sar_bridge_test_last_reload_success gauge
sar_bridge_test_last_reload_success 1
# HELP sar_bridge_test_reloads_total Test reloads.
# TYPE sar_bridge_test_reloads_total counter
sar_bridge_test_reloads_total{result="failure"} 0
sar_bridge_test_reloads_total{result="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestNewErrors(t *testing.T) {
	readErr := errors.New("no such file")
	taken := prometheus.NewRegistry()
	taken.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sar_bridge_test_last_reload_success", Help: "x"}))
	tests := []struct {
		name    string
		load    hotreload.LoadFunc[string]
		reg     prometheus.Registerer
		wantErr string
		wantIs  error
	}{
		{
			name:   "read error",
			load:   func(string) (hotreload.Snapshot[string], error) { return hotreload.Snapshot[string]{}, readErr },
			wantIs: readErr, wantErr: "no such file",
		},
		{name: "build error", load: (&files{content: "bad0"}).load, wantErr: "bad0 does not build"},
		{name: "metrics taken", load: (&files{content: "v0"}).load, reg: taken, wantErr: "registering test reload metrics: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			v, err := hotreload.New(ctx, testOptions(&hotreloadtest.SyncBuffer{}, tt.reg), tt.load)
			if err == nil || v != nil || !strings.Contains(err.Error(), tt.wantErr) || (tt.wantIs != nil && !errors.Is(err, tt.wantIs)) {
				t.Errorf("New = %v, %v; want an error containing %q", v, err, tt.wantErr)
			}
		})
	}
}

// TestReloadOutlivesShutdown: a reload under way when ctx ends still completes,
// and the watch stops after it.
func TestReloadOutlivesShutdown(t *testing.T) {
	building, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	load := func(serving string) (hotreload.Snapshot[string], error) {
		first := serving == ""
		return hotreload.Snapshot[string]{
			Fingerprint: sha256.Sum256([]byte(fmt.Sprint(first))),
			Build: func(ctx context.Context) (string, error) {
				if first {
					return "v0", nil
				}
				once.Do(func() { close(building) })
				<-proceed
				if err := ctx.Err(); err != nil {
					return "", err
				}
				return "v1", nil
			},
		}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	v, err := hotreload.New(ctx, testOptions(&hotreloadtest.SyncBuffer{}, nil), load)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	<-building
	cancel()
	close(proceed)
	select {
	case <-v.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not stop after ctx ended")
	}
	if v.Current() != "v1" || v.Generation() != 1 || hotreloadtest.Failures(v) != 0 {
		t.Errorf("value %q, generation %d, failures %v; want the reload done", v.Current(), v.Generation(), hotreloadtest.Failures(v))
	}
}

func TestConcurrentReads(t *testing.T) {
	v, f := start(t, testOptions(&hotreloadtest.SyncBuffer{}, nil))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got := v.Current(); !strings.HasPrefix(got, "v") {
					t.Errorf("Current() = %q during reloads", got)
					return
				}
			}
		}()
	}
	for i := 1; i <= 3; i++ {
		f.set(fmt.Sprintf("v%d", i), false)
		hotreloadtest.WaitFor(t, "reload", func() bool { return v.Generation() == uint64(i) }, nil)
	}
	close(stop)
	wg.Wait()
}
