// Package clusterdata keeps informer caches of the cluster resources policies
// may read (--cluster.resources) and serves the k8s.get and k8s.list built-ins
// from them: a decision reads memory, never the API server.
package clusterdata

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
)

// maxSyncWait bounds how long a read waits for its informer's first list.
const maxSyncWait = 5 * time.Second

// ErrNotWatched says a policy asked for a resource not in --cluster.resources.
var ErrNotWatched = errors.New("is not watched")

// Reader serves reads of watched resources from informer caches. It is safe
// for concurrent use once Start has been called.
type Reader struct {
	factory   dynamicinformer.DynamicSharedInformerFactory
	mapper    meta.RESTMapper
	byName    map[string]*watched // declared and canonical names → informer
	byGVR     map[schema.GroupVersionResource]*watched
	names     []string // the declared names, for messages
	hasSynced []cache.InformerSynced
}

// watched is one resource's informer.
type watched struct {
	name       string // canonical: resource[.group]
	gvr        schema.GroupVersionResource
	namespaced bool
	lister     cache.GenericLister
	synced     cache.InformerSynced
}

// NewForConfig resolves resources through the API server's discovery and sets
// up (but does not start) an informer for each.
func NewForConfig(cfg *rest.Config, resources []string, resync time.Duration) (*Reader, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return nil, fmt.Errorf("discovering the API server's resources: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return New(dyn, restmapper.NewDiscoveryRESTMapper(groups), resources, resync)
}

// New sets up (but does not start) an informer for each resource, resolved
// with mapper. A resource may be named as kubectl does: "pods",
// "deployments.apps" or "deployments.v1.apps".
func New(dyn dynamic.Interface, mapper meta.RESTMapper, resources []string, resync time.Duration) (*Reader, error) {
	r := &Reader{
		factory: dynamicinformer.NewDynamicSharedInformerFactory(dyn, resync),
		mapper:  mapper,
		byName:  map[string]*watched{},
		byGVR:   map[schema.GroupVersionResource]*watched{},
	}
	for _, arg := range resources {
		gvr, namespaced, err := resolve(mapper, arg)
		if err != nil {
			return nil, err
		}
		w, ok := r.byGVR[gvr]
		if !ok {
			if w, err = r.watch(gvr, namespaced); err != nil {
				return nil, err
			}
			r.byGVR[gvr] = w
		}
		r.byName[arg] = w
		r.byName[w.name] = w
		r.names = append(r.names, arg)
	}
	sort.Strings(r.names)
	return r, nil
}

// resolve finds the served version of a resource and whether it is namespaced.
func resolve(mapper meta.RESTMapper, arg string) (schema.GroupVersionResource, bool, error) {
	arg = strings.TrimSpace(arg)
	if arg == "" {
		return schema.GroupVersionResource{}, false, errors.New("empty resource name")
	}
	full, gr := schema.ParseResourceArg(strings.ToLower(arg))
	var gvr schema.GroupVersionResource
	var err error
	if full != nil {
		gvr, err = mapper.ResourceFor(*full)
	}
	if full == nil || err != nil {
		if gvr, err = mapper.ResourceFor(gr.WithVersion("")); err != nil {
			return gvr, false, fmt.Errorf("resource %q is not served by the API server (see kubectl api-resources): %w", arg, err)
		}
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return gvr, false, fmt.Errorf("resource %q: %w", arg, err)
	}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return gvr, false, fmt.Errorf("resource %q: %w", arg, err)
	}
	return gvr, mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// watch registers the informer of gvr, its objects trimmed of managedFields.
func (r *Reader) watch(gvr schema.GroupVersionResource, namespaced bool) (*watched, error) {
	gi := r.factory.ForResource(gvr)
	inf := gi.Informer()
	if err := inf.SetTransform(Trim); err != nil {
		return nil, fmt.Errorf("informer of %s: %w", gvr, err)
	}
	w := &watched{name: gvr.GroupResource().String(), gvr: gvr, namespaced: namespaced, lister: gi.Lister(), synced: inf.HasSynced}
	r.hasSynced = append(r.hasSynced, inf.HasSynced)
	return w, nil
}

// Trim drops what no policy reads and costs memory: metadata.managedFields.
func Trim(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	}
	return obj, nil
}

// Start starts the informers; they stop with ctx.
func (r *Reader) Start(ctx context.Context) { r.factory.Start(ctx.Done()) }

// Synced reports whether every informer has its first list.
func (r *Reader) Synced() bool {
	for _, s := range r.hasSynced {
		if !s() {
			return false
		}
	}
	return true
}

// WaitForSync blocks until every informer has its first list, or ctx ends.
func (r *Reader) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), r.hasSynced...)
}

// Resources lists the declared resource names, sorted.
func (r *Reader) Resources() []string { return append([]string(nil), r.names...) }

// lookup returns the synced informer of resource, waiting a little for a
// bridge that just started: a decision never reads a partial cache.
func (r *Reader) lookup(ctx context.Context, resource string) (*watched, error) {
	w, ok := r.byName[resource]
	if !ok {
		// Another name of a watched resource ("deployments.v1.apps" for
		// "deployments.apps")?
		if gvr, _, err := resolve(r.mapper, resource); err == nil {
			w, ok = r.byGVR[gvr]
		}
	}
	if !ok {
		return nil, fmt.Errorf("cluster resource %q %w: start with --cluster.resources listing it (watched: %s)", resource, ErrNotWatched, strings.Join(r.names, ", "))
	}
	if w.synced() {
		return w, nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxSyncWait)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), w.synced) {
		return nil, fmt.Errorf("cluster resource %q is not synced yet: its first list has not completed", resource)
	}
	return w, nil
}

// Get returns the object, or found false. Namespace is ignored for a
// cluster-scoped resource.
func (r *Reader) Get(ctx context.Context, resource, namespace, name string) (map[string]any, bool, error) {
	w, err := r.lookup(ctx, resource)
	if err != nil {
		return nil, false, err
	}
	var obj runtime.Object
	if w.namespaced {
		obj, err = w.lister.ByNamespace(namespace).Get(name)
	} else {
		obj, err = w.lister.Get(name)
	}
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s %s/%s from cache: %w", w.name, namespace, name, err)
	}
	content, err := contentOf(obj)
	return content, err == nil, err
}

// List returns the objects matching selector in namespace ("" for all),
// sorted by namespace and name so evaluations are reproducible.
func (r *Reader) List(ctx context.Context, resource, namespace string, selector labels.Selector) ([]map[string]any, error) {
	w, err := r.lookup(ctx, resource)
	if err != nil {
		return nil, err
	}
	if selector == nil {
		selector = labels.Everything()
	}
	var objs []runtime.Object
	if w.namespaced && namespace != metav1.NamespaceAll {
		objs, err = w.lister.ByNamespace(namespace).List(selector)
	} else {
		objs, err = w.lister.List(selector)
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s from cache: %w", w.name, err)
	}
	type keyed struct {
		ns, name string
		content  map[string]any
	}
	sorted := make([]keyed, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("unexpected cached object %T", o)
		}
		sorted = append(sorted, keyed{ns: u.GetNamespace(), name: u.GetName(), content: u.Object})
	}
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		return a.ns < b.ns || (a.ns == b.ns && a.name < b.name)
	})
	out := make([]map[string]any, len(sorted))
	for i, k := range sorted {
		out[i] = k.content
	}
	return out, nil
}

func contentOf(obj runtime.Object) (map[string]any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected cached object %T", obj)
	}
	return u.Object, nil
}
