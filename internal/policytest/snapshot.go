package policytest

import (
	"context"
	"fmt"
	"os"
	"sort"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Snapshot is a cluster given as YAML for the k8s.get and k8s.list built-ins: a map
// from the resource name a policy passes ("pods", "deployments.apps") to its objects,
// as a list or as what `kubectl get -o yaml` prints (an object with items):
//
//	pods:
//	  - {metadata: {name: a, namespace: team-a, labels: {app: x}}, ...}
//	configmaps:
//	  apiVersion: v1
//	  kind: List
//	  items: [...]
//
// A resource not in the snapshot is an error, as an undeclared resource is in the
// bridge (--cluster.resources).
type Snapshot struct {
	objects map[string][]map[string]any
}

// ReadSnapshot reads a snapshot file; "" is an empty snapshot.
func ReadSnapshot(file string) (*Snapshot, error) {
	s := &Snapshot{objects: map[string][]map[string]any{}}
	if file == "" {
		return s, nil
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cluster snapshot: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("cluster snapshot %s: %w", file, err)
	}
	for resource, v := range doc {
		if m, ok := v.(map[string]any); ok {
			v = m["items"]
		}
		list, ok := v.([]any)
		if !ok && v != nil {
			return nil, fmt.Errorf("cluster snapshot %s: %s: want a list of objects or an object with items", file, resource)
		}
		objs := []map[string]any{}
		for i, o := range list {
			obj, ok := o.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("cluster snapshot %s: %s[%d] is not an object", file, resource, i)
			}
			objs = append(objs, obj)
		}
		s.objects[resource] = objs
	}
	return s, nil
}

func meta(obj map[string]any) (namespace, name string, lbls map[string]string) {
	m, _ := obj["metadata"].(map[string]any)
	namespace, _ = m["namespace"].(string)
	name, _ = m["name"].(string)
	lbls = map[string]string{}
	if l, ok := m["labels"].(map[string]any); ok {
		for k, v := range l {
			if s, ok := v.(string); ok {
				lbls[k] = s
			}
		}
	}
	return namespace, name, lbls
}

func (s *Snapshot) resource(resource string) ([]map[string]any, error) {
	objs, ok := s.objects[resource]
	if !ok {
		names := make([]string, 0, len(s.objects))
		for k := range s.objects {
			names = append(names, k)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("resource %q is not in the cluster snapshot (it holds %v)", resource, names)
	}
	return objs, nil
}

// Get is policies.ClusterReader's: the object of that name (in that namespace, for a
// namespaced object).
func (s *Snapshot) Get(_ context.Context, resource, namespace, name string) (map[string]any, bool, error) {
	objs, err := s.resource(resource)
	if err != nil {
		return nil, false, err
	}
	for _, o := range objs {
		ns, n, _ := meta(o)
		if n == name && (ns == "" || ns == namespace) {
			return o, true, nil
		}
	}
	return nil, false, nil
}

// List is policies.ClusterReader's: the objects in namespace ("" every one) that
// selector matches.
func (s *Snapshot) List(_ context.Context, resource, namespace string, selector labels.Selector) ([]map[string]any, error) {
	objs, err := s.resource(resource)
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, o := range objs {
		ns, _, l := meta(o)
		if namespace != "" && ns != "" && ns != namespace {
			continue
		}
		if selector == nil || selector.Matches(labels.Set(l)) {
			out = append(out, o)
		}
	}
	return out, nil
}
