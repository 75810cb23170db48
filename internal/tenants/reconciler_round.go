package tenants

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-kit/log/level"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// Ready condition of an OffloadTenant, and its reasons.
const (
	ConditionReady     = "Ready"
	ReasonReconciled   = "Reconciled"
	ReasonInvalidSpec  = "InvalidSpec"
	readyMessage       = "usage recalculated from the pods charged and the charges pending"
	releaseEnded       = "ended"   // the pod succeeded or failed
	releaseDeleted     = "deleted" // the pod was deleted
	releaseMissing     = "missing" // the charged pod never appeared, or is gone
	reconcileWritten   = "written"
	reconcileUnchanged = "unchanged"
	reconcileError     = "error"
	reconcileDeferred  = "deferred" // to another election's reconciler (elections.go)
)

// chargeID is the pod a charge was made for: by UID when the decision knew it, else by
// namespace and name.
type chargeID struct {
	uid             types.UID
	namespace, name string
}

func idOf(c v1alpha1.Charge) chargeID {
	return chargeID{uid: c.UID, namespace: c.Namespace, name: c.Name}
}

// chargeKey tells one pending entry apart from any other, across re-reads: a charge
// removed after a conflict is exactly the one the round resolved, never a newer charge
// of the same pod.
type chargeKey struct {
	id      chargeID
	node    string
	time    int64 // seconds: what the API keeps of a metav1.Time
	cluster string
}

func keyOf(c v1alpha1.Charge) chargeKey {
	return chargeKey{id: idOf(c), node: c.Node, time: c.Time.Unix(), cluster: c.Cluster}
}

// toConfirm is a pod seen running with one or more pending charges of the tenant.
type toConfirm struct {
	rec     *podRecord
	amounts corev1.ResourceList // the larger of each charge's (and a confirmation's)
	keys    []chargeKey
}

// plan is what a round found out about a tenant's pending charges.
type plan struct {
	confirm  map[types.UID]*toConfirm
	released map[chargeKey]string // by reason
	resolved map[chargeKey]bool   // released, or confirmed on the pod
	// mayYield: the tenant's pending charges leave room enough for its marks to wait
	// for decisions to pause (marks.go).
	mayYield bool
}

// reconcile is one round of one tenant: confirm the pending charges whose pods run,
// release those whose pods ended or never appeared, and write the usage recalculated
// from the pods, in one status write.
func (tm *term) reconcile(ctx context.Context, tenant string) error {
	if _, ok := tm.r.opts.Directory.Quota(tenant); !ok {
		// No quota (any more): nothing charges it. Or this replica's view of the
		// OffloadTenants lags (its informer backing off after the API server restarted,
		// up to a minute): TenantChanged schedules a round once it has caught up. Said
		// at debug level, since a round that does nothing is otherwise silent.
		level.Debug(tm.r.logger).Log("msg", "no quota in this replica's view of the OffloadTenants: nothing to reconcile", "tenant", tenant)
		return nil
	}
	var t v1alpha1.OffloadTenant
	if err := tm.r.opts.Tenants.Get(ctx, client.ObjectKey{Name: tenant}, &t); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted since the directory saw it
		}
		tm.r.metrics.reconciles.WithLabelValues(reconcileError).Inc()
		return fmt.Errorf("reading OffloadTenant %s: %w", tenant, err)
	}
	if tm.r.opts.Cluster == "" && len(t.Status.Clusters) > 0 && !tm.warned[tenant] {
		// A hub's tenant recounted by a bridge without a cluster name: the pods of this
		// cluster that a named reconciler marked would count twice (docs/multicluster.md).
		tm.warned[tenant] = true
		level.Warn(tm.r.logger).Log("msg", "this tenant's ledger is a hub's (status.clusters) but this bridge has no --tenants.cluster-name: give every bridge that charges it a cluster name", "tenant", tenant, "clusters", t.Status.ClustersUsed)
	}
	if other, ok := otherElection(&t.Status, tm.r.opts.Cluster, tm.r.election(), tm.r.opts.Now()); ok {
		tm.deferTo(tenant, other)
		return nil
	}
	tm.verifyVanished(ctx, tenant)
	p := tm.plan(ctx, tenant, t.Status.Pending, tm.view.snapshot())
	tm.confirm(ctx, tenant, p)
	snap := tm.view.snapshot()
	held := snap.holdings(tenant, tm.r.opts.TenantOf) // with this round's confirmations
	rc, err := tm.planReclaim(ctx, tenant, &t, snap)  // expired quota slices (escrow_reclaim.go)
	if err != nil {
		level.Warn(tm.r.logger).Log("msg", "expired quota slices kept for now", "tenant", tenant, "err", err)
	}
	written, err := tm.write(ctx, &t, p.resolved, held, rc)
	switch {
	case errors.Is(err, errOtherElection):
		tm.deferTo(tenant, v1alpha1.ReconcilerRecord{})
		return nil
	case err != nil:
		tm.r.metrics.reconciles.WithLabelValues(reconcileError).Inc()
		return fmt.Errorf("writing the ledger of tenant %s: %w", tenant, err)
	case written:
		tm.r.metrics.reconciles.WithLabelValues(reconcileWritten).Inc()
	default:
		tm.r.metrics.reconciles.WithLabelValues(reconcileUnchanged).Inc()
	}
	for _, reason := range p.released {
		tm.r.metrics.released.WithLabelValues(reason).Inc()
	}
	return nil
}

