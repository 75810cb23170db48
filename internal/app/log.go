package app

import (
	"fmt"
	"os"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	flag "github.com/spf13/pflag"
)

// logOptions configure the log (--log.*, --debug.name).
type logOptions struct {
	level  string
	format string
	name   string
}

func (o *logOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.level, "log.level", "info", "Log level: debug, info, warn, error.")
	fs.StringVar(&o.format, "log.format", "logfmt", "Log format: logfmt or json.")
	fs.StringVar(&o.name, "debug.name", "", "Name added to every log line (name=...).")
}

// newLogger is the logger of the flags, every line named after --debug.name when set.
func (o *logOptions) newLogger() (log.Logger, error) {
	logger, err := newLogger(o.level, o.format)
	if err != nil {
		return nil, err
	}
	if o.name != "" {
		logger = log.With(logger, "name", o.name)
	}
	return logger, nil
}

func newLogger(lvl, format string) (log.Logger, error) {
	var logger log.Logger
	switch format {
	case "logfmt":
		logger = log.NewLogfmtLogger(log.NewSyncWriter(os.Stderr))
	case "json":
		logger = log.NewJSONLogger(log.NewSyncWriter(os.Stderr))
	default:
		return nil, fmt.Errorf("--log.format %q: want logfmt or json", format)
	}
	var opt level.Option
	switch lvl {
	case "debug":
		opt = level.AllowDebug()
	case "info":
		opt = level.AllowInfo()
	case "warn":
		opt = level.AllowWarn()
	case "error":
		opt = level.AllowError()
	default:
		return nil, fmt.Errorf("--log.level %q: want debug, info, warn or error", lvl)
	}
	return log.With(level.NewFilter(logger, opt), "ts", log.DefaultTimestampUTC, "caller", log.DefaultCaller), nil
}
