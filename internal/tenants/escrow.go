package tenants

// The escrow (quota slices): a bridge holds a slice of a tenant's remaining quota,
// recorded in the tenant's status (status.slices: holder, room, expiry), and charges
// allowed creates against it in memory; its charges reach status.pending in batches
// (a report), in the same resourceVersion-checked writes that renew or return the
// slice, or charge a create it did not cover, or refill it near the quota's end. Far
// from the end a busy slice's refills report nothing: its charges stay inside its room
// in the status meanwhile, so the status a burst rewrites stays small. A create that
// does not fit the slice waits for a write, as every create did before.
//
// Why there is no overshoot. Let S be a tenant's status as stored. Every write of it
// is resourceVersion-checked, so writes are serialised, and every write keeps
//
//	used + Σ slices ≤ hard                                                  (I)
//
// per resource of hard (used includes the charges pending): a report moves a charge's
// amounts from its holder's slice into used (the sum is unchanged), a grant takes room
// only from hard − used − Σ slices, a return or shrink lowers Σ slices, an exact charge
// (ledger.go, fits) adds only what fits beside every slice. In memory a holder keeps
//
//	free + Σ unreported = its slice in S                                    (II)
//
// and charges only what free covers (a create that arrives, or one that queued behind a
// write and is charged from the room that write added: the same check under the same
// lock), so what it admitted and has not reported is inside its slice: the creates
// allowed are never more than used + Σ slices ≤ hard. How large a slice is (grantFor:
// a quarter, an even share, a demand) changes nothing here: a grant is taken only from
// hard − used − Σ slices.
// (II) holds across writes because a write that runs while creates are charged from
// free only grows the slice (a report, a refill, creates charged beside it), and a
// write that may shrink it (a return: idle, wanted by a create only the slice's room
// could fit; a spec changed) first takes free to zero, so
// nothing is charged from the room it gives back. A holder stops charging from its slice
// lockMargin before the expiry it wrote (measured from before the write was sent), so
// its slice is still in S while it charges from it. Once a slice has expired (its
// holder died or lost the API), the elected reconciler does not just drop it: in the
// same write it adds a pending charge for every pod of the tenant that could have been
// admitted and is counted by no charge — a pod that exists, has not ended, carries no
// mark and no pending charge, and is bound to a virtual node or not bound yet — read
// from the API (escrow_reclaim.go). Every create the dead holder allowed is such a pod
// (or none at all: a create that never got stored), so what it admitted is still
// counted when its room returns. A holder that comes back after its slice was reclaimed
// reports its charges as usual: a pod already pending is not charged twice.
//
// A report, like every charge, is deduplicated against status.pending and the pods'
// marks, so a pod is charged once by UID whichever bridge or front door saw it.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// SliceOptions turns the escrow on (Holder set) and sizes it.
type SliceOptions struct {
	// Holder is this bridge's identity in status.slices; "" charges every create with
	// a write of its own batch (no slices).
	Holder string
	// Lease is how long a slice lives without a renewal; DefaultSliceLease when zero.
	Lease time.Duration
	// Report is how often unreported charges are written (and an idle slice checked);
	// DefaultSliceReport when zero.
	Report time.Duration
	// Idle returns a slice nothing was charged from for this long; DefaultSliceIdle.
	Idle time.Duration
	// Min and Max bound a slice, in pods of the size last charged; DefaultSliceMin/Max.
	// A new slice asks for Initial (DefaultSliceInitial).
	Min, Initial, Max int
	// Jitter draws, at each write, how many pods more than half of its size a slice may
	// hold when its refill starts, from [0, n): rand.IntN when nil (tests fix it).
	Jitter func(n int) int
}

