// Package hub lets the bridges of several clusters share one cluster's OffloadTenants
// and their ledgers (the hub, --tenants.kubeconfig): each member cluster charges under
// a name of its own (--tenants.cluster-name), which it claims on the hub at start-up so
// that two clusters never charge under one name, and an admin releases a member that
// is gone with one command (ReleaseCluster).
package hub

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Labels and annotations of a claim.
const (
	// ClusterLabel holds the claimed name on the claim's Lease.
	ClusterLabel = "sar-bridge.io/cluster"
	// ServerAnnotation is the member's API server as the bridge that claimed saw it:
	// for the message that names both clusters.
	ServerAnnotation = "sar-bridge.io/cluster-server"
	claimPrefix      = "sar-bridge-cluster-"
)

// ClaimName is the Lease on the hub that holds a member cluster's name.
func ClaimName(cluster string) string { return claimPrefix + cluster }

// ValidateName says why a member cluster's name cannot be used; nil when it can.
func ValidateName(cluster string) error {
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		return fmt.Errorf("--tenants.cluster-name %q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63): %s", cluster, errs[0])
	}
	return nil
}

// Member is a member cluster as it claims its name: the UID of its kube-system
// namespace (created with the cluster, never shared by another one) and, for messages,
// its API server's address.
type Member struct {
	Name   string
	UID    string
	Server string
}

// Identify reads the member cluster's identity: its kube-system namespace's UID.
func Identify(ctx context.Context, member kubernetes.Interface, name, server string) (Member, error) {
	ns, err := member.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return Member{}, fmt.Errorf("reading this cluster's identity (the UID of namespace kube-system) for --tenants.cluster-name: %w", err)
	}
	return Member{Name: name, UID: string(ns.UID), Server: server}, nil
}

// ErrClaimed says the name belongs to another cluster.
var ErrClaimed = errors.New("cluster name claimed by another cluster")

// Claim records on the hub, in namespace, that the member holds its name: a Lease
// ClaimName(name) whose holder is the member's UID. A claim by the same cluster (a
// replica, a restart) is kept; a claim by another cluster is an error naming both,
// wrapping ErrClaimed. The claim has no expiry: it lasts until ReleaseCluster.
func Claim(ctx context.Context, hubClient kubernetes.Interface, namespace string, m Member) error {
	leases := hubClient.CoordinationV1().Leases(namespace)
	want := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ClaimName(m.Name),
			Labels:      map[string]string{ClusterLabel: m.Name},
			Annotations: map[string]string{ServerAnnotation: m.Server},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &m.UID},
	}
	_, err := leases.Create(ctx, want, metav1.CreateOptions{})
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("claiming the cluster name %q on the hub (Lease %s/%s): %w", m.Name, namespace, want.Name, err)
		}
		return nil
	}
	got, err := leases.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the claim of cluster name %q on the hub (Lease %s/%s): %w", m.Name, namespace, want.Name, err)
	}
	holder := ""
	if got.Spec.HolderIdentity != nil {
		holder = *got.Spec.HolderIdentity
	}
	if holder != m.UID {
		return fmt.Errorf("%w: --tenants.cluster-name %q is held on the hub (Lease %s/%s) by the cluster whose kube-system namespace has UID %q (API server %s); this cluster's is %q (API server %s): give this cluster a name of its own, or, if that cluster is gone, release its name with `sar-bridge tenants release-cluster %s`",
			ErrClaimed, m.Name, namespace, want.Name, holder, got.Annotations[ServerAnnotation], m.UID, m.Server, m.Name)
	}
	return nil
}
