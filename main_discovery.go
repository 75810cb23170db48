package main

import (
	"errors"
	"fmt"
	"io"

	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/discovery"
	"github.com/sar-bridge/sar-bridge/mapping"
)

// discoveryCmd is `sar-bridge discovery`: it prints, for each API group, the CRDs and the
// admission policy that make pods.<group> and nodes.<group> known to the API server
// (see package discovery). It returns the exit code: 2 for bad usage, 1 for other errors.
func discoveryCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sar-bridge discovery", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var groups, pairs []string
	var file string
	fs.StringArrayVar(&groups, "group", nil, "An API group to print the objects of, e.g. interlink.io (repeatable).")
	fs.StringSliceVar(&pairs, "openshift.mappings", nil, "Tenant to API group mappings, as the bridge takes them: every mapped group is printed (repeatable).")
	fs.StringVar(&file, "openshift.mappings-file", "", "A mappings file, as the bridge takes it: every group it maps is printed.")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: sar-bridge discovery (--group GROUP ... | --openshift.mappings TENANT=GROUP ... | --openshift.mappings-file FILE)

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
%s`, discovery.PodKind, discovery.NodeKind, fs.FlagUsages())
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "sar-bridge discovery: "+format+"\n", a...)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return usage("%v", err)
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	m, err := mapping.Parse(pairs)
	if err != nil {
		return usage("--openshift.mappings: %v", err)
	}
	if file != "" {
		f, err := mapping.ParseFile(file)
		if err != nil {
			fmt.Fprintf(stderr, "sar-bridge discovery: --openshift.mappings-file: %v\n", err)
			return 1
		}
		if m, err = mapping.Merge(m, f); err != nil {
			fmt.Fprintf(stderr, "sar-bridge discovery: %v\n", err)
			return 1
		}
	}
	groups = append(groups, m.Groups()...)
	if len(groups) == 0 {
		if file != "" {
			fmt.Fprintf(stderr, "sar-bridge discovery: no API group: %s maps no tenant\n", file)
			return 1
		}
		return usage("no API group: give --group, --openshift.mappings or --openshift.mappings-file")
	}
	for _, g := range groups {
		if err := discovery.ValidateGroup(g); err != nil {
			return usage("%v", err)
		}
	}
	out, err := discovery.YAML(groups)
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge discovery: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "sar-bridge discovery: %v\n", err)
		return 1
	}
	return 0
}
