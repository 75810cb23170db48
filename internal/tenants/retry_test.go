package tenants

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// TestRetryOnConflict: an attempt that fails with an error wrapping a context's end is
// that error, never nil (retry.RetryOnConflict returns nil for it); conflicts are
// retried, and other errors returned as they are.
func TestRetryOnConflict(t *testing.T) {
	deadline := fmt.Errorf("Get \"https://hub/...\": %w", context.DeadlineExceeded)
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "offloadtenants"}, "t", errors.New("changed"))
	for _, tc := range []struct {
		name     string
		attempts []error
		want     error
		calls    int
	}{
		{"done", []error{nil}, nil, 1},
		{"the context ended", []error{deadline}, deadline, 1},
		{"a conflict, then the context ended", []error{conflict, deadline}, deadline, 2},
		{"a conflict, then done", []error{conflict, nil}, nil, 2},
		{"canceled", []error{context.Canceled}, context.Canceled, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := RetryOnConflict(DefaultRetry, func() error {
				calls++
				return tc.attempts[calls-1]
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) || calls != tc.calls {
				t.Errorf("err %v after %d calls, want %v after %d", err, calls, tc.want, tc.calls)
			}
		})
	}
}

// TestLedgerWriteTimesOut: a ledger whose reads end with the write's timeout (an API
// server or hub that drops every connection, client-go retrying its GETs until then)
// charges nothing and says so, with slices and without: never an allow.
func TestLedgerWriteTimesOut(t *testing.T) {
	for _, slices := range []bool{false, true} {
		t.Run(fmt.Sprintf("slices=%v", slices), func(t *testing.T) {
			c := fakeClient(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*v1alpha1.OffloadTenant); ok {
					return fmt.Errorf("Get \"https://hub/apis/sar-bridge.io/v1alpha1/offloadtenants/team-a\": %w", context.DeadlineExceeded)
				}
				return c.Get(ctx, key, obj, opts...)
			}}, tenant("team-a", list("pods", "10"), nil))
			opts := LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, Hub: "the hub https://hub (--tenants.kubeconfig)"}
			if slices {
				opts.Slices = SliceOptions{Holder: "h"}
			}
			err := NewLedger(c, nil, opts).Charge(context.Background(), Request{Tenant: "team-a", Namespace: "team-a", Name: "j", Amounts: list("pods", "1"), Generation: 1})
			want := `charging tenant "team-a" in its ledger on the hub https://hub (--tenants.kubeconfig): Get "https://hub/apis/sar-bridge.io/v1alpha1/offloadtenants/team-a": context deadline exceeded`
			if err == nil || err.Error() != want {
				t.Errorf("charge: %v, want %q", err, want)
			}
		})
	}
}
