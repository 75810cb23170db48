package clusterdata

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/sar-bridge/sar-bridge/policies"
)

var _ policies.ClusterReader = (*Reader)(nil)

var (
	cmGVR   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	nsGVR   = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	deplGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	return m
}

func object(apiVersion, kind, ns, name string, lbls map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": name, "labels": lbls,
		"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update"}}}
	if ns != "" {
		md["namespace"] = ns
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md}}
}

func startedReader(t *testing.T, resources ...string) *Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	lists := map[schema.GroupVersionResource]string{cmGVR: "ConfigMapList", nsGVR: "NamespaceList", deplGVR: "DeploymentList"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, lists,
		object("v1", "ConfigMap", "a", "one", map[string]any{"app": "x"}),
		object("v1", "ConfigMap", "a", "two", map[string]any{"app": "y"}),
		object("v1", "ConfigMap", "b", "three", map[string]any{"app": "x"}),
		object("v1", "Namespace", "", "a", nil),
		object("apps/v1", "Deployment", "a", "web", nil),
	)
	return startReader(t, dyn, resources...)
}

// startReader starts a Reader of resources over dyn, until the test ends, and waits for
// its first lists.
func startReader(tb testing.TB, dyn dynamic.Interface, resources ...string) *Reader {
	tb.Helper()
	r, err := New(dyn, testMapper(), resources, 0)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	r.Start(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if !r.WaitForSync(wctx) {
		tb.Fatal("informers did not sync")
	}
	return r
}

func TestGetAndList(t *testing.T) {
	r := startedReader(t, "configmaps", "namespaces", "deployments.apps")
	ctx := context.Background()

	obj, found, err := r.Get(ctx, "configmaps", "a", "one")
	if err != nil || !found {
		t.Fatalf("Get = %v, %v, %v", obj, found, err)
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(obj, "metadata", "managedFields"); ok {
		t.Fatal("managedFields were not trimmed")
	}
	if _, found, err := r.Get(ctx, "configmaps", "b", "one"); err != nil || found {
		t.Fatalf("Get in the wrong namespace: found %v, err %v", found, err)
	}
	if _, found, err := r.Get(ctx, "namespaces", "ignored", "a"); err != nil || !found {
		t.Fatalf("Get of a cluster-scoped object: found %v, err %v", found, err)
	}
	for _, name := range []string{"deployments.apps", "deployments.v1.apps", "Deployments.apps"} {
		if _, found, err := r.Get(ctx, name, "a", "web"); err != nil || !found {
			t.Fatalf("Get %s: found %v, err %v", name, found, err)
		}
	}

	sel := labels.SelectorFromSet(labels.Set{"app": "x"})
	for _, tc := range []struct {
		ns   string
		sel  labels.Selector
		want []string
	}{
		{"", nil, []string{"a/one", "a/two", "b/three"}},
		{"a", labels.Everything(), []string{"a/one", "a/two"}},
		{"", sel, []string{"a/one", "b/three"}},
		{"b", sel, []string{"b/three"}},
		{"c", nil, nil},
	} {
		objs, err := r.List(ctx, "configmaps", tc.ns, tc.sel)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range objs {
			u := unstructured.Unstructured{Object: o}
			got = append(got, u.GetNamespace()+"/"+u.GetName())
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("List(%q, %v) = %v, want %v", tc.ns, tc.sel, got, tc.want)
		}
	}
}

func TestNotWatched(t *testing.T) {
	r := startedReader(t, "configmaps")
	_, _, err := r.Get(context.Background(), "secrets", "a", "x")
	if !errors.Is(err, ErrNotWatched) || !strings.Contains(err.Error(), `"secrets"`) || !strings.Contains(err.Error(), "--cluster.resources") {
		t.Fatalf("err = %v", err)
	}
	if _, err := r.List(context.Background(), "namespaces", "", nil); !errors.Is(err, ErrNotWatched) {
		t.Fatalf("err = %v", err)
	}
}

func TestUnknownResource(t *testing.T) {
	for _, name := range []string{"foos", "deployments.nowhere", ""} {
		_, err := New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), testMapper(), []string{"configmaps", name}, 0)
		if err == nil || !strings.Contains(err.Error(), "resource") {
			t.Errorf("New(%q): err = %v, want an unknown-resource error", name, err)
		}
	}
}

func TestUnsyncedReadFails(t *testing.T) {
	r, err := New(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), testMapper(), []string{"configmaps"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Never started: a read must fail (after the context ends), not answer from an empty cache.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := r.Get(ctx, "configmaps", "a", "one"); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Fatalf("err = %v", err)
	}
	if r.Synced() {
		t.Fatal("Synced before Start")
	}
}
