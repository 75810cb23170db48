package tenants

// The reconciler's marks wait for this replica's decisions to pause.
//
// Why. Confirming a charge is one PATCH of its pod (mark), and every replica's pod view
// then decodes the change: background bookkeeping on the CPU a burst's creates wait
// for. After a burst the leader marks its pods one after another (a thousand take a
// minute at the client's pace), so in make bench-ledger the marks of the job before ran
// beside every later burst: 63–133 PATCHes a phase, and at the quota's end the creates
// were slowest. Nothing is late for it: a charge is counted the same while pending.
//
// Bounds, so that marking keeps up with a load that never pauses: a round's marks wait
// in all no longer than markYield plus the time its marks took (it marks at least at
// half its pace, a pause or not), and not at all for a tenant whose pending charges
// reach half of MaxPending (a ledger that fills refuses creates: the other half is left
// for a burst).

import (
	"context"
	"time"
)

const (
	// markYield is what a round's marks may wait beyond the time they took.
	markYield = 2 * time.Second
	// yieldPendingShare: marks wait only while a tenant's pending charges are under
	// MaxPending/yieldPendingShare.
	yieldPendingShare = 2
	// yieldPoll is how often a waiting mark asks busy again.
	yieldPoll = 50 * time.Millisecond
)

// markYielding is one round's marks' waiting: busy (nil: never wait), what they may
// wait beyond the time they took (markYield), how long the marks took (the caller adds)
// and how long they waited.
type markYielding struct {
	busy                      func() bool
	allowance, marked, waited time.Duration
}

// wait returns when busy says no, its allowance is spent, or ctx ends.
func (y *markYielding) wait(ctx context.Context) {
	if y.busy == nil {
		return
	}
	var timer *time.Timer
	for y.busy() {
		left := y.allowance + y.marked - y.waited
		if left <= 0 {
			return
		}
		step := min(left, yieldPoll)
		if timer == nil {
			timer = time.NewTimer(step)
			defer timer.Stop()
		} else {
			timer.Reset(step)
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		y.waited += step
	}
}
