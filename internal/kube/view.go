package kube

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
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

	// notFound remembers, briefly, namespaces the API said do not exist, so a stream
	// of decisions for one is not a stream of GETs; the informer forgets an entry as
	// soon as the namespace appears.
	notFound    *utilcache.LRUExpireCache
	notFoundTTL time.Duration
	lookups     singleflight.Group
}

// Defaults of the negative namespace cache.
const (
	DefaultNotFoundTTL = 5 * time.Second
	notFoundCacheSize  = 4096
	// liveLookupTimeout bounds one shared GET of a namespace, whoever waits for it.
	liveLookupTimeout = 5 * time.Second
)

// ViewOption configures a ClusterView.
type ViewOption func(*ClusterView)

// WithNotFoundTTL sets how long a namespace the API reported missing is answered as
// missing without asking again; 0 asks every time.
func WithNotFoundTTL(ttl time.Duration) ViewOption {
	return func(v *ClusterView) { v.notFoundTTL = ttl }
}

// NewClusterView sets up (but does not start) informers for namespaces and nodes.
func NewClusterView(client kubernetes.Interface, resync time.Duration, opts ...ViewOption) *ClusterView {
	factory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTransform(slimObject))
	nsInformer := factory.Core().V1().Namespaces()
	nodeInformer := factory.Core().V1().Nodes()
	v := &ClusterView{
		client:      client,
		factory:     factory,
		namespaces:  nsInformer.Lister(),
		nodes:       nodeInformer.Lister(),
		hasSynced:   []cache.InformerSynced{nsInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced},
		notFound:    utilcache.NewLRUExpireCache(notFoundCacheSize),
		notFoundTTL: DefaultNotFoundTTL,
	}
	for _, o := range opts {
		o(v)
	}
	forget := func(obj any) {
		if ns, ok := obj.(metav1.Object); ok {
			v.notFound.Remove(ns.GetName())
		}
	}
	_, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    forget,
		UpdateFunc: func(_, obj any) { forget(obj) },
	})
	if err != nil {
		v.notFoundTTL = 0 // nothing would invalidate entries early: cache nothing
	}
	return v
}

// Start runs the informers until ctx ends.
func (v *ClusterView) Start(ctx context.Context) { v.factory.Start(ctx.Done()) }

// Informers is the factory of the view's namespace and node informers, for what
// follows the same objects (the quota tracker) without a watch of its own.
func (v *ClusterView) Informers() informers.SharedInformerFactory { return v.factory }

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
// name while its label is still on the way; concurrent reads of one name share a GET,
// and a name the API reports missing is answered from the negative cache for a few
// seconds. The returned object must not be modified.
func (v *ClusterView) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := v.namespaces.Get(name)
	if err == nil {
		return ns, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading namespace %q from cache: %w", name, err)
	}
	if _, missing := v.notFound.Get(name); missing {
		return nil, fmt.Errorf("namespace %q: %w", name, ErrNamespaceNotFound)
	}
	ch := v.lookups.DoChan(name, func() (any, error) {
		if _, missing := v.notFound.Get(name); missing { // raced with the GET before
			return nil, fmt.Errorf("namespace %q: %w", name, ErrNamespaceNotFound)
		}
		// The shared GET outlives a waiter that gives up, but not its own timeout.
		getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), liveLookupTimeout)
		defer cancel()
		return v.readLive(getCtx, name)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*corev1.Namespace), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("reading namespace %q: %w", name, ctx.Err())
	}
}

// readLive GETs a namespace; a missing one is remembered in the negative cache.
func (v *ClusterView) readLive(ctx context.Context, name string) (*corev1.Namespace, error) {
	ns, err := v.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		v.rememberMissing(name)
		return nil, fmt.Errorf("namespace %q: %w", name, ErrNamespaceNotFound)
	case err != nil:
		return nil, fmt.Errorf("reading namespace %q: %w", name, err)
	}
	return ns, nil
}

// rememberMissing adds name to the negative cache, then looks at the informer again:
// the informer stores a namespace before it runs the handler that forgets it, so a
// namespace created while the GET was on its way is either seen here or forgotten by
// the handler afterwards, never remembered as missing.
func (v *ClusterView) rememberMissing(name string) {
	if v.notFoundTTL <= 0 {
		return
	}
	v.notFound.Add(name, struct{}{}, v.notFoundTTL)
	if _, err := v.namespaces.Get(name); err == nil {
		v.notFound.Remove(name)
	}
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

// slimObject keeps of namespaces and nodes what decisions read, before the informers
// store them: every node of the cluster is cached (admission counts a node it cannot
// find as virtual, so ordinary ones must be known too), and a node's status (images,
// conditions, addresses, node info) is most of its size. Identity and resourceVersion
// stay: the policy's value cache is keyed by them.
func slimObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		return &corev1.Node{
			ObjectMeta: slimMeta(o.ObjectMeta, nil),
			Spec:       corev1.NodeSpec{Taints: o.Spec.Taints},
			Status:     corev1.NodeStatus{Allocatable: o.Status.Allocatable},
		}, nil
	case *corev1.Namespace:
		// Decisions and policies read a namespace's labels and annotations.
		return &corev1.Namespace{ObjectMeta: slimMeta(o.ObjectMeta, o.Annotations)}, nil
	}
	return dropManagedFields(obj)
}

// slimMeta is an object's name, identity, resourceVersion, labels and the annotations
// given.
func slimMeta(m metav1.ObjectMeta, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Labels: m.Labels, Annotations: annotations,
	}
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
