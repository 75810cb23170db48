package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// FieldManager is the server-side apply field manager used by the harness.
const FieldManager = "sar-bridge-e2e"

// Render builds the kustomization in dir (like `kustomize build dir`) and returns its
// objects in the order kustomize emits them.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}

// Filter returns the objects for which keep returns true.
func Filter(objs []*unstructured.Unstructured, keep func(*unstructured.Unstructured) bool) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}

// SkipKinds returns a Filter predicate that drops the given kinds.
func SkipKinds(kinds ...string) func(*unstructured.Unstructured) bool {
	return func(o *unstructured.Unstructured) bool {
		for _, k := range kinds {
			if o.GetKind() == k {
				return false
			}
		}
		return true
	}
}

// Apply server-side applies the objects in order (Namespaces first) with the admin
// dynamic client.
func (c *Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	return c.apply(ctx, objs, false)
}

// DryRunApply is Apply with server-side dry run: the API server validates and
// defaults the objects but stores nothing.
func (c *Cluster) DryRunApply(ctx context.Context, objs []*unstructured.Unstructured) error {
	return c.apply(ctx, objs, true)
}

func (c *Cluster) apply(ctx context.Context, objs []*unstructured.Unstructured, dryRun bool) error {
	ordered := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			ordered = append(ordered, o)
		}
	}
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			ordered = append(ordered, o)
		}
	}
	for _, o := range ordered {
		if err := c.applyOne(ctx, o, dryRun); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) applyOne(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	gvk := o.GroupVersionKind()
	var mapping *meta.RESTMapping
	var err error
	for i := 0; i < 20; i++ {
		mapping, err = c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			break
		}
		c.Mapper.Reset()
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("no REST mapping for %s: %w", gvk, err)
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ri := c.Dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := o.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		_, err = ri.Namespace(ns).Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts)
	} else {
		_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts)
	}
	if err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err)
	}
	return nil
}

// ApplyDir renders dir with kustomize and applies every object that keep accepts
// (keep may be nil).
func (c *Cluster) ApplyDir(ctx context.Context, dir string, keep func(*unstructured.Unstructured) bool) ([]*unstructured.Unstructured, error) {
	objs, err := Render(dir)
	if err != nil {
		return nil, err
	}
	if keep != nil {
		objs = Filter(objs, keep)
	}
	return objs, c.Apply(ctx, objs)
}

// ParseYAML decodes a multi-document YAML (or JSON) stream into objects.
func ParseYAML(text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// ApplyYAML parses and applies a multi-document YAML stream.
func (c *Cluster) ApplyYAML(ctx context.Context, text string) ([]*unstructured.Unstructured, error) {
	objs, err := ParseYAML(text)
	if err != nil {
		return nil, err
	}
	return objs, c.Apply(ctx, objs)
}

// Delete deletes the objects (ignoring those already gone).
func (c *Cluster) Delete(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		mapping, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		ri := c.Dynamic.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			err = ri.Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		} else {
			err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}
