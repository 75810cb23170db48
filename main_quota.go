package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	flag "github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/admission"
	"github.com/sar-bridge/sar-bridge/authorizer"
	"github.com/sar-bridge/sar-bridge/kube"
	"github.com/sar-bridge/sar-bridge/quota"
)

// quotaOptions configures the tenant offload quotas' usage tracker (--quota.*). Which
// tenants have a quota is policy data (data.interlink.quotas); which nodes are
// virtual is --admission.node-selector.
type quotaOptions struct {
	enabled        bool
	reservationTTL time.Duration
}

func (o *quotaOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "quota.enabled", true, "Track what each tenant's pods on virtual nodes (--admission.node-selector) request, for the quotas of data.interlink.quotas; needs list and watch on pods. Off: a tenant with a quota cannot create (the policy cannot enforce it).")
	fs.DurationVar(&o.reservationTTL, "quota.reservation-ttl", quota.DefaultReservationTTL, "How long a create the bridge allowed counts against its tenant's quota before the bridge's informer shows the pod.")
}

func (o *quotaOptions) validate() error {
	if o.reservationTTL <= 0 {
		return errors.New("--quota.reservation-ttl must be positive")
	}
	return nil
}

// start follows pods, namespaces and nodes for the quotas; nil (a nil interface, so
// the authorizer tracks nothing) when --quota.enabled=false.
func (o *quotaOptions) start(ctx context.Context, client kubernetes.Interface, view *kube.ClusterView, data quota.DataSource,
	targets admission.Targets, tenantLabel string, resync time.Duration, logger log.Logger) (authorizer.QuotaTracker, error) {
	if !o.enabled {
		return nil, nil
	}
	t := quota.NewTracker(quota.Options{
		TenantLabel: tenantLabel, IsVirtual: targets.IsVirtual, ReservationTTL: o.reservationTTL, Quotas: data,
	})
	shared := view.Informers().Core().V1()
	if err := t.Start(ctx, client, shared.Namespaces().Informer(), shared.Nodes().Informer(), resync); err != nil {
		return nil, fmt.Errorf("--quota.enabled: %w", err)
	}
	level.Info(logger).Log("msg", "tracking tenant offload usage for quotas", "reservation_ttl", o.reservationTTL)
	return t, nil
}
