package e2e

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deploy/systemd/sar-bridge.service passes `systemd-analyze verify`, as shipped: it runs
// against a root that holds the unit at its install path, the built binary at
// /usr/local/bin/sar-bridge, /bin/sh for ExecStartPost and the system's unit files.
// verify exits 0 on mere warnings (an unknown key, a bad value), so any output fails too.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze (Debian's systemd package) is needed to check deploy/systemd: %v", err)
	}
	root := t.TempDir()
	units := "/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(units, "sysinit.target")); err != nil {
		units = "/usr/lib/systemd/system"
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ from, to string }{
		{filepath.Join(suite.root, "deploy", "systemd", "sar-bridge.service"), "etc/systemd/system/sar-bridge.service"},
		{suite.binary, "usr/local/bin/sar-bridge"},
		{sh, "bin/sh"},
	} {
		copyFile(t, f.from, filepath.Join(root, f.to))
	}
	entries, err := os.ReadDir(units)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			copyFile(t, filepath.Join(units, e.Name()), filepath.Join(root, "usr/lib/systemd/system", e.Name()))
		}
	}
	out, err := exec.Command(analyze, "verify", "--man=no", "--root="+root, "sar-bridge.service").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The edge node's unit reaches the network through nothing but interLink's socket: both
// listeners on loopback, no profiles.
func TestSystemdUnitListeners(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(suite.root, "deploy", "systemd", "sar-bridge.service"))
	if err != nil {
		t.Fatal(err)
	}
	var exec []string
	for _, l := range strings.Split(strings.ReplaceAll(string(raw), "\\\n", " "), "\n") {
		if rest, ok := strings.CutPrefix(l, "ExecStart="); ok {
			exec = strings.Fields(rest)
		}
	}
	flags := map[string]string{}
	for _, a := range exec {
		name, value, _ := strings.Cut(a, "=")
		flags[name] = value
	}
	for name, prefix := range map[string]string{"--web.listen": "127.0.0.1:", "--web.internal.listen": "127.0.0.1:", "--interlink.listen": "unix://"} {
		if v, ok := flags[name]; !ok || !strings.HasPrefix(v, prefix) {
			t.Errorf("ExecStart %s=%q, want %s…", name, v, prefix)
		}
	}
	if _, ok := flags["--web.enable-pprof"]; ok {
		t.Errorf("ExecStart serves profiles: %q", exec)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(from, to); err == nil {
		return
	}
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
