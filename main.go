// Command sar-bridge is an OPA-compatible decision service for interLink: Kubernetes RBAC
// (SubjectAccessReviews) decides who may offload pods, and a Rego policy adds resource
// and label rules on top.
//
// main reads as a list: a subcommand runs on its own (main_postrender.go); otherwise the
// server's options are parsed and validated (options.go), completed, its components
// built one concern at a time, and run.
package main

import (
	"context"
	"errors"
	"fmt"
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

func main() {
	preferStreamingLists()
	if code, ok := runSubcommand(os.Args[1:]); ok {
		os.Exit(code)
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sar-bridge: %v\n", err)
		os.Exit(2)
	}
	if o.showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	logger, err := o.log.newLogger()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sar-bridge: %v\n", err)
		os.Exit(2)
	}
	o.complete()
	tuneGC()
	tuneMemoryLimit(logger)
	if err := run(o, logger); err != nil {
		level.Error(logger).Log("msg", "exiting", "err", err)
		os.Exit(1)
	}
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
