package interlink

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePluginURL(t *testing.T) {
	tests := []struct {
		in, wantURL, wantSocket, wantErr string
	}{
		{in: "http://127.0.0.1:4000", wantURL: "http://127.0.0.1:4000"},
		{in: "http://slurm-plugin:4000/api/", wantURL: "http://slurm-plugin:4000/api"},
		{in: "unix:///var/run/plugin.sock", wantURL: "http://localhost", wantSocket: "/var/run/plugin.sock"},
		{in: "https://plugin:4000", wantErr: "scheme must be http or unix"},
		{in: "plugin:4000", wantErr: "want http://host:port"},
		{in: "http://:4000", wantErr: "has no host"},
		{in: "http://user:pw@plugin:4000", wantErr: "without credentials"},
		{in: "http://plugin:4000/?x=1", wantErr: "without credentials, query"},
		{in: "unix://host/var/run/p.sock", wantErr: "want unix:///absolute"},
		{in: "unix://", wantErr: "want unix:///absolute"},
		{in: "unix:///var/run/../p.sock", wantErr: "want unix:///absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := ParsePluginURL(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.URL.String() != tt.wantURL || p.Socket != tt.wantSocket {
				t.Fatalf("got %s socket %q", p.URL, p.Socket)
			}
		})
	}
}

func TestParseListenAddress(t *testing.T) {
	tests := []struct {
		in       string
		network  string
		loopback bool
		wantErr  bool
	}{
		{in: "127.0.0.1:4000", network: "tcp", loopback: true},
		{in: "[::1]:4000", network: "tcp", loopback: true},
		{in: "localhost:4000", network: "tcp", loopback: true},
		{in: ":4000", network: "tcp"},
		{in: "0.0.0.0:4000", network: "tcp"},
		{in: "10.0.0.1:4000", network: "tcp"},
		{in: "interlink.example:4000", network: "tcp"},
		{in: "unix:///var/run/sar-bridge.sock", network: "unix", loopback: true},
		{in: "unix://var/run/x.sock", wantErr: true},
		{in: "4000", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			l, err := ParseListenAddress(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("want an error, got %+v", l)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Network != tt.network || l.Loopback() != tt.loopback {
				t.Fatalf("got %+v loopback=%v", l, l.Loopback())
			}
		})
	}
}

func TestListenUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "bridge.sock")
	addr := ListenAddress{Network: "unix", Address: sock}

	// A socket left by a process that is gone is replaced.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close()
	ln, err := Listen(addr)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != socketMode {
		t.Errorf("socket mode %v, %v", fi.Mode().Perm(), err)
	}
	// A live one is not taken over.
	if _, err := Listen(addr); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second listener: %v", err)
	}
	_ = ln.Close()

	// Nor is a file that is not a socket.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(ListenAddress{Network: "unix", Address: file}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
}