// Defaults of SliceOptions. A burst of 1,000 creates over three bridges is decided in
// a second or two: slices of 128 pods doubling up to 512, refilled when about half used
// (a jitter keeps bridges from refilling at once), and a report when returned or renewed
// cost a bridge a handful of writes for its third of the burst (make
// bench-ledger); every write is one more chance to conflict with the other bridges' and
// the reconciler's, each conflict a re-read and rewrite of a status of up to 2,000
// pending charges, so fewer writes is what keeps the slowest creates fast. A lone
// holder's slice holds a quarter at most of the room no other slice holds; beside others
// a slice may hold an even share of the room left, near the end no more than two
// seconds of its holder's creates (grantFor), and slices are kept to the quota's end
// (returned when idle). A quota under four slices of Min is charged exactly.
const (
	DefaultSliceLease   = 15 * time.Second
	DefaultSliceReport  = time.Second
	DefaultSliceIdle    = 500 * time.Millisecond
	DefaultSliceMin     = 16
	DefaultSliceInitial = 128
	DefaultSliceMax     = 512
	// grantShare: a grant takes at most 1/grantShare of the room no slice holds.
	grantShare = 4
	// lockMargin: a holder stops charging from its slice this long before the expiry it
	// wrote (the API keeps seconds: up to 1 s earlier than written; clock skew).
	lockMargin = 4 * time.Second
	// othersWait bounds how long a create that only others' slices could fit waits for
	// them to be used or returned (an idle holder returns its slice after Idle).
	othersWait = 3 * time.Second
)

func (o *SliceOptions) defaults() {
	setDefault(&o.Lease, DefaultSliceLease)
	setDefault(&o.Report, DefaultSliceReport)
	setDefault(&o.Idle, DefaultSliceIdle)
	setDefault(&o.Min, DefaultSliceMin)
	setDefault(&o.Initial, DefaultSliceInitial)
	setDefault(&o.Max, DefaultSliceMax)
	o.Initial = min(max(o.Initial, o.Min), max(o.Max, o.Min))
	o.Max = max(o.Max, o.Initial)
	if o.Jitter == nil {
		o.Jitter = rand.IntN
	}
}

// slice is this bridge's view of its slice of one tenant.
type slice struct {
	free       corev1.ResourceList // room charges may take now: (II)
	unreported []Request           // charged from the slice, not yet in status.pending
	ids        map[chargeID]bool   // of unreported and in-flight reports: charged once
	expires    time.Time           // no charge from free from then on
	generation int64               // of the spec the slice was granted under
	size       int                 // the slice wanted, in pods of unit
	unit       corev1.ResourceList // what the last pod charged held
	lastUse    time.Time           // last charge from free
	lastWrite  time.Time           // last write that landed
	shared     bool                // held to its share of the room left (grantFor): the end
	crowded    bool                // the view shows no room left outside the slices (Observe)
	frozen     bool                // a write is giving room back: free is 0 meanwhile
	rv         string              // the tenant's resourceVersion this bridge last read or wrote
	// A refill read the tenant at rv and found no room to grant: no refill is tried again
	// until the view shows the tenant changed (observeSlice) or a write lands, rather
	// than a read of the whole status at every charge near the quota's end.
	dry bool
	// How many changes of other bridges the view has shown: one shown while a refill
	// ran may be newer than what it read, so the refill does not mark the slice dry.
	changes  int
	jitter   int  // drawn at the last write: lowAt
	refreeze bool // the next write must be frozen (slice lost, spec changed)
	timer    *time.Timer
	// Creates of the tenant this bridge was asked to charge, per second (the current
	// second and the one before): what bounds its slice near the quota's end.
	demandAt                time.Time
	demandNow, demandBefore int
}

// noteDemand counts n creates asked for at now.
func (st *slice) noteDemand(now time.Time, n int) {
	if d := now.Sub(st.demandAt); d >= time.Second || d < 0 {
		st.demandBefore = 0
		if d < 2*time.Second && d >= 0 {
			st.demandBefore = st.demandNow
		}
		st.demandNow, st.demandAt = 0, now
	}
	st.demandNow += n
}

// demand is how many creates the slice should cover for its holder not to wait: two
// seconds' worth at the rate of the last one.
func (st *slice) demand(now time.Time) int {
	st.noteDemand(now, 0)
	return 2 * max(st.demandNow, st.demandBefore)
}

// sliceOf is this bridge's slice state of the tenant, made when there is none.
// Called with l.mu held.
func (l *Ledger) sliceOf(tenant string) *slice {
	st := l.slices[tenant]
	if st == nil {
		st = &slice{ids: map[chargeID]bool{}, size: l.opts.Slices.Initial}
		l.slices[tenant] = st
	}
	return st
}

