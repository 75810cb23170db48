package mapping

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultReloadInterval is how often a Source checks its file when NewSource is given
// no interval.
const DefaultReloadInterval = 5 * time.Second

// ParseFile reads a mappings file, as given to --openshift.mappings-file.
//
// The format is the one of --openshift.mappings, one pair per line:
//
//	# tenant=group; "*" is the fallback for every tenant without its own line
//	team-a=team-a.interlink.io
//	team-b = team-b.interlink.io   # spaces around "=" and trailing comments are fine
//	*=interlink.io
//
// Blank lines are ignored, and so is everything from a "#" to the end of its line
// (neither a tenant, that is a namespace name or a label value, nor an API group can
// contain "#"). A tenant may appear more than once only with the same group. Every
// group must be a valid API group (a DNS subdomain). A file without any pair is valid
// and maps nothing.
func ParseFile(path string) (Mappings, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Mappings{}, fmt.Errorf("reading mappings file: %w", err)
	}
	return parseFile(path, raw)
}

func parseFile(path string, raw []byte) (Mappings, error) {
	groups := map[string]string{}
	lineOf := map[string]int{}
	for i, line := range strings.Split(string(raw), "\n") {
		n := i + 1
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		tenant, group, err := parsePair(line)
		if err != nil {
			return Mappings{}, fmt.Errorf("mappings file %s:%d: %w", path, n, err)
		}
		if prev, dup := groups[tenant]; dup && prev != group {
			return Mappings{}, fmt.Errorf("mappings file %s:%d: tenant %q is already mapped to %q on line %d", path, n, tenant, prev, lineOf[tenant])
		}
		groups[tenant], lineOf[tenant] = group, n
	}
	return Mappings{groups: groups}, nil
}

// Merge combines the mappings of the flags and of the file. A tenant both map is an
// error unless they agree on its group.
func Merge(flags, file Mappings) (Mappings, error) {
	groups := make(map[string]string, len(flags.groups)+len(file.groups))
	for t, g := range flags.groups {
		groups[t] = g
	}
	for t, g := range file.groups {
		if prev, dup := groups[t]; dup && prev != g {
			return Mappings{}, fmt.Errorf("tenant %q is mapped to %q by --openshift.mappings and to %q by the mappings file", t, prev, g)
		}
		groups[t] = g
	}
	return Mappings{groups: groups}, nil
}

// Source holds the current mappings: those of the flags merged with those of a file it
// rereads when the file changes. It is safe for concurrent use.
//
// Every interval the file is read and hashed, so in-place edits, renames over the file
// and a ConfigMap's symlink swap are all seen. A file that cannot be read or parsed, or
// that conflicts with the flags, is rejected: logged once, counted in
// sar_bridge_mapping_reloads_total{result="failure"}, and the last good mappings keep
// serving.
type Source struct {
	flags    Mappings
	file     string
	interval time.Duration
	logger   log.Logger
	current  atomic.Pointer[Mappings]
	gen      atomic.Uint64

	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge

	// Owned by the watch loop after NewSource returns.
	goodHash [sha256.Size]byte
	failed   string // last rejected state, reported once

	done chan struct{} // closed when the watch loop has stopped
}

// NewSource merges flagMappings with the mappings of file (when not empty) and
// rereads the file every interval (DefaultReloadInterval when not positive) until ctx
// is done. An error of the first read is returned: start-up fails. logger and reg may
// be nil; reg registers sar_bridge_mapping_reloads_total and
// sar_bridge_mapping_last_reload_success.
func NewSource(ctx context.Context, flagMappings Mappings, file string, interval time.Duration, logger log.Logger, reg prometheus.Registerer) (*Source, error) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	if logger == nil {
		logger = log.NewNopLogger()
	}
	s := &Source{
		flags: flagMappings, file: file, interval: interval,
		logger: log.With(logger, "component", "mappings-reloader"),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_mapping_reloads_total",
			Help: "Tenant mapping reloads after a change of the mappings file, by result (success, failure).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sar_bridge_mapping_last_reload_success",
			Help: "1 when the mappings file last seen was loaded, 0 when it was rejected and older mappings are serving.",
		}),
		done: make(chan struct{}),
	}
	s.reloads.WithLabelValues("success")
	s.reloads.WithLabelValues("failure")

	current := flagMappings
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading mappings file: %w", err)
		}
		if current, err = s.load(raw); err != nil {
			return nil, err
		}
		s.goodHash = sha256.Sum256(raw)
	}
	s.current.Store(&current)
	s.lastSuccess.Set(1)
	if reg != nil {
		for _, c := range []prometheus.Collector{s.reloads, s.lastSuccess} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering mapping reload metrics: %w", err)
			}
		}
	}
	if file == "" {
		close(s.done)
		return s, nil
	}
	go s.watch(ctx)
	return s, nil
}

// Current returns the mappings in force.
func (s *Source) Current() Mappings { return *s.current.Load() }

// Group returns the API group of a tenant under the current mappings; see
// Mappings.Group.
func (s *Source) Group(tenant string) (string, bool) { return s.Current().Group(tenant) }

// Generation counts the successful reloads since NewSource.
func (s *Source) Generation() uint64 { return s.gen.Load() }

func (s *Source) load(raw []byte) (Mappings, error) {
	fromFile, err := parseFile(s.file, raw)
	if err != nil {
		return Mappings{}, err
	}
	merged, err := Merge(s.flags, fromFile)
	if err != nil {
		return Mappings{}, fmt.Errorf("mappings file %s: %w", s.file, err)
	}
	return merged, nil
}

func (s *Source) watch(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.check()
		}
	}
}

func (s *Source) check() {
	raw, err := os.ReadFile(s.file)
	if err != nil {
		s.reject("read:"+err.Error(), fmt.Errorf("reading mappings file: %w", err))
		return
	}
	sum := sha256.Sum256(raw)
	if sum == s.goodHash {
		if s.failed != "" {
			s.failed = ""
			s.lastSuccess.Set(1)
			level.Info(s.logger).Log("msg", "mappings file is back to the serving version", "file", s.file)
		}
		return
	}
	key := fmt.Sprintf("%x", sum)
	if key == s.failed {
		return
	}
	m, err := s.load(raw)
	if err != nil {
		s.reject(key, err)
		return
	}
	s.current.Store(&m)
	s.goodHash, s.failed = sum, ""
	gen := s.gen.Add(1)
	s.reloads.WithLabelValues("success").Inc()
	s.lastSuccess.Set(1)
	level.Info(s.logger).Log("msg", "mappings reloaded", "file", s.file, "generation", gen, "mappings", m.String())
}

func (s *Source) reject(key string, err error) {
	if key == s.failed {
		return
	}
	s.failed = key
	s.reloads.WithLabelValues("failure").Inc()
	s.lastSuccess.Set(0)
	level.Error(s.logger).Log("msg", "mappings reload rejected; the last good mappings keep serving",
		"file", s.file, "generation", s.gen.Load(), "err", err)
}
