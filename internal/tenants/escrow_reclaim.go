package tenants

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// ReclaimGrace is how long after a slice's expiry the reconciler takes it back: its
// holder stopped charging from it lockMargin before the expiry, so by then every pod a
// create it allowed made is stored (escrow.go).
const ReclaimGrace = 5 * time.Second

// reclaim is what a round takes back: the expired slices of holders, and the pods
// their holders may have admitted that no charge counts.
type reclaim struct {
	holders map[string]bool
	adopt   []v1alpha1.Charge
}

// planReclaim finds the tenant's expired slices and, when there are any, reads from
// the API every pod of the tenant's namespaces that a dead holder could have admitted
// and that nothing counts: not ended, without the mark and without a pending charge,
// created before the slice expired, on a virtual node or not bound yet (and then
// tolerating the virtual nodes' taints). An error takes nothing back: the slices keep
// holding their room.
func (tm *term) planReclaim(ctx context.Context, tenant string, t *v1alpha1.OffloadTenant, snap *podSnapshot) (*reclaim, error) {
	now := tm.r.opts.Now()
	var rc *reclaim
	var latest time.Time
	for _, s := range t.Status.Slices {
		// Another cluster's slice: its pods, which its holder may have admitted, are
		// out of sight; that cluster's reconciler takes it back.
		if s.Cluster == tm.r.opts.Cluster && now.After(s.Expires.Add(ReclaimGrace)) {
			if rc == nil {
				rc = &reclaim{holders: map[string]bool{}}
			}
			rc.holders[s.Holder] = true
			if s.Expires.After(latest) {
				latest = s.Expires.Time
			}
		}
	}
	if rc == nil {
		return nil, nil
	}
	for _, ns := range tm.namespacesOf(tenant, t) {
		var pods corev1.PodList
		if err := tm.r.opts.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing the pods of namespace %s to take back expired quota slices: %w", ns, err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			req := Request{UID: p.UID, Namespace: p.Namespace, Name: p.Name}
			switch {
			case podEnded(p), p.Labels[ChargedLabel] == tenant, pendingIndex(t.Status.Pending, tm.r.opts.Cluster, req) >= 0,
				p.CreationTimestamp.After(latest.Add(time.Second)):
				continue
			case p.Spec.NodeName != "" && snap.find(chargeID{uid: p.UID}) == nil:
				continue // bound to a node that is not virtual
			case p.Spec.NodeName == "" && !toleratesVirtual(p):
				continue
			}
			rc.adopt = append(rc.adopt, v1alpha1.Charge{UID: p.UID, Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName,
				Amounts: PodAmounts(p), Time: metav1.NewTime(now), Cluster: tm.r.opts.Cluster})
		}
	}
	return rc, nil
}

// namespacesOf lists the tenant's namespaces: its spec's, and those the namespace
// informer maps to it.
func (tm *term) namespacesOf(tenant string, t *v1alpha1.OffloadTenant) []string {
	set := map[string]bool{}
	for _, ns := range t.Spec.Namespaces {
		set[ns] = true
	}
	if tm.r.opts.Namespaces != nil {
		for _, key := range tm.r.opts.Namespaces.GetStore().ListKeys() {
			if tm.r.opts.TenantOf(key) == tenant {
				set[key] = true
			}
		}
	}
	if len(set) == 0 {
		set[tenant] = true
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// toleratesVirtual says whether an unbound pod may go to a virtual node: it tolerates
// interLink's taint (virtual-node.interlink/...) or every taint.
func toleratesVirtual(p *corev1.Pod) bool {
	for _, tol := range p.Spec.Tolerations {
		if tol.Key == "" && tol.Operator == corev1.TolerationOpExists || strings.HasPrefix(tol.Key, "virtual-node.interlink/") {
			return true
		}
	}
	return false
}

// apply drops the expired slices (still expired in s: a holder that renewed keeps its
// own) and, when it dropped any, adds the adopted pods as pending charges, recalculating
// usage.
func (rc *reclaim) apply(s *v1alpha1.OffloadTenantStatus, spec *v1alpha1.OffloadTenantSpec, cluster string, held []holding, now time.Time) {
	if rc == nil {
		return
	}
	kept := s.Slices[:0:0]
	dropped := false
	for _, sl := range s.Slices {
		if rc.holders[sl.Holder] && now.After(sl.Expires.Add(ReclaimGrace)) {
			dropped = true
			continue
		}
		kept = append(kept, sl)
	}
	if !dropped {
		return
	}
	s.Slices = kept
	for _, c := range rc.adopt {
		if pendingIndex(s.Pending, cluster, Request{UID: c.UID, Namespace: c.Namespace, Name: c.Name}) < 0 {
			s.Pending = append(s.Pending, *c.DeepCopy())
		}
	}
	s.PendingCount = int32(len(s.Pending))
	used, nodes := usage(spec, ofCluster(s.Pending, cluster), held)
	setUsage(s, spec, cluster, used, nodes)
}
