package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// ErrNamespaceNotFound says the namespace does not exist in the cluster.
var ErrNamespaceNotFound = errors.New("namespace not found")

// ClusterView answers reads of namespaces and nodes from informer caches, so decisions
// see the cluster's own labels and taints and never the caller's.
type ClusterView struct {
	client     kubernetes.Interface
	factory    informers.SharedInformerFactory
	namespaces listersv1.NamespaceLister
	nodes      listersv1.NodeLister
	hasSynced  []cache.InformerSynced
}

// NewClusterView sets up (but does not start) informers for namespaces and nodes.
func NewClusterView(client kubernetes.Interface, resync time.Duration) *ClusterView {
	factory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTransform(dropManagedFields))
	nsInformer := factory.Core().V1().Namespaces()
	nodeInformer := factory.Core().V1().Nodes()
	return &ClusterView{
		client:     client,
		factory:    factory,
		namespaces: nsInformer.Lister(),
		nodes:      nodeInformer.Lister(),
		hasSynced:  []cache.InformerSynced{nsInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced},
	}
}

// Start runs the informers until ctx ends.
func (v *ClusterView) Start(ctx context.Context) { v.factory.Start(ctx.Done()) }

// WaitForSync blocks until the first list of every informer is in, or ctx ends.
func (v *ClusterView) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), v.hasSynced...)
}

// Synced reports whether every informer has completed its first list.
func (v *ClusterView) Synced() bool {
	for _, synced := range v.hasSynced {
		if !synced() {
			return false
		}
	}
	return true
}

// Namespace returns a namespace from the informer cache. A namespace the cache has not
// seen yet (created moments ago) is read live, so a new tenant is never resolved by its
// name while its label is still on the way. The returned object must not be modified.
func (v *ClusterView) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := v.namespaces.Get(name)
	if err == nil {
		return ns, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading namespace %q from cache: %w", name, err)
	}
	ns, err = v.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("namespace %q: %w", name, ErrNamespaceNotFound)
	case err != nil:
		return nil, fmt.Errorf("reading namespace %q: %w", name, err)
	}
	return ns, nil
}

// Node returns a node from the informer cache; ok is false when the cluster has none of
// that name. The returned object must not be modified.
func (v *ClusterView) Node(name string) (*corev1.Node, bool) {
	node, err := v.nodes.Get(name)
	if err != nil {
		return nil, false
	}
	return node, true
}

// dropManagedFields keeps the caches small: decisions never read managed fields.
func dropManagedFields(obj any) (any, error) {
	if accessor, ok := obj.(metav1.ObjectMetaAccessor); ok {
		accessor.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

// NamespaceNames lists the names of every namespace in the informer cache, sorted.
func (v *ClusterView) NamespaceNames() ([]string, error) {
	list, err := v.namespaces.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing namespaces from cache: %w", err)
	}
	names := make([]string, 0, len(list))
	for _, ns := range list {
		names = append(names, ns.Name)
	}
	sort.Strings(names)
	return names, nil
}
