package tenants

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMarkYielding: marks wait while busy, never longer in all than the allowance plus
// the time the marks took, and not at all without busy.
func TestMarkYielding(t *testing.T) {
	cases := []struct {
		name       string
		busyFor    int // calls of busy that say yes; -1: always
		nilBusy    bool
		allowance  time.Duration
		marked     time.Duration
		wantWaited time.Duration
	}{
		{name: "no busy: no wait", nilBusy: true, allowance: time.Second, wantWaited: 0},
		{name: "not busy: no wait", busyFor: 0, allowance: time.Second, wantWaited: 0},
		{name: "busy for two polls", busyFor: 2, allowance: time.Second, wantWaited: 2 * yieldPoll},
		{name: "always busy: the allowance", busyFor: -1, allowance: 120 * time.Millisecond, wantWaited: 120 * time.Millisecond},
		{name: "always busy: the allowance and the time marked", busyFor: -1, allowance: 60 * time.Millisecond, marked: 40 * time.Millisecond, wantWaited: 100 * time.Millisecond},
		{name: "allowance spent: no wait", busyFor: -1, allowance: 0, wantWaited: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			y := markYielding{allowance: tc.allowance, marked: tc.marked, busy: func() bool {
				calls++
				return tc.busyFor < 0 || calls <= tc.busyFor
			}}
			if tc.nilBusy {
				y.busy = nil
			}
			y.wait(context.Background())
			if y.waited != tc.wantWaited {
				t.Errorf("waited %v, want %v", y.waited, tc.wantWaited)
			}
			y.wait(context.Background()) // a second mark: only what is left
			if tc.busyFor < 0 && y.waited != tc.wantWaited {
				t.Errorf("waited %v after a second mark, want still %v", y.waited, tc.wantWaited)
			}
		})
	}
}

// TestReconcileMarksYield: a round's marks wait while the bridge decides creates (Busy),
// unless the tenant's pending charges reach half of MaxPending.
func TestReconcileMarksYield(t *testing.T) {
	cases := []struct {
		name       string
		maxPending int
		wantAsked  bool
	}{
		{name: "few pending: the marks wait", maxPending: 100, wantAsked: true},
		{name: "half of MaxPending pending: no wait", maxPending: 4, wantAsked: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n calls
			a, b := runningPod("team-a", "a", "1"), runningPod("team-a", "b", "1")
			c, _ := recClient(t, &n, nil, a.DeepCopy(), b.DeepCopy(),
				quotaTenant("team-a", pendingCharge("team-a", "a", "1", 10*time.Second), pendingCharge("team-a", "b", "1", 10*time.Second)))
			tm := newTestTerm(t, c, fakeDir{"team-a": nil})
			tm.view.OnAdd("vk-1", a)
			tm.view.OnAdd("vk-1", b)
			var asked, patchedWhileBusy atomic.Int64
			tm.r.opts.MaxPending = tc.maxPending
			tm.r.opts.Busy = func() bool {
				if asked.Add(1) <= 2 {
					patchedWhileBusy.Store(n.patches.Load())
					return true
				}
				return false
			}
			reconcileOK(t, tm, "team-a")
			if got := asked.Load() > 0; got != tc.wantAsked {
				t.Errorf("busy asked %d times, want asked: %v", asked.Load(), tc.wantAsked)
			}
			if patchedWhileBusy.Load() != 0 {
				t.Errorf("%d pods marked while busy", patchedWhileBusy.Load())
			}
			if n.patches.Load() != 2 {
				t.Errorf("%d pods marked, want 2", n.patches.Load())
			}
		})
	}
}

// TestLedgerBusy: a decision asking about a create of a tenant with a quota (Prior,
// which every such create calls, allowed or not) makes the ledger Busy for busyWithin.
func TestLedgerBusy(t *testing.T) {
	l := NewLedger(nil, nil, LedgerOptions{Registerer: prometheus.NewRegistry()})
	if l.Busy() {
		t.Fatal("busy before any decision")
	}
	if _, err := l.Prior(context.Background(), tenant("team-a", list("pods", "10"), nil), onePod("a")); err != nil {
		t.Fatal(err)
	}
	if !l.Busy() {
		t.Error("not busy just after a decision asked")
	}
	time.Sleep(busyWithin + 50*time.Millisecond)
	if l.Busy() {
		t.Errorf("still busy %v after the decision", busyWithin+50*time.Millisecond)
	}
}
