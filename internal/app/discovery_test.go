package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sar-bridge/sar-bridge/internal/discovery"
)

func TestDiscoveryCmd(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mappings")
	if err := os.WriteFile(file, []byte("# comment\nteam-a=interlink.io\ntenant-b = tenant-b.interlink.io\n*=interlink.io\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	yamlOf := func(groups ...string) string {
		out, err := discovery.YAML(groups)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	both := yamlOf("interlink.io", "tenant-b.interlink.io")
	for _, tc := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{name: "one group", args: []string{"--group", "interlink.io"}, stdout: yamlOf("interlink.io")},
		{name: "groups sorted, once", args: []string{"--group=tenant-b.interlink.io", "--group", "interlink.io", "--group", "interlink.io"}, stdout: both},
		{name: "from mapping flags", args: []string{"--openshift.mappings=team-a=interlink.io,tenant-b=tenant-b.interlink.io", "--openshift.mappings", "*=interlink.io"}, stdout: both},
		{name: "from a mappings file", args: []string{"--openshift.mappings-file", file}, stdout: both},
		{name: "all sources", args: []string{"--group", "extra.interlink.io", "--openshift.mappings=x=interlink.io", "--openshift.mappings-file", file}, stdout: yamlOf("extra.interlink.io", "interlink.io", "tenant-b.interlink.io")},
		{name: "no group", code: 2, stderr: "sar-bridge discovery: no API group: give --group, --openshift.mappings or --openshift.mappings-file\n"},
		{name: "bad group", args: []string{"--group", "interlink"}, code: 2,
			stderr: "sar-bridge discovery: group \"interlink\" is not a valid API group for a CustomResourceDefinition: it needs at least one dot (e.g. interlink.io)\n"},
		{name: "bad mapping", args: []string{"--openshift.mappings", "team-a"}, code: 2,
			stderr: "sar-bridge discovery: --openshift.mappings: mapping \"team-a\": want tenant=group\n"},
		{name: "unknown flag", args: []string{"--groups", "interlink.io"}, code: 2, stderr: "sar-bridge discovery: unknown flag: --groups\n"},
		{name: "argument", args: []string{"interlink.io"}, code: 2, stderr: "sar-bridge discovery: unexpected arguments [\"interlink.io\"]\n"},
		{name: "missing file", args: []string{"--openshift.mappings-file", filepath.Join(dir, "nope")}, code: 1,
			stderr: "sar-bridge discovery: --openshift.mappings-file: reading mappings file: open " + filepath.Join(dir, "nope") + ": no such file or directory\n"},
		{name: "file maps nothing", args: []string{"--openshift.mappings-file", empty}, code: 1, stderr: "sar-bridge discovery: no API group: " + empty + " maps no tenant\n"},
		{name: "flags and file disagree", args: []string{"--openshift.mappings=team-a=other.io", "--openshift.mappings-file", file}, code: 1,
			stderr: "sar-bridge discovery: tenant \"team-a\" is mapped to \"other.io\" by --openshift.mappings and to \"interlink.io\" by the mappings file\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Discovery(tc.args, nil, &stdout, &stderr)
			if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("discovery %q: exit %d, stdout:\n%s\nstderr %q\nwant exit %d, stdout:\n%s\nstderr %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// --help prints the usage with examples on stderr and exits 0, with nothing on stdout.
func TestDiscoveryHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Discovery([]string{"--help"}, nil, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q", code, stdout.String())
	}
	for _, w := range []string{
		"Usage: sar-bridge discovery (--group GROUP ... | --openshift.mappings TENANT=GROUP ... | --openshift.mappings-file FILE)\n",
		"  sar-bridge discovery --group interlink.io | kubectl apply -f -\n",
		"--openshift.mappings-file string",
		"kind OffloadPod",
	} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("help lacks %q:\n%s", w, stderr.String())
		}
	}
}