// chargeFromSlice charges req in memory when this bridge's slice of the tenant covers
// it; false sends it to a write. Called with l.mu held.
func (l *Ledger) chargeFromSlice(req Request, now time.Time) (charged bool) {
	st := l.slices[req.Tenant]
	if st == nil || st.frozen || !now.Before(st.expires) || req.Generation != st.generation || req.Generation == 0 {
		return false
	}
	id := requestID(req)
	if st.ids[id] {
		return true // charged from the slice before, not reported yet: charged once
	}
	if !covers(st.free, req.Amounts) {
		return false
	}
	st.free = Sub(st.free, req.Amounts)
	st.unreported = append(st.unreported, req)
	st.ids[id] = true
	st.lastUse = now
	st.unit = restrict(req.Amounts, st.free)
	if st.refillDue() {
		l.flushLocked(req.Tenant) // refill before it runs out, while charges go on
	} else {
		l.armLocked(req.Tenant, st)
	}
	return true
}

// refillDue says the slice is down to lowAt and a refill may find room.
func (st *slice) refillDue() bool {
	return !st.dry && podsWorth(st.free, st.unit) <= st.lowAt()
}

// lowAt is how many pods left start a refill: half the size, plus a jitter drawn at each
// write so that bridges charging a burst at the same rate do not refill at once.
func (st *slice) lowAt() int { return st.size/2 + st.jitter }

func requestID(req Request) chargeID {
	return chargeID{uid: req.UID, namespace: req.Namespace, name: req.Name}
}

// flushLocked starts a write of the tenant's slice (report, refill) unless one runs.
func (l *Ledger) flushLocked(tenant string) {
	q := l.queues[tenant]
	if q == nil {
		q = &queue{}
		l.queues[tenant] = q
	}
	q.flush = true
	if !q.writing {
		q.writing = true
		go l.drain(tenant, q)
	}
}

// armLocked makes sure a write follows within Report while the slice holds room or
// unreported charges: reports, renewals and the return of an idle slice.
func (l *Ledger) armLocked(tenant string, st *slice) {
	if st.timer != nil {
		return
	}
	// As often as an idle slice is to be returned, at most every Report; a flush
	// with nothing to report or return writes nothing. Once charges have stopped, at
	// the moment the slice becomes idle, not a whole period later.
	wait := min(l.opts.Slices.Report, l.idleAfter(st))
	if until := st.lastUse.Add(l.idleAfter(st)).Sub(l.opts.Now()); until > 0 && until < wait {
		wait = until
	}
	st.timer = time.AfterFunc(wait, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		st.timer = nil
		if l.slices[tenant] == st {
			l.flushLocked(tenant)
		}
	})
}

// idleAfter is how long a slice nothing is charged from is kept: Idle, or a fifth of
// it for a slice held to its share near the quota's end or while the view shows no
// room left outside the slices, where what it holds may be what a create elsewhere
// waits for (othersWait).
func (l *Ledger) idleAfter(st *slice) time.Duration {
	if st.shared || st.crowded {
		return l.opts.Slices.Idle / 5
	}
	return l.opts.Slices.Idle
}

// observeSlice notes whether t, as the view shows it, leaves room outside the slices,
// and returns this bridge's slice at once when none is left and the slice has been idle
// for idleAfter: a create elsewhere may be waiting for it. Called with l.mu held.
func (l *Ledger) observeSlice(t *v1alpha1.OffloadTenant) {
	st := l.slices[t.Name]
	if st != nil && st.rv != t.ResourceVersion {
		st.dry = false // another bridge's write: room may have come back
		st.changes++
	}
	if st == nil || len(st.unit) == 0 || isZero(st.free) {
		return
	}
	was := st.crowded
	st.crowded = podsWorth(unsliced(t), st.unit) < 1
	switch {
	case !st.crowded || st.frozen:
	case l.opts.Now().Sub(st.lastUse) >= l.idleAfter(st):
		l.flushLocked(t.Name)
	case !was && st.timer != nil:
		// Armed for the longer idle time: check again when this one has passed.
		st.timer.Stop()
		st.timer = nil
		l.armLocked(t.Name, st)
	}
}

