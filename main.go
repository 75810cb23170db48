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
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/version"
)

func main() {
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
	if err := run(o, logger); err != nil {
		level.Error(logger).Log("msg", "exiting", "err", err)
		os.Exit(1)
	}
}

// gcPercent is the heap growth between collections the server runs with unless GOGC
// says otherwise: a decision allocates much that dies at once against a small live
// heap, so collecting at 5x the live heap rather than 2x saves a good part of the CPU.
// GOMEMLIMIT (the manifests set it to the container's memory limit) bounds the heap.
const gcPercent = 400

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// run builds the server's components and serves until SIGINT or SIGTERM.
func run(o serveOptions, logger log.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	registry := newRegistry()
	core, err := newDecisionCore(ctx, o, registry, logger)
	if err != nil {
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