// plan sorts the tenant's pending charges: a pod seen running is confirmed; a pod seen
// ended is released; a pod not seen keeps its charge unless the charge is older than
// the pending timeout and the API, asked now, has no such pod running. An informer that
// has not seen a pod never releases its charge: it may not have seen it yet
// (kubernetes#123434). Only this cluster's charges are sorted: another cluster's pods
// are out of sight.
func (tm *term) plan(ctx context.Context, tenant string, pending []v1alpha1.Charge, snap *podSnapshot) *plan {
	p := &plan{confirm: map[types.UID]*toConfirm{}, released: map[chargeKey]string{}, resolved: map[chargeKey]bool{},
		mayYield: len(pending) < tm.r.opts.MaxPending/yieldPendingShare}
	now := tm.r.opts.Now()
	for _, c := range pending {
		if c.Cluster != tm.r.opts.Cluster {
			continue
		}
		rec := snap.find(idOf(c))
		if rec != nil && rec.terminated && c.UID == "" {
			// An ended pod of that name, but the charge names no UID: it may be for a
			// new pod of the same name the informer has not seen yet.
			rec = nil
		}
		switch {
		case rec != nil && rec.terminated:
			p.release(keyOf(c), releaseEnded)
		case rec != nil:
			// A pod whose namespace now belongs to another tenant keeps the charge here
			// until it ends: moving it would charge a tenant no decision charged.
			if tm.r.opts.TenantOf(rec.namespace) == tenant {
				p.add(rec, c)
			}
		case now.Sub(c.Time.Time) < tm.r.opts.PendingTimeout:
			// Young: its pod may still be on its way (created, not yet bound or seen).
		default:
			if reason, gone := tm.missing(ctx, c); gone {
				p.release(keyOf(c), reason)
			}
		}
	}
	return p
}

func (p *plan) release(k chargeKey, reason string) {
	p.released[k] = reason
	p.resolved[k] = true
}

func (p *plan) add(rec *podRecord, c v1alpha1.Charge) {
	tc := p.confirm[rec.uid]
	if tc == nil {
		tc = &toConfirm{rec: rec, amounts: corev1.ResourceList{}}
		p.confirm[rec.uid] = tc
	}
	tc.amounts = maxAmounts(tc.amounts, c.Amounts)
	tc.keys = append(tc.keys, keyOf(c))
}

// missing asks the API for the pod of an overdue charge that the informer has not
// seen: gone is true only when the API says the pod does not exist (or is another pod
// now, or has ended). An error keeps the charge.
func (tm *term) missing(ctx context.Context, c v1alpha1.Charge) (reason string, gone bool) {
	if c.Name == "" {
		// Nothing to ask the API for: the charge holds until its pod is seen.
		level.Debug(tm.r.logger).Log("msg", "pending charge without a pod name: kept until its pod is seen", "namespace", c.Namespace, "uid", c.UID)
		return "", false
	}
	var pod corev1.Pod
	err := tm.r.opts.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name}, &pod)
	switch {
	case apierrors.IsNotFound(err):
		return releaseMissing, true
	case err != nil:
		level.Warn(tm.r.logger).Log("msg", "cannot tell whether a charged pod exists: its charge is kept", "namespace", c.Namespace, "pod", c.Name, "err", err)
		return "", false
	case c.UID != "" && pod.UID != c.UID:
		return releaseMissing, true // the name now belongs to another pod
	case podEnded(&pod):
		return releaseEnded, true
	}
	return "", false // it exists and runs, off the virtual nodes so far: still charged
}