// maxUnreported is how many charges a slice may hold unreported before a write reports
// them even far from the quota's end.
func maxUnreported(opts SliceOptions) int { return 2 * opts.Max }

// writeSliced is drain's write when slices are on: it reports the slice's charges,
// charges the batch (creates the slice did not cover) exactly, and refills, renews,
// shrinks or returns the slice, in one resourceVersion-checked write.
func (l *Ledger) writeSliced(ctx context.Context, tenant string, batch []*waiter) []error {
	opts := l.opts.Slices
	start := l.opts.Now()
	l.mu.Lock()
	st := l.slices[tenant]
	if st == nil {
		st = l.sliceOf(tenant)
	}
	idle := len(batch) == 0 && start.Sub(st.lastUse) >= l.idleAfter(st)
	// A write that may give room back takes free to zero first: (II). The others only
	// add room, so charges go on from free meanwhile.
	frozen := idle || st.refreeze
	renewal := !start.Before(st.expires.Add(-opts.Lease / 2))
	// The charges are reported (moved into status.pending) where they count: when the
	// slice gives room back, falls short of a create, is held to its share near the
	// quota's end, is renewed, or holds many. A busy slice far from the end is only
	// refilled meanwhile, so the status a burst rewrites stays small (each write, and
	// each replica's decoding of it, costs its size); its charges are inside its room
	// in the status, counted for every other bridge, and recounted from the pods if
	// its holder dies (escrow_reclaim.go).
	report := frozen || len(batch) > 0 || st.shared || renewal || len(st.unreported) >= maxUnreported(opts)
	reportDue := st.shared && len(st.unreported) > 0 && start.Sub(st.lastWrite) >= opts.Report
	if !frozen && len(batch) == 0 && !reportDue && !st.refillDue() && !renewal &&
		len(st.unreported) < maxUnreported(opts) {
		// A check for idleness found none, and no report, refill or renewal is due.
		l.armLocked(tenant, st)
		l.mu.Unlock()
		return nil
	}
	defer l.timeRound(time.Now())
	var reports []Request
	var kept corev1.ResourceList // charged from the slice and not reported by this write
	if report {
		reports, st.unreported = st.unreported, nil
	} else {
		for _, r := range st.unreported {
			kept = add(kept, r.Amounts)
		}
	}
	held := st.free
	if frozen {
		st.frozen, st.free, st.refreeze = true, nil, false
	}
	size, unit, known, demand, changes, low := st.size, st.unit, st.generation, st.demand(start), st.changes, st.lowAt()
	l.mu.Unlock()
	if len(unit) == 0 && len(batch) > 0 {
		unit = batch[len(batch)-1].req.Amounts
	}

	all := make([]Request, 0, len(reports)+len(batch))
	all = append(all, reports...)
	for _, w := range batch {
		all = append(all, w.req)
	}
	confirmed, readErrs := l.readConfirmed(ctx, all)

	results := make([]error, len(batch))
	already := make([]bool, len(batch))
	var room, grant, returned corev1.ResourceList
	var generation int64
	var rv string
	lost, wrote, refreeze, atEnd, refilled, short := false, false, false, false, false, false
	written, adoptedPods := 0, 0
	err := l.writeViewed(ctx, tenant, func(t *v1alpha1.OffloadTenant) error {
		written, wrote, grant, refreeze, adoptedPods, atEnd, short = 0, false, nil, false, 0, false, false
		generation, rv = t.Generation, t.ResourceVersion
		// The pods already running that no charge covers count first (adopt.go), as in
		// an exact write: a slice is granted from what is left of the quota after them.
		adopted, err := l.adopt(ctx, t)
		if err != nil {
			return err
		}
		now := l.opts.Now()
		others := l.otherHolders(tenant, t, now)
		i := sliceIndex(t.Status.Slices, opts.Holder)
		room = corev1.ResourceList{}
		var expires time.Time
		if i >= 0 {
			room, expires = t.Status.Slices[i].Amounts.DeepCopy(), t.Status.Slices[i].Expires.Time
		}
		// A write answering no create keeps every room its charges may be taking.
		lost = !frozen && (i < 0 && !isZero(held) || i >= 0 && t.Generation != known)
		refilled = i >= 0 // a slice held already: a refill, not a first grant
		changed := 0
		// Reports: allowed already, so recorded whatever the quota says now, each
		// moving its amounts from the slice into used; a pod charged meanwhile (another
		// bridge, a report that landed though its answer was lost) gives its room back.
		returned = corev1.ResourceList{}
		for k, r := range reports {
			if confirmed[k] || pendingIndex(t.Status.Pending, l.opts.Cluster, r) >= 0 {
				if i >= 0 {
					returned = add(returned, restrict(r.Amounts, room))
				}
				continue
			}
			room = Sub(room, r.Amounts)
			charge(t, l.opts.Cluster, r, now)
			changed++
		}
		// A duplicate's room was never taken from the slice as stored (room = free +
		// unreported): it stays there, and comes back to free below.
		if frozen {
			// Under the spec as it is now, and (I) whatever happened meanwhile.
			room = clampRoom(t, opts.Holder, restrict(room, t.Spec.Hard))
		}
		setRoom(t, opts.Holder, l.opts.Cluster, room)
		// Creates the slice did not cover: from the slice (frozen: nothing else takes
		// from it), else from the room no slice holds, else they wait for slices to be
		// used or returned (this one's by a frozen write next).
		waitOthers := false
		for k, w := range batch {
			results[k], already[k] = readErrs[len(reports)+k], false
			if results[k] != nil {
				continue
			}
			switch {
			case confirmed[len(reports)+k] || pendingIndex(t.Status.Pending, l.opts.Cluster, w.req) >= 0:
				already[k] = true
			case len(t.Status.Pending) >= l.opts.MaxPending:
				results[k] = fmt.Errorf("the ledger of tenant %q holds %d unconfirmed charges (is the reconciler running?)", tenant, len(t.Status.Pending))
			case frozen && len(t.Spec.Nodes) == 0 && !isZero(room) && covers(room, w.req.Amounts):
				room = Sub(room, w.req.Amounts)
				setRoom(t, opts.Holder, l.opts.Cluster, room)
				charge(t, l.opts.Cluster, w.req, now)
				changed++
			default:
				refusal := fits(t, w.req)
				if refusal == nil {
					charge(t, l.opts.Cluster, w.req, now)
					changed++
					continue
				}
				results[k] = refusal
				switch {
				case !frozen && !isZero(room) && withoutSlices(t, w.req):
					results[k], refreeze = &waitingOthers{refusal}, true
				case withoutOthers(t, opts.Holder, w.req):
					results[k], waitOthers = &waitingOthers{refusal}, true
				}
			}
		}
		// The slice from now on, kept to the quota's end: near it, the room left is
		// split among the bridges charging (grantFor), so the last creates are charged
		// from slices as the first were, not one write per batch.
		share := sharing{others: others, demand: demand}
		switch {
		case !frozen:
			if free := podsWorth(Sub(room, kept), unit); !lost && size > free && free <= low {
				// A slice that ran low while charging is refilled to twice its size
				// (up to Max) at once, not to its size and then again.
				target := size
				if refilled {
					target = max(size, min(2*size, opts.Max))
				}
				grant, atEnd = grantFor(t, opts, l.opts.MaxPending, unit, target-free, share)
				short = podsWorth(grant, unit) < target-free
			}
		case len(t.Spec.Nodes) > 0 || len(t.Spec.Hard) == 0 || idle || waitOthers:
			room = nil // per-node caps are charged exactly; idle or wanted: returned
		default:
			if want := size - podsWorth(room, unit); want > 0 {
				grant, atEnd = grantFor(t, opts, l.opts.MaxPending, unit, want, share)
				short = podsWorth(grant, unit) < want
			}
		}
		room = add(room, grant)
		setRoom(t, opts.Holder, l.opts.Cluster, room)
		renew := i >= 0 && !now.Before(expires.Add(-opts.Lease/2))
		if changed == 0 && len(grant) == 0 && !renew && !(frozen && i >= 0) && !adopted {
			return nil // nothing to record
		}
		if !isZero(room) {
			t.Status.Slices[sliceIndex(t.Status.Slices, opts.Holder)].Expires = metav1.NewTime(now.Add(opts.Lease))
		}
		if adoptedPods, err = l.updateStatus(ctx, t, adopted); err == nil {
			written, wrote, rv = changed, true, t.ResourceVersion
		}
		return err
	})
	l.metrics.adopted.Add(float64(adoptedPods))

	l.mu.Lock()
	defer l.mu.Unlock()
	st.frozen, st.rv = false, rv
	// A refill that found nothing to grant waits for the tenant to change.
	st.dry = err == nil && !wrote && !frozen && len(batch) == 0 && len(grant) == 0 && st.changes == changes
	if err != nil {
		l.metrics.writes.WithLabelValues("error").Inc()
		// Nothing landed: the slice in status is what it was. The reports are kept for
		// the next write (they were answered); the room held comes back.
		st.unreported = append(reports, st.unreported...)
		if frozen {
			st.free = held
		}
		l.armLocked(tenant, st)
		for k := range results {
			if results[k] == nil || isWaitingOthers(results[k]) {
				results[k] = l.chargeError(tenant, err)
			}
		}
		return results
	}
	if wrote {
		l.metrics.writes.WithLabelValues("success").Inc()
		l.metrics.batch.Observe(float64(written))
	}
	for _, r := range reports {
		delete(st.ids, requestID(r))
	}
	switch {
	case frozen:
		st.free = room.DeepCopy()
		st.generation = generation
	case lost || refreeze:
		// The slice was reclaimed, the spec changed, or a create needs the slice's room
		// back: the next write is frozen and decides the room again.
		st.refreeze = true
		st.free = add(st.free, add(grant, returned))
		if isZero(room) {
			st.free = nil
		}
		l.flushLocked(tenant)
	default:
		st.free = add(st.free, add(grant, returned))
		st.generation = generation
	}
	if wrote {
		st.lastWrite = start
		if isZero(room) {
			st.expires = time.Time{}
		} else {
			st.expires = start.Add(opts.Lease - lockMargin)
		}
	}
	st.unit = restrict(unit, room)
	switch {
	case isZero(room):
		st.size = opts.Initial
	case len(grant) > 0 && !frozen && refilled:
		// Ran low while charging: a larger slice. Not on a slice's first grant, whose
		// creates show no rate yet: a refill then would follow at once, a second write
		// beside the other bridges' first ones at a burst's start.
		st.size = min(2*st.size, opts.Max)
	}
	if wrote && !frozen && (len(grant) > 0 || atEnd) {
		st.shared = atEnd
	}
	if isZero(room) {
		st.shared = false
	}
	if held := podsWorth(Sub(room, kept), unit); (atEnd || short) && held > 0 && held < st.size {
		// Held to its share (near the end, or granted less than it asked): refilled at
		// half of what it holds, not of a size it cannot reach, which would write at
		// every charge for a pod or two of room each time.
		st.size = max(held, opts.Min)
	}
	st.jitter = opts.Jitter(st.size/4 + 1)
	if len(st.unreported) > 0 || !isZero(room) {
		l.armLocked(tenant, st)
	}
	for k, r := range results {
		switch {
		case already[k]:
			l.metrics.charges.WithLabelValues("already").Inc()
		case r == nil:
			l.metrics.charges.WithLabelValues("charged").Inc()
		case isRefusal(r):
			l.metrics.charges.WithLabelValues("refused").Inc()
		case isWaitingOthers(r):
		default:
			l.metrics.charges.WithLabelValues("error").Inc()
		}
	}
	return results
}

