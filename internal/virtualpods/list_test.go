package virtualpods

import (
	"context"
	"errors"
	"slices"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// TestList: the pods of the virtual nodes, and only those, each node listed with its
// own spec.nodeName selector; before the node informer has synced, an error rather
// than a list that may miss a node.
func TestList(t *testing.T) {
	c := newCluster(t, node("vk-1", true), node("vk-2", true), node("worker", false),
		pod("a", "on-vk-1", "vk-1"), pod("b", "on-vk-2", "vk-2"), pod("a", "on-worker", "worker"), pod("a", "unbound", ""))
	nodes := informers.NewSharedInformerFactory(c.client, 0).Core().V1().Nodes().Informer()
	opts := Options{Client: c.client, Nodes: nodes, IsVirtual: isVirtual}

	if _, err := List(context.Background(), opts); !errors.Is(err, ErrNodesNotSynced) {
		t.Fatalf("List before the nodes synced: %v, want ErrNodesNotSynced", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go nodes.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		t.Fatal("nodes never synced")
	}
	pods, err := List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods {
		got = append(got, nsName(p.Namespace, p.Name)+"@"+p.Spec.NodeName)
	}
	slices.Sort(got)
	if want := []string{"a/on-vk-1@vk-1", "b/on-vk-2@vk-2"}; !slices.Equal(got, want) {
		t.Errorf("List: %v, want %v", got, want)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lists["worker"] != 0 || c.lists["vk-1"] != 1 || c.lists["vk-2"] != 1 {
		t.Errorf("lists by node %v, want one of each virtual node and none of worker", c.lists)
	}
}
