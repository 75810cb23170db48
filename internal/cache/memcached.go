package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"golang.org/x/time/rate"
)

// Resolver looks up the addresses of a host name. *net.Resolver satisfies it.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// MemcachedOptions configures a Memcached.
type MemcachedOptions struct {
	// Servers are host:port addresses; a DNS name stands for every address it resolves
	// to (a headless Service, for instance).
	Servers []string
	// Timeout bounds connecting and each exchange with a server; 0 means gomemcache's
	// default (500ms).
	Timeout time.Duration
	// MaxIdleConns is the idle connections kept per address; 0 means 16. Keep it above
	// the usual number of concurrent look-ups, or connections are opened per request.
	MaxIdleConns int
	// RefreshInterval is how often names are resolved again; 0 resolves them once.
	RefreshInterval time.Duration
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver Resolver
	Logger   log.Logger
	Metrics  *Metrics

	// ClusterID scopes every key to one cluster (required): bridges of different
	// clusters sharing a memcached compute different keys and verify different seals.
	ClusterID string
	// Keys sign every value and verify every hit; a value they did not sign is a miss,
	// counted as result="forged". Required unless InsecureUnsigned.
	Keys KeySource
	// InsecureUnsigned stores values with a checksum only: anyone who can write to
	// memcached can then forge answers.
	InsecureUnsigned bool
	// MaxAge returns how long this replica keeps value (its own TTL for that outcome):
	// an older entry is a miss whatever expiry its writer gave it. Nil: no cap.
	MaxAge func(value []byte) time.Duration
}

const (
	defaultMaxIdleConns = 16
	dnsTimeout          = 5 * time.Second
	// memcached reads an expiration above 30 days as a Unix timestamp.
	maxMemcachedTTL = 30 * 24 * time.Hour
	// maxClockSkew is how far in the future a write time may be: further, the writer's
	// clock is off and the age of its entry unknown, so it is a miss.
	maxClockSkew = time.Second
)

// Memcached is a Cache shared by replicas, kept in one or more memcached servers.
// Errors (server down, timeout, server error) are returned, never reported as a hit.
type Memcached struct {
	client   *memcache.Client
	servers  *memcache.ServerList
	specs    []serverSpec
	resolver Resolver
	metrics  *Metrics
	logger   log.Logger
	limited  *limitedLogger

	clusterID string
	keys      KeySource // nil: unsigned
	maxAge    func([]byte) time.Duration

	mu       sync.Mutex          // guards lastGood and current
	lastGood map[string][]string // server spec -> its last successful resolution
	current  []string            // addresses given to servers, sorted

	stop context.CancelFunc
	done chan struct{}
}

type serverSpec struct {
	raw, host, port string
	ip              bool
}