func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// verifyVanished asks the API about the tenant's confirmed pods that left the informer
// unseen deleted (their virtual node went away): they count until the API says they
// are gone.
func (tm *term) verifyVanished(ctx context.Context, tenant string) {
	for _, rec := range tm.view.vanishedOf(tenant, tm.r.opts.TenantOf) {
		var pod corev1.Pod
		err := tm.r.opts.Client.Get(ctx, client.ObjectKey{Namespace: rec.namespace, Name: rec.name}, &pod)
		reason := ""
		switch {
		case apierrors.IsNotFound(err) || err == nil && pod.UID != rec.uid:
			reason = releaseDeleted
		case err != nil:
			level.Warn(tm.r.logger).Log("msg", "cannot tell whether a charged pod exists: it still counts", "namespace", rec.namespace, "pod", rec.name, "err", err)
		case podEnded(&pod):
			reason = releaseEnded
		}
		if reason != "" {
			tm.view.forget(rec.uid)
			tm.r.metrics.released.WithLabelValues(reason).Inc()
		}
	}
}

// confirm marks each running pod with pending charges as charged — the label, and the
// amounts it holds from now on — with one merge patch per pod; the pod's UID in the
// patch makes it a precondition, so a pod created again under the name is not marked.
// A pod already marked so is not patched again. A patch that fails leaves the charges
// pending, for the next round.
func (tm *term) confirm(ctx context.Context, tenant string, p *plan) {
	uids := make([]types.UID, 0, len(p.confirm))
	for uid := range p.confirm {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	y := markYielding{busy: tm.r.opts.Busy, allowance: markYield}
	if !p.mayYield {
		y.busy = nil
	}
	for _, uid := range uids {
		tc := p.confirm[uid]
		if tc.rec.label == tenant {
			// Marked before (an earlier round whose status write did not land, or a
			// charge made twice): the pod keeps the larger amounts.
			tc.amounts = maxAmounts(tc.amounts, tc.rec.charged)
		}
		if tc.rec.label != tenant || !sameAmounts(tc.rec.charged, tc.amounts) {
			y.wait(ctx)
			start := time.Now()
			err := tm.mark(ctx, tc.rec, tenant, tc.amounts)
			y.marked += time.Since(start)
			if err != nil {
				level.Warn(tm.r.logger).Log("msg", "cannot mark a charged pod: its charge stays pending", "namespace", tc.rec.namespace, "pod", tc.rec.name, "err", err)
				continue
			}
			tm.r.metrics.confirmed.Inc()
		}
		tm.view.confirm(uid, tenant, tc.amounts)
		for _, k := range tc.keys {
			p.resolved[k] = true
		}
	}
}

func sameAmounts(a, b corev1.ResourceList) bool {
	return a != nil && equality.Semantic.DeepEqual(a, b)
}

// mark writes the label and the amounts annotation on a pod.
func (tm *term) mark(ctx context.Context, rec *podRecord, tenant string, amounts corev1.ResourceList) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         rec.uid,
		"labels":      map[string]string{ChargedLabel: tenant},
		"annotations": map[string]string{ChargedAmountsAnnotation: EncodeAmounts(amounts)},
	}})
	if err != nil {
		return fmt.Errorf("encoding the patch: %w", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: rec.namespace, Name: rec.name}}
	if err := tm.r.opts.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("patching pod %s/%s: %w", rec.namespace, rec.name, err)
	}
	return nil
}

// write sets the tenant's status to what the round found, with a resourceVersion-
// checked update; a conflict (a decision charged meanwhile) re-reads the tenant and
// recomputes from the charges then pending. written is false when nothing changed.
func (tm *term) write(ctx context.Context, first *v1alpha1.OffloadTenant, resolved map[chargeKey]bool, held []holding, rc *reclaim) (written bool, err error) {
	t := first
	attempts := 0
	err = RetryOnConflict(tm.r.opts.Retry, func() error {
		written = false
		if attempts++; attempts > 1 {
			t = &v1alpha1.OffloadTenant{}
			if err := tm.r.opts.Tenants.Get(ctx, client.ObjectKey{Name: first.Name}, t); err != nil {
				return err
			}
		}
		now := tm.r.opts.Now()
		if _, ok := otherElection(&t.Status, tm.r.opts.Cluster, tm.r.election(), now); ok {
			return errOtherElection // it wrote since this round read the tenant
		}
		next := desiredStatus(t, tm.r.opts.Cluster, resolved, held)
		rc.apply(&next, &t.Spec, tm.r.opts.Cluster, held, now)
		if equality.Semantic.DeepEqual(next, t.Status) {
			return nil
		}
		recordElection(&next, tm.r.record(now))
		t.Status = next
		if err := UpdateStatus(ctx, tm.r.opts.Tenants, t); err != nil {
			if apierrors.IsConflict(err) {
				tm.r.metrics.conflicts.Inc()
			}
			return err
		}
		written = true
		return nil
	})
	return written, err
}

