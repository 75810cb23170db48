package virtualpods

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const virtualLabel = "virtual-node.interlink/type"

func isVirtual(n *corev1.Node) bool { return n.Labels[virtualLabel] == "virtual-kubelet" }

func node(name string, virtual bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if virtual {
		n.Labels[virtualLabel] = "virtual-kubelet"
	}
	return n
}

func pod(ns, name, nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + nsName(ns, name))},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "main", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}},
	}
}

func nsName(ns, name string) string { return ns + "/" + name }

// cluster is a fake API whose pod lists and watches honour the spec.nodeName field
// selector, as the API server does (the fake ignores field selectors). It records the
// nodes whose pods are listed and watched, and can hold a node's list back.
type cluster struct {
	client *fake.Clientset
	mu     sync.Mutex
	lists  map[string]int // node → pod lists
	watchs map[string]int // node → pod watches opened
	hold   map[string]chan struct{}
}

func newCluster(t *testing.T, objects ...runtime.Object) *cluster {
	t.Helper()
	c := &cluster{client: fake.NewClientset(objects...), lists: map[string]int{}, watchs: map[string]int{}, hold: map[string]chan struct{}{}}
	c.client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		node := selectedNode(t, sel)
		c.mu.Lock()
		c.lists[node]++
		hold := c.hold[node]
		c.mu.Unlock()
		if hold != nil {
			<-hold
		}
		obj, err := c.client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		list.Items = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Spec.NodeName != node })
		return true, list, nil
	})
	c.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		node := selectedNode(t, a.(k8stesting.WatchAction).GetWatchRestrictions().Fields)
		w, err := c.client.Tracker().Watch(corev1.SchemeGroupVersion.WithResource("pods"), "")
		if err != nil {
			return true, nil, err
		}
		c.mu.Lock()
		c.watchs[node]++
		c.mu.Unlock()
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
			p, ok := e.Object.(*corev1.Pod)
			return e, ok && p.Spec.NodeName == node
		}), nil
	})
	return c
}

// selectedNode is the node of a spec.nodeName=<node> selector; any other selector
// fails the test: the follower must never list more than one node's pods.
func selectedNode(t *testing.T, sel fields.Selector) string {
	node, ok := sel.RequiresExactMatch("spec.nodeName")
	if !ok || len(sel.Requirements()) != 1 {
		t.Errorf("pods listed or watched with selector %q, want spec.nodeName=<node> alone", sel)
	}
	return node
}

func (c *cluster) watching(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watchs[node] > 0
}

// recorder is a Handler keeping the pods it was told of, by node, and the events.
type recorder struct {
	mu     sync.Mutex
	pods   map[string]map[string]string // node → namespace/name → container env value
	events []string
}

func newRecorder() *recorder { return &recorder{pods: map[string]map[string]string{}} }

func (r *recorder) OnAdd(node string, p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "add "+node+" "+nsName(p.Namespace, p.Name))
	r.set(node, p)
}

func (r *recorder) OnUpdate(node string, _, p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "update "+node+" "+nsName(p.Namespace, p.Name))
	r.set(node, p)
}

func (r *recorder) OnDelete(node string, p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "delete "+node+" "+nsName(p.Namespace, p.Name))
	delete(r.pods[node], nsName(p.Namespace, p.Name))
	if len(r.pods[node]) == 0 {
		delete(r.pods, node)
	}
}

func (r *recorder) set(node string, p *corev1.Pod) {
	if r.pods[node] == nil {
		r.pods[node] = map[string]string{}
	}
	env := "none"
	if len(p.Spec.Containers) > 0 && len(p.Spec.Containers[0].Env) > 0 {
		env = p.Spec.Containers[0].Env[0].Value
	}
	r.pods[node][nsName(p.Namespace, p.Name)] = env
}