// NewMemcached resolves opts.Servers and, when opts.RefreshInterval > 0, resolves them
// again every interval until ctx ends or Close is called. It fails when no server
// resolves; servers that fail are logged and retried at each refresh.
func NewMemcached(ctx context.Context, opts MemcachedOptions) (*Memcached, error) {
	if len(opts.Servers) == 0 {
		return nil, errors.New("memcached: no servers given")
	}
	specs := make([]serverSpec, 0, len(opts.Servers))
	for _, s := range opts.Servers {
		spec, err := parseServer(s)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	if err := checkSealing(opts); err != nil {
		return nil, err
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Logger == nil {
		opts.Logger = log.NewNopLogger()
	}
	if opts.MaxIdleConns <= 0 {
		opts.MaxIdleConns = defaultMaxIdleConns
	}
	servers := new(memcache.ServerList)
	client := memcache.NewFromSelector(servers)
	client.Timeout = opts.Timeout
	client.MaxIdleConns = opts.MaxIdleConns
	m := &Memcached{
		client:   client,
		servers:  servers,
		specs:    specs,
		resolver: opts.Resolver,
		metrics:  opts.Metrics,
		logger:   opts.Logger,
		limited:  newLimitedLogger(opts.Logger, defaultLogEvery),
		lastGood: make(map[string][]string),
		done:     make(chan struct{}),

		clusterID: opts.ClusterID,
		keys:      opts.Keys,
		maxAge:    opts.MaxAge,
	}

	errs := m.resolve(ctx)
	if len(m.addrs()) == 0 {
		return nil, fmt.Errorf("memcached: no server could be resolved: %w", errors.Join(errs...))
	}
	for _, err := range errs {
		level.Warn(m.logger).Log("msg", "memcached server not resolved; it is retried at each refresh", "err", err)
	}

	ctx, m.stop = context.WithCancel(ctx)
	if opts.RefreshInterval <= 0 {
		close(m.done)
		return m, nil
	}
	go m.refreshLoop(ctx, opts.RefreshInterval)
	return m, nil
}

// checkSealing refuses to share answers that anyone could forge, unless told to.
func checkSealing(opts MemcachedOptions) error {
	switch {
	case opts.ClusterID == "":
		return errors.New("memcached: no cluster identity to scope keys with")
	case opts.Keys != nil && opts.InsecureUnsigned:
		return errors.New("memcached: HMAC keys and insecure unsigned values exclude each other")
	case opts.Keys == nil && !opts.InsecureUnsigned:
		return errors.New("memcached: no HMAC keys: unsigned values can be forged by anyone who can write to memcached")
	case opts.Keys != nil && opts.Keys.Current() == nil:
		return errors.New("memcached: empty HMAC key source")
	}
	return nil
}

func parseServer(s string) (serverSpec, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return serverSpec{}, fmt.Errorf("memcached server %q: want host:port: %w", s, err)
	}
	if host == "" {
		return serverSpec{}, fmt.Errorf("memcached server %q: empty host", s)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return serverSpec{}, fmt.Errorf("memcached server %q: port must be a number from 1 to 65535", s)
	}
	_, err = netip.ParseAddr(host)
	return serverSpec{raw: s, host: host, port: port, ip: err == nil}, nil
}

// Close stops the refresh and closes idle connections.
func (m *Memcached) Close() error {
	m.stop()
	<-m.done
	return m.client.Close()
}

func (m *Memcached) refreshLoop(ctx context.Context, every time.Duration) {
	defer close(m.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, err := range m.resolve(ctx) {
				if ctx.Err() != nil {
					return
				}
				m.limited.warn("dns", "msg", "memcached server not resolved; keeping its last addresses", "err", err)
			}
		}
	}
}

