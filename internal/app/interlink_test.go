package app

import (
	"strings"
	"testing"
)

func TestInterlinkFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		socket  string
	}{
		{name: "off by default"},
		{name: "unix socket on both sides", args: []string{"--interlink.listen=unix:///var/run/sar-bridge.sock", "--interlink.plugin-url=unix:///var/run/plugin.sock"}, socket: "/var/run/plugin.sock"},
		{name: "loopback TCP", args: []string{"--interlink.listen=127.0.0.1:4000", "--interlink.plugin-url=http://127.0.0.1:4001"}},
		{name: "all interfaces refused", args: []string{"--interlink.listen=:4000", "--interlink.plugin-url=http://127.0.0.1:4001"},
			wantErr: "--interlink.listen :4000 is reachable from other hosts"},
		{name: "all interfaces when insecure", args: []string{"--interlink.listen=:4000", "--interlink.plugin-url=http://127.0.0.1:4001", "--interlink.insecure-allow-any-caller"}},
		{name: "no plugin", args: []string{"--interlink.listen=127.0.0.1:4000"}, wantErr: "--interlink.listen needs --interlink.plugin-url"},
		{name: "plugin without listen", args: []string{"--interlink.plugin-url=http://127.0.0.1:4001"}, wantErr: "--interlink.plugin-url needs --interlink.listen"},
		{name: "https plugin", args: []string{"--interlink.listen=127.0.0.1:4000", "--interlink.plugin-url=https://p:4001"}, wantErr: "scheme must be http or unix"},
		{name: "relay to itself", args: []string{"--interlink.listen=unix:///run/s.sock", "--interlink.plugin-url=unix:///run/s.sock"}, wantErr: "would call itself"},
		{name: "bad listen", args: []string{"--interlink.listen=4000", "--interlink.plugin-url=http://127.0.0.1:4001"}, wantErr: "--interlink.listen: listen address"},
		{name: "zero body limit", args: []string{"--interlink.listen=127.0.0.1:4000", "--interlink.plugin-url=http://127.0.0.1:4001", "--interlink.max-body-bytes=0"}, wantErr: "must be positive"},
		{name: "zero timeout", args: []string{"--interlink.listen=127.0.0.1:4000", "--interlink.plugin-url=http://127.0.0.1:4001", "--interlink.plugin-timeout=0s"}, wantErr: "must be positive"},
		{name: "bad decision path", args: []string{"--interlink.listen=127.0.0.1:4000", "--interlink.plugin-url=http://127.0.0.1:4001", "--interlink.decision-path=a//b"}, wantErr: "is not a document path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.interlink.plugin.Socket != tt.socket {
				t.Errorf("plugin socket %q, want %q", cfg.interlink.plugin.Socket, tt.socket)
			}
		})
	}
}