// state renders the pods known as "node:ns/name=env ..." sorted.
func (r *recorder) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for node, pods := range r.pods {
		for k, env := range pods {
			out = append(out, node+":"+k+"="+env)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// started is a Follower with a recorder, over a fake cluster holding objects.
type started struct {
	c     *cluster
	f     *Follower
	rec   *recorder
	nodes informers.SharedInformerFactory
}

func start(t *testing.T, transform func(any) (any, error), objects ...runtime.Object) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := newCluster(t, objects...)
	factory := informers.NewSharedInformerFactory(c.client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	f, err := New(Options{Client: c.client, Nodes: nodes, IsVirtual: isVirtual, Transform: transform})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if err := f.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	return &started{c: c, f: f, rec: rec, nodes: factory}
}

func TestFollowsOnlyVirtualNodes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// change acts on the cluster once the first lists are in.
		change    func(t *testing.T, s *started)
		want      string // pods known after the change
		informers int
	}{
		{
			name:      "first lists: the virtual nodes' pods only",
			change:    func(*testing.T, *started) {},
			want:      "vk-1:a/p1=b vk-1:b/p2=b",
			informers: 1,
		},
		{
			name: "a pod created and one deleted on a virtual node",
			change: func(t *testing.T, s *started) {
				pods := s.c.client.CoreV1().Pods("a")
				mustDo(t, func() error { _, err := pods.Create(ctx, pod("a", "p3", "vk-1"), metav1.CreateOptions{}); return err })
				mustDo(t, func() error { return s.c.client.CoreV1().Pods("b").Delete(ctx, "p2", metav1.DeleteOptions{}) })
			},
			want:      "vk-1:a/p1=b vk-1:a/p3=b",
			informers: 1,
		},
		{
			name: "a virtual node added later, with a pod bound already",
			change: func(t *testing.T, s *started) {
				mustDo(t, func() error {
					_, err := s.c.client.CoreV1().Pods("a").Create(ctx, pod("a", "p9", "vk-2"), metav1.CreateOptions{})
					return err
				})
				mustDo(t, func() error {
					_, err := s.c.client.CoreV1().Nodes().Create(ctx, node("vk-2", true), metav1.CreateOptions{})
					return err
				})
			},
			want:      "vk-1:a/p1=b vk-1:b/p2=b vk-2:a/p9=b",
			informers: 2,
		},
		{
			name: "an ordinary node labelled virtual",
			change: func(t *testing.T, s *started) {
				mustDo(t, func() error {
					_, err := s.c.client.CoreV1().Nodes().Update(ctx, node("worker", true), metav1.UpdateOptions{})
					return err
				})
			},
			want:      "vk-1:a/p1=b vk-1:b/p2=b worker:a/w1=b",
			informers: 2,
		},
		{
			name: "a virtual node no longer virtual: its pods are deleted",
			change: func(t *testing.T, s *started) {
				mustDo(t, func() error {
					_, err := s.c.client.CoreV1().Nodes().Update(ctx, node("vk-1", false), metav1.UpdateOptions{})
					return err
				})
			},
			want:      "",
			informers: 0,
		},
		{
			name: "a virtual node deleted: its pods are deleted",
			change: func(t *testing.T, s *started) {
				mustDo(t, func() error { return s.c.client.CoreV1().Nodes().Delete(ctx, "vk-1", metav1.DeleteOptions{}) })
			},
			want:      "",
			informers: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, nil, node("vk-1", true), node("worker", false),
				pod("a", "p1", "vk-1"), pod("b", "p2", "vk-1"), pod("a", "w1", "worker"), pod("a", "pending", ""))
			eventually(t, "first lists", s.f.HasSynced)
			eventually(t, "vk-1 watched", func() bool { return s.c.watching("vk-1") })
			tc.change(t, s)
			eventually(t, fmt.Sprintf("pods %q (have %q)", tc.want, s.rec.state()), func() bool {
				return s.rec.state() == tc.want && s.f.Informers() == tc.informers && s.f.HasSynced()
			})
			s.c.mu.Lock()
			defer s.c.mu.Unlock()
			if n := s.c.lists[""]; n != 0 {
				t.Errorf("pods listed without a node %d times", n)
			}
		})
	}
}

