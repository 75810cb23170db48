package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/sar-bridge/sar-bridge/internal/tenants"
)

func TestQuotaFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !o.decision.quota.enabled || o.decision.quota.pendingTimeout != tenants.DefaultPendingTimeout || o.decision.quota.leaseNamespace != "sar-bridge" ||
		o.decision.quota.interval != tenants.DefaultInterval || o.decision.quota.maxPending != tenants.DefaultMaxPending {
		t.Fatalf("defaults: %+v", o.decision.quota)
	}
	o, err = parseFlags([]string{"--quota.enabled=false", "--quota.pending-timeout=5m", "--quota.lease-namespace=interlink", "--quota.reservation-ttl=1m"})
	if err != nil || o.decision.quota.enabled || o.decision.quota.pendingTimeout != 5*time.Minute || o.decision.quota.leaseNamespace != "interlink" {
		t.Fatalf("parsed %+v, %v", o.decision.quota, err)
	}
	// Quota slices: on by default, with the replica's identity as holder; off, every
	// create is charged with a write (no holder).
	for _, tc := range []struct {
		args   []string
		holder string
	}{
		{nil, "replica-1"},
		{[]string{"--quota.slices=false"}, ""},
	} {
		o, err := parseFlags(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.decision.quota.sliceOptions("replica-1").Holder; got != tc.holder {
			t.Errorf("%v: slice holder %q, want %q", tc.args, got, tc.holder)
		}
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--quota.pending-timeout=0s"}},
		{[]string{"--quota.reconcile-interval=-1s"}},
		{[]string{"--quota.max-pending=0"}},
		{[]string{"--quota.lease-namespace="}},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), strings.SplitN(strings.TrimPrefix(tc.args[0], "--"), "=", 2)[0]) {
			t.Errorf("%v: err = %v, want an error naming the flag", tc.args, err)
		}
	}
}

// TestQuotaWithoutCRD: a cluster without the OffloadTenant CRD runs on the flags' and
// mapping file's tenants, without quotas, and says so.
func TestQuotaWithoutCRD(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	view := o.decision.informer.newClusterView(ctx, client)
	parts, err := o.decision.quota.start(ctx, &rest.Config{Host: "https://127.0.0.1:1"}, client, view, nil, coreUse{reviews: o.reviews(nil, log.NewNopLogger()), targets: o.admission.targets}, "interlink.io/tenant", time.Minute, log.NewNopLogger(), prometheus.NewRegistry())
	if err != nil || parts.directory != nil || parts.ledger != nil {
		t.Fatalf("without the CRD: %+v, %v; want no parts", parts, err)
	}
}
