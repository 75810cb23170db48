package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/internal/opaplugins"
	"github.com/sar-bridge/sar-bridge/internal/replay"
	"github.com/sar-bridge/sar-bridge/policies"
)

const replayHelp = `Re-decide recorded decisions with a candidate policy and print what flips: whose pods
the candidate would stop, and whose it would let through.

Reads decision logs in OPA's event format: the console's JSON lines (decision_logs:
{console: true}; the bridge's other log lines between them are skipped), or what the
decision log plugin uploads (gzip'd JSON arrays), from files, directories (every file
in them) or "-" (stdin, the default). Each event's recorded input is what the bridge
decided by, reviews, quota usage, namespace and node included, so no cluster is needed:
it is evaluated again at the event's path with the candidate, the embedded policy with
--policies and --policies.data (the server's flags), and --bundle layered over them as
a bundle would be. Events whose input the log's mask changed (OPA's erased and masked
paths, or "**masked**" values) are listed, not re-decided: the recorded input is not
what was decided.

Prints counts by rule and by tenant, then each changed decision (pod, old -> new,
reasons). A result whose violations name their rules is counted by rule, one without
by its reason.

Exit status: 0 nothing flipped, 1 a decision flipped, 2 an error (an event that could
not be read or re-decided included).

Examples:
  # Would the policy directory's new rule stop anyone whose pods were decided today?
  sar-bridge replay --policies ./policies --policies.data data.yaml decisions.log

  # The uploads a log service received, with the next revision of the site's bundle
  sar-bridge replay --bundle https://bundles.example.org/site.tar.gz -o json uploads/

Usage: sar-bridge replay [flags] [FILE|DIR|-]...

Flags:
`

// replayOptions are replay's flags: the candidate policy (the server's --policies and
// --policies.data, and a bundle) and the report.
type replayOptions struct {
	policyDir    string
	policyData   string
	bundle       string
	output       string
	decideMasked bool
}

func (o *replayOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.policyDir, "policies", "", "Directory of .rego files that extend the embedded policy (as the server's --policies).")
	fs.StringVar(&o.policyData, "policies.data", "", "JSON or YAML file whose object becomes the policy's data (as the server's --policies.data).")
	fs.StringVar(&o.bundle, "bundle", "", "An OPA bundle layered over the policy as the server layers a configured bundle: a .tar.gz file, a bundle directory, or an http(s) URL of a bundle file (signatures are not verified).")
	fs.StringVarP(&o.output, "output", "o", "", "Output format: empty for text, or json.")
	fs.BoolVar(&o.decideMasked, "masked.decide", false, "Re-decide masked events too (each is marked masked in the report): their recorded input differs from what was decided.")
}

// candidate is the policy replay decides with.
func (o replayOptions) candidate(ctx context.Context) (*policies.Reloader, error) {
	r, err := policies.NewReloader(ctx, policies.ReloaderOptions{Options: policies.Options{Dir: o.policyDir, DataFile: o.policyData}})
	if err != nil {
		return nil, fmt.Errorf("loading the candidate policy: %w", err)
	}
	if o.bundle == "" {
		return r, nil
	}
	b, err := opaplugins.ReadBundle(ctx, o.bundle)
	if err != nil {
		return nil, err
	}
	if err := r.ActivateBundles(ctx, []policies.Bundle{b}, func(*policies.Evaluator) error { return nil }); err != nil {
		return nil, fmt.Errorf("activating the bundle %s: %w", o.bundle, err)
	}
	return r, nil
}

// Replay is `sar-bridge replay`; it returns the exit code.
func Replay(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o replayOptions
	fs := flag.NewFlagSet("sar-bridge replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	o.addFlags(fs)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, replayHelp+fs.FlagUsages())
		return 0
	case err != nil:
		return usageError(stderr, fs.Name(), err)
	case o.output != "" && o.output != "json":
		return usageError(stderr, fs.Name(), fmt.Errorf("--output %q: want json or nothing", o.output))
	}
	paths := fs.Args()
	if len(paths) == 0 {
		paths = []string{"-"}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	candidate, err := o.candidate(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	log, err := replay.ReadPaths(paths, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "error: reading decision logs: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "read %d decisions (%d lines that are not decision log events skipped, %d seen twice)\n", len(log.Events), log.Skipped, log.Duplicates)
	report := replay.Run(ctx, log.Events, candidate, replay.Options{DecideMasked: o.decideMasked})
	if o.output == "json" {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	case len(report.Failed) > 0:
		fmt.Fprintf(stderr, "error: %d decisions could not be re-decided\n", len(report.Failed))
		return exitUsage
	case report.Flips():
		return 1
	}
	return 0
}
