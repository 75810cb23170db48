package tenants

// Member clusters. When the OffloadTenants live in a hub that the bridges of several
// clusters charge (--tenants.kubeconfig, --tenants.cluster-name), every charge, slice
// and adoption records the member cluster it belongs to, and each cluster's elected
// reconciler confirms, releases and recounts only its own: it sees only its own pods.
// status.clusters keeps each cluster's usage, and status.used is their sum, so
//
//	used + Σ slices ≤ hard                                                  (I)
//
// holds across every cluster: a charge adds to its cluster's entry and to used at once,
// a recount replaces one entry and moves used by the difference, never touching
// another cluster's part. Without a cluster name (no hub) nothing of this shows: no
// entry is written, and a recount sets used as before.

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// clusterIndex is the index of the cluster's entry in s.Clusters, -1 when none.
func clusterIndex(s *v1alpha1.OffloadTenantStatus, cluster string) int {
	for i := range s.Clusters {
		if s.Clusters[i].Name == cluster {
			return i
		}
	}
	return -1
}

// clusterEntry is the cluster's entry, added (sorted by name) when missing. Never for "".
func clusterEntry(s *v1alpha1.OffloadTenantStatus, cluster string) *v1alpha1.ClusterUsage {
	if i := clusterIndex(s, cluster); i >= 0 {
		return &s.Clusters[i]
	}
	s.Clusters = append(s.Clusters, v1alpha1.ClusterUsage{Name: cluster})
	sort.Slice(s.Clusters, func(i, j int) bool { return s.Clusters[i].Name < s.Clusters[j].Name })
	return &s.Clusters[clusterIndex(s, cluster)]
}

// clustersSum is Σ status.clusters[].used (and per node).
func clustersSum(s *v1alpha1.OffloadTenantStatus) (corev1.ResourceList, map[string]corev1.ResourceList) {
	used := corev1.ResourceList{}
	var nodes map[string]corev1.ResourceList
	for _, c := range s.Clusters {
		used = add(used, c.Used)
		for node, amounts := range c.NodesUsed {
			if nodes == nil {
				nodes = map[string]corev1.ResourceList{}
			}
			nodes[node] = add(nodes[node], amounts)
		}
	}
	return used, nodes
}

// setUsage records a cluster's recount (what its pods held and its charges pending):
// without a cluster name, used is the recount plus every named cluster's entry; with
// one, the cluster's entry is replaced and used moves by the difference, so the other
// clusters' parts (and what bridges without a name charged) stay as they are.
func setUsage(s *v1alpha1.OffloadTenantStatus, spec *v1alpha1.OffloadTenantSpec, cluster string, used corev1.ResourceList, nodes map[string]corev1.ResourceList) {
	if cluster == "" {
		if len(s.Clusters) == 0 {
			s.Used, s.NodesUsed = used, nodes // no hub: as it always was
			return
		}
		others, otherNodes := clustersSum(s)
		s.Used, s.NodesUsed = add(used, others), addNodes(nodes, otherNodes, spec)
		s.ClustersUsed = clustersSummary(s)
		return
	}
	e := clusterEntry(s, cluster)
	oldUsed, oldNodes := e.Used, e.NodesUsed
	e.Used, e.NodesUsed = used, nodes
	// The rest: what every other part holds, as recorded.
	rest := Sub(s.Used, oldUsed)
	s.Used = add(used, rest)
	if len(spec.Nodes) > 0 || len(s.NodesUsed) > 0 {
		restNodes := map[string]corev1.ResourceList{}
		for node, amounts := range s.NodesUsed {
			restNodes[node] = Sub(amounts, oldNodes[node])
		}
		s.NodesUsed = addNodes(nodes, restNodes, spec)
	}
	s.ClustersUsed = clustersSummary(s)
}

