// Package app is sar-bridge's commands: the server and the admin commands, each built
// from options by concern (one type per concern, with addFlags, validate and a
// constructor) around the one decision core (newDecisionCore). main.go is the command
// table over it.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/internal/version"
)

// Serve is the server (`sar-bridge [flags]`): its options are parsed and validated
// (options.go), completed, its components built one concern at a time, and run until
// SIGINT or SIGTERM. It returns the exit code.
func Serve(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge: %v\n", err)
		return 2
	}
	if o.showVersion {
		fmt.Fprintln(stdout, version.Get())
		return 0
	}
	logger, err := o.log.newLogger()
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge: %v\n", err)
		return 2
	}
	o.complete()
	tuneGC()
	tuneMemoryLimit(logger)
	if err := run(o, logger); err != nil {
		level.Error(logger).Log("msg", "exiting", "err", err)
		return 1
	}
	return 0
}

// gcPercent is the heap growth between collections the server runs with unless GOGC
// says otherwise: a decision allocates much that dies at once against a small live
// heap, so collecting at 5x the live heap rather than 2x saves a good part of the CPU.
// The memory limit (tuneMemoryLimit) bounds the heap.
const gcPercent = 400

// memoryLimitRatio is the share of the container's memory limit (its cgroup's, read
// with automemlimit) the Go runtime aims to stay under, unless GOMEMLIMIT is set: with
// gcPercent the heap grows up to it, and the rest is for the binary's pages and what
// the runtime does not count (issue 31: at the whole limit, a stream of the largest pods
// took the process 30 MiB over it).
const memoryLimitRatio = 0.8

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

func tuneMemoryLimit(logger log.Logger) {
	limit, err := memlimit.Set(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	if err != nil {
		level.Warn(logger).Log("msg", "no memory limit read from the cgroup; set GOMEMLIMIT", "err", err)
		return
	}
	if limit != math.MaxInt64 {
		level.Info(logger).Log("msg", "Go memory limit", "bytes", limit, "from", memoryLimitSource())
	}
}

func memoryLimitSource() string {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		return "GOMEMLIMIT"
	}
	return fmt.Sprintf("%.0f%% of the cgroup's limit", memoryLimitRatio*100)
}

// run builds the server's components and serves until SIGINT or SIGTERM.
func run(o serveOptions, logger log.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	registry := newRegistry()
	core, err := newDecisionCore(ctx, o.decision, coreUse{reviews: o.reviews(registry, logger), targets: o.admission.targets}, registry, logger)
	if err != nil {
		return err
	}
	defer core.stop()
	if err := enableOpenShift(o, core.authz, core.view, core.client, core.restConfig, core.evaluator.Documents()); err != nil {
		return err
	}
	l, err := newListeners(ctx, o, core, registry, logger)
	if err != nil {
		return err
	}
	return serve(ctx, o, core, l, registry, logger)
}

// newRegistry is the metrics registry, with the Go, process and build collectors.
func newRegistry() *prometheus.Registry {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(version.Get()))
	return registry
}
