// Package virtualpods follows the pods bound to virtual nodes, and only those.
//
// A cluster interLink serves is often a large, shared one: tens of thousands of pods on
// ordinary nodes, a few hundred on virtual ones. An informer over every bound pod costs
// memory in proportion to the whole cluster (issue 35: 409 MiB for 20,000 pods), although
// only the pods on virtual nodes can ever matter to the bridge. So a Follower watches the
// nodes (through a shared node informer) and runs one pod informer per virtual node, with
// the field selector spec.nodeName=<node>: the API server answers it from its watch cache
// through its node index, the way it serves each kubelet its own pods. A node's informer
// starts when the node appears or becomes virtual, and stops (watch cancelled, store
// dropped, a delete delivered for each of its pods) when the node goes away or stops
// being virtual. Memory then follows the offloaded pods, not the size of the cluster.
package virtualpods

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Handler receives the pods of the virtual nodes, each with the node it is on. The calls
// for one node come in order, one at a time; calls for different nodes may come at the
// same time. A handler must not call the Follower (its Stop waits for the calls to end).
type Handler interface {
	OnAdd(node string, pod *corev1.Pod)
	OnUpdate(node string, old, pod *corev1.Pod)
	// OnDelete is called when a pod leaves what is followed: deleted, or its node went
	// away, stopped being virtual, or the Follower stopped. pod is its last known state.
	OnDelete(node string, pod *corev1.Pod)
}

// HandlerFuncs is a Handler of functions; a nil one ignores its event.
type HandlerFuncs struct {
	AddFunc    func(node string, pod *corev1.Pod)
	UpdateFunc func(node string, old, pod *corev1.Pod)
	DeleteFunc func(node string, pod *corev1.Pod)
}

func (h HandlerFuncs) OnAdd(node string, pod *corev1.Pod) {
	if h.AddFunc != nil {
		h.AddFunc(node, pod)
	}
}

func (h HandlerFuncs) OnUpdate(node string, old, pod *corev1.Pod) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(node, old, pod)
	}
}

func (h HandlerFuncs) OnDelete(node string, pod *corev1.Pod) {
	if h.DeleteFunc != nil {
		h.DeleteFunc(node, pod)
	}
}

// Options configures a Follower.
type Options struct {
	// Client lists and watches the pods of each virtual node.
	Client kubernetes.Interface
	// Nodes is a (shared) node informer: which nodes exist, and their labels.
	Nodes cache.SharedIndexInformer
	// IsVirtual tells virtual nodes apart (admission.Targets.IsVirtual).
	IsVirtual func(*corev1.Node) bool
	// Resync is the pod informers' resync period; 0: none.
	Resync time.Duration
	// Transform is applied to every pod before it is stored or handed on, so that only
	// what the handlers read is kept; nil keeps pods whole.
	Transform cache.TransformFunc
}

// Follower runs the pod informers of the virtual nodes. Start it once; Stop ends it.
type Follower struct {
	opts Options

	// mu guards nodes, handlers (written with every node's lock held too, so a node's
	// fan-out may read it under its own lock), nodeReg and the states below.
	mu       sync.Mutex
	nodes    map[string]*nodePods
	handlers atomic.Pointer[[]Handler]
	nodeReg  cache.ResourceEventHandlerRegistration
	ctx      context.Context // the pod informers' parent; cancelled by Stop
	cancel   context.CancelFunc
	started  bool
	stopped  bool
}

// nodePods is one virtual node's pod informer, and what its handlers were told.
type nodePods struct {
	node     string
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex // guards seen and stopped; held while handlers are called
	seen    map[types.NamespacedName]*corev1.Pod
	stopped bool
}

// New returns a Follower that follows nothing until Start.
func New(opts Options) (*Follower, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("virtualpods: no Kubernetes client")
	case opts.Nodes == nil:
		return nil, errors.New("virtualpods: no node informer")
	case opts.IsVirtual == nil:
		return nil, errors.New("virtualpods: no virtual-node predicate")
	}
	f := &Follower{opts: opts, nodes: map[string]*nodePods{}}
	f.handlers.Store(&[]Handler{})
	return f, nil
}

// AddEventHandler adds a handler. Added while pods are followed, it is first told of
// every pod followed so far (as adds), before any later event.
func (f *Follower) AddEventHandler(h Handler) error {
	if h == nil {
		return errors.New("virtualpods: nil handler")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return errors.New("virtualpods: the follower has stopped")
	}
	// Every node's lock, so that no node hands on an event between the replay and the
	// new handler list.
	for _, np := range f.nodes {
		np.mu.Lock()
		defer np.mu.Unlock()
	}
	hs := append(append([]Handler(nil), *f.handlers.Load()...), h)
	f.handlers.Store(&hs)
	for _, np := range f.nodes {
		for _, p := range np.seen {
			h.OnAdd(np.node, p)
		}
	}
	return nil
}

