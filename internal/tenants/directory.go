package tenants

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// Groups answers a tenant's API group from the flags and mapping file; mapping.Source is
// the real one.
type Groups interface {
	// Group is the tenant's group, the fallback mapping (*=group) included.
	Group(tenant string) (string, bool)
	// Named is the group a mapping of the tenant itself names, the fallback ignored.
	Named(tenant string) (string, bool)
}

// Directory is the bridge's view of the OffloadTenant objects, from an informer: a
// tenant's API group (merged with the flags' and mapping file's), the namespaces listed
// for it, and its quota. It is safe for concurrent use.
type Directory struct {
	informer cache.SharedIndexInformer
	flags    Groups

	mu      sync.RWMutex
	tenants map[string]*v1alpha1.OffloadTenant
	listed  map[string][]string // namespace → tenants whose spec.namespaces lists it
}

// NewDirectory sets up (but does not start) the informer of OffloadTenants. flags may
// be nil (no flags or mapping file).
func NewDirectory(client dynamic.Interface, resync time.Duration, flags Groups) (*Directory, error) {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, resync)
	d := &Directory{informer: factory.ForResource(v1alpha1.Resource).Informer(), flags: flags, tenants: map[string]*v1alpha1.OffloadTenant{}, listed: map[string][]string{}}
	if err := d.informer.SetTransform(toTenant); err != nil {
		return nil, fmt.Errorf("following OffloadTenants: %w", err)
	}
	_, err := d.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.set(obj, false) },
		UpdateFunc: func(_, obj any) { d.set(obj, false) },
		DeleteFunc: func(obj any) { d.set(obj, true) },
	})
	if err != nil {
		return nil, fmt.Errorf("following OffloadTenants: %w", err)
	}
	return d, nil
}

// toTenant stores typed objects: every read then skips the conversion.
func toTenant(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	var t v1alpha1.OffloadTenant
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err != nil {
		return nil, fmt.Errorf("reading OffloadTenant %s: %w", u.GetName(), err)
	}
	return &t, nil
}

// Run runs the informer until ctx ends.
func (d *Directory) Run(ctx context.Context) { d.informer.Run(ctx.Done()) }

// HasSynced says the first list is in.
func (d *Directory) HasSynced() bool { return d.informer.HasSynced() }

func (d *Directory) set(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(*v1alpha1.OffloadTenant)
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if deleted {
		delete(d.tenants, t.Name)
	} else {
		d.tenants[t.Name] = t
	}
	d.listed = map[string][]string{}
	for name, o := range d.tenants {
		for _, ns := range o.Spec.Namespaces {
			d.listed[ns] = append(d.listed[ns], name)
		}
	}
	for ns := range d.listed {
		sort.Strings(d.listed[ns])
	}
}

// OnChange calls f with every OffloadTenant added or changed (the informer's objects:
// f must not modify them), those already seen included.
func (d *Directory) OnChange(f func(*v1alpha1.OffloadTenant)) error {
	call := func(obj any) {
		if t, ok := obj.(*v1alpha1.OffloadTenant); ok {
			f(t)
		}
	}
	if _, err := d.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: call, UpdateFunc: func(_, obj any) { call(obj) }}); err != nil {
		return fmt.Errorf("following OffloadTenants: %w", err)
	}
	return nil
}

// Tenant is the tenant whose spec.namespaces lists namespace; ok is false when none
// does (the tenant is then the namespace's label, else its name). Two tenants listing
// one namespace is an error: no decision is made for its pods.
func (d *Directory) Tenant(namespace string) (tenant string, ok bool, err error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	switch names := d.listed[namespace]; len(names) {
	case 0:
		return "", false, nil
	case 1:
		return names[0], true, nil
	default:
		return "", false, fmt.Errorf("namespace %q is listed by the OffloadTenants %s: list it in one", namespace, strings.Join(names, ", "))
	}
}

// Group is the tenant's API group: its OffloadTenant's, else the flags' or mapping
// file's (their fallback *=group included). A tenant an OffloadTenant and a mapping of
// its own name with different groups has none (Conflict says why).
func (d *Directory) Group(tenant string) (string, bool) {
	group, ok, conflict := d.group(tenant)
	return group, ok && conflict == ""
}

// Conflict says why a tenant has no group although it is named: an OffloadTenant and
// the flags or mapping file give it different groups. "" when there is no conflict.
func (d *Directory) Conflict(tenant string) string {
	_, _, conflict := d.group(tenant)
	return conflict
}

func (d *Directory) group(tenant string) (group string, ok bool, conflict string) {
	d.mu.RLock()
	t, found := d.tenants[tenant]
	d.mu.RUnlock()
	if d.flags == nil {
		if found {
			return t.Spec.Group, true, ""
		}
		return "", false, ""
	}
	if !found {
		group, ok = d.flags.Group(tenant)
		return group, ok, ""
	}
	// The object wins over the fallback (*=group); only a mapping of the tenant itself
	// can disagree with it.
	if named, ok := d.flags.Named(tenant); ok && named != t.Spec.Group {
		return "", false, fmt.Sprintf("tenant %q is declared twice with different API groups: %q by OffloadTenant %s and %q by --openshift.mappings (or its file): make them agree", tenant, t.Spec.Group, t.Name, named)
	}
	return t.Spec.Group, true, ""
}

// Quota is the tenant's OffloadTenant when it sets hard amounts; ok is false when the
// tenant has no quota. The object is shared: do not modify it.
func (d *Directory) Quota(tenant string) (*v1alpha1.OffloadTenant, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	t, ok := d.tenants[tenant]
	if !ok || !hasQuota(t) {
		return nil, false
	}
	return t, true
}

// hasQuota says whether the tenant sets hard amounts, in total or per virtual node.
func hasQuota(t *v1alpha1.OffloadTenant) bool { return len(t.Spec.Hard) > 0 || len(t.Spec.Nodes) > 0 }

// WithQuota lists the tenants that set hard amounts, sorted.
func (d *Directory) WithQuota() []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var out []string
	for name, t := range d.tenants {
		if hasQuota(t) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
