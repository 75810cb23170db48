package app

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/version"
)

// --version wins over every other flag's validation, so it answers even where the rest
// of the command line would not start a server.
func TestParseFlagsVersion(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "alone", args: []string{"--version"}},
		{name: "with a configuration that would not start", args: []string{"--version", "--cache.size=0", "--authn.mode=none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", tt.args, err)
			}
			if !cfg.showVersion {
				t.Fatal("showVersion not set")
			}
		})
	}
}

func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfo(version.Info{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.26"}))
	want := `
# HELP sar_bridge_build_info The running build: version, revision and Go version in the labels; always 1.
# TYPE sar_bridge_build_info gauge
sar_bridge_build_info{goversion="go1.26",revision="abc",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sar_bridge_build_info"); err != nil {
		t.Fatal(err)
	}
}
