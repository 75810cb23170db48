package app

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/internal/mapping"
)

// TestAdminCommandsShareDecisionFlags: the server and both admin commands parse the
// decision flags into the same fields, so a command line copied from the server decides
// alike.
func TestAdminCommandsShareDecisionFlags(t *testing.T) {
	args := []string{
		"--kubeconfig=/k", "--openshift.mappings=a=a.io", "--openshift.mappings-file=/m", "--tenant.label=l",
		"--policies=/p", "--policies.data=/d", "--review.node-access", "--review.timeout=3s", "--kube.qps=7", "--kube.burst=9",
	}
	server, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"check", "who-can"} {
		t.Run(name, func(t *testing.T) {
			var cfg decisionOptions
			var a adminFlags
			fs := newAdminFlagSet(name, &cfg, &a)
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := cfg.validateAdmin(a); err != nil {
				t.Fatal(err)
			}
			want := server.decision
			if cfg.mappings.String() != want.mappings.String() {
				t.Errorf("admin mappings %s differ from the server's %s", cfg.mappings, want.mappings)
			}
			want.complete() // as main does
			cfg.mappings, want.mappings = mapping.Mappings{}, mapping.Mappings{}
			if !reflect.DeepEqual(cfg, want) {
				t.Errorf("admin config %+v differs from the server's %+v", cfg, want)
			}
		})
	}
	// Every decision flag is the server's own, with its help text.
	serverSet := flag.NewFlagSet("server", flag.ContinueOnError)
	(&decisionOptions{}).addFlags(serverSet)
	adminSet := newAdminFlagSet("check", &decisionOptions{}, &adminFlags{})
	serverSet.VisitAll(func(f *flag.Flag) {
		if g := adminSet.Lookup(f.Name); g == nil || g.Usage != f.Usage || g.DefValue != f.DefValue {
			t.Errorf("--%s differs in the admin commands", f.Name)
		}
	})
}

func TestAdminCommandLines(t *testing.T) {
	job := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(job, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // prefix
		stderr string
	}{
		{name: "check help", args: []string{"check", "--help"}, stdout: "Decide pods as the server would"},
		{name: "who-can help", args: []string{"who-can", "-h"}, stdout: "List the subjects"},
		{name: "check without -f", args: []string{"check"}, code: 2, stderr: "error: -f/--filename is required\nSee 'sar-bridge check --help' for usage.\n"},
		{name: "check stray argument", args: []string{"check", "-f", job, "pod"}, code: 2, stderr: "error: unexpected arguments: [\"pod\"]\nSee 'sar-bridge check --help' for usage.\n"},
		{name: "check --as-group alone", args: []string{"check", "-f", job, "--as-group", "g"}, code: 2, stderr: "error: --as-group needs --as\nSee 'sar-bridge check --help' for usage.\n"},
		{name: "check bad operation", args: []string{"check", "-f", job, "--operation", "update"}, code: 2,
			stderr: "error: --operation \"update\": want one of create, delete, status\nSee 'sar-bridge check --help' for usage.\n"},
		{name: "check bad mapping", args: []string{"check", "-f", job, "--openshift.mappings", "x"}, code: 2,
			stderr: "error: --openshift.mappings: mapping \"x\": want tenant=group\nSee 'sar-bridge check --help' for usage.\n"},
		{name: "who-can unknown flag", args: []string{"who-can", "--nope"}, code: 2, stderr: "error: unknown flag: --nope\nSee 'sar-bridge who-can --help' for usage.\n"},
		{name: "who-can node access without node", args: []string{"who-can", "--review.node-access"}, code: 2,
			stderr: "error: --review.node-access needs --node: the node reviews name it\nSee 'sar-bridge who-can --help' for usage.\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code, ok := -1, false
			switch tc.args[0] {
			case "check":
				code, ok = Check(tc.args[1:], strings.NewReader(""), &stdout, &stderr), true
			case "who-can":
				code, ok = WhoCan(tc.args[1:], nil, &stdout, &stderr), true
			}
			if !ok && tc.code != -1 || ok && code != tc.code {
				t.Errorf("code %d (handled %v), want %d", code, ok, tc.code)
			}
			if !strings.HasPrefix(stdout.String(), tc.stdout) || (tc.stdout == "") != (stdout.Len() == 0) {
				t.Errorf("stdout %q, want it to start with %q", stdout.String(), tc.stdout)
			}
			if stderr.String() != tc.stderr {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.stderr)
			}
		})
	}
}
