package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// benchData is the policy data of the e2e suite and manifests/base, plus a
// few more groups and a second protected taint.
const benchData = `{
  "interlink": {
    "default_limits": {"cpu": "1", "memory": "1Gi"},
    "limits": {
      "system:serviceaccounts:team-a": {"cpu": "4", "memory": "8Gi"},
      "system:serviceaccounts:team-b": {"cpu": "2", "memory": "4Gi"},
      "system:authenticated": {"cpu": "2000m", "memory": "16384Mi"},
      "gpu-users": {"cpu": "64", "memory": "256Gi"}
    },
    "protected_taints": [
      {"key": "hpc.example/gpu", "value": "a100", "allowed_users": [], "allowed_groups": ["system:serviceaccounts:team-a"]},
      {"key": "hpc.example/reserved", "value": "bigmem", "allowed_users": ["system:serviceaccount:team-b:runner"], "allowed_groups": ["gpu-users"]}
    ],
    "restricted_annotations": {
      "slurm-job.vk.io/flags": {"users": [], "groups": ["system:serviceaccounts:team-a"]}
    },
    "hpc": {"tenants": {"*": {"sbatch_options": ["--job-name", "--time"]}}}
  }
}`

// benchPod is a pod as interLink sends it: two containers with resources,
// tolerations, a nodeSelector, labels and annotations.
const benchPod = `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "job-7f9c", "namespace": "team-a", "uid": "0c6f2b9e-1b7a-4c2e-9a51-3f0d7f6f9e11",
    "labels": {"app": "trainer", "app.kubernetes.io/part-of": "ml", "interlink.io/tenant": "tenant-a"},
    "annotations": {"slurm-job.vk.io/flags": "--job-name=trainer", "interlink.eu/pod-vpn": "true"}},
  "spec": {
    "serviceAccountName": "runner",
    "nodeName": "vk-a",
    "nodeSelector": {"interlink.io/tenant": "tenant-a", "kubernetes.io/os": "linux"},
    "containers": [
      {"name": "main", "image": "ghcr.io/example/trainer:1.4", "command": ["python", "train.py"],
       "env": [{"name": "EPOCHS", "value": "10"}, {"name": "BATCH", "value": "64"}],
       "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}}},
      {"name": "sidecar", "image": "busybox:1.36", "args": ["sleep", "infinity"],
       "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    ],
    "tolerations": [
      {"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"},
      {"key": "hpc.example/gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
      {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ],
    "restartPolicy": "Never"
  }
}`

// benchSubject mirrors authorizer.Subject (policies may not import authorizer).
type benchSubject struct {
	Username string              `json:"username"`
	UID      string              `json:"uid"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra"`
}

// benchInput builds the input the way authorizer.Decide does: the request as
// decoded JSON, plus Go-typed subject, namespace, node and review.
func benchInput(t testing.TB) map[string]any {
	t.Helper()
	var pod map[string]any
	if err := json.Unmarshal([]byte(benchPod), &pod); err != nil {
		t.Fatal(err)
	}
	in := map[string]any{
		"operation": "create",
		"pod":       pod,
		"subject": benchSubject{
			Username: "system:serviceaccount:team-a:runner",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"},
			Extra:    map[string][]string{},
		},
		"tenant":       "tenant-a",
		"tenant_label": "interlink.io/tenant",
		"group":        "interlink.io",
		"namespace": map[string]any{"name": "team-a",
			"labels":      map[string]string{"interlink.io/tenant": "tenant-a", "interlink.io/billing-project": "proj-42", "kubernetes.io/metadata.name": "team-a"},
			"annotations": map[string]string{"owner": "ml-team"}},
		"node": map[string]any{"name": "vk-a", "found": true,
			"labels": map[string]string{"interlink.io/tenant": "tenant-a", "kubernetes.io/role": "agent", "type": "virtual-kubelet"},
			"taints": []any{
				map[string]any{"key": "virtual-node.interlink/no-schedule", "value": "true", "effect": "NoSchedule"},
				map[string]any{"key": "hpc.example/gpu", "value": "a100", "effect": "NoSchedule"},
			},
			"allocatable": map[string]string{"cpu": "100", "memory": "1Ti", "pods": "1k"}},
		"review": map[string]any{"allowed": true, "denied": false, "reason": `RBAC: allowed by RoleBinding "team-a/runner" of ClusterRole "interlink-pods"`,
			"attributes": []any{map[string]any{"namespace": "team-a", "verb": "create", "group": "interlink.io", "resource": "pods", "name": "job-7f9c"}}},
	}
	return bridged(t, in)
}

