package policies

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/tester"
	"k8s.io/apimachinery/pkg/labels"
)

// fakeCluster is a ClusterReader over fixed objects, by resource.
type fakeCluster struct {
	objects map[string][]map[string]any
	gets    int
}

func (f *fakeCluster) Get(_ context.Context, resource, namespace, name string) (map[string]any, bool, error) {
	f.gets++
	objs, ok := f.objects[resource]
	if !ok {
		return nil, false, fmt.Errorf("resource %q is not watched", resource)
	}
	for _, o := range objs {
		if meta(o, "namespace") == namespace && meta(o, "name") == name {
			return o, true, nil
		}
	}
	return nil, false, nil
}

func (f *fakeCluster) List(_ context.Context, resource, namespace string, sel labels.Selector) ([]map[string]any, error) {
	objs, ok := f.objects[resource]
	if !ok {
		return nil, fmt.Errorf("resource %q is not watched", resource)
	}
	var out []map[string]any
	for _, o := range objs {
		if namespace != "" && meta(o, "namespace") != namespace {
			continue
		}
		if sel.Matches(labels.Set(objLabels(o))) {
			out = append(out, o)
		}
	}
	return out, nil
}

func meta(o map[string]any, key string) string {
	s, _ := o["metadata"].(map[string]any)[key].(string)
	return s
}

func objLabels(o map[string]any) map[string]string {
	out := map[string]string{}
	ls, _ := o["metadata"].(map[string]any)["labels"].(map[string]any)
	for k, v := range ls {
		out[k], _ = v.(string)
	}
	return out
}

func configMap(ns, name string, lbls map[string]any, data map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": ns, "name": name, "labels": lbls},
		"data":     data,
	}
}

func testCluster() *fakeCluster {
	return &fakeCluster{objects: map[string][]map[string]any{
		"configmaps": {
			configMap("a", "switch", map[string]any{"app": "x"}, map[string]any{"deny": "true"}),
			configMap("a", "other", map[string]any{"app": "y"}, nil),
			configMap("b", "third", map[string]any{"app": "x", "tier": "gold"}, nil),
		},
	}}
}

// newClusterEvaluator compiles module (package t) next to the default policy.
func newClusterEvaluator(t *testing.T, module string, reader ClusterReader) *Evaluator {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.rego"), []byte("package t\n\n"+module), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := New(context.Background(), Options{Dir: dir, Cluster: reader})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func names(v any) []string {
	var out []string
	arr, _ := v.([]any)
	for _, o := range arr {
		out = append(out, fmt.Sprint(o.(map[string]any)["metadata"].(map[string]any)["name"]))
	}
	return out
}