// resolve looks every server up and installs the union of their addresses. A server
// that fails or resolves to nothing keeps its last good addresses, so a DNS hiccup
// never empties the list. It returns the lookups that failed.
func (m *Memcached) resolve(ctx context.Context) []error {
	var errs []error
	found := make(map[string][]string, len(m.specs))
	for _, s := range m.specs {
		addrs, err := m.lookup(ctx, s)
		if err != nil && ctx.Err() != nil {
			// Shutting down (or the caller gave up): not a DNS failure, change nothing.
			return []error{fmt.Errorf("memcached server %q: %w", s.raw, ctx.Err())}
		}
		if err != nil {
			m.metrics.dnsError()
			errs = append(errs, err)
			continue
		}
		found[s.raw] = addrs
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range found {
		m.lastGood[k] = v
	}
	var all []string
	for _, v := range m.lastGood {
		all = append(all, v...)
	}
	// Every replica must order the list alike: the server of a key is picked by index.
	slices.Sort(all)
	all = slices.Compact(all)
	if len(all) == 0 || slices.Equal(all, m.current) {
		return errs
	}
	if err := m.servers.SetServers(all...); err != nil {
		// Addresses are IP literals, so this is not expected; keep the old list.
		return append(errs, fmt.Errorf("memcached: setting servers %v: %w", all, err))
	}
	if m.current != nil {
		level.Info(m.logger).Log("msg", "memcached servers changed", "old", strings.Join(m.current, ","), "new", strings.Join(all, ","))
		// Drop idle connections, including those to addresses no longer listed.
		_ = m.client.Close()
	}
	m.current = all
	m.metrics.setServers(len(all))
	return errs
}

func (m *Memcached) lookup(ctx context.Context, s serverSpec) ([]string, error) {
	if s.ip {
		return []string{net.JoinHostPort(s.host, s.port)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	hosts, err := m.resolver.LookupHost(ctx, s.host)
	if err != nil {
		return nil, fmt.Errorf("memcached server %q: %w", s.raw, err)
	}
	// A dual-stack name is one host twice: use one family, or every key would hash
	// between two addresses of which one may not listen (localhost on 127.0.0.1 only).
	var v4, v6 []string
	for _, h := range hosts {
		ip, err := netip.ParseAddr(h)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() {
			v4 = append(v4, net.JoinHostPort(ip.String(), s.port))
		} else {
			v6 = append(v6, net.JoinHostPort(ip.String(), s.port))
		}
	}
	if len(v4) > 0 {
		return v4, nil
	}
	if len(v6) > 0 {
		return v6, nil
	}
	return nil, fmt.Errorf("memcached server %q: resolved to no address", s.raw)
}

// addrs returns the addresses in use.
func (m *Memcached) addrs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.current)
}

// Get returns the value under key if it has not expired.
func (m *Memcached) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, _, ok, err := m.GetWithTTL(ctx, key)
	return v, ok, err
}

// GetWithTTL is Get that also returns how long the value has left to live: the least
// of what its writer allowed and what this replica's MaxAge leaves.
func (m *Memcached) GetWithTTL(ctx context.Context, key string) (value []byte, remaining time.Duration, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, false, fmt.Errorf("memcached get: %w", err)
	}
	start := time.Now()
	mkey := MemcachedKey(m.clusterID, key)
	var item *memcache.Item
	err = m.do(func() (err error) {
		item, err = m.client.Get(mkey)
		return err
	})
	if errors.Is(err, memcache.ErrCacheMiss) {
		m.metrics.observeGet(tierMemcached, resultMiss, start)
		return nil, 0, false, nil
	}
	if err != nil {
		m.metrics.observeGet(tierMemcached, resultError, start)
		m.limited.warn("get", "msg", "memcached get failed; reviews are asked live", "err", err)
		return nil, 0, false, fmt.Errorf("memcached get: %w", err)
	}
	value, remaining, r := m.open(mkey, item.Value, time.Now())
	m.metrics.observeGet(tierMemcached, r, start)
	switch r {
	case resultForged:
		// Never an allow and never an error: the review is asked live and its Set
		// replaces the value. The key names the entry; it is no secret.
		m.limited.warn("forged", "msg", "memcached value failed HMAC verification (unknown key, tampered, or moved from another key); treated as a miss",
			"memcached_key", mkey, "len", len(item.Value))
		return nil, 0, false, nil
	case resultMiss:
		return nil, 0, false, nil
	}
	return value, remaining, true, nil
}

// open verifies b, stored under mkey, and caps its life at this replica's MaxAge.
// A value that fails verification is resultForged when values are signed; unsigned,
// it is only a miss (another version, or an accident the checksum caught).
func (m *Memcached) open(mkey string, b []byte, now time.Time) (value []byte, remaining time.Duration, r result) {
	keys, signed := m.keyring()
	if signed && keys == nil {
		return nil, 0, resultForged // no key to verify with: nothing can be trusted
	}
	value, s, ok := unseal(keys, m.clusterID, mkey, b)
	if !ok {
		if signed {
			return nil, 0, resultForged
		}
		m.limited.debug("decode", "msg", "memcached value not understood; treated as a miss", "len", len(b))
		return nil, 0, resultMiss
	}
	age := now.Sub(s.writtenAt)
	if age < -maxClockSkew {
		m.limited.warn("skew", "msg", "memcached value written in the future: a replica's clock is off; treated as a miss", "ahead", -age)
		return nil, 0, resultMiss
	}
	// memcached rounds expirations up to whole seconds; the stamp is exact.
	remaining = s.expiry.Sub(now)
	if m.maxAge != nil {
		remaining = min(remaining, m.maxAge(value)-max(age, 0))
	}
	if remaining <= 0 {
		return nil, 0, resultMiss
	}
	return value, remaining, resultHit
}

