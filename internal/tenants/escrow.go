package tenants

// The escrow (quota slices): a bridge holds a slice of a tenant's remaining quota,
// recorded in the tenant's status (status.slices: holder, room, expiry), and charges
// allowed creates against it in memory; its charges reach status.pending in batches
// (a report), in the same resourceVersion-checked writes that refill, renew or return
// the slice. A create that does not fit the slice waits for a write, as every create
// did before.
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
// and charges only what free covers, so what it admitted and has not reported is
// inside its slice: the creates allowed are never more than used + Σ slices ≤ hard.
// (II) holds across writes because a write that runs while creates are charged from
// free only grows the slice (a report, a refill, creates charged beside it), and a
// write that may shrink it (a return: idle, near the quota's end, wanted by a create
// only the slice's room could fit; a spec changed) first takes free to zero, so
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
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
}

// Defaults of SliceOptions. A burst of 1,000 creates over three bridges is decided in
// a second or two: slices of 128 pods doubling up to 512, refilled when half used, and a
// report a second cost a bridge a handful of writes for its third of the burst (make
// bench-ledger); every write is one more chance to conflict with the other bridges' and
// the reconciler's, each conflict a re-read and rewrite of a status of up to 2,000
// pending charges, so fewer writes is what keeps the slowest creates fast. A slice of
// a quarter at most of the room no other slice holds, and no grant below four slices of
// Min unsliced, keeps a nearly full (or small) quota in the unsliced remainder, charged
// exactly.
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
	frozen     bool                // a write is giving room back: free is 0 meanwhile
	refreeze   bool                // the next write must be frozen (slice lost, spec changed)
	timer      *time.Timer
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
	if podsWorth(st.free, st.unit) <= st.size/2 {
		l.flushLocked(req.Tenant) // refill before it runs out, while charges go on
	} else {
		l.armLocked(req.Tenant, st)
	}
	return true
}

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
	// with nothing to report or return writes nothing.
	st.timer = time.AfterFunc(min(l.opts.Slices.Report, l.opts.Slices.Idle), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		st.timer = nil
		if l.slices[tenant] == st {
			l.flushLocked(tenant)
		}
	})
}