// policyPair holds prepared decision queries of the default policy as the bridge
// loads it (current: with the precomputed tables, so the fast path), of its general
// rules alone (general: the same modules over the data without the precomputed
// document, as the opa CLI evaluates it) and of the trivial policy.
type policyPair struct {
	general, current, trivial rego.PreparedEvalQuery
	evaluator                 *Evaluator // as the bridge builds it, with the trivial module
}

// preparePair builds an Evaluator the way the bridge does (New, with data as
// its data file), with the trivial policy as an extra module, and prepares doc
// of each on its compiler, with and without the precomputed document.
func preparePair(t testing.TB, data string, doc string) policyPair {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "bench_trivial.rego", trivialPolicy)
	opts := Options{Dir: dir}
	var parsed map[string]any
	if data != "" {
		opts.DataFile = writeFile(t, t.TempDir(), "data.json", data)
		var err error
		if parsed, err = parseData("data.json", []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	e := newEvaluator(t, opts)
	plain := inmem.NewFromObjectWithOpts(parsed, inmem.OptReturnASTValuesOnRead(true))
	prep := func(pkg string, store storage.Store) rego.PreparedEvalQuery {
		pq, err := rego.New(
			rego.Query("result = data.interlink."+pkg+"."+doc),
			rego.Compiler(e.compiler),
			rego.Store(store),
		).PrepareForEval(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return pq
	}
	return policyPair{general: prep("authz", plain), current: prep("authz", e.store), trivial: prep("bench_trivial", e.store), evaluator: e}
}

// trivialPolicy calibrates BenchmarkPolicy: the fixed cost of one prepared
// evaluation on this machine (issue 19: ~7 µs where 50 µs is the target).
const trivialPolicy = `package interlink.bench_trivial

decision := {"allowed": input.review.allowed == true}
`

func evalResult(t testing.TB, pq rego.PreparedEvalQuery, opts ...rego.EvalOption) any {
	t.Helper()
	rs, err := pq.Eval(context.Background(), opts...)
	if err != nil {
		t.Fatalf("Eval: %v", err)
	}
	if len(rs) != 1 {
		t.Fatalf("Eval: %d results", len(rs))
	}
	return rs[0].Bindings["result"]
}

// BenchmarkPolicy evaluates the default policy's decision on the input the
// bridge builds, beside its general rules alone (general-*: without the
// precomputed tables, as the opa CLI or an OPA server evaluates it; a prepared
// query, as opa bench) in the same run.
// "parsed" converts the input to an ast.Value once (rego.EvalParsedInput), as
// a caller holding a parsed input would: issue 19's target applies to it.
// "trivial-parsed" is the fixed cost of any evaluation on this machine.
// "bridge" is the default policy's decision as the bridge evaluates it
// (Evaluator.EvalValue without memo: OPA's evaluator called directly).
func BenchmarkPolicy(b *testing.B) {
	pair := preparePair(b, benchData, "decision")
	in := benchInput(b)
	parsed, err := ast.InterfaceToValue(in)
	if err != nil {
		b.Fatal(err)
	}
	want := evalResult(b, pair.general, rego.EvalInput(in))
	if d := want.(map[string]any); d["allowed"] != true {
		b.Fatalf("bench input is not allowed: %v", d)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name    string
		pq      rego.PreparedEvalQuery
		opt     rego.EvalOption
		trivial bool
	}{
		{"trivial-parsed", pair.trivial, rego.EvalParsedInput(parsed), true},
		{"general-map", pair.general, rego.EvalInput(in), false},
		{"general-parsed", pair.general, rego.EvalParsedInput(parsed), false},
		{"map", pair.current, rego.EvalInput(in), false},
		{"parsed", pair.current, rego.EvalParsedInput(parsed), false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if got := evalResult(b, bc.pq, bc.opt); !bc.trivial && !reflect.DeepEqual(got, want) {
				b.Fatalf("decision differs from the general rules':\n got %v\nwant %v", got, want)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.pq.Eval(ctx, bc.opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	decision := []string{"interlink", "authz", "decision"}
	b.Run("bridge", func(b *testing.B) {
		got, err := pair.evaluator.EvalValue(ctx, decision, parsed, Memo{})
		if err != nil {
			b.Fatal(err)
		}
		if gotJSON, err := ast.JSON(got.Value); err != nil || !reflect.DeepEqual(gotJSON, want) {
			b.Fatalf("decision differs from the general rules': %v (%v)\nwant %v", got.Value, err, want)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := pair.evaluator.EvalValue(ctx, decision, parsed, Memo{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// variedDatas are data sets of odd and ordinary shapes, which the sameness tests
// decide with (TestPrecomputeMatchesFallback extends them).
var variedDatas = map[string]string{
	"none":  "",
	"bench": benchData,
	"e2e": `{"interlink": {"default_limits": {"cpu": "1", "memory": "1Gi"},
	  "limits": {"system:serviceaccounts:team-a": {"cpu": "2", "memory": "4Gi"}},
	  "protected_taints": [{"key": "hpc.example/gpu", "value": "a100", "allowed_users": [], "allowed_groups": ["system:serviceaccounts:team-a"]}]}}`,
	"odd": `{"interlink": {"default_limits": {}, "limits": {"system:serviceaccounts:team-a": "4",
	  "system:authenticated": {"cpu": "four", "memory": 1073741824}, "gpu-users": {"cpu": 8, "memory": ["1Gi"]}},
	  "protected_taints": [1, {"key": 2}, {"key": ""}, {"key": "hpc.example/gpu"},
	    {"key": "hpc.example/reserved", "value": "bigmem", "allowed_users": "alice", "allowed_groups": {"a": "gpu-users"}}]}}`,
	"wrong-types": `{"interlink": {"limits": [1], "protected_taints": {"key": "x"}, "default_limits": "1"}}`,
}

// variedInputs is the bench input, hand-written edge cases and seeded random
// mixes of well- and ill-typed fields.
func variedInputs(t testing.TB) []any {
	t.Helper()
	jsonOf := func(v any) any {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var out any
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	base := jsonOf(benchInput(t)).(map[string]any)
	withoutRestrictedAnnotations(base)
	inputs := []any{nil, map[string]any{}, "x", 1, []any{}, true, base}

	pick := func(r *rand.Rand, vs ...any) any { return vs[r.IntN(len(vs))] }
	quantities := []any{"1", "2", "3500m", "4", "4.5", "5", "64", "8Gi", "12Gi", "16Gi", "17G", "1e3", "35E-1", "lots", "", nil, 3, json.Number("2.5"), []any{"1Gi"}, true}
	resources := func(r *rand.Rand) any {
		switch r.IntN(8) {
		case 0:
			return nil
		case 1:
			return "big"
		case 2:
			return map[string]any{"limits": map[string]any{}}
		case 3:
			return map[string]any{"limits": nil, "requests": map[string]any{"cpu": pick(r, quantities...)}}
		}
		res := map[string]any{}
		for _, kind := range []string{"limits", "requests"} {
			if r.IntN(3) == 0 {
				continue
			}
			m := map[string]any{}
			for _, q := range []string{"cpu", "memory"} {
				if r.IntN(3) > 0 {
					m[q] = pick(r, quantities...)
				}
			}
			res[kind] = m
		}
		return res
	}
	container := func(r *rand.Rand) any {
		switch r.IntN(12) {
		case 0:
			return 1
		case 1:
			return nil
		case 2:
			return "x"
		}
		c := map[string]any{"image": "busybox"}
		if n := pick(r, "main", "side", "init", "main", "", 5, nil, "absent"); n != "absent" {
			c["name"] = n
		}
		if r.IntN(5) > 0 {
			c["resources"] = resources(r)
		}
		return c
	}
	list := func(r *rand.Rand, f func(*rand.Rand) any) any {
		switch r.IntN(10) {
		case 0:
			return "none"
		case 1:
			return map[string]any{"a": f(r)}
		}
		n := r.IntN(4)
		out := make([]any, n)
		for i := range out {
			out[i] = f(r)
		}
		return out
	}
	toleration := func(r *rand.Rand) any {
		if r.IntN(10) == 0 {
			return pick(r, 1, "t", nil)
		}
		t := map[string]any{}
		if k := pick(r, "hpc.example/gpu", "hpc.example/reserved", "other/taint", "", 5, nil, []any{"hpc.example/gpu"}, "absent"); k != "absent" {
			t["key"] = k
		}
		if op := pick(r, "Exists", "Equal", "", "Like", 7, nil, "absent"); op != "absent" {
			t["operator"] = op
		}
		if v := pick(r, "a100", "bigmem", "cpu", "", 3, nil, "absent"); v != "absent" {
			t["value"] = v
		}
		return t
	}
	tenants := []any{"tenant-a", "tenant-b", "", 3, nil}
	for seed := range 400 {
		r := rand.New(rand.NewPCG(uint64(seed), 19))
		in := jsonOf(base).(map[string]any)
		pod := in["pod"].(map[string]any)
		spec := pod["spec"].(map[string]any)
		in["operation"] = pick(r, "create", "create", "create", "delete", "status", "Create", 1)
		spec["containers"] = list(r, container)
		if r.IntN(2) == 0 {
			spec["initContainers"] = list(r, container)
		}
		spec["tolerations"] = list(r, toleration)
		switch r.IntN(5) {
		case 0:
			delete(spec, "nodeSelector")
		case 1:
			spec["nodeSelector"] = pick(r, "tenant-b", []any{"x"}, nil)
		default:
			spec["nodeSelector"] = map[string]any{"interlink.io/tenant": pick(r, tenants...), "kubernetes.io/os": "linux"}
		}
		if r.IntN(2) == 0 {
			spec["affinity"] = map[string]any{"nodeAffinity": map[string]any{
				"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{
					1,
					map[string]any{"matchExpressions": pick(r, "x", []any{
						map[string]any{"key": "kubernetes.io/os", "operator": "In", "values": []any{"linux"}},
						map[string]any{"key": pick(r, "interlink.io/tenant", 5), "operator": pick(r, "In", "NotIn"), "values": pick(r, []any{"tenant-a", "tenant-b"}, []any{"tenant-a"}, "tenant-b", map[string]any{"x": "tenant-c"})},
					})},
				}},
			}}
		}
		if r.IntN(10) == 0 {
			pod["spec"] = pick(r, nil, "s", []any{})
		}
		if r.IntN(15) == 0 {
			in["pod"] = pick(r, nil, map[string]any{})
		}
		in["subject"] = pick(r,
			map[string]any{"username": "system:serviceaccount:team-a:runner", "groups": []any{"system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"}},
			map[string]any{"username": "system:serviceaccount:team-b:runner", "groups": []any{"system:serviceaccounts:team-b", "system:authenticated"}},
			map[string]any{"username": "alice", "groups": []any{"system:authenticated"}},
			map[string]any{"username": "bob", "groups": []any{"system:authenticated", "gpu-users", 3}},
			map[string]any{"username": "", "groups": []any{"unrelated"}},
			map[string]any{"username": 7, "groups": "system:authenticated"},
			map[string]any{"groups": map[string]any{"a": "gpu-users"}},
			nil, "alice",
		)
		in["tenant"] = pick(r, tenants...)
		in["tenant_label"] = pick(r, "interlink.io/tenant", "interlink.io/tenant", "", []any{"x"}, nil)
		if r.IntN(3) == 0 {
			in["node"] = pick(r, nil, "vk",
				map[string]any{"name": "vk-b", "found": true, "labels": map[string]any{"interlink.io/tenant": "tenant-b"}, "taints": []any{}},
				map[string]any{"name": "vk-b", "found": false, "labels": map[string]any{"interlink.io/tenant": "tenant-b"}},
				map[string]any{"name": 5, "found": "true", "labels": []any{"interlink.io/tenant"}},
				map[string]any{"found": true, "labels": map[string]any{"interlink.io/tenant": 3}},
			)
		}
		if r.IntN(3) == 0 {
			in["namespace"] = pick(r, nil, "team-a",
				map[string]any{"name": "team-a", "labels": map[string]any{"interlink.io/billing-project": pick(r, "proj-1", 42, nil, "")}},
				map[string]any{"name": "team-a", "labels": []any{}},
			)
		}
		if r.IntN(3) == 0 {
			in["review"] = pick(r, nil, "yes", false,
				map[string]any{"allowed": false, "denied": true, "reason": "RBAC: no binding"},
				map[string]any{"allowed": false, "reason": ""},
				map[string]any{"allowed": "true", "reason": 12},
				map[string]any{"allowed": true},
			)
		}
		if r.IntN(20) == 0 {
			delete(in, pick(r, "operation", "pod", "subject", "tenant", "tenant_label", "namespace", "node", "review").(string))
		}
		inputs = append(inputs, bridged(t, in))
	}
	return inputs
}

// bridged sets the members the bridge derives from input.pod the way it does for
// every pod decision.
func bridged(t testing.TB, in map[string]any) map[string]any {
	t.Helper()
	for k, v := range derivedMembers(t, in["pod"]) {
		in[k] = v
	}
	return in
}

// derivedMembers is what the bridge adds to an input for its pod (policies.SpecDerived
// and input.hpc), as JSON: what a pod that is not an object becomes is null.
func derivedMembers(t testing.TB, pod any) map[string]any {
	t.Helper()
	v, err := ast.InterfaceToValue(pod)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for _, m := range append(DeriveFromPod(v).Members(), ast.Item(ast.StringTerm("hpc"), ast.NewTerm(PodHPC(v)))) {
		if out[string(m[0].Value.(ast.String))], err = ast.JSON(m[1].Value); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestVariedInputsVaried(t *testing.T) {
	// Guards the generator: the comparison means little if every random input
	// were denied by the review or allowed outright.
	pair := preparePair(t, benchData, "decision")
	var allowed, denied int
	reasons := map[string]bool{}
	for _, in := range variedInputs(t) {
		d, _ := evalResult(t, pair.current, rego.EvalInput(in)).(map[string]any)
		if d["allowed"] == true {
			allowed++
		} else {
			denied++
		}
		reasons[fmt.Sprint(d["reason"])] = true
	}
	if allowed < 20 || denied < 20 || len(reasons) < 50 {
		t.Errorf("inputs not varied enough: %d allowed, %d denied, %d distinct reasons", allowed, denied, len(reasons))
	}
}

// withoutRestrictedAnnotations drops the bench pod's slurm-job.vk.io/flags
// annotation from an input: the restricted annotations rule (policies/rules/restricted-annotations)
// refuses it unless the data names the subject, as benchData does, and the
// varied inputs try other subjects.
func withoutRestrictedAnnotations(in map[string]any) {
	pod := in["pod"].(map[string]any)
	delete(pod["metadata"].(map[string]any)["annotations"].(map[string]any), "slurm-job.vk.io/flags")
	if v, err := ast.InterfaceToValue(pod); err == nil {
		in["hpc"], _ = ast.JSON(PodHPC(v))
	}
}