// Set stores value under key for ttl (at most 30 days); a non-positive ttl stores nothing.
func (m *Memcached) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memcached set: %w", err)
	}
	ttl = min(ttl, maxMemcachedTTL)
	keys, signed := m.keyring()
	if signed && keys == nil {
		return errors.New("memcached set: no HMAC key in force")
	}
	now := time.Now()
	mkey := MemcachedKey(m.clusterID, key)
	item := &memcache.Item{
		Key:        mkey,
		Value:      seal(keys, m.clusterID, mkey, value, stamp{writtenAt: now, expiry: now.Add(ttl)}),
		Expiration: expirationSeconds(ttl),
	}
	err := m.do(func() error { return m.client.Set(item) })
	m.metrics.observeSet(tierMemcached, err)
	if err != nil {
		m.limited.warn("set", "msg", "memcached set failed; reviews are asked live", "err", err)
		return fmt.Errorf("memcached set: %w", err)
	}
	return nil
}

// keyring returns the keys in force, and whether values are signed at all.
func (m *Memcached) keyring() (keys *Keyring, signed bool) {
	if m.keys == nil {
		return nil, false
	}
	return m.keys.Current(), true
}

// do runs op, and once more after a failure on a pooled connection the server had
// closed (it restarted, or dropped an idle connection). The idle pool is emptied first:
// its other connections are most likely dead too, and each would cost a failed request.
// Refused connections and timeouts are not retried, so a server down costs at most
// about one Timeout.
func (m *Memcached) do(op func() error) error {
	err := op()
	if err != nil && staleConn(err) {
		_ = m.client.Close()
		err = op()
	}
	return err
}

func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// expirationSeconds rounds ttl up to whole seconds within what memcached reads as relative.
func expirationSeconds(ttl time.Duration) int32 {
	s := (ttl + time.Second - 1) / time.Second
	return int32(min(max(s, 1), maxMemcachedTTL/time.Second))
}

const defaultLogEvery = 10 * time.Second

// limitedLogger logs at most one line per kind per interval, so an outage costs a few
// lines rather than one per request; the next line says how many were dropped.
type limitedLogger struct {
	logger log.Logger
	every  time.Duration

	mu    sync.Mutex
	kinds map[string]*limitedKind
}

// limitedKind is one kind of line: its limiter and the lines it dropped since the last.
type limitedKind struct {
	limiter    *rate.Limiter
	suppressed int
}

func newLimitedLogger(logger log.Logger, every time.Duration) *limitedLogger {
	return &limitedLogger{logger: logger, every: every, kinds: make(map[string]*limitedKind)}
}

func (l *limitedLogger) warn(kind string, keyvals ...any) bool {
	return l.log(level.Warn(l.logger), kind, keyvals)
}

func (l *limitedLogger) debug(kind string, keyvals ...any) bool {
	return l.log(level.Debug(l.logger), kind, keyvals)
}

func (l *limitedLogger) log(logger log.Logger, kind string, keyvals []any) bool {
	l.mu.Lock()
	k := l.kinds[kind]
	if k == nil {
		k = &limitedKind{limiter: rate.NewLimiter(rate.Every(l.every), 1)}
		l.kinds[kind] = k
	}
	if !k.limiter.Allow() {
		k.suppressed++
		l.mu.Unlock()
		return false
	}
	n := k.suppressed
	k.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		keyvals = append(keyvals, "suppressed", n)
	}
	_ = logger.Log(keyvals...)
	return true
}
