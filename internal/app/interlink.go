package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/sar-bridge/sar-bridge/internal/interlink"
)

// interlinkConfig configures the interLink plugin relay (--interlink.*).
type interlinkConfig struct {
	listen            string
	pluginURL         string
	decisionPath      string
	insecureAnyCaller bool
	maxBodyBytes      int64
	decisionTimeout   time.Duration
	pluginTimeout     time.Duration
	pluginDialTimeout time.Duration
	readTimeout       time.Duration
	allowJobScript    bool

	// Parsed by validate.
	address interlink.ListenAddress
	plugin  interlink.Plugin
}

func (c *interlinkConfig) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "interlink.listen", "", "Serve interLink's plugin API here (host:port or unix:///path): point interLink's SidecarURL/SidecarPort at it. Creates are decided, everything else is relayed to --interlink.plugin-url. Empty: off.")
	fs.StringVar(&c.pluginURL, "interlink.plugin-url", "", "The real interLink plugin: http://host:port[/prefix] or unix:///path.")
	fs.StringVar(&c.decisionPath, "interlink.decision-path", interlink.DefaultDecisionPath, "Policy document that decides a create (as in /v1/data/<path>).")
	fs.BoolVar(&c.insecureAnyCaller, "interlink.insecure-allow-any-caller", false, "Allow a non-loopback TCP --interlink.listen: interLink cannot authenticate to its plugin, so anyone who reaches the port can submit pods to the plugin as any service account that is allowed.")
	fs.Int64Var(&c.maxBodyBytes, "interlink.max-body-bytes", interlink.DefaultMaxBodyBytes, "Largest /create body (the pod with its ConfigMaps and Secrets); larger ones get 413.")
	fs.DurationVar(&c.decisionTimeout, "interlink.decision-timeout", 10*time.Second, "Deadline of one create decision; past it the create gets 503 and is not forwarded.")
	fs.DurationVar(&c.pluginTimeout, "interlink.plugin-timeout", 2*time.Minute, "Longest wait for the plugin's response headers (a streamed /getLogs body is not bounded).")
	fs.DurationVar(&c.pluginDialTimeout, "interlink.plugin-dial-timeout", 5*time.Second, "Longest wait to connect to the plugin.")
	fs.DurationVar(&c.readTimeout, "interlink.read-timeout", time.Minute, "Longest time to read one request from interLink, body included.")
	fs.BoolVar(&c.allowJobScript, "interlink.allow-job-script", false, "Forward creates whose body carries a jobScript (interLink's JobScriptBuilderURL or JobScriptTemplate): the SLURM plugin runs it on the HPC host as it is, outside any container and unjudged. Off: such creates get 403.")
}

// validate checks the flags; the relay is off without --interlink.listen.
func (c *interlinkConfig) validate() error {
	if c.listen == "" {
		if c.pluginURL != "" {
			return errors.New("--interlink.plugin-url needs --interlink.listen")
		}
		return nil
	}
	var err error
	if c.address, err = interlink.ParseListenAddress(c.listen); err != nil {
		return fmt.Errorf("--interlink.listen: %w", err)
	}
	if !c.address.Loopback() && !c.insecureAnyCaller {
		return fmt.Errorf("--interlink.listen %s is reachable from other hosts and interLink cannot authenticate to its plugin: use a unix socket or a loopback address, or set --interlink.insecure-allow-any-caller", c.listen)
	}
	if c.pluginURL == "" {
		return errors.New("--interlink.listen needs --interlink.plugin-url")
	}
	if c.plugin, err = interlink.ParsePluginURL(c.pluginURL); err != nil {
		return fmt.Errorf("--interlink.plugin-url: %w", err)
	}
	if c.plugin.Socket != "" && c.plugin.Socket == c.address.Address {
		return errors.New("--interlink.plugin-url is --interlink.listen itself: the relay would call itself")
	}
	switch {
	case c.maxBodyBytes <= 0:
		return errors.New("--interlink.max-body-bytes must be positive")
	case c.decisionTimeout <= 0 || c.pluginTimeout <= 0 || c.pluginDialTimeout <= 0 || c.readTimeout <= 0:
		return errors.New("--interlink.decision-timeout, --interlink.plugin-timeout, --interlink.plugin-dial-timeout and --interlink.read-timeout must be positive")
	case strings.Trim(c.decisionPath, "/") == "" || strings.Contains(strings.Trim(c.decisionPath, "/"), "//"):
		return fmt.Errorf("--interlink.decision-path %q is not a document path", c.decisionPath)
	}
	return nil
}

// startInterlink listens on --interlink.listen and serves the relay in g until ctx is
// done, then shuts it down like the other listeners. It does nothing when the relay is off.
func startInterlink(ctx context.Context, g *errgroup.Group, o serveOptions, decider interlink.Decider, reg prometheus.Registerer, logger log.Logger) error {
	c := o.interlink
	if c.listen == "" {
		return nil
	}
	relay, err := interlink.New(decider, interlink.Options{
		Plugin: c.plugin, DecisionPath: strings.Split(strings.Trim(c.decisionPath, "/"), "/"),
		MaxBodyBytes: c.maxBodyBytes, DecisionTimeout: c.decisionTimeout,
		PluginTimeout: c.pluginTimeout, PluginDialTimeout: c.pluginDialTimeout,
		AllowJobScript: c.allowJobScript,
		Logger:         logger, Registerer: reg,
	})
	if err != nil {
		return err
	}
	ln, err := interlink.Listen(c.address)
	if err != nil {
		return fmt.Errorf("--interlink.listen %s: %w", c.listen, err)
	}
	srv := relay.Server(c.readTimeout)
	level.Info(logger).Log("msg", "interLink relay", "listen", c.address, "plugin", c.plugin, "decision_path", c.decisionPath)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving %s: %w", c.address, err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		time.Sleep(o.web.shutdownDelay)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), o.web.shutdown)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			// Followed logs never end by themselves: cut them rather than fail the exit.
			level.Warn(logger).Log("msg", "closing interLink requests still open", "err", err)
			_ = srv.Close()
		}
		relay.CloseIdleConnections()
		return nil
	})
	return nil
}
