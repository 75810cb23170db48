package hub

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/internal/tenants"
)

// Released is what ReleaseCluster took out of one tenant's ledger.
type Released struct {
	Tenant  string
	Pending int                 // charges pending
	Slices  int                 // quota slices
	Used    corev1.ResourceList // the cluster's usage
}

// ReleaseCluster removes a member cluster that is gone from every OffloadTenant on the
// hub — its pending charges, its quota slices and its usage — each tenant with a
// resourceVersion-checked write retried on conflict (the other clusters' bridges keep
// charging meanwhile), then its name's claim. It returns what it released, tenant by
// tenant; an error stops it (what was released stays released: run it again).
func ReleaseCluster(ctx context.Context, c client.Client, hubClient kubernetes.Interface, namespace, cluster string) ([]Released, error) {
	if err := ValidateName(cluster); err != nil {
		return nil, err
	}
	var list v1alpha1.OffloadTenantList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing the OffloadTenants on the hub: %w", err)
	}
	var out []Released
	for _, item := range list.Items {
		var r Released
		err := tenants.RetryOnConflict(retry.DefaultRetry, func() error {
			var t v1alpha1.OffloadTenant
			if err := c.Get(ctx, client.ObjectKey{Name: item.Name}, &t); err != nil {
				return err
			}
			r = released(&t, cluster)
			if !tenants.ReleaseCluster(&t, cluster) {
				return nil
			}
			return tenants.UpdateStatus(ctx, c, &t)
		})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return out, fmt.Errorf("releasing cluster %q from OffloadTenant %s: %w", cluster, item.Name, err)
		}
		if r.Pending > 0 || r.Slices > 0 || r.Used != nil {
			out = append(out, r)
		}
	}
	err := hubClient.CoordinationV1().Leases(namespace).Delete(ctx, ClaimName(cluster), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return out, fmt.Errorf("removing the claim of cluster name %q (Lease %s/%s): %w", cluster, namespace, ClaimName(cluster), err)
	}
	return out, nil
}

// released counts what the cluster holds in t.
func released(t *v1alpha1.OffloadTenant, cluster string) Released {
	r := Released{Tenant: t.Name}
	for _, c := range t.Status.Pending {
		if c.Cluster == cluster {
			r.Pending++
		}
	}
	for _, s := range t.Status.Slices {
		if s.Cluster == cluster {
			r.Slices++
		}
	}
	for _, e := range t.Status.Clusters {
		if e.Name == cluster {
			r.Used = e.Used.DeepCopy()
			if r.Used == nil {
				r.Used = corev1.ResourceList{}
			}
		}
	}
	return r
}
