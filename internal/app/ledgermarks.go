package app

import (
	_ "embed"
	"errors"
	"fmt"
	"io"

	flag "github.com/spf13/pflag"
)

const ledgerMarksUsage = `Usage: sar-bridge ledger-marks

Prints, as YAML for kubectl apply, the ValidatingAdmissionPolicy sar-bridge-ledger-marks
and its binding: only the quota ledger (whoever may update offloadtenants/status in
sar-bridge.io) may set, change or remove a pod's label sar-bridge.io/charged and
annotation sar-bridge.io/charged-amounts. Without it, anyone who may create or change
pods can mark a pod charged (it then skips its tenant's quota) or unmark a running one
(its quota is freed while it runs).

manifests/base and the chart install it; the Helm post-renderer does not (it is one
cluster-wide object, and each interLink release would claim it): a site that runs the
bridge only as interLink's sidecar applies it once.

Example:
  sar-bridge ledger-marks | kubectl apply -f -
`

// LedgerMarks is `sar-bridge ledger-marks`: it prints the admission policy that keeps
// the ledger's pod marks to the ledger. It returns the exit code: 2 for bad usage.
func LedgerMarks(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sar-bridge ledger-marks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ledgerMarksUsage) }
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err == nil && fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge ledger-marks: %v\n", err)
		return 2
	}
	if _, err := stdout.Write(files.LedgerMarks); err != nil {
		fmt.Fprintf(stderr, "sar-bridge ledger-marks: %v\n", err)
		return 1
	}
	return 0
}
