package tenants

// Adoption: a tenant's pods that already run on virtual nodes when it gets a quota (or
// its namespaces change) were charged by no decision; a ResourceQuota counts the
// objects that exist when it is created, and so does the ledger. The first charge of
// each spec generation counts them itself, in the charging bridge, from a live list of
// the pods of the virtual nodes, and writes them as pending charges in the same
// resourceVersion-checked write as its own charge. Nothing waits for the elected
// reconciler (which may not run at all for a while); a bridge that loses the write's
// conflict re-reads the tenant, finds the count made for that generation, and only
// charges. The reconciler later confirms the adopted charges like any other: it marks
// their pods (ChargedLabel) as it marks every charged pod it sees running.
//
// Counted: phase Running (the HPC job was submitted), on a virtual node, in one of the
// tenant's namespaces, carrying no ChargedLabel (of any tenant: the reconciler counts a
// marked pod against its namespace's tenant already) and covered by no pending charge
// (by UID, or by namespace and name for a charge made before the pod had a UID). A pod
// bound but not running yet is not counted: its decision at the relay may be on its
// way, and charges it or refuses it when the quota is full.

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// RunningPods lists, live, the pods bound to the virtual nodes (virtualpods.List): what
// a tenant's first charge of a spec generation adopts. An error (the bridge's view of
// the nodes or namespaces not synced, the API unreachable) fails the charge.
type RunningPods interface {
	VirtualPods(ctx context.Context) ([]*corev1.Pod, error)
}

// maxAdoptedNames bounds the names status.adopted lists.
const maxAdoptedNames = 10

// needsAdoption says whether the tenant's ledger has not counted, for its current spec,
// the pods already running.
func needsAdoption(t *v1alpha1.OffloadTenant, cluster string) bool {
	a := adoption(&t.Status, cluster)
	return a == nil || a.Generation < t.Generation
}

// Observe is called with every OffloadTenant the bridge's directory sees added or
// changed: a tenant with a quota whose current spec has not had its running pods counted
// gets the count now, in a write of its own (drain's, with no charge waiting), rather
// than in the path of its first create, which would otherwise wait for a live list of
// every pod on the virtual nodes (seconds, in a large cluster). Every replica tries;
// the resourceVersion check lets one count land, and the others find it counted. A
// count that fails (the views not synced yet, the API unreachable) is left to the first
// charge, as before. A ledger that cannot write (check, who-can) does nothing.
//
// Any change wakes the tenant's creates that wait for others' slices (awaitOthers),
// tells this bridge's slice whether room is left outside the slices (observeSlice), and
// is what a slice's write retried after a conflict may read (viewed.go): t is kept, as
// an informer's objects are, and must not be changed afterwards.
func (l *Ledger) Observe(t *v1alpha1.OffloadTenant) {
	if l.client == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noteViewed(t)
	if !hasQuota(t) {
		return
	}
	l.wakeLocked(t)
	l.observeSlice(t)
	if needsAdoption(t, l.opts.Cluster) {
		l.flushLocked(t.Name)
	}
}

// adopt counts the tenant's running pods no charge covers into t (pending charges,
// usage, status.adopted), when its ledger has not counted them for this spec
// generation. changed says t was modified. It fails, never guesses, when the pods
// cannot be listed.
func (l *Ledger) adopt(ctx context.Context, t *v1alpha1.OffloadTenant) (changed bool, err error) {
	if changed, err = l.adoptPods(ctx, t); err != nil {
		return false, fmt.Errorf("counting the pods of tenant %q already running on virtual nodes (its quota is new or its spec changed; nothing is charged until they are counted): %w", t.Name, err)
	}
	return changed, nil
}

// adoptPods is adopt without the error's context.
func (l *Ledger) adoptPods(ctx context.Context, t *v1alpha1.OffloadTenant) (changed bool, err error) {
	if !needsAdoption(t, l.opts.Cluster) {
		return false, nil
	}
	if l.opts.Running == nil || l.opts.TenantOf == nil {
		return false, errors.New("this bridge has no view of the pods running on virtual nodes")
	}
	pods, err := l.opts.Running.VirtualPods(ctx)
	if err != nil {
		return false, err
	}
	found := adoptable(t, l.opts.Cluster, pods, l.opts.TenantOf)
	if n := len(t.Status.Pending) + len(found); len(found) > 0 && n > l.opts.MaxPending {
		return false, fmt.Errorf("%d running pods no charge covers and %d charges pending are over the %d unconfirmed charges the ledger may hold (--quota.max-pending)", len(found), len(t.Status.Pending), l.opts.MaxPending)
	}
	now := l.opts.Now()
	a := &v1alpha1.Adoption{Generation: t.Generation, Time: metav1.NewTime(now), Pods: int32(len(found))}
	for _, p := range found {
		amounts := PodAmounts(p)
		charge(t, l.opts.Cluster, Request{Tenant: t.Name, UID: p.UID, Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Amounts: amounts}, now)
		if len(a.Names) < maxAdoptedNames {
			a.Names = append(a.Names, p.Namespace+"/"+p.Name)
		}
	}
	setAdoption(&t.Status, l.opts.Cluster, a)
	return true, nil
}

// adoptable lists, sorted by namespace and name, the pods of t's namespaces that run
// and that no charge of the cluster covers.
func adoptable(t *v1alpha1.OffloadTenant, cluster string, pods []*corev1.Pod, tenantOf func(namespace string) string) []*corev1.Pod {
	uids := make(map[types.UID]bool, len(t.Status.Pending))
	names := make(map[types.NamespacedName]bool, len(t.Status.Pending))
	for _, c := range t.Status.Pending {
		if c.Cluster != cluster {
			continue
		}
		if c.UID != "" {
			uids[c.UID] = true
		} else {
			names[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = true
		}
	}
	tenants := map[string]string{}
	var out []*corev1.Pod
	for _, p := range pods {
		if _, marked := p.Labels[ChargedLabel]; marked || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" ||
			uids[p.UID] || names[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] {
			continue
		}
		owner, ok := tenants[p.Namespace]
		if !ok {
			owner = tenantOf(p.Namespace)
			tenants[p.Namespace] = owner
		}
		if owner == t.Name {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
