package app

import (
	"errors"
	"fmt"
	"io"

	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/internal/discovery"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
)

// discoveryOptions are the flags of `sar-bridge discovery`.
type discoveryOptions struct {
	groups, pairs []string
	file          string
}

func (o *discoveryOptions) addFlags(fs *flag.FlagSet) {
	fs.StringArrayVar(&o.groups, "group", nil, "An API group to print the objects of, e.g. interlink.io (repeatable).")
	fs.StringSliceVar(&o.pairs, "openshift.mappings", nil, "Tenant to API group mappings, as the bridge takes them: every mapped group is printed (repeatable).")
	fs.StringVar(&o.file, "openshift.mappings-file", "", "A mappings file, as the bridge takes it: every group it maps is printed.")
}

const discoveryUsage = `Usage: sar-bridge discovery (--group GROUP ... | --openshift.mappings TENANT=GROUP ... | --openshift.mappings-file FILE)

Prints, as YAML for kubectl apply, for every API group once: CustomResourceDefinitions
for pods.<group> (kind %s) and nodes.<group> (kind %s), so that kubectl auth can-i
and RBAC tools know the resources sar-bridge reviews, and a ValidatingAdmissionPolicy
with its binding that refuses every object of them (they are names for RBAC; nothing is
stored). Nothing is added to the bridge's own RBAC.

Examples:
  sar-bridge discovery --group interlink.io | kubectl apply -f -
  sar-bridge discovery --group interlink.io --group tenant-b.interlink.io > discovery.yaml
  sar-bridge discovery --openshift.mappings-file /etc/sar-bridge/mappings/mappings | kubectl apply -f -
  kubectl auth can-i create pods.interlink.io -n team-a --as system:serviceaccount:team-a:runner

Flags:
%s`

// discoveryUsageError is a command line discovery cannot run (exit status 2).
type discoveryUsageError struct{ error }

// Discovery is `sar-bridge discovery`: it prints, for each API group, the CRDs and the
// admission policy that make pods.<group> and nodes.<group> known to the API server
// (see package discovery). It returns the exit code: 2 for bad usage, 1 for other errors.
func Discovery(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sar-bridge discovery", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o discoveryOptions
	o.addFlags(fs)
	fs.Usage = func() { fmt.Fprintf(stderr, discoveryUsage, discovery.PodKind, discovery.NodeKind, fs.FlagUsages()) }
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		err = discoveryUsageError{err}
	case fs.NArg() > 0:
		err = discoveryUsageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	default:
		err = o.print(stdout)
	}
	var usage discoveryUsageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "sar-bridge discovery: %v\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "sar-bridge discovery: %v\n", err)
		return 1
	}
	return 0
}

// print writes the objects of every group to stdout.
func (o *discoveryOptions) print(stdout io.Writer) error {
	groups, err := o.allGroups()
	if err != nil {
		return err
	}
	out, err := discovery.YAML(groups)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// allGroups is --group and the groups of the mappings, each validated.
func (o *discoveryOptions) allGroups() ([]string, error) {
	m, err := mapping.Parse(o.pairs)
	if err != nil {
		return nil, discoveryUsageError{fmt.Errorf("--openshift.mappings: %w", err)}
	}
	if o.file != "" {
		f, err := mapping.ParseFile(o.file)
		if err != nil {
			return nil, fmt.Errorf("--openshift.mappings-file: %w", err)
		}
		if m, err = mapping.Merge(m, f); err != nil {
			return nil, err
		}
	}
	groups := append(o.groups, m.Groups()...)
	switch {
	case len(groups) == 0 && o.file != "":
		return nil, fmt.Errorf("no API group: %s maps no tenant", o.file)
	case len(groups) == 0:
		return nil, discoveryUsageError{errors.New("no API group: give --group, --openshift.mappings or --openshift.mappings-file")}
	}
	for _, g := range groups {
		if err := discovery.ValidateGroup(g); err != nil {
			return nil, discoveryUsageError{err}
		}
	}
	return groups, nil
}
