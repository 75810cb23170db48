package app

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
)

// The internal listener answers kubelet probes on the pod's IP, so by default it serves
// no profiles; --web.enable-pprof turns them on, and probes and metrics answer either way.
func TestInternalListenerProfiling(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want map[string]int
	}{
		{nil, map[string]int{"/debug/pprof/": 404, "/debug/pprof/heap": 404, "/debug/pprof/cmdline": 404, "/live": 200, "/ready": 200, "/metrics": 200}},
		{[]string{"--web.enable-pprof=false"}, map[string]int{"/debug/pprof/": 404, "/live": 200}},
		{[]string{"--web.enable-pprof"}, map[string]int{"/debug/pprof/": 200, "/debug/pprof/heap": 200, "/debug/pprof/cmdline": 200, "/live": 200, "/ready": 200, "/metrics": 200}},
	} {
		var o webOptions
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.addFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		h := o.internalHandler(nil, nil, prometheus.NewRegistry())
		for path, want := range tc.want {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != want {
				t.Errorf("%q: GET %s = %d, want %d", tc.args, path, rec.Code, want)
			}
		}
	}
}
