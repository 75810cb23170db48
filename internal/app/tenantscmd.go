package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	flag "github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sar-bridge/sar-bridge/internal/hub"
)

const tenantsUsage = `Usage: sar-bridge tenants release-cluster NAME [--tenants.kubeconfig PATH] [--quota.lease-namespace NAMESPACE]

release-cluster removes a member cluster that is gone from the ledgers of every
OffloadTenant on the hub: its pending charges, its quota slices and its usage
(status.clusters), then the claim of its name (Lease sar-bridge-cluster-NAME). Its
pods are no longer counted anywhere: run it only for a cluster whose pods are gone
(or no longer offloaded). Each tenant is written with a resourceVersion-checked update
retried on conflict, so the other clusters' bridges keep charging meanwhile. It prints
what it released, tenant by tenant.

Flags:
`

// Tenants is `sar-bridge tenants`: an admin's operations on the hub's ledgers. It
// returns the exit code: 2 for bad usage, 1 when the operation failed.
func Tenants(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sar-bridge tenants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("tenants.kubeconfig", "", "Kubeconfig of the hub (default: $KUBECONFIG, ~/.kube/config, as kubectl).")
	namespace := fs.String("quota.lease-namespace", "sar-bridge", "Namespace on the hub of the cluster names' claims (the bridges' --quota.lease-namespace).")
	timeout := fs.Duration("timeout", time.Minute, "Give up after this long.")
	fs.Usage = func() { fmt.Fprint(stderr, tenantsUsage); fs.PrintDefaults() }
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err == nil && (fs.NArg() != 2 || fs.Arg(0) != "release-cluster"):
		err = fmt.Errorf("want: tenants release-cluster NAME, got %q", fs.Args())
	case err == nil:
		err = hub.ValidateName(fs.Arg(1))
	}
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge tenants: %v\n", err)
		return 2
	}
	cluster := fs.Arg(1)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge tenants: the hub's kubeconfig: %v\n", err)
		return 1
	}
	c, err := ledgerClient(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge tenants: %v\n", err)
		return 1
	}
	hubClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge tenants: %v\n", err)
		return 1
	}
	released, err := hub.ReleaseCluster(ctx, c, hubClient, *namespace, cluster)
	for _, r := range released {
		fmt.Fprintf(stdout, "tenant %s: released %d pending charges, %d quota slices, usage %s of cluster %s\n", r.Tenant, r.Pending, r.Slices, formatList(r.Used), cluster)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge tenants: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "cluster %s released from %d tenants on %s; its name is free\n", cluster, len(released), cfg.Host)
	return 0
}

// formatList is "cpu=2,pods=3" ("none" when empty).
func formatList(l corev1.ResourceList) string {
	if len(l) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(l))
	for name, q := range l {
		parts = append(parts, string(name)+"="+q.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
