package tenants

// Adoption: a tenant's pods that run on virtual nodes with no charge covering them are
// counted, as a ResourceQuota counts the objects that exist when it is created. They
// ran before the tenant had a quota (or reached the virtual nodes with no bridge in
// their path), so no decision charged them; without adoption usage would start from
// zero and the quota would admit its whole size again on top of them.
//
// Only running pods are adopted (phase Running: the HPC job was submitted). A pod bound
// to a virtual node but still Pending may be waiting for its decision at the relay,
// which charges it, or refuses it when the quota is full (the burst case: exactly the
// quota's worth of bound pods run); adopting it would count it before that decision and
// let it through uncounted against the quota.
//
// Adopted pods get the same marks as a confirmed charge (ChargedLabel and the amounts
// their spec holds), so every later round, on any replica, counts them as charged; the
// round records them in status.adopted, which kubectl describe shows. A decision that
// charges an adopted pod later (its relay create after a restart) finds the marks and
// charges nothing again.

import (
	"context"
	"fmt"
	"sort"

	"github.com/go-kit/log/level"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// maxAdoptedNames bounds the names status.adopted lists.
const maxAdoptedNames = 10

// adoptable lists the tenant's running pods that nothing counts: unmarked, not marked
// by this term, not ended, and covered by no pending charge (by UID, or by namespace
// and name for a charge made before the pod had a UID).
func (s *podSnapshot) adoptable(tenant string, tenantOf func(string) string, pending []v1alpha1.Charge) []*podRecord {
	uids := make(map[types.UID]bool, len(pending))
	names := make(map[types.NamespacedName]bool, len(pending))
	for _, c := range pending {
		if c.UID != "" {
			uids[c.UID] = true
		} else {
			names[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = true
		}
	}
	var out []*podRecord
	for uid, rec := range s.byUID {
		if !rec.running || rec.terminated || rec.labelled || uids[uid] || names[types.NamespacedName{Namespace: rec.namespace, Name: rec.name}] {
			continue
		}
		if _, patched := s.confirmed[uid]; patched || tenantOf(rec.namespace) != tenant {
			continue
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].namespace != out[j].namespace {
			return out[i].namespace < out[j].namespace
		}
		return out[i].name < out[j].name
	})
	return out
}

// adopt marks the tenant's adoptable pods charged with what their spec holds and
// returns the adoption to record, nil when there was none. A pod whose patch fails is
// left for the next round: it counts nothing meanwhile, as before its quota.
func (tm *term) adopt(ctx context.Context, tenant string, pending []v1alpha1.Charge, snap *podSnapshot) *v1alpha1.Adoption {
	var a *v1alpha1.Adoption
	for _, rec := range snap.adoptable(tenant, tm.r.opts.TenantOf, pending) {
		amounts := rec.spec.DeepCopy()
		amounts[ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
		if err := tm.mark(ctx, rec, tenant, amounts); err != nil {
			level.Warn(tm.r.logger).Log("msg", "cannot mark a running pod no charge covers: adopted at a later round", "namespace", rec.namespace, "pod", rec.name, "err", err)
			continue
		}
		tm.view.confirm(rec.uid, tenant, amounts)
		tm.r.metrics.adopted.Inc()
		if a == nil {
			a = &v1alpha1.Adoption{Time: metav1.NewTime(tm.r.opts.Now())}
		}
		a.Pods++
		if len(a.Names) < maxAdoptedNames {
			a.Names = append(a.Names, fmt.Sprintf("%s/%s", rec.namespace, rec.name))
		}
	}
	if a != nil {
		level.Info(tm.r.logger).Log("msg", "counted running pods no charge covered", "tenant", tenant, "pods", a.Pods)
	}
	return a
}
