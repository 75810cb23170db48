package tenants

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

func inCluster(c v1alpha1.Charge, cluster string) v1alpha1.Charge { c.Cluster = cluster; return c }

// hubTenant is team-a on a hub: cluster a has an overdue charge of pod x (whose pod
// cluster b's API does not have), cluster b a young charge of pod y.
func hubTenant() *v1alpha1.OffloadTenant {
	t := quotaTenant("team-a",
		inCluster(pendingCharge("team-a", "x", "2", 10*time.Minute), "a"),
		inCluster(pendingCharge("team-a", "y", "1", 10*time.Second), "b"))
	t.Status.Clusters = []v1alpha1.ClusterUsage{
		{Name: "a", Used: list("pods", "1", "cpu", "2"), NodesUsed: map[string]corev1.ResourceList{"vk-1": list("cpu", "2")}},
		{Name: "b", Used: list("pods", "1", "cpu", "1"), NodesUsed: map[string]corev1.ResourceList{"vk-1": list("cpu", "1")}},
	}
	t.Status.Used = list("pods", "2", "cpu", "3")
	t.Status.NodesUsed = map[string]corev1.ResourceList{"vk-1": list("cpu", "3")}
	return t
}

// TestReconcileOwnClusterOnly: cluster b's reconciler, its tenants on a hub, confirms
// b's charge on b's pod and never releases a's overdue charge (a's pod is out of its
// sight, never asked for); its recount replaces b's part only, used the sum.
func TestReconcileOwnClusterOnly(t *testing.T) {
	var hubCalls, bCalls calls
	hubClient, _ := recClient(t, &hubCalls, nil, hubTenant())
	y := runningPod("team-a", "y", "1")
	podsB, apiB := recClient(t, &bCalls, nil, y.DeepCopy())
	r, err := NewReconciler(ReconcilerOptions{
		Client: podsB, Tenants: hubClient, Cluster: "b",
		Pods: func() (PodSource, error) { return newFakeSource(), nil }, Directory: fakeDir{"team-a": nil}, TenantOf: tenantOf,
		LeaseClient: kubefake.NewClientset(), LeaseNamespace: "sar-bridge",
		Now: func() time.Time { return testNow }, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	tm := r.newTerm()
	t.Cleanup(tm.queue.ShutDown)
	tm.view.OnAdd("vk-1", y)
	reconcileOK(t, tm, "team-a")

	if p := getPod(t, apiB, "team-a", "y"); p.Labels[ChargedLabel] != "team-a" {
		t.Errorf("pod y in b: labels %v, want it marked charged", p.Labels)
	}
	if bCalls.podGets.Load() != 0 {
		t.Errorf("%d pod GETs in cluster b, want none (x is cluster a's)", bCalls.podGets.Load())
	}
	s := status(t, hubClient, "team-a")
	if len(s.Pending) != 1 || s.Pending[0].Name != "x" || s.Pending[0].Cluster != "a" {
		t.Fatalf("pending %+v, want a's charge of x alone", s.Pending)
	}
	wantUsed(t, s, "pods", "2", "cpu", "3")
	if s.ClustersUsed != "a=1,b=1" || len(s.Clusters) != 2 {
		t.Errorf("clusters %+v (%q), want a=1,b=1", s.Clusters, s.ClustersUsed)
	}

	// y deleted in b: b's part drops to 0, a's stays.
	deleted := getPod(t, apiB, "team-a", "y")
	deleting(deleted)
	tm.view.OnDelete("vk-1", deleted)
	reconcileOK(t, tm, "team-a")
	s = status(t, hubClient, "team-a")
	wantUsed(t, s, "pods", "1", "cpu", "2")
	if got := s.NodesUsed["vk-1"][corev1.ResourceCPU]; got.String() != "2" {
		t.Errorf("nodesUsed %v, want 2 cpu on vk-1 (a's)", s.NodesUsed)
	}
	if s.ClustersUsed != "a=1,b=0" {
		t.Errorf("clustersUsed %q, want a=1,b=0", s.ClustersUsed)
	}
}

// TestLedgerChargesPerCluster: a bridge of cluster b charges a pod whose namespace and
// name cluster a has a charge of (another pod), records its cluster on the charge and
// in status.clusters, and counts its own cluster's running pods (adoption) apart.
func TestLedgerChargesPerCluster(t *testing.T) {
	ten := tenant("team-a", list("pods", "3"), nil)
	ten.Status.Pending = []v1alpha1.Charge{{Namespace: "team-a", Name: "job", Amounts: list("pods", "1"), Cluster: "a"}}
	ten.Status.PendingCount = 1
	ten.Status.Used = list("pods", "1")
	ten.Status.Clusters = []v1alpha1.ClusterUsage{{Name: "a", Used: list("pods", "1"), Adopted: &v1alpha1.Adoption{}}}
	ten.Status.Adopted = &v1alpha1.Adoption{}
	c := fakeClient(t, interceptor.Funcs{}, ten)
	l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Cluster: "b"})
	ctx := context.Background()
	job := Request{Tenant: "team-a", Namespace: "team-a", Name: "job", Amounts: list("pods", "1")}
	if err := l.Charge(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := l.Charge(ctx, job); err != nil { // b's own charge again: once
		t.Fatal(err)
	}
	s := status(t, c, "team-a")
	if len(s.Pending) != 2 || s.Pending[1].Cluster != "b" {
		t.Fatalf("pending %+v, want a's and b's charges of team-a/job", s.Pending)
	}
	wantUsed(t, s, "pods", "2")
	if s.ClustersUsed != "a=1,b=1" || s.Clusters[1].Adopted == nil {
		t.Errorf("clusters %+v (%q), want a=1,b=1 and b's adoption recorded", s.Clusters, s.ClustersUsed)
	}
	// The quota is one across clusters: one more fits, then none.
	if err := l.Charge(ctx, Request{Tenant: "team-a", Namespace: "team-a", Name: "j2", Amounts: list("pods", "1")}); err != nil {
		t.Fatal(err)
	}
	err := l.Charge(ctx, Request{Tenant: "team-a", Namespace: "team-a", Name: "j3", Amounts: list("pods", "1")})
	if want := `tenant "team-a" would use 4 pods on virtual nodes, over its quota of 3 (3 in use, this pod holds 1)`; err == nil || err.Error() != want {
		t.Errorf("j3: %v, want %q", err, want)
	}
}

func TestReleaseCluster(t *testing.T) {
	ten := hubTenant()
	ten.Status.Slices = []v1alpha1.Slice{{Holder: "a-1", Cluster: "a", Amounts: list("pods", "2")}, {Holder: "b-1", Cluster: "b", Amounts: list("pods", "1")}}
	for _, tc := range []struct {
		cluster, wantPending, wantSlice, wantUsed, wantSummary string
		changed                                                bool
	}{
		{cluster: "a", wantPending: "y", wantSlice: "b-1", wantUsed: "1", wantSummary: "b=1", changed: true},
		{cluster: "b", wantPending: "x", wantSlice: "a-1", wantUsed: "1", wantSummary: "a=1", changed: true},
		{cluster: "c", wantPending: "", wantSlice: "", wantUsed: "2", wantSummary: "", changed: false},
	} {
		t.Run(tc.cluster, func(t *testing.T) {
			o := ten.DeepCopy()
			if got := ReleaseCluster(o, tc.cluster); got != tc.changed {
				t.Errorf("changed %v, want %v", got, tc.changed)
			}
			if !tc.changed {
				return
			}
			s := o.Status
			if len(s.Pending) != 1 || s.Pending[0].Name != tc.wantPending || s.PendingCount != 1 {
				t.Errorf("pending %+v, want %s alone", s.Pending, tc.wantPending)
			}
			if len(s.Slices) != 1 || s.Slices[0].Holder != tc.wantSlice {
				t.Errorf("slices %+v, want %s alone", s.Slices, tc.wantSlice)
			}
			wantUsed(t, s, "pods", tc.wantUsed)
			if s.ClustersUsed != tc.wantSummary || len(s.Clusters) != 1 {
				t.Errorf("clusters %+v (%q), want %s", s.Clusters, s.ClustersUsed, tc.wantSummary)
			}
		})
	}
}

// TestReclaimOwnClusterOnly: cluster b's reconciler takes back b's expired slice,
// counting b's pods its dead holder may have admitted as b's charges, and leaves a's
// expired slice alone: a's pods are out of its sight.
func TestReclaimOwnClusterOnly(t *testing.T) {
	ten := tenant("team-a", list("pods", "20"), nil)
	ten.Generation = 1
	expired := metav1.NewTime(testNow.Add(-time.Minute))
	ten.Status.Slices = []v1alpha1.Slice{
		{Holder: "a-dead", Cluster: "a", Amounts: list("pods", "4"), Expires: expired},
		{Holder: "b-dead", Cluster: "b", Amounts: list("pods", "4"), Expires: expired},
	}
	ten.Status.Clusters = []v1alpha1.ClusterUsage{{Name: "a", Used: list("pods", "2")}}
	ten.Status.Used = list("pods", "2")
	var hubCalls, bCalls calls
	hubClient, _ := recClient(t, &hubCalls, nil, ten)
	p := runningPod("team-a", "admitted", "1")
	p.CreationTimestamp = metav1.NewTime(testNow.Add(-2 * time.Minute))
	podsB, _ := recClient(t, &bCalls, nil, p.DeepCopy())
	r, err := NewReconciler(ReconcilerOptions{
		Client: podsB, Tenants: hubClient, Cluster: "b",
		Pods: func() (PodSource, error) { return newFakeSource(), nil }, Directory: fakeDir{"team-a": nil}, TenantOf: tenantOf,
		LeaseClient: kubefake.NewClientset(), LeaseNamespace: "sar-bridge",
		Now: func() time.Time { return testNow }, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	tm := r.newTerm()
	t.Cleanup(tm.queue.ShutDown)
	tm.view.OnAdd("vk-1", p)
	reconcileOK(t, tm, "team-a")

	s := status(t, hubClient, "team-a")
	if len(s.Slices) != 1 || s.Slices[0].Holder != "a-dead" {
		t.Errorf("slices %+v, want a's alone (b's taken back)", s.Slices)
	}
	if len(s.Pending) != 1 || s.Pending[0].Name != "admitted" || s.Pending[0].Cluster != "b" {
		t.Errorf("pending %+v, want b's pod admitted as b's charge", s.Pending)
	}
	wantUsed(t, s, "pods", "3")
	if s.ClustersUsed != "a=2,b=1" {
		t.Errorf("clustersUsed %q, want a=2,b=1", s.ClustersUsed)
	}
}
