package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeResolver answers from a table that tests change between refreshes.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string]fakeAnswer
	calls   int
}

type fakeAnswer struct {
	addrs []string
	err   error
}

func (r *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	a, ok := r.answers[host]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	return a.addrs, a.err
}

func (r *fakeResolver) set(host string, a fakeAnswer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[host] = a
}

func (r *fakeResolver) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// metricValue reads one counter or gauge sample from reg.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func TestNewMemcachedResolution(t *testing.T) {
	tests := []struct {
		name      string
		servers   []string
		answers   map[string]fakeAnswer
		want      []string
		wantErr   string // substring; empty means success
		wantCalls int
	}{
		{
			name:    "ip literals skip dns",
			servers: []string{"10.0.0.2:11211", "[fd00::1]:11211"},
			want:    []string{"10.0.0.2:11211", "[fd00::1]:11211"},
		},
		{
			name:      "name resolves to every address, sorted and deduplicated",
			servers:   []string{"mc.ns.svc:11211", "10.0.0.1:11211"},
			answers:   map[string]fakeAnswer{"mc.ns.svc": {addrs: []string{"10.0.0.3", "10.0.0.1", "10.0.0.2"}}},
			want:      []string{"10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"},
			wantCalls: 1,
		},
		{
			name:      "dual stack name uses ipv4 only",
			servers:   []string{"localhost:11211"},
			answers:   map[string]fakeAnswer{"localhost": {addrs: []string{"::1", "127.0.0.1"}}},
			want:      []string{"127.0.0.1:11211"},
			wantCalls: 1,
		},
		{
			name:      "ipv6 only name",
			servers:   []string{"mc:11211"},
			answers:   map[string]fakeAnswer{"mc": {addrs: []string{"fd00::2", "fd00::1"}}},
			want:      []string{"[fd00::1]:11211", "[fd00::2]:11211"},
			wantCalls: 1,
		},
		{
			name:      "one of two names fails: the other is used",
			servers:   []string{"good:1", "bad:2"},
			answers:   map[string]fakeAnswer{"good": {addrs: []string{"10.0.0.1"}}},
			want:      []string{"10.0.0.1:1"},
			wantCalls: 2,
		},
		{
			name:      "every name fails",
			servers:   []string{"bad:11211"},
			wantErr:   `memcached server "bad:11211": lookup bad: no such host`,
			wantCalls: 1,
		},
		{
			name:      "name resolves to nothing",
			servers:   []string{"empty:11211"},
			answers:   map[string]fakeAnswer{"empty": {}},
			wantErr:   `memcached server "empty:11211": resolved to no address`,
			wantCalls: 1,
		},
		{name: "no servers", wantErr: "no servers given"},
		{name: "missing port", servers: []string{"mc"}, wantErr: `memcached server "mc": want host:port`},
		{name: "bad port", servers: []string{"mc:x"}, wantErr: `memcached server "mc:x": port must be`},
		{name: "empty host", servers: []string{":11211"}, wantErr: "empty host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakeResolver{answers: tt.answers}
			m, err := NewMemcached(context.Background(), MemcachedOptions{Servers: tt.servers, Resolver: r, ClusterID: testClusterID, Keys: testKeys(t, 1)})
			if r.callCount() != tt.wantCalls {
				t.Errorf("resolver calls = %d, want %d", r.callCount(), tt.wantCalls)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if got := m.addrs(); !slices.Equal(got, tt.want) {
				t.Errorf("addrs = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMemcachedRefresh(t *testing.T) {
	tests := []struct {
		name          string
		refresh       map[string]fakeAnswer // answers at the refresh
		want          []string
		wantDNSErrors float64
	}{
		{
			name:    "new addresses replace the list",
			refresh: map[string]fakeAnswer{"a": {addrs: []string{"10.0.0.9"}}, "b": {addrs: []string{"10.0.1.1", "10.0.1.2"}}},
			want:    []string{"10.0.0.9:11211", "10.0.1.1:11211", "10.0.1.2:11211"},
		},
		{
			name:          "failure keeps the last good list",
			refresh:       map[string]fakeAnswer{"a": {err: errors.New("i/o timeout")}, "b": {err: errors.New("SERVFAIL")}},
			want:          []string{"10.0.0.1:11211", "10.0.1.1:11211"},
			wantDNSErrors: 2,
		},
		{
			name:          "no address keeps the last good list",
			refresh:       map[string]fakeAnswer{"a": {}, "b": {addrs: []string{"not-an-ip"}}},
			want:          []string{"10.0.0.1:11211", "10.0.1.1:11211"},
			wantDNSErrors: 2,
		},
		{
			name:          "one name fails, the other changes",
			refresh:       map[string]fakeAnswer{"a": {err: errors.New("SERVFAIL")}, "b": {addrs: []string{"10.0.1.5"}}},
			want:          []string{"10.0.0.1:11211", "10.0.1.5:11211"},
			wantDNSErrors: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			r := &fakeResolver{answers: map[string]fakeAnswer{
				"a": {addrs: []string{"10.0.0.1"}},
				"b": {addrs: []string{"10.0.1.1"}},
			}}
			m, err := NewMemcached(context.Background(), MemcachedOptions{
				Servers: []string{"a:11211", "b:11211"}, Resolver: r, Metrics: NewMetrics(reg),
				ClusterID: testClusterID, Keys: testKeys(t, 1),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for host, a := range tt.refresh {
				r.set(host, a)
			}
			m.resolve(context.Background())
			if got := m.addrs(); !slices.Equal(got, tt.want) {
				t.Errorf("addrs = %v, want %v", got, tt.want)
			}
			if got := metricValue(t, reg, "sar_bridge_memcached_servers", nil); got != float64(len(tt.want)) {
				t.Errorf("servers gauge = %v, want %d", got, len(tt.want))
			}
			if got := metricValue(t, reg, "sar_bridge_memcached_dns_refresh_errors_total", nil); got != tt.wantDNSErrors {
				t.Errorf("dns errors = %v, want %v", got, tt.wantDNSErrors)
			}
		})
	}
}

// The refresh goroutine picks changes up by itself and stops with Close.
func TestMemcachedRefreshLoop(t *testing.T) {
	r := &fakeResolver{answers: map[string]fakeAnswer{"mc": {addrs: []string{"10.0.0.1"}}}}
	logs := &logRecorder{}
	m, err := NewMemcached(context.Background(), MemcachedOptions{
		Servers: []string{"mc:11211"}, Resolver: r, RefreshInterval: 5 * time.Millisecond, Logger: logs,
		ClusterID: testClusterID, Keys: testKeys(t, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.set("mc", fakeAnswer{err: errors.New("SERVFAIL")})
	waitFor(t, func() bool { return r.callCount() >= 5 })
	if got := m.addrs(); !slices.Equal(got, []string{"10.0.0.1:11211"}) {
		t.Errorf("after failures addrs = %v", got)
	}
	// Several failed refreshes, one log line: the rest are rate limited.
	if n := logs.count("keeping its last addresses"); n != 1 {
		t.Errorf("logged %d dns failures, want 1", n)
	}
	r.set("mc", fakeAnswer{addrs: []string{"10.0.0.2", "10.0.0.3"}})
	waitFor(t, func() bool { return slices.Equal(m.addrs(), []string{"10.0.0.2:11211", "10.0.0.3:11211"}) })
	m.Close()
	calls := r.callCount()
	time.Sleep(30 * time.Millisecond)
	if r.callCount() != calls {
		t.Error("refresh still running after Close")
	}
}

// Cancelling the constructor's context also stops the refresh.
func TestMemcachedRefreshStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &fakeResolver{answers: map[string]fakeAnswer{"mc": {addrs: []string{"10.0.0.1"}}}}
	m, err := NewMemcached(ctx, MemcachedOptions{
		Servers: []string{"mc:11211"}, Resolver: r, RefreshInterval: time.Millisecond, ClusterID: testClusterID, Keys: testKeys(t, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-m.done:
	case <-time.After(5 * time.Second):
		t.Fatal("refresh did not stop with the context")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Log(keyvals ...any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprint(keyvals...))
	return nil
}

func (l *logRecorder) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

var _ log.Logger = (*logRecorder)(nil)

func TestExpirationSeconds(t *testing.T) {
	tests := []struct {
		ttl  time.Duration
		want int32
	}{
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Millisecond, 2},
		{5 * time.Minute, 300},
		{30 * 24 * time.Hour, 2592000},
		{365 * 24 * time.Hour, 2592000}, // above 30 days memcached would read a timestamp
	}
	for _, tt := range tests {
		if got := expirationSeconds(tt.ttl); got != tt.want {
			t.Errorf("expirationSeconds(%v) = %d, want %d", tt.ttl, got, tt.want)
		}
	}
}

func TestLimitedLogger(t *testing.T) {
	logs := &logRecorder{}
	l := newLimitedLogger(logs, 50*time.Millisecond)
	steps := []struct {
		kind   string
		sleep  time.Duration
		logged bool
	}{
		{kind: "get", logged: true},
		{kind: "get", logged: false},
		{kind: "get", logged: false},
		{kind: "set", logged: true}, // kinds are limited apart
		{kind: "get", sleep: 60 * time.Millisecond, logged: true},
	}
	for i, s := range steps {
		time.Sleep(s.sleep)
		if got := l.warn(s.kind, "msg", s.kind); got != s.logged {
			t.Fatalf("step %d: logged = %v, want %v", i, got, s.logged)
		}
	}
	if n := logs.count("suppressed2"); n != 1 {
		t.Errorf("want the last line to count 2 suppressed lines: %q", logs.lines)
	}
}

func TestMetricsNilSafe(t *testing.T) {
	var m *Metrics
	m.observeGet(tierMemory, resultHit, time.Now())
	m.observeSet(tierMemcached, errors.New("x"))
	m.setServers(1)
	m.dnsError()
}
