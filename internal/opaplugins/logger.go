package opaplugins

import (
	"fmt"
	"sort"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/open-policy-agent/opa/v1/logging"
)

// kitLogger writes OPA's plugin logs as the bridge's own lines, with
// component=opa-<plugin> and OPA's fields as key-values.
type kitLogger struct {
	logger log.Logger
	level  logging.Level
	fields map[string]any
}

func newKitLogger(logger log.Logger, debug bool) *kitLogger {
	lvl := logging.Info
	if debug {
		lvl = logging.Debug
	}
	return &kitLogger{logger: log.With(logger, "component", "opa-plugins"), level: lvl}
}

func (l *kitLogger) log(lvl logging.Level, leveled func(log.Logger) log.Logger, format string, a ...any) {
	if lvl > l.level {
		return
	}
	kv := []any{"msg", fmt.Sprintf(format, a...)}
	keys := make([]string, 0, len(l.fields))
	for k := range l.fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kv = append(kv, k, l.fields[k])
	}
	_ = leveled(l.logger).Log(kv...)
}

func (l *kitLogger) Debug(f string, a ...any) { l.log(logging.Debug, level.Debug, f, a...) }
func (l *kitLogger) Info(f string, a ...any)  { l.log(logging.Info, level.Info, f, a...) }
func (l *kitLogger) Warn(f string, a ...any)  { l.log(logging.Warn, level.Warn, f, a...) }
func (l *kitLogger) Error(f string, a ...any) { l.log(logging.Error, level.Error, f, a...) }

func (l *kitLogger) WithFields(fields map[string]any) logging.Logger {
	merged := make(map[string]any, len(l.fields)+len(fields))
	for k, v := range l.fields {
		merged[k] = v
	}
	for k, v := range fields {
		merged[k] = v
	}
	return &kitLogger{logger: l.logger, level: l.level, fields: merged}
}

func (l *kitLogger) GetLevel() logging.Level    { return l.level }
func (l *kitLogger) SetLevel(lvl logging.Level) { l.level = lvl }
