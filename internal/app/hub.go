package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	flag "github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sar-bridge/sar-bridge/internal/hub"
	"github.com/sar-bridge/sar-bridge/internal/kube"
)

// hubOptions point the tenants' objects and ledgers at a hub cluster that the bridges
// of several clusters share (--tenants.*, internal/hub).
type hubOptions struct {
	kubeconfig string
	cluster    string
}

func (o *hubOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "tenants.kubeconfig", "", "Kubeconfig of the hub: the cluster whose OffloadTenants (their groups, namespaces and quotas) and ledgers this bridge reads and charges, shared with the bridges of other clusters so that a tenant's quota is one allocation across them (docs/multicluster.md). Reviews, the cluster view, the pods and their marks, and the reconciler's Lease stay this cluster's. Empty: this cluster's own OffloadTenants.")
	fs.StringVar(&o.cluster, "tenants.cluster-name", "", "This member cluster's name in the hub's ledgers (a DNS-1123 label, required with --tenants.kubeconfig): every charge, quota slice and adoption records it, this cluster's reconciler confirms, releases and recounts only its own (status.clusters), and the bridge claims the name on the hub at start-up (Lease sar-bridge-cluster-NAME in --quota.lease-namespace), refusing to start when another cluster holds it. Set without --tenants.kubeconfig, this cluster is the hub and a member of that name.")
}

func (o *hubOptions) validate() error {
	switch {
	case o.kubeconfig != "" && o.cluster == "":
		return errors.New("--tenants.kubeconfig needs --tenants.cluster-name: the name this cluster's charges carry in the hub's ledgers")
	case o.cluster != "":
		return hub.ValidateName(o.cluster)
	}
	return nil
}

// hubConn is where the OffloadTenants live: the hub, or this cluster.
type hubConn struct {
	config *rest.Config
	client kubernetes.Interface
	// where names the hub in errors ("" for this cluster's own tenants).
	where string
}

// connect returns the hub's connection: the bridge's own without --tenants.kubeconfig.
// The hub's requests have a token bucket of their own, of --kube.qps's size.
func (o *hubOptions) connect(restConfig *rest.Config, own kubernetes.Interface) (hubConn, error) {
	if o.kubeconfig == "" {
		return hubConn{config: restConfig, client: own}, nil
	}
	c, cfg, err := kube.NewClient(kube.ClientOptions{Kubeconfig: o.kubeconfig, QPS: restConfig.QPS, Burst: restConfig.Burst, UserAgent: restConfig.UserAgent})
	if err != nil {
		return hubConn{}, fmt.Errorf("--tenants.kubeconfig: %w", err)
	}
	return hubConn{config: cfg, client: c, where: fmt.Sprintf("the hub %s (--tenants.kubeconfig)", cfg.Host)}, nil
}

// claimTimeout bounds the name's claim at start-up.
const claimTimeout = 30 * time.Second

// claim claims this cluster's name on the hub (a serving bridge only).
func (o *hubOptions) claim(ctx context.Context, h hubConn, own kubernetes.Interface, ownHost, namespace string) error {
	if o.cluster == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	m, err := hub.Identify(ctx, own, o.cluster, ownHost)
	if err != nil {
		return err
	}
	if err := hub.Claim(ctx, h.client, namespace, m); err != nil {
		return fmt.Errorf("--tenants.cluster-name: %w", err)
	}
	return nil
}
