package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/prometheus/client_golang/prometheus"
)

// memcachedProcess is a real memcached on a loopback port, stopped at the end of the test.
type memcachedProcess struct {
	tb     testing.TB
	bin    string
	port   int
	cmd    *exec.Cmd
	exited chan error
}

// startMemcached starts memcached, or skips when it is not installed, unless CI is set:
// there a missing memcached must not pass silently.
func startMemcached(tb testing.TB) *memcachedProcess {
	tb.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		if os.Getenv("CI") == "" {
			tb.Skip("memcached not installed (apt-get install memcached); skipping tests against a real server")
		}
		tb.Fatalf("CI is set but memcached is not installed: %v", err)
	}
	p := &memcachedProcess{tb: tb, bin: bin}
	// A free port can be taken between probe and bind: try a few.
	for attempt := 0; ; attempt++ {
		p.port = freePort(tb)
		err := p.start()
		if err == nil {
			break
		}
		if attempt == 3 {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(p.stop)
	return p
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (p *memcachedProcess) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// start runs memcached on p.port and waits until it accepts connections.
func (p *memcachedProcess) start() error {
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(p.port), "-U", "0", "-m", "16"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses to run as root without -u
	}
	cmd := exec.Command(p.bin, args...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting memcached: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("memcached on port %d exited: %v: %s", p.port, err, stderr.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", p.addr(), 100*time.Millisecond); err == nil {
			c.Close()
			p.cmd, p.exited = cmd, exited
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("memcached on port %d did not listen within 5s: %s", p.port, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// restart starts memcached again on the same port.
func (p *memcachedProcess) restart() {
	p.tb.Helper()
	if err := p.start(); err != nil {
		p.tb.Fatal(err)
	}
}

// stop kills memcached (as a crash would) and waits for it to exit.
func (p *memcachedProcess) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

const testClusterID = "0f6d7a2e-test-cluster"

func newTestMemcached(tb testing.TB, addr string, timeout time.Duration, metrics *Metrics) *Memcached {
	tb.Helper()
	return newTestMemcachedWith(tb, MemcachedOptions{
		Servers: []string{addr}, Timeout: timeout, Metrics: metrics, Logger: &logRecorder{},
		ClusterID: testClusterID, Keys: testKeys(tb, 1),
	})
}

func newTestMemcachedWith(tb testing.TB, opts MemcachedOptions) *Memcached {
	tb.Helper()
	m, err := NewMemcached(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

func TestMemcachedServerSetGet(t *testing.T) {
	p := startMemcached(t)
	m := newTestMemcached(t, p.addr(), time.Second, nil)
	ctx := context.Background()

	tests := []struct {
		name  string
		key   string
		value []byte
		ttl   time.Duration
		sleep time.Duration
		want  bool
	}{
		{name: "hit", key: "sarb1-" + strings.Repeat("0a", 32), value: []byte(`{"v":1,"a":true}`), ttl: time.Minute, want: true},
		{name: "empty value", key: "empty", value: []byte{}, ttl: time.Minute, want: true},
		{name: "long key", key: strings.Repeat("x", 400), value: []byte("long"), ttl: time.Minute, want: true},
		{name: "key with spaces", key: "a key\nwith spaces", value: []byte("spaces"), ttl: time.Minute, want: true},
		{name: "zero ttl stores nothing", key: "zero", value: []byte("v"), ttl: 0, want: false},
		{name: "sub-second ttl expires exactly", key: "short", value: []byte("v"), ttl: 300 * time.Millisecond, sleep: 400 * time.Millisecond, want: false},
		{name: "expired", key: "expired", value: []byte("v"), ttl: time.Second, sleep: 1100 * time.Millisecond, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := m.Set(ctx, tt.key, tt.value, tt.ttl); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tt.sleep)
			v, remaining, ok, err := m.GetWithTTL(ctx, tt.key)
			if err != nil || ok != tt.want {
				t.Fatalf("GetWithTTL = %q, %v, %v, %v; want hit=%v", v, remaining, ok, err, tt.want)
			}
			if ok && (!bytes.Equal(v, tt.value) || remaining <= 0 || remaining > tt.ttl) {
				t.Errorf("GetWithTTL = %q, %v; want %q with 0 < remaining <= %v", v, remaining, tt.value, tt.ttl)
			}
		})
	}
	t.Run("absent key", func(t *testing.T) {
		if v, ok, err := m.Get(ctx, "absent"); ok || err != nil {
			t.Fatalf("Get = %q, %v, %v; want a miss", v, ok, err)
		}
	})
}

// memcached drops the entry itself (its Expiration is set), not only our header check.
func TestMemcachedServerExpiration(t *testing.T) {
	p := startMemcached(t)
	m := newTestMemcached(t, p.addr(), time.Second, nil)
	raw := memcache.New(p.addr())
	defer raw.Close()
	if err := m.Set(context.Background(), "k", []byte("v"), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Get(MemcachedKey(testClusterID, "k")); err != nil {
		t.Fatalf("raw Get = %v; want the entry", err)
	}
	// memcached's clock ticks in whole seconds: allow one more.
	time.Sleep(2100 * time.Millisecond)
	if _, err := raw.Get(MemcachedKey(testClusterID, "k")); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("raw Get after the ttl = %v; want a miss", err)
	}
}

// A value another writer (or an older version) left is a miss, and Set replaces it.
func TestMemcachedServerForeignValue(t *testing.T) {
	p := startMemcached(t)
	reg := prometheus.NewRegistry()
	m := newTestMemcached(t, p.addr(), time.Second, NewMetrics(reg))
	ctx := context.Background()
	raw := memcache.New(p.addr())
	defer raw.Close()

	now := time.Now()
	keys := testKeys(t, 1)
	sealed := func(key string, writtenAt, expiry time.Time) []byte {
		return SealValue(keys, testClusterID, key, []byte("allowed"), writtenAt, expiry)
	}
	foreign := []struct {
		name   string
		b      func(key string) []byte
		forged bool
	}{
		{name: "raw", b: func(string) []byte { return []byte(`{"v":1,"a":true}`) }, forged: true},
		{name: "truncated", b: func(k string) []byte { b := sealed(k, now, now.Add(time.Minute)); return b[:len(b)-2] }, forged: true},
		{name: "version 1", b: func(k string) []byte { return append([]byte{1}, sealed(k, now, now.Add(time.Minute))[1:]...) }, forged: true},
		{name: "unsigned", b: func(k string) []byte {
			return SealValue(nil, testClusterID, k, []byte("allowed"), now, now.Add(time.Minute))
		}, forged: true},
		{name: "sealed for another key", b: func(string) []byte { return sealed("k", now, now.Add(time.Minute)) }, forged: true},
		{name: "expired", b: func(k string) []byte { return sealed(k, now.Add(-time.Minute), now.Add(-time.Second)) }},
	}
	wantForged := 0.0
	for _, tt := range foreign {
		t.Run(tt.name, func(t *testing.T) {
			key := "foreign-" + strings.ReplaceAll(tt.name, " ", "-")
			if err := raw.Set(&memcache.Item{Key: MemcachedKey(testClusterID, key), Value: tt.b(key), Expiration: 60}); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := m.Get(ctx, key); ok || err != nil {
				t.Fatalf("Get = %q, %v, %v; want a miss", v, ok, err)
			}
			if tt.forged {
				wantForged++
			}
			if got := metricValue(t, reg, "sar_bridge_cache_requests_total", map[string]string{"tier": "memcached", "result": "forged"}); got != wantForged {
				t.Errorf("forged = %v, want %v", got, wantForged)
			}
			if err := m.Set(ctx, key, []byte("new"), time.Minute); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := m.Get(ctx, key); !ok || err != nil || string(v) != "new" {
				t.Fatalf("Get after Set = %q, %v, %v", v, ok, err)
			}
		})
	}
}

// Forged values written straight into memcached: misses, counted, logged once per
// interval, never an error; the genuine value written after them is a hit again.
func TestMemcachedServerForged(t *testing.T) {
	p := startMemcached(t)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	m := newTestMemcached(t, p.addr(), time.Second, metrics)
	logs := m.logger.(*logRecorder)
	tiered := NewTiered(NewMemory(16), time.Minute, m, metrics)
	raw := memcache.New(p.addr())
	defer raw.Close()
	ctx := context.Background()
	now := time.Now()
	allowed := []byte(`{"v":1,"a":true}`)

	const forgeries = 5
	for i := 0; i < forgeries; i++ {
		key := fmt.Sprintf("sarb1-forged-%d", i)
		// The attacker knows everything but the key.
		forged := SealValue(testKeys(t, 99), testClusterID, key, allowed, now, now.Add(time.Hour))
		if err := raw.Set(&memcache.Item{Key: MemcachedKey(testClusterID, key), Value: forged, Expiration: 3600}); err != nil {
			t.Fatal(err)
		}
		if v, ok, err := tiered.Get(ctx, key); ok || err != nil {
			t.Fatalf("Get of forgery %d = %q, %v, %v; want a miss without error", i, v, ok, err)
		}
	}
	forged := map[string]string{"tier": "memcached", "result": "forged"}
	if got := metricValue(t, reg, "sar_bridge_cache_requests_total", forged); got != forgeries {
		t.Errorf("forged = %v, want %d", got, forgeries)
	}
	if got := metricValue(t, reg, "sar_bridge_cache_requests_total", map[string]string{"tier": "memcached", "result": "hit"}); got != 0 {
		t.Errorf("memcached hits = %v, want 0", got)
	}
	if n := logs.count("failed HMAC verification"); n != 1 {
		t.Errorf("logged %d forgeries, want 1 (rate limited): %q", n, logs.lines)
	}
	// The live review's Set replaces the forgery.
	if err := tiered.Set(ctx, "sarb1-forged-0", []byte(`{"v":1,"d":true}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	fresh := NewTiered(NewMemory(16), time.Minute, m, metrics) // an empty front: read memcached
	if v, ok, err := fresh.Get(ctx, "sarb1-forged-0"); !ok || err != nil || string(v) != `{"v":1,"d":true}` {
		t.Fatalf("Get after Set = %q, %v, %v; want the genuine value", v, ok, err)
	}
}

// Two clusters' bridges sharing one memcached, even with the same HMAC key, never
// answer from each other's entries.
func TestMemcachedServerClusterScope(t *testing.T) {
	p := startMemcached(t)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	newFor := func(cluster string) *Memcached {
		return newTestMemcachedWith(t, MemcachedOptions{
			Servers: []string{p.addr()}, Timeout: time.Second, Logger: &logRecorder{}, Metrics: metrics,
			ClusterID: cluster, Keys: testKeys(t, 1),
		})
	}
	a, a2, b := newFor("cluster-a"), newFor("cluster-a"), newFor("cluster-b")
	ctx := context.Background()
	const key = "sarb1-same-spec"
	if err := a.Set(ctx, key, []byte("allowed in a"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := b.Get(ctx, key); ok || err != nil {
		t.Fatalf("cluster b Get = %q, %v, %v; want a miss", v, ok, err)
	}
	if v, ok, err := a2.Get(ctx, key); !ok || err != nil || string(v) != "allowed in a" {
		t.Fatalf("another replica of cluster a: Get = %q, %v, %v; want a hit", v, ok, err)
	}
	if err := b.Set(ctx, key, []byte("denied in b"), time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		m    *Memcached
		want string
	}{{"a", a, "allowed in a"}, {"b", b, "denied in b"}} {
		if v, ok, err := c.m.Get(ctx, key); !ok || err != nil || string(v) != c.want {
			t.Errorf("cluster %s: Get = %q, %v, %v; want %q", c.name, v, ok, err, c.want)
		}
	}
	if got := metricValue(t, reg, "sar_bridge_cache_requests_total", map[string]string{"tier": "memcached", "result": "forged"}); got != 0 {
		t.Errorf("forged = %v, want 0: the clusters' keys differ, they never read each other's values", got)
	}
}

func TestTieredServer(t *testing.T) {
	p := startMemcached(t)
	ctx := context.Background()

	t.Run("front copy of a back hit expires with the back entry", func(t *testing.T) {
		back := newTestMemcached(t, p.addr(), time.Second, nil)
		front := NewMemory(16)
		tiered := NewTiered(front, time.Hour, back, nil)
		// Stored by another replica: this one's front does not have it.
		if err := back.Set(ctx, "k1", []byte("v"), 1500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if _, ok, err := tiered.Get(ctx, "k1"); !ok || err != nil {
			t.Fatalf("Get = %v, %v; want a hit", ok, err)
		}
		if _, ok, _ := front.Get(ctx, "k1"); !ok {
			t.Fatal("back hit not copied to front")
		}
		// About 1s was left in back: the front copy must be gone after it, not after an hour.
		time.Sleep(1100 * time.Millisecond)
		if _, ok, _ := front.Get(ctx, "k1"); ok {
			t.Error("front copy outlived the back entry")
		}
		if _, ok, err := tiered.Get(ctx, "k1"); ok || err != nil {
			t.Errorf("Get = %v, %v; want a miss", ok, err)
		}
	})

	t.Run("Set bounds front by the entry ttl", func(t *testing.T) {
		back := newTestMemcached(t, p.addr(), time.Second, nil)
		front := NewMemory(16)
		tiered := NewTiered(front, time.Hour, back, nil)
		if err := tiered.Set(ctx, "k2", []byte("v"), time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
		if _, ok, _ := front.Get(ctx, "k2"); ok {
			t.Error("front copy outlived the entry ttl")
		}
	})

	// Written by a replica with a longer TTL (or stamped a year ahead): this replica
	// keeps it no longer than its own MaxAge, in memcached and in front.
	t.Run("a year-away expiry is capped at this replica's TTL", func(t *testing.T) {
		const ownTTL = 2 * time.Second
		keys := testKeys(t, 1)
		back := newTestMemcachedWith(t, MemcachedOptions{
			Servers: []string{p.addr()}, Timeout: time.Second, Logger: &logRecorder{},
			ClusterID: testClusterID, Keys: keys, MaxAge: func([]byte) time.Duration { return ownTTL },
		})
		front := NewMemory(16)
		tiered := NewTiered(front, time.Hour, back, nil)
		raw := memcache.New(p.addr())
		defer raw.Close()
		now := time.Now()
		for _, e := range []struct {
			key     string
			age     time.Duration
			wantHit bool
		}{{"k-old", ownTTL + time.Second, false}, {"k-young", ownTTL - time.Second, true}} {
			b := SealValue(keys, testClusterID, e.key, []byte("v"), now.Add(-e.age), now.Add(365*24*time.Hour))
			if err := raw.Set(&memcache.Item{Key: MemcachedKey(testClusterID, e.key), Value: b, Expiration: 3600}); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := tiered.Get(ctx, e.key); ok != e.wantHit || err != nil {
				t.Fatalf("%s: Get = %v, %v; want hit = %v", e.key, ok, err, e.wantHit)
			}
		}
		// About 1s was left of k-young's own TTL: its front copy ends with it.
		time.Sleep(1100 * time.Millisecond)
		if _, ok, _ := front.Get(ctx, "k-young"); ok {
			t.Error("front copy outlived this replica's TTL")
		}
		if _, ok, err := tiered.Get(ctx, "k-young"); ok || err != nil {
			t.Errorf("Get after this replica's TTL = %v, %v; want a miss", ok, err)
		}
	})

	t.Run("front ttl shorter than back", func(t *testing.T) {
		back := newTestMemcached(t, p.addr(), time.Second, nil)
		front := NewMemory(16)
		tiered := NewTiered(front, 200*time.Millisecond, back, nil)
		if err := tiered.Set(ctx, "k3", []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if _, ok, _ := front.Get(ctx, "k3"); ok {
			t.Error("front copy outlived frontTTL")
		}
		if v, ok, err := tiered.Get(ctx, "k3"); !ok || err != nil || string(v) != "v" {
			t.Errorf("Get = %q, %v, %v; want a back hit", v, ok, err)
		}
	})
}

// An unreachable memcached turns into errors (never hits) within the timeout, counted
// by the metrics; when it comes back, the same client works again.
func TestMemcachedServerDownAndBack(t *testing.T) {
	p := startMemcached(t)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	const timeout = 200 * time.Millisecond
	back := newTestMemcached(t, p.addr(), timeout, metrics)
	logs := back.logger.(*logRecorder)
	tiered := NewTiered(NewMemory(16), time.Minute, back, metrics)
	ctx := context.Background()

	if err := tiered.Set(ctx, "hot", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := back.Get(ctx, "hot"); !ok || err != nil {
		t.Fatalf("Get = %v, %v; want a hit", ok, err)
	}

	p.stop()
	ops := []struct {
		name string
		op   func() error
	}{
		{"get", func() error {
			v, ok, err := back.Get(ctx, "hot")
			if ok {
				return fmt.Errorf("hit %q with memcached down", v)
			}
			return err
		}},
		{"set", func() error { return back.Set(ctx, "k", []byte("v"), time.Minute) }},
		{"tiered get of a cold key", func() error {
			_, ok, err := tiered.Get(ctx, "cold")
			if ok {
				return errors.New("hit with memcached down")
			}
			return err
		}},
		{"tiered set", func() error { return tiered.Set(ctx, "k", []byte("v"), time.Minute) }},
	}
	for _, o := range ops {
		for i := 0; i < 3; i++ {
			start := time.Now()
			err := o.op()
			if took := time.Since(start); took > 2*timeout {
				t.Errorf("%s took %v with memcached down; want at most 2x the %v timeout", o.name, took, timeout)
			}
			if err == nil {
				t.Errorf("%s: no error with memcached down", o.name)
			}
		}
	}
	// The front still answers hot keys, without a round trip.
	if v, ok, err := tiered.Get(ctx, "hot"); !ok || err != nil || string(v) != "v" {
		t.Errorf("tiered Get of a hot key = %q, %v, %v; want a front hit", v, ok, err)
	}
	if got := metricValue(t, reg, "sar_bridge_cache_requests_total", map[string]string{"tier": "memcached", "result": "error"}); got != 6 {
		t.Errorf("memcached get errors = %v, want 6", got)
	}
	if got := metricValue(t, reg, "sar_bridge_cache_set_errors_total", map[string]string{"tier": "memcached"}); got != 6 {
		t.Errorf("memcached set errors = %v, want 6", got)
	}
	if got := metricValue(t, reg, "sar_bridge_cache_requests_total", map[string]string{"tier": "memory", "result": "hit"}); got != 1 {
		t.Errorf("memory hits = %v, want 1", got)
	}
	if n := logs.count("reviews are asked live"); n != 2 {
		t.Errorf("logged %d failures, want 2 (one per kind, rate limited): %q", n, logs.lines)
	}

	p.restart()
	if err := back.Set(ctx, "k", []byte("back"), time.Minute); err != nil {
		t.Fatalf("Set after restart: %v", err)
	}
	if v, ok, err := back.Get(ctx, "k"); !ok || err != nil || string(v) != "back" {
		t.Fatalf("Get after restart = %q, %v, %v", v, ok, err)
	}
}

// A restart while the client is idle leaves dead pooled connections: the first
// operation afterwards must not fail because of them.
func TestMemcachedServerRestartWhileIdle(t *testing.T) {
	p := startMemcached(t)
	back := newTestMemcached(t, p.addr(), time.Second, nil)
	ctx := context.Background()
	// Fill the idle pool with several connections.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = back.Set(ctx, fmt.Sprint("k", i), []byte("v"), time.Minute)
		}()
	}
	wg.Wait()

	p.stop()
	p.restart()
	for i := 0; i < 8; i++ {
		if err := back.Set(ctx, "k", []byte("v"), time.Minute); err != nil {
			t.Fatalf("Set %d after restart: %v", i, err)
		}
		if _, ok, err := back.Get(ctx, "k"); !ok || err != nil {
			t.Fatalf("Get %d after restart = %v, %v", i, ok, err)
		}
	}
}

// A server that accepts but never answers costs one Timeout per operation, not more.
func TestMemcachedUnresponsiveServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, silent
		}
	}()
	const timeout = 150 * time.Millisecond
	m := newTestMemcached(t, l.Addr().String(), timeout, nil)
	start := time.Now()
	_, ok, err := m.Get(context.Background(), "k")
	took := time.Since(start)
	if ok || err == nil {
		t.Fatalf("Get = %v, %v; want an error", ok, err)
	}
	if took < timeout || took > 2*timeout {
		t.Errorf("Get took %v; want about the %v timeout", took, timeout)
	}
	if !strings.Contains(err.Error(), "memcached get") {
		t.Errorf("error %q lacks context", err)
	}
}

func BenchmarkGetHit(b *testing.B) {
	ctx := context.Background()
	keys := make([]string, 256)
	for i := range keys {
		keys[i] = fmt.Sprintf("sarb1-%064x", i)
	}
	value := []byte(`{"v":1,"a":true,"r":"RBAC: allowed by ClusterRoleBinding \"x\""}`)
	run := func(b *testing.B, c Cache) {
		for _, k := range keys {
			if err := c.Set(ctx, k, value, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, ok, err := c.Get(ctx, keys[i%len(keys)]); !ok || err != nil {
				b.Fatalf("Get = %v, %v", ok, err)
			}
		}
	}
	b.Run("memory", func(b *testing.B) { run(b, NewMemory(1024)) })
	// Signed and unsigned against one server in one run: the ratio is the cost of
	// signing and verifying a hit.
	p := startMemcached(b)
	b.Run("memcached", func(b *testing.B) {
		run(b, newTestMemcached(b, p.addr(), time.Second, NewMetrics(nil)))
	})
	b.Run("memcached-unsigned", func(b *testing.B) {
		run(b, newTestMemcachedWith(b, MemcachedOptions{
			Servers: []string{p.addr()}, Timeout: time.Second, Metrics: NewMetrics(nil), Logger: &logRecorder{},
			ClusterID: testClusterID + "-unsigned", InsecureUnsigned: true,
		}))
	})
	b.Run("tiered", func(b *testing.B) {
		m := NewMetrics(nil)
		run(b, NewTiered(NewMemory(1024), time.Hour, newTestMemcached(b, p.addr(), time.Second, m), m))
	})
}

// BenchmarkOpen is the verification of a hit alone, without the round trip.
func BenchmarkOpen(b *testing.B) {
	value := []byte(`{"v":1,"a":true,"r":"RBAC: allowed by ClusterRoleBinding \"x\""}`)
	mkey := MemcachedKey(testClusterID, "sarb1-bench")
	now := time.Now()
	for _, c := range []struct {
		name string
		keys *Keyring
	}{{"signed", testKeys(b, 1)}, {"signed-3-keys-last", testKeys(b, 2, 3, 1)}, {"unsigned", nil}} {
		b.Run(c.name, func(b *testing.B) {
			writer := c.keys
			if writer != nil {
				writer = testKeys(b, 1)
			}
			stored := seal(writer, testClusterID, mkey, value, stamp{now, now.Add(time.Hour)})
			m := &Memcached{clusterID: testClusterID, maxAge: func([]byte) time.Duration { return time.Hour }}
			if c.keys != nil {
				m.keys = c.keys
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, r := m.open(mkey, stored, now); r != resultHit {
					b.Fatalf("result %d", r)
				}
			}
		})
	}
}
