// Package hotreloadtest helps tests of hotreload users: a log sink the watch
// loop and the test share, polling, and the reload metrics.
package hotreloadtest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/hotreload"
)

// SyncBuffer is a log sink the watch loop and the test share.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitFor polls cond until it holds; after 10s it fails t, showing logs (which
// may be nil).
func WaitFor(t testing.TB, what string, cond func() bool, logs fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			var l string
			if logs != nil {
				l = logs.String()
			}
			t.Fatalf("timed out waiting for %s; logs:\n%s", what, l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Settle gives the watch loop time for several more checks.
func Settle() { time.Sleep(100 * time.Millisecond) }

// Failures returns the failure count of v's reloads.
func Failures[T any](v *hotreload.Value[T]) float64 {
	reloads, _ := v.Metrics()
	return testutil.ToFloat64(reloads.WithLabelValues("failure"))
}

// LastSuccess returns v's last-reload-success gauge.
func LastSuccess[T any](v *hotreload.Value[T]) float64 {
	_, last := v.Metrics()
	return testutil.ToFloat64(last)
}

// CheckMetrics fails t unless v counts success and failure reloads and its
// last-reload-success gauge is last.
func CheckMetrics[T any](t testing.TB, v *hotreload.Value[T], success, failure, last float64) {
	t.Helper()
	reloads, _ := v.Metrics()
	if got := testutil.ToFloat64(reloads.WithLabelValues("success")); got != success {
		t.Errorf("reloads{success} = %v, want %v", got, success)
	}
	if got := Failures(v); got != failure {
		t.Errorf("reloads{failure} = %v, want %v", got, failure)
	}
	if got := LastSuccess(v); got != last {
		t.Errorf("last_reload_success = %v, want %v", got, last)
	}
}
