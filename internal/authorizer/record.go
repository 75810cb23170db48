package authorizer

import (
	"time"

	"github.com/go-kit/log/level"
)

// decisionRecord is one decision's metrics and log line, the same for every kind of
// request the authorizer answers: begun when a request arrives, ended (deferred) when
// it leaves, whatever the path in between.
type decisionRecord struct {
	a       *Authorizer
	start   time.Time
	fields  []any
	outcome string // "error" until decided
}

func (a *Authorizer) beginDecision(fields ...any) *decisionRecord {
	// Room for the fields a decision adds, so its line is not grown piece by piece.
	return &decisionRecord{a: a, start: time.Now(), fields: append(make([]any, 0, 40), fields...), outcome: "error"}
}

// add appends key/value pairs to every later line of the decision.
func (r *decisionRecord) add(keyvals ...any) { r.fields = append(r.fields, keyvals...) }

// decided logs the decision line: the fields so far, the outcome and reason, then
// keyvals and the time taken.
func (r *decisionRecord) decided(outcome, reason string, keyvals ...any) {
	r.outcome = outcome
	line := append(r.fields, "msg", "decision", "outcome", outcome, "reason", reason)
	line = append(line, keyvals...)
	level.Info(r.a.logger).Log(append(line, "duration", time.Since(r.start).String())...)
}

// failed logs why a request got no decision, at error level (a dependency failed) or
// info (the caller's request was refused).
func (r *decisionRecord) failed(callerFault bool, msg string, err error) {
	line := append(r.fields, "msg", msg, "err", err)
	if callerFault {
		level.Info(r.a.logger).Log(line...)
		return
	}
	level.Error(r.a.logger).Log(line...)
}

// end records the decision's metrics.
func (r *decisionRecord) end() {
	r.a.metrics.decisions.WithLabelValues(r.outcome).Inc()
	r.a.metrics.decisionDuration.Observe(time.Since(r.start).Seconds())
}
