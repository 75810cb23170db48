package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sar-bridge/sar-bridge/internal/version"
)

// buildInfo is the sar_bridge_build_info gauge: always 1, the build in its labels, so a
// dashboard can tell which replicas run which version.
func buildInfo(info version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "sar_bridge_build_info",
		Help:        "The running build: version, revision and Go version in the labels; always 1.",
		ConstLabels: prometheus.Labels{"version": info.Version, "revision": info.Revision, "goversion": info.GoVersion},
	})
	g.Set(1)
	return g
}