// writeSliced is drain's write when slices are on: it reports the slice's charges,
// charges the batch (creates the slice did not cover) exactly, and refills, renews,
// shrinks or returns the slice, in one resourceVersion-checked write.
func (l *Ledger) writeSliced(ctx context.Context, tenant string, batch []*waiter) []error {
	opts := l.opts.Slices
	start := l.opts.Now()
	l.mu.Lock()
	st := l.slices[tenant]
	if st == nil {
		st = &slice{ids: map[chargeID]bool{}, size: opts.Initial}
		l.slices[tenant] = st
	}
	idle := len(batch) == 0 && start.Sub(st.lastUse) >= opts.Idle
	// A write that may give room back takes free to zero first: (II). The others only
	// add room, so charges go on from free meanwhile.
	frozen := idle || st.refreeze
	if !frozen && len(batch) == 0 && start.Sub(st.lastWrite) < opts.Report && podsWorth(st.free, st.unit) > st.size/2 &&
		start.Before(st.expires.Add(-opts.Lease/2)) {
		// A check for idleness found none, and no report, refill or renewal is due.
		l.armLocked(tenant, st)
		l.mu.Unlock()
		return nil
	}
	defer l.timeRound(time.Now())
	reports := st.unreported
	st.unreported = nil
	held := st.free
	if frozen {
		st.frozen, st.free, st.refreeze = true, nil, false
	}
	size, unit, known := st.size, st.unit, st.generation
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
	lost, wrote, refreeze, nearEnd := false, false, false, false
	written, adoptedPods := 0, 0
	err := RetryOnConflict(l.opts.Retry, func() error {
		written, wrote, grant, refreeze, adoptedPods = 0, false, nil, false, 0
		var t v1alpha1.OffloadTenant
		if err := l.client.Get(ctx, client.ObjectKey{Name: tenant}, &t); err != nil {
			return err
		}
		generation = t.Generation
		// The pods already running that no charge covers count first (adopt.go), as in
		// an exact write: a slice is granted from what is left of the quota after them.
		adopted, err := l.adopt(ctx, &t)
		if err != nil {
			return err
		}
		now := l.opts.Now()
		i := sliceIndex(t.Status.Slices, opts.Holder)
		room = corev1.ResourceList{}
		var expires time.Time
		if i >= 0 {
			room, expires = t.Status.Slices[i].Amounts.DeepCopy(), t.Status.Slices[i].Expires.Time
		}
		// A write answering no create keeps every room its charges may be taking.
		lost = !frozen && (i < 0 && !isZero(held) || i >= 0 && t.Generation != known)
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
			charge(&t, l.opts.Cluster, r, now)
			changed++
		}
		// A duplicate's room was never taken from the slice as stored (room = free +
		// unreported): it stays there, and comes back to free below.
		if frozen {
			// Under the spec as it is now, and (I) whatever happened meanwhile.
			room = clampRoom(&t, opts.Holder, restrict(room, t.Spec.Hard))
		}
		setRoom(&t, opts.Holder, l.opts.Cluster, room)
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
				setRoom(&t, opts.Holder, l.opts.Cluster, room)
				charge(&t, l.opts.Cluster, w.req, now)
				changed++
			default:
				refusal := fits(&t, w.req)
				if refusal == nil {
					charge(&t, l.opts.Cluster, w.req, now)
					changed++
					continue
				}
				results[k] = refusal
				switch {
				case !frozen && !isZero(room) && withoutSlices(&t, w.req):
					results[k], refreeze = &waitingOthers{refusal}, true
				case withoutOthers(&t, opts.Holder, w.req):
					results[k], waitOthers = &waitingOthers{refusal}, true
				}
			}
		}
		// The slice from now on. Near the quota's end (what no slice holds is under four
		// slices of Min) slices go back, so none is stranded in a replica that does not
		// need it: the last creates are charged exactly, one write per batch.
		nearEnd = len(unit) > 0 && podsWorth(unsliced(&t), restrict(unit, t.Spec.Hard)) < grantShare*opts.Min
		switch {
		case !frozen:
			if !lost && !nearEnd && size > podsWorth(room, unit) && podsWorth(room, unit) < size/2+1 {
				grant = grantFor(&t, opts, l.opts.MaxPending, unit, size-podsWorth(room, unit))
			}
		case len(t.Spec.Nodes) > 0 || len(t.Spec.Hard) == 0 || idle || waitOthers || nearEnd:
			room = nil // per-node caps are charged exactly; idle, wanted or near the end: returned
		default:
			if want := size - podsWorth(room, unit); want > 0 {
				grant = grantFor(&t, opts, l.opts.MaxPending, unit, want)
			}
		}
		room = add(room, grant)
		setRoom(&t, opts.Holder, l.opts.Cluster, room)
		renew := i >= 0 && !now.Before(expires.Add(-opts.Lease/2))
		if changed == 0 && len(grant) == 0 && !renew && !(frozen && i >= 0) && !adopted {
			return nil // nothing to record
		}
		if !isZero(room) {
			t.Status.Slices[sliceIndex(t.Status.Slices, opts.Holder)].Expires = metav1.NewTime(now.Add(opts.Lease))
		}
		if adoptedPods, err = l.updateStatus(ctx, &t, adopted); err == nil {
			written, wrote = changed, true
		}
		return err
	})
	l.metrics.adopted.Add(float64(adoptedPods))

	l.mu.Lock()
	defer l.mu.Unlock()
	st.frozen = false
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
	case lost || refreeze || nearEnd && !isZero(room):
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
	case len(grant) > 0 && !frozen:
		st.size = min(2*st.size, opts.Max) // ran low while charging: a larger slice
	}
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

// grantFor is the room to add to opts.Holder's slice: want pods of unit, so that the slice
// holds at most 1/grantShare of the room no other slice holds (hard − used − Σ others'
// slices, t's slices as they are being written), and at most 1/grantShare of the
// pending entries left; nil when that is less than one pod, or when what no slice holds
// is less than grantShare slices of the smallest size: near its end (and for a small
// quota) every create is charged with a write, as without slices, so no room is
// stranded in a replica that does not need it. The bound is on the slice, not on each
// grant: a holder topped up grant after grant near the end of a small quota held a
// third of it (hard 200: 50, then 21 more), which a replica that dies strands until its
// lease expires.
func grantFor(t *v1alpha1.OffloadTenant, opts SliceOptions, maxPending int, unit corev1.ResourceList, want int) corev1.ResourceList {
	u := restrict(unit, t.Spec.Hard)
	free := podsWorth(unsliced(t), u)
	if free < grantShare*opts.Min {
		return nil
	}
	mine := 0
	if i := sliceIndex(t.Status.Slices, opts.Holder); i >= 0 {
		mine = podsWorth(t.Status.Slices[i].Amounts, u)
	}
	n := min(want, (free+mine)/grantShare-mine, (maxPending-len(t.Status.Pending))/grantShare)
	if n <= 0 || isZero(u) {
		return nil
	}
	return scale(u, n)
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
