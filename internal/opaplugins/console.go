package opaplugins

import (
	"io"
	"os"

	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/sirupsen/logrus"
)

// newConsoleLogger is where OPA's decision log plugin writes events with
// decision_logs.console: true. They are written as OPA itself writes them (its
// standard logger with logrus' JSON formatter: one JSON object a line, the event's
// fields beside level, msg and time), not through the bridge's log: a logfmt line
// cannot hold the event's input and result (go-kit prints "unsupported value type"),
// and a JSON line per event is what `sar-bridge replay` and OPA's own tools read.
// The events are masked before they get here, as uploaded ones are.
func newConsoleLogger(w io.Writer) logging.Logger {
	if w == nil {
		w = os.Stderr // where OPA writes them, and where the bridge logs
	}
	l := logging.New()
	l.SetOutput(w)
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetLevel(logging.Info)
	return l
}
