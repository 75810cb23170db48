package tenants

// One election per tenant and cluster. Every replica of a cluster must elect its
// reconciler through the same Lease (--quota.lease-namespace): a second election runs a
// second reconciler, and the two recount a tenant's usage from pod informers that lag
// each other, so one that recounts before its informer shows the pods the other just
// confirmed (and took out of status.pending) counts too little, and creates over the
// quota are allowed (an end-to-end test with two elections saw 51 pods admitted under
// pods: 40). Nothing in the cluster tells a replica that another election exists, so
// the tenant's status says which one reconciles it: every reconciler write records its
// election (status.reconcilers, per cluster), and a reconciler of another election
// leaves the tenant alone — no mark, no release, no recount — while that record is
// younger than ElectionHold. The one that wrote first keeps the tenant while it keeps
// writing; another takes over only after a quiet ElectionHold, long after any informer
// has caught up. A replica that defers says so (a warning once per term and tenant, and
// sar_bridge_ledger_reconciles_total{result="deferred"}).

import (
	"errors"
	"time"

	"github.com/go-kit/log/level"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// ElectionHold is how long a tenant stays with the election whose reconciler last
// wrote its status: far longer than informers lag, and a few rounds (DefaultInterval).
const ElectionHold = 2 * time.Minute

// errOtherElection: a reconciler of another election wrote the tenant meanwhile.
var errOtherElection = errors.New("another election's reconciler reconciles this tenant")

// otherElection is the record of another election that reconciles the tenant for
// cluster, when it wrote less than ElectionHold before now.
func otherElection(s *v1alpha1.OffloadTenantStatus, cluster, election string, now time.Time) (v1alpha1.ReconcilerRecord, bool) {
	for _, r := range s.Reconcilers {
		if r.Cluster == cluster && r.Election != election && now.Sub(r.Time.Time) < ElectionHold {
			return r, true
		}
	}
	return v1alpha1.ReconcilerRecord{}, false
}

// recordElection makes rec the cluster's record in s.
func recordElection(s *v1alpha1.OffloadTenantStatus, rec v1alpha1.ReconcilerRecord) {
	for i := range s.Reconcilers {
		if s.Reconcilers[i].Cluster == rec.Cluster {
			s.Reconcilers[i] = rec
			return
		}
	}
	s.Reconcilers = append(s.Reconcilers, rec)
}

// election is the Lease this reconciler is elected through, as records name it.
func (r *Reconciler) election() string {
	return r.opts.LeaseNamespace + "/" + r.opts.LeaseName
}

// record is what this reconciler writes into a status it changes.
func (r *Reconciler) record(now time.Time) v1alpha1.ReconcilerRecord {
	return v1alpha1.ReconcilerRecord{Cluster: r.opts.Cluster, Election: r.election(), Holder: r.opts.Identity, Time: metav1.NewTime(now)}
}

// deferTo leaves the tenant to another election's reconciler (other, when known), and
// says so once per term.
func (tm *term) deferTo(tenant string, other v1alpha1.ReconcilerRecord) {
	tm.r.metrics.reconciles.WithLabelValues(reconcileDeferred).Inc()
	if tm.deferred[tenant] {
		return
	}
	tm.deferred[tenant] = true
	level.Warn(tm.r.logger).Log("msg", "another election's reconciler reconciles this tenant: every replica and sidecar of a cluster must name the same --quota.lease-namespace; this one leaves the tenant alone while the other keeps writing it",
		"tenant", tenant, "election", tm.r.election(), "other_election", other.Election, "other_holder", other.Holder, "other_wrote", other.Time.UTC().Format(time.RFC3339))
}
