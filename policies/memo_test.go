package policies

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

func memoEvaluator(t *testing.T, module string) *Evaluator {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "memo.rego", module)
	e, err := New(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func value(t *testing.T, s string) ast.Value {
	t.Helper()
	v, err := ast.ParseTerm(s)
	if err != nil {
		t.Fatal(err)
	}
	return v.Value
}

func TestInputFootprint(t *testing.T) {
	tests := []struct {
		name   string
		module string
		paths  string // the footprint, or "" when not memoisable
		reason string
	}{
		{"references", `package m
d := {"n": input.pod.metadata.name, "c": count(input.pod.spec.containers)}`,
			`[["pod", "metadata", "name"], ["pod", "spec", "containers"]]`, ""},
		{"iteration keeps the prefix", `package m
d contains c.image if some c in input.pod.spec.containers`, `[["pod", "spec", "containers"]]`, ""},
		{"a key from data keeps the prefix", `package m
d := input.node.labels[data.m.key]
key := "tenant"`, `[["node", "labels"]]`, ""},
		{"functions and else branches", `package m
d := f(input.pod.spec) if input.operation == "create" else := g(input.pod.metadata.name)
f(s) := s.nodeName
g(n) := n`,
			`[["operation"], ["pod", "metadata", "name"], ["pod", "spec"]]`, ""},
		{"a longer path is covered by its prefix", `package m
d := [input.pod, input.pod.spec.nodeName]`, `[["pod"]]`, ""},
		{"input passed whole", `package m
d := object.get(input, "pod", {})`, "", "the whole input is read as a value"},
		{"input bound to a variable", `package m
d := x if x := input`, "", "the whole input is read as a value"},
		{"a variable top-level key", `package m
d := [v | some k; v := input[k]]`, "", "input is read with a key known only at evaluation"},
		{"with input", `package m
d := v if v := e with input as {}
e := input.x`, "", "replaces input"},
		{"http.send", `package m
d := http.send({"method": "GET", "url": input.url})`, "", "built-in http.send is nondeterministic"},
		{"time.now_ns in a function", `package m
d := f(1)
f(x) := time.now_ns() + x`, "", "built-in time.now_ns is nondeterministic"},
		{"unreachable nondeterminism does not count", `package m
d := input.a
other := time.now_ns()`, `[["a"]]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := memoEvaluator(t, tt.module+"\n")
			p, err := e.prepare(context.Background(), []string{"m", "d"})
			if err != nil || p == nil {
				t.Fatalf("prepare: %v", err)
			}
			fp := p.footprint
			if tt.paths == "" {
				if fp.memoisable() || !strings.Contains(fp.reason, tt.reason) {
					t.Fatalf("memoisable=%v reason %q, want not memoisable because %q", fp.memoisable(), fp.reason, tt.reason)
				}
				return
			}
			if !fp.memoisable() {
				t.Fatalf("not memoisable: %s", fp.reason)
			}
			if got, want := fmt.Sprint(fp.paths), strings.ReplaceAll(tt.paths, ", ", " "); got != want {
				t.Fatalf("paths %s, want %s", got, tt.paths)
			}
		})
	}
}

// TestMemoKeysOnWhatThePolicyReads fails when a field the policy reads is left out of
// the key: two inputs differing only there must not share a result.
func TestMemoKeysOnWhatThePolicyReads(t *testing.T) {
	e := memoEvaluator(t, `package m
d := {"name": input.pod.metadata.name, "sa": object.get(input.pod.spec, "serviceAccountName", "default")}
`)
	ctx := context.Background()
	memo := Memo{Salt: []byte("review allowed"), Expires: time.Now().Add(time.Minute)}
	eval := func(in string, m Memo) Result {
		t.Helper()
		r, err := e.EvalValue(ctx, []string{"m", "d"}, value(t, in), m)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	steps := []struct {
		name  string
		in    string
		memo  Memo
		want  MemoOutcome
		name2 string // the result's name
	}{
		{"first", `{"pod": {"metadata": {"name": "a", "uid": "1"}, "spec": {}}}`, memo, MemoMiss, "a"},
		{"first again: now kept", `{"pod": {"metadata": {"name": "a", "uid": "1"}, "spec": {}}}`, memo, MemoMiss, "a"},
		{"same read fields, other uid", `{"pod": {"metadata": {"name": "a", "uid": "2"}, "spec": {}}}`, memo, MemoHit, "a"},
		{"another name", `{"pod": {"metadata": {"name": "b", "uid": "3"}, "spec": {}}}`, memo, MemoMiss, "b"},
		{"the first name again", `{"pod": {"metadata": {"name": "a"}, "spec": {}}}`, memo, MemoHit, "a"},
		{"a field of a read subtree", `{"pod": {"metadata": {"name": "a"}, "spec": {"serviceAccountName": "default"}}}`, memo, MemoMiss, "a"},
		{"another salt", `{"pod": {"metadata": {"name": "a"}, "spec": {}}}`, Memo{Salt: []byte("review denied"), Expires: memo.Expires}, MemoMiss, "a"},
		{"no memo asked", `{"pod": {"metadata": {"name": "a"}, "spec": {}}}`, Memo{}, MemoOff, "a"},
	}
	for _, s := range steps {
		r := eval(s.in, s.memo)
		if r.Memo != s.want || !r.Defined {
			t.Fatalf("%s: memo %s (defined %v), want %s", s.name, r.Memo, r.Defined, s.want)
		}
		if got := r.Value.(ast.Object).Get(ast.StringTerm("name")); got == nil || got.Value.Compare(ast.String(s.name2)) != 0 {
			t.Fatalf("%s: name %v, want %s", s.name, got, s.name2)
		}
	}
}

// TestMemoKeepsRepeatedKeys: a result is kept the second time its key is evaluated, so
// inputs that never repeat leave no entry behind.
func TestMemoKeepsRepeatedKeys(t *testing.T) {
	e := memoEvaluator(t, "package m\nd := input.a\n")
	ctx := context.Background()
	memo := Memo{Salt: []byte{}, Expires: time.Now().Add(time.Minute)}
	for i := range 100 {
		if r, err := e.EvalValue(ctx, []string{"m", "d"}, value(t, fmt.Sprintf(`{"a": %d}`, i)), memo); err != nil || r.Memo != MemoMiss {
			t.Fatalf("input %d: %s, %v; want a miss", i, r.Memo, err)
		}
	}
	if n := e.memo.entries.Len(); n != 0 {
		t.Fatalf("100 distinct inputs left %d results in the memo, want 0", n)
	}
	for i, want := range []MemoOutcome{MemoMiss, MemoHit, MemoHit} {
		if r, err := e.EvalValue(ctx, []string{"m", "d"}, value(t, `{"a": 7}`), memo); err != nil || r.Memo != want {
			t.Fatalf("input 7, evaluation %d after the first: %s, %v; want %s", i+1, r.Memo, err, want)
		}
	}
	if n := e.memo.entries.Len(); n != 1 {
		t.Fatalf("the memo holds %d results, want 1 (the input evaluated twice)", n)
	}
}

func TestMemoExpires(t *testing.T) {
	e := memoEvaluator(t, "package m\nd := input.a\n")
	ctx := context.Background()
	in := value(t, `{"a": 1}`)
	for _, tt := range []struct {
		name    string
		expires time.Time
		want    MemoOutcome
	}{
		{"already expired: not stored", time.Now().Add(-time.Second), MemoMiss},
		{"evaluated once: not stored", time.Now().Add(time.Minute), MemoMiss},
		{"again: stored", time.Now().Add(50 * time.Millisecond), MemoMiss},
		{"reused", time.Now().Add(time.Minute), MemoHit},
	} {
		r, err := e.EvalValue(ctx, []string{"m", "d"}, in, Memo{Salt: []byte{}, Expires: tt.expires})
		if err != nil || r.Memo != tt.want {
			t.Fatalf("%s: %s, %v; want %s", tt.name, r.Memo, err, tt.want)
		}
	}
	time.Sleep(60 * time.Millisecond)
	r, _ := e.EvalValue(ctx, []string{"m", "d"}, in, Memo{Salt: []byte{}, Expires: time.Now().Add(time.Minute)})
	if r.Memo != MemoMiss {
		t.Fatalf("an entry past its expiry answered: %s", r.Memo)
	}
}

func TestMemoOffForNondeterministicPolicies(t *testing.T) {
	e := memoEvaluator(t, "package m\nd := time.now_ns()\n")
	ctx := context.Background()
	m := Memo{Salt: []byte{}, Expires: time.Now().Add(time.Minute)}
	first, err := e.EvalValue(ctx, []string{"m", "d"}, value(t, `{}`), m)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := e.EvalValue(ctx, []string{"m", "d"}, value(t, `{}`), m)
	if first.Memo != MemoOff || second.Memo != MemoOff || first.Value == second.Value {
		t.Fatalf("memo %s/%s, values %v/%v: want two fresh evaluations", first.Memo, second.Memo, first.Value, second.Value)
	}
	ok, reason, err := e.MemoStatus(ctx, []string{"m", "d"})
	if err != nil || ok || !strings.Contains(reason, "time.now_ns") {
		t.Fatalf("MemoStatus = %v, %q, %v", ok, reason, err)
	}
}

// TestEvalValueMatchesEval: the parsed-input path gives what the map path gives, on
// the default policy.
func TestEvalValueMatchesEval(t *testing.T) {
	e, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	path := []string{"interlink", "authz", "decision"}
	in := testInput(t, setContainerCPU("3"))
	want, _, err := e.Eval(ctx, path, in)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ast.InterfaceToValue(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []Memo{{}, {Salt: []byte("s"), Expires: time.Now().Add(time.Minute)}, {Salt: []byte("s"), Expires: time.Now().Add(time.Minute)}} {
		got, err := e.EvalValue(ctx, path, parsed, m)
		if err != nil || !got.Defined || fmt.Sprint(ast.MustJSON(got.Value)) != fmt.Sprint(want) {
			t.Fatalf("memo %s: got %v, %v; want %v", got.Memo, got.Value, err, want)
		}
	}
}

// TestDefaultPolicyIsMemoisable: the default decision stays memoisable, and the pods of
// an array job (other name, uid, labels, hostname) share its key. An edit that reads
// input whole (object.get(input, …) counts: the compiler binds input to a variable)
// or a pod's metadata fails here.
func TestDefaultPolicyIsMemoisable(t *testing.T) {
	for source, newEv := range evaluatorSources {
		t.Run(source, func(t *testing.T) {
			e := newEv(t, Options{})
			p, err := e.prepare(context.Background(), []string{"interlink", "authz", "decision"})
			if err != nil || p == nil {
				t.Fatalf("prepare: %v", err)
			}
			if !p.footprint.memoisable() {
				t.Fatalf("the default decision is not memoisable: %s", p.footprint.reason)
			}
			for _, path := range p.footprint.paths {
				if key, ok := strings.CutPrefix(fmt.Sprint(path), `["pod" "metadata" "annotations" "`); ok && slices.Contains(hpcAnnotations, strings.TrimSuffix(key, `"]`)) {
					continue // the restricted-annotations and hpc rules read the HPC annotations by name; the pods of a job share them
				}
				if s := fmt.Sprint(path); strings.HasPrefix(s, `["pod" "metadata"`) || s == `["pod" "spec"]` || s == `["pod"]` || strings.Contains(s, "hostname") {
					t.Errorf("the default decision reads %s: the pods of one job would not share a memo entry", s)
				}
			}
		})
	}
}

// TestFootprintValues: reading the footprint's values with shared prefixes looked up
// once encodes exactly what looking each path up from the root does.
func TestFootprintValues(t *testing.T) {
	e := newEvaluator(t, Options{DataFile: writeFile(t, t.TempDir(), "data.json", benchData)})
	p, err := e.prepare(context.Background(), []string{"interlink", "authz", "decision"})
	if err != nil {
		t.Fatal(err)
	}
	bench, err := ast.InterfaceToValue(benchInput(t))
	if err != nil {
		t.Fatal(err)
	}
	arrays := inputFootprint(memoEvaluator(t, `package m

d := [input.a[0].b, input.a[0].c, input.a[1].b, input.a.x, input.b.c.d, input.b.c.e, input.b.f]
`).compiler, ast.MustParseRef("data.m.d"))
	for _, tc := range []struct {
		name  string
		fp    footprint
		input ast.Value
	}{
		{"bench input", p.footprint, bench},
		{"empty input", p.footprint, value(t, `{}`)},
		{"no spec", p.footprint, value(t, `{"pod": {"metadata": {"annotations": {"slurm-job.vk.io/flags": "x"}}}, "node": 3}`)},
		{"not an object", p.footprint, value(t, `"pod"`)},
		{"arrays", arrays, value(t, `{"a": [{"b": 1, "c": 2}, {"b": 3}], "b": {"c": {"d": [4], "e": null}, "f": 5}}`)},
		{"arrays, other shapes", arrays, value(t, `{"a": {"x": 1}, "b": {"c": 7}}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.fp.memoisable() || len(tc.fp.paths) < 5 {
				t.Fatalf("footprint %v (%s): want at least 5 paths", tc.fp.paths, tc.fp.reason)
			}
			var want []byte
			for _, path := range tc.fp.paths {
				want = astjson.AppendCanonical(want, astjson.Find(tc.input, path))
			}
			if got := tc.fp.appendValues(nil, tc.input); string(got) != string(want) {
				t.Errorf("appendValues = %q, want %q", got, want)
			}
		})
	}
}

// TestMemoPrehashIsOnlyAnIndex: an entry found by its prehash is used only when its full
// key matches, so two evaluations that share a prehash never share a result; the full
// key is computed only when an entry or a first evaluation shares the prehash.
func TestMemoPrehashIsOnlyAnIndex(t *testing.T) {
	m := newMemo(16)
	now := time.Now()
	keyOf := func(s string, computed *int) func() [32]byte {
		return func() [32]byte { *computed++; return sha256.Sum256([]byte(s)) }
	}
	var n int
	const pre = 42
	a := memoEntry{value: ast.String("a's result"), defined: true, expires: now.Add(time.Minute)}
	m.add(pre, keyOf("a", &n), a) // first: remembered, not kept
	m.add(pre, keyOf("a", &n), a) // again: kept, with a's key
	if n != 1 {
		t.Fatalf("adding computed the full key %d times, want 1 (when kept)", n)
	}
	n = 0
	if e, ok := m.get(pre, keyOf("b", &n), now); ok {
		t.Fatalf("b, with a's prehash, got a's result %v", e.value)
	}
	if e, ok := m.get(pre, keyOf("a", &n), now); !ok || e.value.Compare(a.value) != 0 {
		t.Fatalf("a: %v, %v; want its result", e.value, ok)
	}
	if n != 2 {
		t.Errorf("two lookups under a kept prehash computed %d full keys, want 2", n)
	}
	n = 0
	if _, ok := m.get(pre+1, keyOf("c", &n), now); ok || n != 0 {
		t.Errorf("a prehash without an entry: hit %v, %d full keys computed; want a miss and none", ok, n)
	}
}

// TestMemoPrehashFollowsValues: equal inputs give one prehash, however their objects
// were built, and a change in a value read changes it (but an array's order: see
// TestMemoPrehashIsOnlyAnIndex for why that is safe).
func TestMemoPrehashFollowsValues(t *testing.T) {
	e := memoEvaluator(t, "package m\nd := [input.a, input.b.c]\n")
	p, err := e.prepare(context.Background(), []string{"m", "d"})
	if err != nil {
		t.Fatal(err)
	}
	pre := func(in string, salt string) uint64 {
		return memoPrehash([]string{"m", "d"}, []byte(salt), p.footprint, value(t, in))
	}
	base := pre(`{"a": [1, {"x": "y", "z": 2}], "b": {"c": "v", "unread": 1}}`, "s")
	for _, tc := range []struct {
		in, salt string
		same     bool
	}{
		{`{"b": {"unread": 2, "c": "v"}, "a": [1, {"z": 2, "x": "y"}]}`, "s", true},
		{`{"a": [1, {"x": "y", "z": 2}], "b": {"c": "v"}}`, "s", true},
		{`{"a": [1, {"x": "y", "z": 3}], "b": {"c": "v"}}`, "s", false},
		// OPA hashes an array as the sum of its elements' hashes: order is the full key's.
		{`{"a": [{"x": "y", "z": 2}, 1], "b": {"c": "v"}}`, "s", true},
		{`{"a": [1, {"x": "y", "z": 2}, 3], "b": {"c": "v"}}`, "s", false},
		{`{"a": [1, {"x": "y", "z": 2}], "b": {"c": "w"}}`, "s", false},
		{`{"a": [1, {"x": "y", "z": 2}], "b": {}}`, "s", false},
		{`{"a": [1, {"x": "y", "z": 2}], "b": {"c": "v"}}`, "t", false},
	} {
		if got := pre(tc.in, tc.salt) == base; got != tc.same {
			t.Errorf("%s (salt %s): same prehash %v, want %v", tc.in, tc.salt, got, tc.same)
		}
	}
}

// TestMemoArrayOrder: inputs whose arrays differ only in order share a prehash and get
// their own results.
func TestMemoArrayOrder(t *testing.T) {
	e := memoEvaluator(t, "package m\nd := [x | some x in input.a]\n")
	memo := Memo{Salt: []byte{}, Expires: time.Now().Add(time.Minute)}
	for i, tc := range []struct {
		in   string
		want string
		memo MemoOutcome
	}{
		{`{"a": [1, 2]}`, "[1, 2]", MemoMiss},
		{`{"a": [1, 2]}`, "[1, 2]", MemoMiss}, // kept now
		{`{"a": [2, 1]}`, "[2, 1]", MemoMiss},
		{`{"a": [1, 2]}`, "[1, 2]", MemoHit},
	} {
		r, err := e.EvalValue(context.Background(), []string{"m", "d"}, value(t, tc.in), memo)
		if err != nil || r.Memo != tc.memo || r.Value.String() != tc.want {
			t.Errorf("%d %s: %v (%s), %v; want %s (%s)", i, tc.in, r.Value, r.Memo, err, tc.want, tc.memo)
		}
	}
}
