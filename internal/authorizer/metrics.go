package authorizer

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the decision pipeline's Prometheus collectors.
type Metrics struct {
	reviews          *prometheus.CounterVec
	reviewDuration   prometheus.Histogram
	cacheRequests    *prometheus.CounterVec
	cacheErrors      *prometheus.CounterVec
	decisions        *prometheus.CounterVec
	decisionDuration prometheus.Histogram
	memo             *prometheus.CounterVec
	violations       *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg when it is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_reviews_total",
			Help: "SubjectAccessReviews sent to the Kubernetes API, by result (allowed, denied, error).",
		}, []string{"result"}),
		reviewDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sar_bridge_review_duration_seconds",
			Help:    "Latency of SubjectAccessReviews sent to the Kubernetes API.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		cacheRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_review_cache_requests_total",
			Help: "Review cache look-ups, by result (hit, miss).",
		}, []string{"result"}),
		cacheErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_review_cache_errors_total",
			Help: "Review cache operations that failed and were bypassed, by operation (get, set).",
		}, []string{"op"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_decisions_total",
			Help: "Decisions answered, by outcome (allowed, denied, undefined, error).",
		}, []string{"outcome"}),
		decisionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sar_bridge_decision_duration_seconds",
			Help:    "Time to reach a decision: identity, reviews and policy.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17),
		}),
		memo: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_decision_memo_total",
			Help: "Policy evaluations of reviewed decisions, by use of the decision memo: hit (answered from it), miss (evaluated and kept), off (the document reads more than bounded parts of input and data, e.g. a nondeterministic built-in, so it is evaluated every time).",
		}, []string{"result"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sar_bridge_policy_violations_total",
			Help: "Violations found by pod decisions, by rule, tenant, action (deny, warn, audit: warn and audit allowed what deny would refuse) and front door (relay, admission, data_api).",
		}, []string{"rule", "tenant", "action", "front_door"}),
	}
	if reg != nil {
		reg.MustRegister(m.reviews, m.reviewDuration, m.cacheRequests, m.cacheErrors, m.decisions, m.decisionDuration, m.memo, m.violations)
	}
	return m
}
