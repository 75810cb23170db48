// Command sar-bridge is an OPA-compatible decision service for interLink: Kubernetes RBAC
// (SubjectAccessReviews) decides who may offload pods, and a Rego policy adds resource
// and label rules on top. Every command builds its decisions from the same options and
// the same decision core (internal/app).
package main

import (
	_ "embed"
	"io"
	"os"

	"github.com/sar-bridge/sar-bridge/internal/app"
)

// command runs one command with its arguments and returns its exit code.
type command func(args []string, stdin io.Reader, stdout, stderr io.Writer) int

// commands are sar-bridge's subcommands; any other command line is the server's.
var commands = map[string]command{
	"check":           app.Check,          // decide pods from a terminal, as the server would
	"who-can":         app.WhoCan,         // who may offload where
	"replay":          app.Replay,         // re-decide recorded decision logs with a candidate policy
	"test":            app.Test,           // a policy directory's Rego tests and samples, offline
	"discovery":       app.Discovery,      // CRDs that make kubectl auth can-i truthful
	"helm-postrender": app.HelmPostRender, // add the bridge to interLink's chart
	"ledger-marks":    app.LedgerMarks,    // the admission policy that keeps the ledger's pod marks to it
	"tenants":         app.Tenants,        // release a member cluster that is gone from the hub's ledgers
}

// Files of the repository's root the commands need (go:embed reaches no parent directory).
var (
	//go:embed VERSION
	release string
	//go:embed manifests/ledger-marks/ledger-marks.yaml
	ledgerMarks []byte
)

func main() {
	app.PreferStreamingLists() // before any informer starts: client-go reads it once
	app.SetFiles(app.Files{Release: release, LedgerMarks: ledgerMarks})
	cmd, args := command(app.Serve), os.Args[1:]
	if len(args) > 0 && commands[args[0]] != nil {
		cmd, args = commands[args[0]], args[1:]
	}
	os.Exit(cmd(args, os.Stdin, os.Stdout, os.Stderr))
}
