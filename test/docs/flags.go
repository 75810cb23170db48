package docs

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// FlagsPath is the generated reference, relative to the repository root.
const FlagsPath = "docs/reference/flags.md"

// RegenerateCommand regenerates FlagsPath; messages about a stale page name it.
const RegenerateCommand = "make docs"

// subcommandRE finds the subcommands the server's --help lists in its usage lines
// ("sar-bridge check -f FILE ..."), so that a new one gets its section without a
// change here.
var subcommandRE = regexp.MustCompile(`(?m)^(?:Usage:)?\s+sar-bridge ([a-z][a-z0-9-]*)\b`)

// Help runs binary with args and returns what it printed (stdout, then stderr: the
// server prints its usage to stderr, the admin commands to stdout). The environment is
// empty so that nothing of the caller's ($KUBECONFIG, ...) leaks into the page.
func Help(binary string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s%s", binary, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String() + stderr.String(), nil
}

// FlagsReference is the page FlagsPath holds: every command's --help, as the binary
// prints it.
func FlagsReference(binary string) (string, error) {
	top, err := Help(binary, "--help")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# Reference: flags\n\n")
	b.WriteString("<!-- Generated from the binary's --help by `" + RegenerateCommand + "`; do not edit. -->\n\n")
	b.WriteString("Every command's `--help`, as the binary prints it. `sar-bridge` with no command serves.\n")
	b.WriteString("Regenerate this page with `" + RegenerateCommand + "` after changing a flag.\n\n")
	section := func(title, text string) {
		fmt.Fprintf(&b, "## `%s`\n\n```text\n%s\n```\n\n", title, strings.TrimRight(text, "\n"))
	}
	section("sar-bridge", top)
	seen := map[string]bool{}
	for _, m := range subcommandRE.FindAllStringSubmatch(top, -1) {
		name := m[1]
		if seen[name] {
			continue
		}
		seen[name] = true
		text, err := Help(binary, name, "--help")
		if err != nil {
			return "", err
		}
		section("sar-bridge "+name, text)
	}
	if len(seen) == 0 {
		return "", fmt.Errorf("%s --help lists no subcommand in its usage lines", binary)
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}