// waitingOthers: the create fits only once other bridges use or return their slices;
// it is asked again until othersWait has passed, then refused.
type waitingOthers struct{ refusal *Refusal }

func (w *waitingOthers) Error() string { return w.refusal.Message }

func isWaitingOthers(err error) bool {
	var w *waitingOthers
	return errors.As(err, &w)
}

// readConfirmed reads the stored pods' confirmation labels, at once.
func (l *Ledger) readConfirmed(ctx context.Context, reqs []Request) ([]bool, []error) {
	confirmed := make([]bool, len(reqs))
	errs := make([]error, len(reqs))
	sem := make(chan struct{}, maxConcurrentPodReads)
	done := make(chan struct{})
	n := 0
	for i, r := range reqs {
		if !l.readsPod(r) {
			continue
		}
		n++
		go func() {
			sem <- struct{}{}
			confirmed[i], errs[i] = l.alreadyConfirmed(ctx, r)
			<-sem
			done <- struct{}{}
		}()
	}
	for range n {
		<-done
	}
	return confirmed, errs
}

func sliceIndex(slices []v1alpha1.Slice, holder string) int {
	for i, s := range slices {
		if s.Holder == holder {
			return i
		}
	}
	return -1
}

// setRoom records the holder's slice room in t (removed when it holds nothing; the
// expiry of an existing one kept).
func setRoom(t *v1alpha1.OffloadTenant, holder, cluster string, room corev1.ResourceList) {
	i := sliceIndex(t.Status.Slices, holder)
	switch {
	case isZero(room) && i >= 0:
		t.Status.Slices = append(t.Status.Slices[:i:i], t.Status.Slices[i+1:]...)
	case isZero(room):
	case i >= 0:
		t.Status.Slices[i].Amounts = room.DeepCopy()
	default:
		t.Status.Slices = append(t.Status.Slices, v1alpha1.Slice{Holder: holder, Amounts: room.DeepCopy(), Cluster: cluster})
	}
}

