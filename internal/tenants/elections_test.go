package tenants

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// TestReconcileOneElection: the first election to write a tenant keeps it; a reconciler
// elected through another Lease leaves it alone (no mark, no write) while that record
// is younger than ElectionHold, and takes it over after.
func TestReconcileOneElection(t *testing.T) {
	for _, tc := range []struct {
		name      string
		age       time.Duration // of the other election's record
		election  string        // the other record's
		cluster   string        // the other record's
		wantDefer bool
	}{
		{"another election, recent", time.Minute, "other-ns/sar-bridge-ledger", "", true},
		{"another election, quiet for ElectionHold", ElectionHold, "other-ns/sar-bridge-ledger", "", false},
		{"another lease name, recent", time.Second, "sar-bridge/other-lease", "", true},
		{"the same election, another holder", time.Second, "sar-bridge/sar-bridge-ledger", "", false},
		{"another cluster's election", time.Second, "other-ns/sar-bridge-ledger", "b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n calls
			a := runningPod("team-a", "a", "2")
			tenant := quotaTenant("team-a", pendingCharge("team-a", "a", "2", 10*time.Second))
			tenant.Status.Reconcilers = []v1alpha1.ReconcilerRecord{{Cluster: tc.cluster, Election: tc.election, Holder: "other-replica", Time: metav1.NewTime(testNow.Add(-tc.age))}}
			c, api := recClient(t, &n, nil, a.DeepCopy(), tenant)
			tm := newTestTerm(t, c, fakeDir{"team-a": nil})
			tm.r.opts.Identity = "this-replica"
			tm.view.OnAdd("vk-1", a)
			reconcileOK(t, tm, "team-a")

			s := status(t, c, "team-a")
			marked := getPod(t, api, "team-a", "a").Labels[ChargedLabel] == "team-a"
			deferred := testutil.ToFloat64(tm.r.metrics.reconciles.WithLabelValues(reconcileDeferred))
			if tc.wantDefer {
				if marked || n.patches.Load() != 0 || n.statusWrites.Load() != 0 || len(s.Pending) != 1 || deferred != 1 {
					t.Errorf("marked %v, %d patches, %d status writes, pending %d, deferred %v; want the tenant left alone (false, 0, 0, 1, 1)", marked, n.patches.Load(), n.statusWrites.Load(), len(s.Pending), deferred)
				}
				return
			}
			if !marked || len(s.Pending) != 0 || deferred != 0 {
				t.Fatalf("marked %v, pending %d, deferred %v; want the charge confirmed by this reconciler", marked, len(s.Pending), deferred)
			}
			want := v1alpha1.ReconcilerRecord{Cluster: "", Election: "sar-bridge/sar-bridge-ledger", Holder: "this-replica", Time: metav1.NewTime(testNow)}
			var got *v1alpha1.ReconcilerRecord
			for i, r := range s.Reconcilers {
				if r.Cluster == "" {
					got = &s.Reconcilers[i]
				}
			}
			if got == nil || got.Election != want.Election || got.Holder != want.Holder || !got.Time.Equal(&want.Time) {
				t.Errorf("records %+v, want this cluster's %+v", s.Reconcilers, want)
			}
			if tc.cluster != "" && len(s.Reconcilers) != 2 {
				t.Errorf("records %+v, want the other cluster's kept", s.Reconcilers)
			}
		})
	}
}

// TestReconcileOtherElectionWritesMeanwhile: an election that writes the tenant between
// this round's read and its write wins: the round's write conflicts, and on the re-read
// the round leaves the tenant alone.
func TestReconcileOtherElectionWritesMeanwhile(t *testing.T) {
	var n calls
	a := runningPod("team-a", "a", "2")
	inner := recScheme(t).WithObjects(a.DeepCopy(), quotaTenant("team-a", pendingCharge("team-a", "a", "2", 10*time.Second))).Build()
	first := true
	c := interceptor.NewClient(inner, interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		n.statusWrites.Add(1)
		if first {
			first = false
			var other v1alpha1.OffloadTenant
			if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &other); err != nil {
				return err
			}
			other.Status.Reconcilers = []v1alpha1.ReconcilerRecord{{Election: "other-ns/sar-bridge-ledger", Holder: "other-replica", Time: metav1.NewTime(testNow)}}
			if err := c.SubResource(sub).Update(ctx, &other); err != nil {
				return err
			}
		}
		return c.SubResource(sub).Update(ctx, obj, opts...)
	}})
	tm := newTestTerm(t, c, fakeDir{"team-a": nil})
	tm.view.OnAdd("vk-1", a)
	reconcileOK(t, tm, "team-a")
	s := status(t, c, "team-a")
	if len(s.Pending) != 1 || len(s.Reconcilers) != 1 || s.Reconcilers[0].Election != "other-ns/sar-bridge-ledger" {
		t.Errorf("pending %d, records %+v; want the other election's write kept and nothing of this round's", len(s.Pending), s.Reconcilers)
	}
	if got := testutil.ToFloat64(tm.r.metrics.reconciles.WithLabelValues(reconcileDeferred)); got != 1 {
		t.Errorf("deferred %v, want 1", got)
	}
}
