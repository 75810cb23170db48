package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sar-bridge/sar-bridge/quota"
)

func TestQuotaFlags(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !o.quota.enabled || o.quota.reservationTTL != quota.DefaultReservationTTL {
		t.Fatalf("defaults: enabled %v, reservation TTL %v", o.quota.enabled, o.quota.reservationTTL)
	}
	if o, err = parseFlags([]string{"--quota.enabled=false", "--quota.reservation-ttl=1m"}); err != nil || o.quota.enabled || o.quota.reservationTTL != time.Minute {
		t.Fatalf("parsed %+v, %v", o.quota, err)
	}
	for _, args := range [][]string{{"--quota.reservation-ttl=0s"}, {"--quota.reservation-ttl=-1s"}} {
		if _, err := parseFlags(args); err == nil || !strings.Contains(err.Error(), "--quota.reservation-ttl") {
			t.Errorf("%v: err = %v, want a --quota.reservation-ttl error", args, err)
		}
	}
}

// noData is policy data without quotas.
type noData struct{}

func (noData) Eval(context.Context, []string, map[string]any) (any, bool, error) {
	return nil, false, nil
}
func (noData) Generation() uint64 { return 0 }

func TestQuotaStart(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
	view := o.informer.newClusterView(ctx, client)

	o.quota.enabled = false
	if tr, err := o.quota.start(ctx, client, view, noData{}, o.admission.targets, "interlink.io/tenant", time.Minute, log.NewNopLogger()); err != nil || tr != nil {
		t.Fatalf("disabled: %v, %v; want a nil interface", tr, err)
	}
	o.quota.enabled = true
	tr, err := o.quota.start(ctx, client, view, noData{}, o.admission.targets, "interlink.io/tenant", time.Minute, log.NewNopLogger())
	if err != nil || tr == nil {
		t.Fatalf("enabled: %v, %v", tr, err)
	}
	if _, ok := tr.(*quota.Tracker); !ok {
		t.Fatalf("tracker is %T", tr)
	}
}