// slicesSum is Σ status.slices of holders other than except, per resource.
func slicesSum(t *v1alpha1.OffloadTenant, except string) corev1.ResourceList {
	sum := corev1.ResourceList{}
	for _, s := range t.Status.Slices {
		if s.Holder != except {
			sum = add(sum, s.Amounts)
		}
	}
	return sum
}

// clampRoom lowers the holder's room until used + Σ slices ≤ hard holds with it (I):
// the spec may have been lowered since it was granted.
func clampRoom(t *v1alpha1.OffloadTenant, holder string, room corev1.ResourceList) corev1.ResourceList {
	limit := Sub(t.Spec.Hard, add(t.Status.Used, slicesSum(t, holder)))
	out := make(corev1.ResourceList, len(room))
	for name, q := range room {
		if l := limit[name]; q.Cmp(l) > 0 {
			q = l.DeepCopy()
		}
		out[name] = q
	}
	return out
}

// unsliced is hard − used − Σ slices (t's slices as they are being written).
func unsliced(t *v1alpha1.OffloadTenant) corev1.ResourceList {
	return Sub(t.Spec.Hard, add(t.Status.Used, slicesSum(t, "")))
}

// sharing is what grantFor splits the room left by: how many other bridges charge the
// tenant (slices in its status, or seen there within a lease), and this bridge's demand
// (creates it was asked for in two seconds at its latest rate).
type sharing struct{ others, demand int }