// Start follows the virtual nodes until ctx ends or Stop.
func (f *Follower) Start(ctx context.Context) error {
	// Held throughout: adding a handler to a running informer only queues its events.
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started || f.stopped {
		return errors.New("virtualpods: started twice, or after Stop")
	}
	f.started = true
	f.ctx, f.cancel = context.WithCancel(ctx)
	reg, err := f.opts.Nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.nodeChanged(obj, false) },
		UpdateFunc: func(_, obj any) { f.nodeChanged(obj, false) },
		DeleteFunc: func(obj any) { f.nodeChanged(obj, true) },
	})
	if err != nil {
		f.cancel()
		return fmt.Errorf("following the virtual nodes: %w", err)
	}
	f.nodeReg = reg
	go func() {
		<-f.ctx.Done()
		f.Stop()
	}()
	return nil
}

// HasSynced reports whether the nodes have been listed and every current virtual node's
// pod informer has its first list, handed on to the handlers. False before Start and
// after Stop.
func (f *Follower) HasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodeReg == nil || f.stopped || !f.nodeReg.HasSynced() {
		return false
	}
	for _, np := range f.nodes {
		if !np.reg.HasSynced() {
			return false
		}
	}
	return true
}

// Informers is the number of pod informers running: one per virtual node.
func (f *Follower) Informers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.nodes)
}

// Stop stops every pod informer, after a delete of each pod followed has been handed
// on, and stops following the nodes. It returns once no handler is being called.
func (f *Follower) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	if f.cancel != nil {
		defer f.cancel() // after the informers, whose stop waits for them to end
	}
	if f.nodeReg != nil {
		// An error means the node informer has stopped: it calls nothing any more.
		_ = f.opts.Nodes.RemoveEventHandler(f.nodeReg)
	}
	for name, np := range f.nodes {
		np.stop(*f.handlers.Load())
		delete(f.nodes, name)
	}
}

// nodeChanged starts or stops a node's pod informer as the node comes, changes or goes.
func (f *Follower) nodeChanged(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	virtual := !deleted && f.opts.IsVirtual(node)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return // a late event from the node informer
	}
	np, following := f.nodes[node.Name]
	switch {
	case virtual && !following:
		f.nodes[node.Name] = f.startNode(node.Name)
	case !virtual && following:
		np.stop(*f.handlers.Load())
		delete(f.nodes, node.Name)
	}
}

// startNode starts the pod informer of one virtual node. Called with f.mu held.
func (f *Follower) startNode(node string) *nodePods {
	ctx, cancel := context.WithCancel(f.ctx)
	np := &nodePods{node: node, cancel: cancel, done: make(chan struct{}), seen: map[types.NamespacedName]*corev1.Pod{}}
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	// No indexers: nothing looks pods up but the handlers, which keep their own state.
	np.informer = coreinformers.NewFilteredPodInformer(f.opts.Client, metav1.NamespaceAll, f.opts.Resync, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
	if f.opts.Transform != nil {
		// Only fails once the informer has started.
		_ = np.informer.SetTransform(f.opts.Transform)
	}
	// The informer has not started, so this cannot fail.
	np.reg, _ = np.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { np.upsert(f, nil, obj) },
		UpdateFunc: func(old, obj any) { np.upsert(f, old, obj) },
		DeleteFunc: func(obj any) { np.delete(f, obj) },
	})
	go func() {
		defer close(np.done)
		np.informer.RunWithContext(ctx)
	}()
	return np
}

// upsert hands on an add or update, unless the node's informer is being stopped.
func (np *nodePods) upsert(f *Follower, oldObj, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	np.mu.Lock()
	defer np.mu.Unlock()
	if np.stopped {
		return
	}
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	prev, had := np.seen[key]
	np.seen[key] = pod
	if old, ok := oldObj.(*corev1.Pod); ok && had {
		prev = old
	}
	for _, h := range *f.handlers.Load() {
		if had {
			h.OnUpdate(np.node, prev, pod)
		} else {
			h.OnAdd(np.node, pod)
		}
	}
}

// delete hands on a delete; a pod the handlers were never told of is not handed on.
func (np *nodePods) delete(f *Follower, obj any) {
	var key types.NamespacedName
	pod, _ := obj.(*corev1.Pod)
	switch o := obj.(type) {
	case *corev1.Pod:
		key = types.NamespacedName{Namespace: o.Namespace, Name: o.Name}
	case cache.DeletedFinalStateUnknown:
		pod, _ = o.Obj.(*corev1.Pod)
		ns, name, err := cache.SplitMetaNamespaceKey(o.Key)
		if err != nil {
			return
		}
		key = types.NamespacedName{Namespace: ns, Name: name}
	default:
		return
	}
	np.mu.Lock()
	defer np.mu.Unlock()
	last, had := np.seen[key]
	if np.stopped || !had {
		return
	}
	delete(np.seen, key)
	if pod == nil {
		pod = last
	}
	for _, h := range *f.handlers.Load() {
		h.OnDelete(np.node, pod)
	}
}

// stop ends the node's informer: every pod its handlers were told of is handed on as a
// delete (the informer drops the notifications it had not delivered, so its store is
// not what the handlers know), then the watch is cancelled and the store let go.
func (np *nodePods) stop(handlers []Handler) {
	np.mu.Lock()
	np.stopped = true
	for key, pod := range np.seen {
		for _, h := range handlers {
			h.OnDelete(np.node, pod)
		}
		delete(np.seen, key)
	}
	np.mu.Unlock()
	np.cancel()
	<-np.done
}
