package virtualpods

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// ErrNodesNotSynced is List's error before the node informer has its first list: which
// nodes are virtual is not known, so no list of their pods can be complete.
var ErrNodesNotSynced = errors.New("the bridge's view of the nodes has not synced yet: which nodes are virtual is unknown")

// listPageSize bounds one page of a node's pods.
const listPageSize = 500

// List reads, live from the API server, the pods bound to the virtual nodes the node
// informer knows: one list per virtual node with the field selector spec.nodeName=<node>
// (served through the API server's node index, as a Follower's informers are), paged.
// It follows nothing and keeps nothing: a caller that needs the pods as they are now,
// once, reads them here instead of starting informers. Any error fails the whole list.
func List(ctx context.Context, opts Options) ([]*corev1.Pod, error) {
	switch {
	case opts.Client == nil || opts.Nodes == nil || opts.IsVirtual == nil:
		return nil, errors.New("virtualpods: List needs a client, a node informer and a virtual-node predicate")
	case !opts.Nodes.HasSynced():
		return nil, ErrNodesNotSynced
	}
	var out []*corev1.Pod
	for _, obj := range opts.Nodes.GetStore().List() {
		node, ok := obj.(*corev1.Node)
		if !ok || !opts.IsVirtual(node) {
			continue
		}
		list := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String(), Limit: listPageSize}
		for {
			page, err := opts.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, list)
			if err != nil {
				return nil, fmt.Errorf("listing the pods of virtual node %s: %w", node.Name, err)
			}
			for i := range page.Items {
				out = append(out, &page.Items[i])
			}
			if page.Continue == "" {
				break
			}
			list.Continue = page.Continue
		}
	}
	return out, nil
}