// grantFor is the room to add to opts.Holder's slice: want pods of unit, taken from the
// room no slice holds (hard − used − Σ slices, t's slices as they are being written:
// (I)), and at most 1/grantShare of the pending entries left. The slice is bounded too:
// alone, by 1/grantShare of the room no other slice holds, so the first bridge of a burst
// does not take what the others will ask for a moment later; beside others, by the
// larger of that and an even share of the room left (hard − used) among the bridges
// charging, so slices last to the quota's end rather than go back and leave its last
// creates to a write each (three replicas conflicting on every one). Where that share is
// under Initial pods (the end), it is also bounded by the holder's demand (at least Min):
// a bridge charging slowly holds no more than it uses in two seconds, so what it holds is
// used or returned (idle) before a create waiting elsewhere for others' slices (up to
// othersWait) is refused. nil when that is less than one pod, for a quota under
// grantShare slices of Min (charged exactly), and for a lone holder when what no slice
// holds is under that.
//
// atEnd says the slice was held to its share of the room left near the quota's end
// (the even share under Initial pods bound the grant): its holder refills it at half of
// what it holds and returns it sooner when idle.
func grantFor(t *v1alpha1.OffloadTenant, opts SliceOptions, maxPending int, unit corev1.ResourceList, want int, share sharing) (grant corev1.ResourceList, atEnd bool) {
	u := restrict(unit, t.Spec.Hard)
	if isZero(u) || podsWorth(t.Spec.Hard, u) < grantShare*opts.Min {
		return nil, false
	}
	free := podsWorth(unsliced(t), u)
	if share.others == 0 && free < grantShare*opts.Min {
		return nil, false
	}
	mine := 0
	if i := sliceIndex(t.Status.Slices, opts.Holder); i >= 0 {
		mine = podsWorth(t.Status.Slices[i].Amounts, u)
	}
	limit := (free + mine) / grantShare
	if share.others > 0 {
		// All of it is shared out: a share held back unsliced (tried before) left the
		// last quarter of the quota to exact charges, a write per batch from every
		// replica at once, conflicting (make bench-ledger: slower, and twice the writes
		// at half). A holder whose share runs out first waits for the others' to be
		// used or returned (crowded: after Idle/5 idle).
		even := (podsWorth(Sub(t.Spec.Hard, t.Status.Used), u) + share.others) / (share.others + 1)
		if even < opts.Initial {
			even = min(even, max(opts.Min, share.demand))
			atEnd = even >= limit && want > even-mine
		}
		limit = max(limit, even)
	}
	n := min(want, limit-mine, free, (maxPending-len(t.Status.Pending))/grantShare)
	if n <= 0 {
		return nil, atEnd
	}
	return scale(u, n), atEnd
}

