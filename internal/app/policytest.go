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

	"github.com/sar-bridge/sar-bridge/internal/policytest"
)

const testHelp = `Run a policy directory's Rego tests and sample cases offline, as the bridge decides:
no cluster, no server.

Rego tests: the directory's *_test.rego files, over the embedded policy with the
directory's *.rego files layered as --policies layers them, the data of
--policies.data, and the bridge's built-ins (k8s.get and k8s.list read the
--cluster.snapshot).

Samples: every JSON or YAML file in a samples/ directory under DIR, in the layout of the
built-in rules (policies/rules/<name>/samples):

  description: what the case shows
  data_patch: {...}     JSON merge patch over samples/base_data.json (else --policies.data)
  input_patch: {...}    JSON merge patch over samples/base_input.json
  pod: {...}            the Pod (replaces input.pod)
  review: {...}         what the SubjectAccessReviews answered (replaces input.review)
  want:
    allowed: false
    reason: "..."       optional: the decision's reason, exactly
    violations: [...]   the rule's messages (its rule.json names the document)
    annotations: {...}  the rule's pod annotations (rule.json)
    modifications: {...}

input.resources, input.tolerations, input.images and input.hpc are derived from the pod by the
bridge's own input builder; namespace, node, tenant, review and quota are the case's.

Output: a --- FAIL line per failing test or sample with what differs (- want, + got),
--- PASS lines with -v, then a summary.

Exit status: 0 everything passed, 1 a test or sample failed, 2 an error (a directory or
file that cannot be read or compiled).

Examples:
  # The built-in rules' samples
  sar-bridge test policies/rules

  # A site's rules, tests and samples, with its data and a cluster snapshot
  sar-bridge test --policies.data data.yaml --cluster.snapshot cluster.yaml ./site

Usage: sar-bridge test [flags] DIR...

Flags:
`

// Test is `sar-bridge test`; it returns the exit code.
func Test(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var dataFile, snapshotFile string
	var verbose bool
	fs := flag.NewFlagSet("sar-bridge test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&dataFile, "policies.data", "", "JSON or YAML file whose object becomes the policy's data (as the server's --policies.data).")
	fs.StringVar(&snapshotFile, "cluster.snapshot", "", "YAML file of the cluster objects k8s.get and k8s.list read: resource name (pods, deployments.apps) to a list of objects, or to what kubectl get -o yaml prints.")
	fs.BoolVarP(&verbose, "verbose", "v", false, "Print passing tests and samples too.")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, testHelp+fs.FlagUsages())
		return 0
	case err != nil:
		return usageError(stderr, fs.Name(), err)
	case fs.NArg() == 0:
		return usageError(stderr, fs.Name(), errors.New("no policy directory"))
	}
	snapshot, err := policytest.ReadSnapshot(snapshotFile)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	failed := false
	for _, dir := range fs.Args() {
		s, err := policytest.Run(ctx, policytest.Options{Dir: dir, DataFile: dataFile, Snapshot: snapshot, Verbose: verbose, Out: stdout})
		if err != nil {
			fmt.Fprintf(stdout, "FAIL\t%s\n", dir)
			fmt.Fprintf(stderr, "error: %s: %v\n", dir, err)
			return exitUsage
		}
		result := "ok"
		if s.Failed() {
			result, failed = "FAIL", true
		}
		fmt.Fprintf(stdout, "%s\t%s\tRego tests: %d passed of %d; samples: %d passed of %d\n",
			result, dir, s.Tests-s.TestsFailed, s.Tests, s.Samples-s.SamplesFailed, s.Samples)
	}
	if failed {
		return 1
	}
	return 0
}
