package cache

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Tier label values.
const (
	tierMemory    = "memory"
	tierMemcached = "memcached"
)

// Metrics holds the cache collectors. A nil *Metrics records nothing, so every cache
// accepts one optionally.
type Metrics struct {
	requests         *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	sets             *prometheus.CounterVec
	setErrors        *prometheus.CounterVec
	servers          prometheus.Gauge
	dnsRefreshErrors prometheus.Counter

	// Children are resolved once: a label lookup per request would cost more than a
	// memory-tier hit itself.
	memory, memcached *tierMetrics
}

type tierMetrics struct {
	hit, miss, err prometheus.Counter
	forged         prometheus.Counter
	duration       prometheus.Observer
	sets, setErrs  prometheus.Counter
}

// NewMetrics creates the collectors and registers them with reg when it is not nil.
// Create it once per registry: registering twice panics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_cache_requests_total",
			Help: "Cache look-ups by tier (memory, memcached) and result (hit, miss, error; forged: a memcached value that failed HMAC verification, a miss).",
		}, []string{"tier", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sar_bridge_cache_request_duration_seconds",
			Help: "Latency of cache look-ups by tier.",
			// From sub-microsecond memory hits to memcached timeouts.
			Buckets: []float64{1e-6, 1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}, []string{"tier"}),
		sets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_cache_sets_total",
			Help: "Cache writes by tier.",
		}, []string{"tier"}),
		setErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_cache_set_errors_total",
			Help: "Cache writes that failed, by tier.",
		}, []string{"tier"}),
		servers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sar_bridge_memcached_servers",
			Help: "Memcached addresses in use after DNS resolution.",
		}),
		dnsRefreshErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sar_bridge_memcached_dns_refresh_errors_total",
			Help: "Memcached server names that failed to resolve or resolved to no address; the last good addresses are kept.",
		}),
	}
	m.memory = m.tier(tierMemory)
	m.memcached = m.tier(tierMemcached)
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.sets, m.setErrors, m.servers, m.dnsRefreshErrors)
	}
	return m
}

func (m *Metrics) tier(name string) *tierMetrics {
	return &tierMetrics{
		hit:      m.requests.WithLabelValues(name, "hit"),
		miss:     m.requests.WithLabelValues(name, "miss"),
		err:      m.requests.WithLabelValues(name, "error"),
		forged:   m.requests.WithLabelValues(name, "forged"),
		duration: m.duration.WithLabelValues(name),
		sets:     m.sets.WithLabelValues(name),
		setErrs:  m.setErrors.WithLabelValues(name),
	}
}

type result int

const (
	resultHit result = iota
	resultMiss
	resultError
	resultForged
)

func (m *Metrics) forTier(tier string) *tierMetrics {
	if m == nil {
		return nil
	}
	if tier == tierMemory {
		return m.memory
	}
	return m.memcached
}

func (m *Metrics) observeGet(tier string, r result, start time.Time) {
	t := m.forTier(tier)
	if t == nil {
		return
	}
	t.duration.Observe(time.Since(start).Seconds())
	switch r {
	case resultHit:
		t.hit.Inc()
	case resultMiss:
		t.miss.Inc()
	case resultForged:
		t.forged.Inc()
	default:
		t.err.Inc()
	}
}

func (m *Metrics) observeSet(tier string, err error) {
	t := m.forTier(tier)
	if t == nil {
		return
	}
	t.sets.Inc()
	if err != nil {
		t.setErrs.Inc()
	}
}

func (m *Metrics) setServers(n int) {
	if m != nil {
		m.servers.Set(float64(n))
	}
}

func (m *Metrics) dnsError() {
	if m != nil {
		m.dnsRefreshErrors.Inc()
	}
}
