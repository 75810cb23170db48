package clusterdata

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/sar-bridge/sar-bridge/policies"
)

// benchInput is an allowed create, as the authorizer builds it.
const benchInput = `{
  "operation": "create",
  "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
          "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}},
  "subject": {"username": "system:serviceaccount:team-a:runner", "uid": "", "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"], "extra": {}},
  "tenant": "team-a", "tenant_label": "interlink.io/tenant", "group": "interlink.io",
  "namespace": {"name": "team-a", "labels": {}, "annotations": {}},
  "node": {"name": "vk", "found": true, "labels": {}, "taints": [], "allocatable": {}},
  "review": {"allowed": true, "denied": false, "reason": "RBAC: allowed", "attributes": []}
}`

// benchPolicy: the default decision, the same gated by a ConfigMap, and each built-in
// alone.
const benchPolicy = `package bench

import data.interlink.authz

plain := authz.decision

gated := authz.decision if {
	not k8s.get("configmaps", "team-a", "offload-switch").data.offload == "deny"
}

get := k8s.get("configmaps", "ns-7", "cm-7")

list := k8s.list("configmaps", "ns-7", "app=bench")
`

// benchConfigMap is a ConfigMap of a few labels and keys, with managedFields as the
// API server sends them.
func benchConfigMap(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"namespace": ns, "name": name, "uid": "6f1c0a4e-0d5c-4d7e-9a43-" + fmt.Sprintf("%012d", len(name)),
			"resourceVersion": "12345", "creationTimestamp": "2025-01-01T00:00:00Z",
			"labels": map[string]any{"app": "bench", "tier": "backend"},
			"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
				"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": map[string]any{"f:offload": map[string]any{}, "f:size": map[string]any{}}}}},
		},
		"data": map[string]any{"offload": "allow", "size": "small"},
	}}
}

// benchPod is a one-container pod with requests, limits, a toleration and status.
func benchPod(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{
			"namespace": ns, "name": name, "uid": "0b8f5a9e-7c1d-4f2a-8e3b-" + fmt.Sprintf("%012d", len(name)),
			"resourceVersion": "12345", "creationTimestamp": "2025-01-01T00:00:00Z",
			"labels":          map[string]any{"app": "bench", "job-name": name},
			"ownerReferences": []any{map[string]any{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "x", "controller": true}},
		},
		"spec": map[string]any{
			"nodeName": "vk-1", "serviceAccountName": "runner", "restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "main", "image": "registry.example/hpc/app:1.2",
				"command":   []any{"/bin/run", "--steps", "1000"},
				"resources": map[string]any{"requests": map[string]any{"cpu": "2", "memory": "4Gi"}, "limits": map[string]any{"cpu": "2", "memory": "4Gi"}}}},
			"tolerations": []any{map[string]any{"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"}},
		},
		"status": map[string]any{"phase": "Pending", "qosClass": "Guaranteed"},
	}}
}

func benchReader(b *testing.B, n int) *Reader {
	b.Helper()
	objs := make([]kruntime.Object, 0, n+1)
	objs = append(objs, benchConfigMap("team-a", "offload-switch"))
	for i := range n {
		objs = append(objs, benchConfigMap(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("cm-%d", i)))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(), map[schema.GroupVersionResource]string{cmGVR: "ConfigMapList"}, objs...)
	return startReader(b, dyn, "configmaps")
}

// BenchmarkClusterBuiltins measures, over 1,000 cached ConfigMaps (100 per
// namespace), a decision of the default policy, k8s.get and k8s.list alone (one call
// each, with the query around them), and the default decision gated by a k8s.get;
// each is also reported as a ratio to the plain decision of the same run.
func BenchmarkClusterBuiltins(b *testing.B) {
	reader := benchReader(b, 1000)
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.rego"), []byte(benchPolicy), 0o600); err != nil {
		b.Fatal(err)
	}
	e, err := policies.New(context.Background(), policies.Options{Dir: dir, Cluster: reader})
	if err != nil {
		b.Fatal(err)
	}
	var raw any
	if err := json.Unmarshal([]byte(benchInput), &raw); err != nil {
		b.Fatal(err)
	}
	in, err := ast.InterfaceToValue(raw)
	if err != nil {
		b.Fatal(err)
	}
	eval := func(doc string) func(*testing.B) {
		return func(b *testing.B) {
			ctx := context.Background()
			path := []string{"bench", doc}
			b.ReportAllocs()
			for b.Loop() {
				res, err := e.EvalValue(ctx, path, in, policies.Memo{})
				if err != nil || !res.Defined {
					b.Fatalf("%s: defined %v, err %v", doc, res.Defined, err)
				}
			}
		}
	}
	// The baseline of the ratios: the plain decision, timed here (testing.Benchmark
	// cannot run inside a benchmark).
	plainNs := func() float64 {
		ctx, path := context.Background(), []string{"bench", "plain"}
		const n = 2000
		start := time.Now()
		for range n {
			if _, err := e.EvalValue(ctx, path, in, policies.Memo{}); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / n
	}
	plainNs() // warm up: prepared queries, caches
	base := plainNs()
	for _, doc := range []string{"plain", "get", "list", "gated"} {
		b.Run(doc, func(b *testing.B) {
			eval(doc)(b)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x_plain_decision")
		})
	}
}

// BenchmarkMemoryPerObject measures the heap an informer store takes per object
// (trimmed as the informers trim them), for ConfigMaps and Pods.
func BenchmarkMemoryPerObject(b *testing.B) {
	const n = 10000
	for _, kind := range []struct {
		name string
		make func(ns, name string) *unstructured.Unstructured
	}{{"configmaps", benchConfigMap}, {"pods", benchPod}} {
		b.Run(kind.name, func(b *testing.B) {
			var perObject float64
			for b.Loop() {
				perObject = storeBytesPerObject(b, n, kind.make)
			}
			b.ReportMetric(perObject, "bytes/object")
		})
	}
}

// storeBytesPerObject fills an indexer (namespace index, as informers keep) with n
// objects decoded from JSON, as a watch delivers them, and returns the heap growth
// per object.
func storeBytesPerObject(b *testing.B, n int, mk func(ns, name string) *unstructured.Unstructured) float64 {
	b.Helper()
	wire := make([][]byte, n)
	for i := range n {
		data, err := json.Marshal(mk(fmt.Sprintf("ns-%d", i%100), fmt.Sprintf("obj-%d", i)).Object)
		if err != nil {
			b.Fatal(err)
		}
		wire[i] = data
	}
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	before := heapInUse()
	for _, data := range wire {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			b.Fatal(err)
		}
		obj, _ := Trim(u)
		if err := store.Add(obj); err != nil {
			b.Fatal(err)
		}
	}
	after := heapInUse()
	runtime.KeepAlive(wire)
	if len(store.List()) != n {
		b.Fatal("store lost objects")
	}
	return float64(after-before) / float64(n)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