func TestClusterBuiltins(t *testing.T) {
	tests := []struct {
		name        string
		rule        string
		want        any // compared with names() for arrays
		undefined   bool
		wantErr     string
		nilReader   bool
		compareName bool
	}{
		{name: "get found", rule: `r := k8s.get("configmaps", "a", "switch").data.deny`, want: "true"},
		{name: "get absent", rule: `r := k8s.get("configmaps", "a", "missing")`, undefined: true},
		{name: "get wrong namespace", rule: `r := k8s.get("configmaps", "b", "switch")`, undefined: true},
		{name: "list namespace", rule: `r := k8s.list("configmaps", "a", "")`, want: []string{"switch", "other"}, compareName: true},
		{name: "list all namespaces", rule: `r := k8s.list("configmaps", "", "")`, want: []string{"switch", "other", "third"}, compareName: true},
		{name: "list none", rule: `r := k8s.list("configmaps", "c", "")`, want: []string(nil), compareName: true},
		{name: "selector string", rule: `r := k8s.list("configmaps", "", "app=x,tier notin (silver)")`, want: []string{"switch", "third"}, compareName: true},
		{name: "selector set-based", rule: `r := k8s.list("configmaps", "", "tier in (gold)")`, want: []string{"third"}, compareName: true},
		{name: "selector matchLabels", rule: `r := k8s.list("configmaps", "", {"matchLabels": {"app": "x"}})`, want: []string{"switch", "third"}, compareName: true},
		{name: "selector matchExpressions", rule: `r := k8s.list("configmaps", "", {"matchExpressions": [{"key": "tier", "operator": "Exists"}]})`, want: []string{"third"}, compareName: true},
		{name: "selector empty object", rule: `r := k8s.list("configmaps", "b", {})`, want: []string{"third"}, compareName: true},
		{name: "bad selector string", rule: `r := k8s.list("configmaps", "", "app in (")`, wantErr: "label selector"},
		{name: "bad selector field", rule: `r := k8s.list("configmaps", "", {"matchLabel": {"app": "x"}})`, wantErr: "unknown field"},
		{name: "bad selector operator", rule: `r := k8s.list("configmaps", "", {"matchExpressions": [{"key": "a", "operator": "Near"}]})`, wantErr: "label selector"},
		{name: "undeclared resource get", rule: `r := k8s.get("secrets", "a", "x")`, wantErr: `resource "secrets" is not watched`},
		{name: "undeclared resource list", rule: `r := k8s.list("secrets", "", "")`, wantErr: `resource "secrets" is not watched`},
		{name: "undeclared resource in negation", rule: `r if not k8s.get("secrets", "a", "x")`, wantErr: `resource "secrets" is not watched`},
		{name: "no reader", rule: `r := k8s.get("configmaps", "a", "switch")`, nilReader: true, wantErr: "no cluster resources are watched: start with --cluster.resources"},
		{name: "no reader list", rule: `r := k8s.list("configmaps", "a", "")`, nilReader: true, wantErr: "start with --cluster.resources"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var reader ClusterReader = testCluster()
			if tc.nilReader {
				reader = nil
			}
			e := newClusterEvaluator(t, tc.rule, reader)
			got, defined, err := e.Eval(context.Background(), []string{"t", "r"}, map[string]any{})
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q (result %v, defined %v)", err, tc.wantErr, got, defined)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.undefined:
				if defined {
					t.Fatalf("defined as %v, want undefined", got)
				}
				return
			case !defined:
				t.Fatal("undefined")
			}
			if tc.compareName {
				got = names(got)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// TestClusterBuiltinsNotMemoised: a decision calling k8s.get depends on the
// cluster, so the memo must stay off for it, and it reads the cluster on every
// evaluation.
func TestClusterBuiltinsNotMemoised(t *testing.T) {
	reader := testCluster()
	e := newClusterEvaluator(t, `deny if k8s.get("configmaps", "a", "switch").data.deny == "true"`, reader)
	ctx := context.Background()
	ok, reason, err := e.MemoStatus(ctx, []string{"t", "deny"})
	if err != nil || ok || !strings.Contains(reason, "k8s.get") {
		t.Fatalf("MemoStatus = %v, %q, %v; want not memoisable because of k8s.get", ok, reason, err)
	}
	for range 3 {
		if _, _, err := e.Eval(ctx, []string{"t", "deny"}, map[string]any{}); err != nil {
			t.Fatal(err)
		}
	}
	if reader.gets != 3 {
		t.Fatalf("reader read %d times for 3 evaluations, want 3", reader.gets)
	}
	// A change in the cluster shows in the next decision.
	reader.objects["configmaps"][0]["data"] = map[string]any{"deny": "false"}
	if _, defined, err := e.Eval(ctx, []string{"t", "deny"}, map[string]any{}); err != nil || defined {
		t.Fatalf("after the change: defined %v, err %v; want undefined", defined, err)
	}
}

// TestClusterBuiltinsNotPrecomputed: a _precompute document may not read the
// cluster, which changes after the load.
func TestClusterBuiltinsNotPrecomputed(t *testing.T) {
	dir := t.TempDir()
	src := "package t\n\n_precompute := k8s.list(\"configmaps\", \"\", \"\")\n"
	if err := os.WriteFile(filepath.Join(dir, "t.rego"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), Options{Dir: dir, Cluster: testCluster()})
	if err == nil || !strings.Contains(err.Error(), "k8s.list") {
		t.Fatalf("err = %v, want a refusal naming k8s.list", err)
	}
}

// testerClusterBuiltins are the cluster built-ins for the Rego test runner, without
// a reader: tests mock them with `with`.
func testerClusterBuiltins() []*tester.Builtin {
	impls := ClusterBuiltins(nil)
	return []*tester.Builtin{
		{Decl: clusterBuiltinDecls[builtinK8sGet], Func: impls[0]},
		{Decl: clusterBuiltinDecls[builtinK8sList], Func: impls[1]},
	}
}