// desiredStatus is the tenant's status once the resolved charges are gone and the
// cluster's usage is recalculated: the pods held plus the cluster's charges still pending.
func desiredStatus(t *v1alpha1.OffloadTenant, cluster string, resolved map[chargeKey]bool, held []holding) v1alpha1.OffloadTenantStatus {
	s := *t.Status.DeepCopy()
	s.Pending = nil
	for _, c := range t.Status.Pending {
		if !resolved[keyOf(c)] {
			s.Pending = append(s.Pending, *c.DeepCopy())
		}
	}
	s.PendingCount = int32(len(s.Pending))
	used, nodes := usage(&t.Spec, ofCluster(s.Pending, cluster), held)
	setUsage(&s, &t.Spec, cluster, used, nodes)
	s.ObservedGeneration = t.Generation
	meta.SetStatusCondition(&s.Conditions, readyCondition(t))
	return s
}

// usage sums the pods held and the pending charges whose pods are not among them (a
// charge made while its pod was being confirmed counts once), in total and on each
// virtual node the spec caps. Every resource the spec caps is listed, 0 when unused.
func usage(spec *v1alpha1.OffloadTenantSpec, pending []v1alpha1.Charge, held []holding) (corev1.ResourceList, map[string]corev1.ResourceList) {
	used := zeros(spec.Hard)
	var nodes map[string]corev1.ResourceList
	if len(spec.Nodes) > 0 {
		nodes = make(map[string]corev1.ResourceList, len(spec.Nodes))
		for name, hard := range spec.Nodes {
			nodes[name] = zeros(hard)
		}
	}
	uids := map[types.UID]bool{}
	names := map[types.NamespacedName]bool{}
	for _, h := range held {
		addInto(used, h.amounts)
		if n, ok := nodes[h.rec.node]; ok {
			addInto(n, h.amounts)
		}
		uids[h.rec.uid] = true
		names[types.NamespacedName{Namespace: h.rec.namespace, Name: h.rec.name}] = true
	}
	for _, c := range pending {
		if c.UID != "" && uids[c.UID] || c.UID == "" && names[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] {
			continue
		}
		addInto(used, c.Amounts)
		if n, ok := nodes[c.Node]; ok && c.Node != "" {
			addInto(n, c.Amounts)
		}
	}
	return used, nodes
}

// ofCluster is the charges of the cluster.
func ofCluster(pending []v1alpha1.Charge, cluster string) []v1alpha1.Charge {
	out := make([]v1alpha1.Charge, 0, len(pending))
	for _, c := range pending {
		if c.Cluster == cluster {
			out = append(out, c)
		}
	}
	return out
}

func zeros(hard corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(hard))
	for name, q := range hard {
		out[name] = resource.Quantity{Format: q.Format}
	}
	return out
}

func addInto(sum, amounts corev1.ResourceList) {
	for name, q := range amounts {
		total := sum[name]
		total.Add(q)
		sum[name] = total
	}
}

// readyCondition says whether the tenant's spec can be read: usage is recalculated
// either way, but a negative amount caps nothing a person meant.
func readyCondition(t *v1alpha1.OffloadTenant) metav1.Condition {
	c := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReconciled, Message: readyMessage, ObservedGeneration: t.Generation}
	if err := validateSpec(&t.Spec); err != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonInvalidSpec, err.Error()
	}
	return c
}

// validateSpec finds what the API's schema lets through but a quota cannot mean.
func validateSpec(spec *v1alpha1.OffloadTenantSpec) error {
	errs := negatives("spec.hard", spec.Hard)
	nodes := make([]string, 0, len(spec.Nodes))
	for name := range spec.Nodes {
		nodes = append(nodes, name)
	}
	sort.Strings(nodes)
	for _, name := range nodes {
		if name == "" {
			errs = append(errs, `spec.nodes names a node ""`)
		}
		errs = append(errs, negatives(fmt.Sprintf("spec.nodes[%q]", name), spec.Nodes[name])...)
	}
	if len(errs) == 0 {
		return nil
	}
	// One line: it is a condition's message.
	return errors.New(strings.Join(errs, "; "))
}

func negatives(path string, l corev1.ResourceList) []string {
	var errs []string
	for _, name := range sortedNames(l) {
		if q := l[name]; q.Sign() < 0 {
			errs = append(errs, fmt.Sprintf("%s.%s is negative (%s): no pod could ever fit", path, name, q.String()))
		}
	}
	return errs
}