// otherHolders is how many other bridges hold a slice of the tenant in t or did within
// a lease (a slice used up and refilled comes and goes), as this bridge last saw.
func (l *Ledger) otherHolders(tenant string, t *v1alpha1.OffloadTenant, now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := l.holders[tenant]
	if seen == nil {
		seen = map[string]time.Time{}
		l.holders[tenant] = seen
	}
	for _, s := range t.Status.Slices {
		if s.Holder != l.opts.Slices.Holder && !isZero(s.Amounts) {
			seen[s.Holder] = now
		}
	}
	n := 0
	for h, at := range seen {
		if now.Sub(at) > l.opts.Slices.Lease {
			delete(seen, h)
			continue
		}
		n++
	}
	return n
}

// withoutSlices says whether req would fit if every slice were returned.
func withoutSlices(t *v1alpha1.OffloadTenant, req Request) bool {
	return over(t.Name, t.Spec.Hard, t.Status.Used, req.Amounts, "", "") == nil
}

// withoutOthers says whether req would fit if other holders' slices were returned.
func withoutOthers(t *v1alpha1.OffloadTenant, holder string, req Request) bool {
	if isZero(slicesSum(t, holder)) {
		return false
	}
	mine := corev1.ResourceList{}
	if i := sliceIndex(t.Status.Slices, holder); i >= 0 {
		mine = t.Status.Slices[i].Amounts
	}
	return over(t.Name, t.Spec.Hard, add(t.Status.Used, mine), req.Amounts, "", "") == nil
}

func covers(free, amounts corev1.ResourceList) bool {
	if len(free) == 0 {
		return false
	}
	for name, want := range amounts {
		have, ok := free[name]
		if !ok {
			continue // a resource the quota does not cap
		}
		if want.Cmp(have) > 0 {
			return false
		}
	}
	return true
}

// restrict is a's amounts of the resources names lists.
func restrict(a, names corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(names))
	for name := range names {
		if q, ok := a[name]; ok {
			out[name] = q.DeepCopy()
		} else {
			out[name] = resource.Quantity{}
		}
	}
	return out
}

func isZero(a corev1.ResourceList) bool {
	for _, q := range a {
		if !q.IsZero() {
			return false
		}
	}
	return true
}

// podsWorth is how many pods of unit fit in room (0 when unit holds none of room's
// resources: no slice is sized from such a pod).
func podsWorth(room, unit corev1.ResourceList) int {
	n := -1
	for name, q := range unit {
		r, ok := room[name]
		if !ok || q.IsZero() {
			continue
		}
		k := int(r.MilliValue() / q.MilliValue())
		if n < 0 || k < n {
			n = k
		}
	}
	if n < 0 {
		return 0
	}
	return n
}

func scale(unit corev1.ResourceList, n int) corev1.ResourceList {
	out := make(corev1.ResourceList, len(unit))
	for name, q := range unit {
		out[name] = *resource.NewMilliQuantity(q.MilliValue()*int64(n), q.Format)
	}
	return out
}
