package app

import (
	"fmt"
	"os"
	"strings"

	flag "github.com/spf13/pflag"
)

// serveOptions is the command line of `sar-bridge` (serve): one options type per
// concern, each with addFlags and validate (which also keeps what it parsed), and a
// constructor that builds the concern's component from it. `check` and `who-can` take
// the same decisionOptions, so they decide as the server does.
type serveOptions struct {
	decision  decisionOptions  // every flag that changes a decision (decision.go)
	cache     cacheOptions     // --cache.*, --memcached.*, --review.max-in-flight (memcached.go)
	web       webOptions       // --web.*: the two listeners (serve.go)
	authn     authnOptions     // --authn.*: who may call the public listener (callers.go)
	tls       tlsOptions       // --tls.*: the listeners' TLS (callers.go)
	log       logOptions       // --log.*, --debug.name (log.go)
	openshift openshiftOptions // --opa.*: opa-openshift compatibility (openshift.go)
	interlink interlinkConfig  // --interlink.*: the plugin relay (interlink.go)
	admission admissionConfig  // --admission.*: the admission webhooks (admission.go)

	showVersion bool
}

// unsupportedFlags are opa-openshift flags sar-bridge refuses rather than ignores.
var unsupportedFlags = map[string]string{
	"debug.token": "a fallback token would let any caller without a token act as its bearer",
}

const serveUsage = `sar-bridge answers OPA Data API requests (POST /v1/data/{package}/{rule}) for interLink.
Each pod decision is a Kubernetes SubjectAccessReview for the pod's service account on
"pods" in the API group its tenant maps to, then a Rego policy (caps, protected taints,
tenant isolation, modifications).

Usage: sar-bridge [flags]                serve (the default)
       sar-bridge check -f FILE [flags]   decide pods from a terminal, as the server would
       sar-bridge who-can [flags]         list who may offload where
       sar-bridge replay [flags] [FILE]   re-decide recorded decision logs with a candidate policy
       sar-bridge test [flags] DIR        run a policy directory's Rego tests and samples offline
       sar-bridge discovery --group G     CRDs that make kubectl auth can-i truthful
       sar-bridge helm-postrender [flags] add the bridge to interLink's chart (Helm post-renderer)
       sar-bridge ledger-marks            the admission policy that keeps the quota ledger's pod marks to it
       sar-bridge tenants release-cluster NAME   remove a member cluster that is gone from a hub's ledgers
       sar-bridge --version
Each command explains itself with --help.

Flags:
%s`

// addFlags registers every concern's flags on fs.
func (o *serveOptions) addFlags(fs *flag.FlagSet) {
	o.decision.addFlags(fs) // shared with `sar-bridge check` and `who-can` (admin.go)
	fs.BoolVar(&o.showVersion, "version", false, "Print the version, commit and Go version, then exit.")
	o.cache.addFlags(fs)
	o.web.addFlags(fs)
	o.authn.addFlags(fs)
	o.tls.addFlags(fs)
	o.log.addFlags(fs)
	o.openshift.addFlags(fs)
	o.interlink.addFlags(fs)
	o.admission.addFlags(fs)
	for name, why := range unsupportedFlags {
		fs.String(name, "", "Not supported: "+why+".")
		_ = fs.MarkHidden(name)
	}
}

// newServeFlagSet is the flag set of the server, with its usage text.
func newServeFlagSet(o *serveOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("sar-bridge", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintf(os.Stderr, serveUsage, fs.FlagUsages()) }
	o.addFlags(fs)
	return fs
}

// parseFlags parses and validates the server's command line.
func parseFlags(args []string) (serveOptions, error) {
	var o serveOptions
	fs := newServeFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.showVersion {
		return o, nil
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for name, why := range unsupportedFlags {
		if fs.Changed(name) {
			return o, fmt.Errorf("--%s is not supported by sar-bridge: %s", name, why)
		}
	}
	return o, o.validate()
}

// validate checks every concern in turn and returns the first error.
func (o *serveOptions) validate() error {
	for _, check := range []func() error{
		o.openshift.validate,
		func() error { return o.authn.validate(o.web.listen, o.tls) },
		o.tls.validate,
		o.cache.validate,
		o.interlink.validate,
		o.admission.validate,
		o.decision.validate,
		o.web.validate,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// complete fills what the command line leaves to the environment.
func (o *serveOptions) complete() {
	o.decision.complete()
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
