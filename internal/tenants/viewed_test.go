package tenants

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// TestWriteViewed: a slice's write reads the tenant from the API first; after a
// conflict it writes on the winner's version as soon as the view shows it, and reads
// from the API again only when the view does not (in time) or cannot be known to be newer
// than the version that conflicted. Every write is resourceVersion-checked, so the
// rival's write is never lost (its pendingCount survives).
func TestWriteViewed(t *testing.T) {
	cases := []struct {
		name string
		// observe: the view shows the stored tenant before the write; behind: this
		// bridge wrote once since, and the view has not shown that write yet.
		observe, behind bool
		// rival: another bridge writes between this one's read and its update; shown:
		// the view then shows the rival's write.
		rival, shown bool
		wantGets     int64
		wantAttempts int
	}{
		{name: "no conflict: one read, even with the view current", observe: true, wantGets: 1, wantAttempts: 1},
		{name: "conflict, the view shows the winner: written on it", observe: true, rival: true, shown: true, wantGets: 1, wantAttempts: 2},
		{name: "conflict, the view silent: a read after the backoff", observe: true, rival: true, wantGets: 2, wantAttempts: 2},
		{name: "conflict, the view never showed what was read: a read again", rival: true, shown: true, wantGets: 2, wantAttempts: 2},
		{name: "conflict, the view behind this bridge's write: a read again", observe: true, behind: true, rival: true, shown: true, wantGets: 2, wantAttempts: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			gets := &atomic.Int64{}
			c := fakeClient(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				gets.Add(1)
				return c.Get(ctx, key, obj, opts...)
			}}, tenant("team-a", nil, nil)) // no quota: Observe starts no write of its own (adopt.go)
			l := NewLedger(c, nil, LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Registerer: prometheus.NewRegistry(),
				Retry:  wait.Backoff{Steps: 5, Duration: 20 * time.Millisecond, Factor: 1},
				Slices: SliceOptions{Holder: "replica-0"}})
			stored := func() *v1alpha1.OffloadTenant {
				var s v1alpha1.OffloadTenant
				if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &s); err != nil {
					t.Fatal(err)
				}
				return &s
			}
			bump := func(t *v1alpha1.OffloadTenant) error {
				t.Status.PendingCount++
				return UpdateStatus(ctx, c, t)
			}
			if tc.observe {
				l.Observe(stored())
			}
			if tc.behind {
				if err := l.writeViewed(ctx, "team-a", bump); err != nil {
					t.Fatal(err)
				}
			}
			gets.Store(0)
			attempts := 0
			err := l.writeViewed(ctx, "team-a", func(tn *v1alpha1.OffloadTenant) error {
				attempts++
				if tc.rival && attempts == 1 {
					other := stored()
					if err := bump(other); err != nil {
						t.Fatal(err)
					}
					if tc.shown {
						l.Observe(other)
					}
					gets.Add(-1) // the rival's read is not this bridge's
				}
				return bump(tn)
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := gets.Load(); n != tc.wantGets {
				t.Errorf("%d reads of the tenant, want %d", n, tc.wantGets)
			}
			if attempts != tc.wantAttempts {
				t.Errorf("%d attempts, want %d", attempts, tc.wantAttempts)
			}
			want := int32(1)
			if tc.behind {
				want++
			}
			if tc.rival {
				want++
			}
			if got := stored().Status.PendingCount; got != want {
				t.Errorf("pendingCount %d, want %d: a write was lost", got, want)
			}
		})
	}
}