// addNodes is a + b for the nodes spec caps (nil when it caps none), every resource a
// node's cap names listed.
func addNodes(a, b map[string]corev1.ResourceList, spec *v1alpha1.OffloadTenantSpec) map[string]corev1.ResourceList {
	if len(spec.Nodes) == 0 {
		return nil
	}
	out := make(map[string]corev1.ResourceList, len(spec.Nodes))
	for node, hard := range spec.Nodes {
		sum := zeros(hard)
		addInto(sum, a[node])
		addInto(sum, b[node])
		out[node] = sum
	}
	return out
}

// chargeCluster adds a charge's amounts to its cluster's entry (charge adds them to used).
func chargeCluster(t *v1alpha1.OffloadTenant, cluster string, req Request) {
	if cluster == "" {
		return
	}
	e := clusterEntry(&t.Status, cluster)
	e.Used = add(e.Used, req.Amounts)
	if _, capped := t.Spec.Nodes[req.Node]; capped && req.Node != "" {
		if e.NodesUsed == nil {
			e.NodesUsed = map[string]corev1.ResourceList{}
		}
		e.NodesUsed[req.Node] = add(e.NodesUsed[req.Node], req.Amounts)
	}
	t.Status.ClustersUsed = clustersSummary(&t.Status)
}

// clustersSummary is "a=3,b=7": the pods each cluster holds, for kubectl get -o wide.
func clustersSummary(s *v1alpha1.OffloadTenantStatus) string {
	parts := make([]string, 0, len(s.Clusters))
	for _, c := range s.Clusters {
		pods := c.Used[corev1.ResourcePods]
		parts = append(parts, fmt.Sprintf("%s=%s", c.Name, pods.String()))
	}
	return strings.Join(parts, ",")
}

// adoption is the cluster's last count of running pods no charge covered.
func adoption(s *v1alpha1.OffloadTenantStatus, cluster string) *v1alpha1.Adoption {
	if cluster == "" {
		return s.Adopted
	}
	if i := clusterIndex(s, cluster); i >= 0 {
		return s.Clusters[i].Adopted
	}
	return nil
}

func setAdoption(s *v1alpha1.OffloadTenantStatus, cluster string, a *v1alpha1.Adoption) {
	if cluster == "" {
		s.Adopted = a
		return
	}
	clusterEntry(s, cluster).Adopted = a
}

// ReleaseCluster removes a member cluster from a tenant's ledger: its pending charges,
// its slices and its usage (an admin's release of a cluster that is gone: its pods
// are no longer counted anywhere). changed says t was modified.
func ReleaseCluster(t *v1alpha1.OffloadTenant, cluster string) (changed bool) {
	s := &t.Status
	pending := s.Pending[:0:0]
	for _, c := range s.Pending {
		if c.Cluster != cluster {
			pending = append(pending, c)
		}
	}
	slices := s.Slices[:0:0]
	for _, sl := range s.Slices {
		if sl.Cluster != cluster {
			slices = append(slices, sl)
		}
	}
	changed = len(pending) != len(s.Pending) || len(slices) != len(s.Slices)
	s.Pending, s.Slices = pending, slices
	s.PendingCount = int32(len(s.Pending))
	if len(s.Slices) == 0 {
		s.Slices = nil
	}
	if len(s.Pending) == 0 {
		s.Pending = nil
	}
	if i := clusterIndex(s, cluster); i >= 0 {
		e := s.Clusters[i]
		s.Used = Sub(s.Used, e.Used)
		for node, amounts := range e.NodesUsed {
			if used, ok := s.NodesUsed[node]; ok {
				s.NodesUsed[node] = Sub(used, amounts)
			}
		}
		s.Clusters = append(s.Clusters[:i:i], s.Clusters[i+1:]...)
		if len(s.Clusters) == 0 {
			s.Clusters = nil
		}
		s.ClustersUsed = clustersSummary(s)
		changed = true
	}
	records := s.Reconcilers[:0:0]
	for _, r := range s.Reconcilers {
		if r.Cluster != cluster {
			records = append(records, r)
		}
	}
	if len(records) != len(s.Reconcilers) {
		s.Reconcilers, changed = records, true
		if len(records) == 0 {
			s.Reconcilers = nil
		}
	}
	return changed
}