// TestHasSyncedWaitsForEveryVirtualNode: a virtual node's first list not in yet keeps
// HasSynced false, at start-up and for a node added later.
func TestHasSyncedWaitsForEveryVirtualNode(t *testing.T) {
	c := newCluster(t)
	for _, n := range []string{"vk-1", "vk-2"} {
		c.hold[n] = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mustDo(t, func() error {
		_, err := c.client.CoreV1().Nodes().Create(ctx, node("vk-1", true), metav1.CreateOptions{})
		return err
	})
	factory := informers.NewSharedInformerFactory(c.client, 0)
	f, err := New(Options{Client: c.client, Nodes: factory.Core().V1().Nodes().Informer(), IsVirtual: isVirtual})
	if err != nil {
		t.Fatal(err)
	}
	if f.HasSynced() {
		t.Error("synced before Start")
	}
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	eventually(t, "vk-1 listed", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.lists["vk-1"] > 0 })
	time.Sleep(50 * time.Millisecond)
	if f.HasSynced() {
		t.Fatal("synced while vk-1's list is held")
	}
	close(c.hold["vk-1"])
	eventually(t, "synced", f.HasSynced)

	mustDo(t, func() error {
		_, err := c.client.CoreV1().Nodes().Create(ctx, node("vk-2", true), metav1.CreateOptions{})
		return err
	})
	eventually(t, "vk-2 listed", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.lists["vk-2"] > 0 })
	if f.HasSynced() {
		t.Fatal("synced while vk-2's list is held")
	}
	close(c.hold["vk-2"])
	eventually(t, "synced with vk-2", f.HasSynced)
}

func TestStopDeletesEveryPod(t *testing.T) {
	s := start(t, nil, node("vk-1", true), node("vk-2", true), pod("a", "p1", "vk-1"), pod("a", "p2", "vk-2"))
	eventually(t, "first lists", func() bool { return s.f.HasSynced() && s.rec.state() != "" })
	s.f.Stop()
	if got := s.rec.state(); got != "" {
		t.Errorf("after Stop the handler still knows %q", got)
	}
	if s.f.HasSynced() || s.f.Informers() != 0 {
		t.Errorf("after Stop: HasSynced %v, %d informers", s.f.HasSynced(), s.f.Informers())
	}
	if err := s.f.AddEventHandler(newRecorder()); err == nil {
		t.Error("a handler was added after Stop")
	}
	s.f.Stop() // a second Stop does nothing
}

func TestLateHandlerIsToldTheCurrentPods(t *testing.T) {
	s := start(t, nil, node("vk-1", true), pod("a", "p1", "vk-1"), pod("a", "p2", "vk-1"))
	eventually(t, "first lists", func() bool { return s.f.HasSynced() && s.rec.state() != "" })
	late := newRecorder()
	if err := s.f.AddEventHandler(late); err != nil {
		t.Fatal(err)
	}
	if got, want := late.state(), s.rec.state(); got != want {
		t.Errorf("late handler knows %q, the first %q", got, want)
	}
	eventually(t, "vk-1 watched", func() bool { return s.c.watching("vk-1") })
	mustDo(t, func() error {
		return s.c.client.CoreV1().Pods("a").Delete(context.Background(), "p1", metav1.DeleteOptions{})
	})
	eventually(t, "both told of the delete", func() bool { return late.state() == "vk-1:a/p2=b" && s.rec.state() == "vk-1:a/p2=b" })
}

func TestTransformKeepsPodsSmall(t *testing.T) {
	dropEnv := func(obj any) (any, error) {
		p := obj.(*corev1.Pod).DeepCopy()
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Env = []corev1.EnvVar{{Name: "A", Value: "slim"}}
		}
		return p, nil
	}
	s := start(t, dropEnv, node("vk-1", true), pod("a", "p1", "vk-1"))
	eventually(t, "slim pod", func() bool { return s.rec.state() == "vk-1:a/p1=slim" })
}

func TestNewChecksOptions(t *testing.T) {
	client := fake.NewClientset()
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes().Informer()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no client", Options{Nodes: nodes, IsVirtual: isVirtual}, "client"},
		{"no node informer", Options{Client: client, IsVirtual: isVirtual}, "node informer"},
		{"no predicate", Options{Client: client, Nodes: nodes}, "predicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func mustDo(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}
