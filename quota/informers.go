package quota

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// boundPods selects the pods bound to a node: only those can use a quota.
const boundPods = "spec.nodeName!="

// Start feeds the tracker: namespaces and nodes from the given (shared) informers,
// and pods bound to nodes from an informer of its own, kept small by slimPod. Events
// run until ctx ends; decisions of tenants with a quota wait for the first lists.
func (t *Tracker) Start(ctx context.Context, client kubernetes.Interface, namespaces, nodes cache.SharedIndexInformer, resync time.Duration) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = boundPods }),
		informers.WithTransform(slimPod))
	pods := factory.Core().V1().Pods().Informer()
	var synced []cache.InformerSynced
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{namespaces, handler(t.UpsertNamespace, func(_, name string) { t.DeleteNamespace(name) })},
		{nodes, handler(t.UpsertNode, func(_, name string) { t.DeleteNode(name) })},
		{pods, handler(t.UpsertPod, t.DeletePod)},
	} {
		reg, err := h.informer.AddEventHandler(h.handler)
		if err != nil {
			return fmt.Errorf("following the cluster for quotas: %w", err)
		}
		synced = append(synced, reg.HasSynced)
	}
	t.synced = func() bool {
		for _, s := range synced {
			if !s() {
				return false
			}
		}
		return true
	}
	factory.Start(ctx.Done())
	return nil
}

// handler calls upsert with the typed object of an add or update, and remove with
// the namespace and name of a delete, tombstones included.
func handler[T metav1.Object](upsert func(T), remove func(namespace, name string)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(metav1.Object); ok {
				remove(o.GetNamespace(), o.GetName())
			}
		},
	}
}

// slimPod keeps of a pod what the tracker reads: the informer holds every bound pod
// of the cluster, so the rest (env, volumes, status details) is dropped.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			Containers:     defaultRequests(p.Spec.Containers),
			InitContainers: defaultRequests(p.Spec.InitContainers),
			Overhead:       p.Spec.Overhead,
			Resources:      p.Spec.Resources,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	return slim, nil
}
