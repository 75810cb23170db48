package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sar-bridge/sar-bridge/internal/app"
)

// TestCommands: the table names every subcommand, and each explains itself with --help.
func TestCommands(t *testing.T) {
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"check", "discovery", "helm-postrender", "ledger-marks", "replay", "tenants", "test", "who-can"}; !slices.Equal(names, want) {
		t.Errorf("commands %q, want %q", names, want)
	}
	app.SetFiles(app.Files{Release: release, LedgerMarks: ledgerMarks})
	for _, name := range names {
		var stdout, stderr bytes.Buffer
		if code := commands[name]([]string{"--help"}, strings.NewReader(""), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String()+stderr.String(), "sar-bridge") {
			t.Errorf("%s --help: exit code %d, output %q", name, code, stdout.String()+stderr.String())
		}
	}
	// The files main embeds reach the commands: the sidecar's image is this release's.
	var stdout bytes.Buffer
	commands["helm-postrender"]([]string{"--help"}, nil, &stdout, &stdout)
	if want := "ghcr.io/sar-bridge/sar-bridge:" + strings.TrimSpace(release) + `"`; release == "" || !strings.Contains(stdout.String(), want) {
		t.Errorf("helm-postrender's --image default is not %s:\n%s", want, stdout.String())
	}
}
