package policies

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// hpcSample is the HPC pod of make bench-http where the tenant's images must come from
// its registry: it takes the fast path, through _fast_hpc_proved too.
func hpcSample(t *testing.T) sample {
	t.Helper()
	for _, s := range loadSamples(t) {
		if strings.HasSuffix(s.file, "images/samples/allow-hpc-pod.json") {
			return s
		}
	}
	t.Fatal("no sample images/samples/allow-hpc-pod.json")
	return sample{}
}

// hpcInput is the sample's input with its container's memory limit and name set, and
// what the bridge derives from the pod, as a value; mutate may change the pod first.
func hpcInput(t *testing.T, s sample, name, memory string, mutate func(pod map[string]any)) ast.Value {
	t.Helper()
	in := s.input(t)
	pod := in["pod"].(map[string]any)
	pod["metadata"].(map[string]any)["name"] = name
	c := pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	c["resources"].(map[string]any)["limits"].(map[string]any)["memory"] = memory
	if mutate != nil {
		mutate(pod)
	}
	v, err := ast.InterfaceToValue(bridged(t, in))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func proved(t *testing.T, in ast.Value) any {
	t.Helper()
	v, err := ast.JSON(in.(ast.Object).Get(ast.StringTerm("hpc")).Value)
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]any)["proved"]
}

// TestSharedProof: the evaluator sets input.hpc.proved from its own proof, only where the
// fast path reads it, removes a caller's, and remembers the proof across pods that
// differ only in what it does not read.
func TestSharedProof(t *testing.T) {
	s := hpcSample(t)
	w := newThreeWays(t, newEvaluator, s.data(t))
	ctx := context.Background()
	memo := func() Memo { return Memo{Salt: []byte("review allowed"), Expires: time.Now().Add(time.Hour)} }
	otherFlavor := func(pod map[string]any) {
		pod["metadata"].(map[string]any)["annotations"].(map[string]any)["slurm-job.vk.io/flavor"] = "bigmem"
	}
	claimsProved := func(in ast.Value) ast.Value {
		obj := in.(ast.Object)
		hpc := obj.Get(hpcMember).Value.(ast.Object)
		return withMember(obj, hpcMember, ast.NewTerm(withMember(hpc, provedKey, ast.InternedTerm(true))))
	}
	plainPod := func(pod map[string]any) {
		annotations := pod["metadata"].(map[string]any)["annotations"].(map[string]any)
		for k := range annotations {
			delete(annotations, k)
		}
		delete(pod["spec"].(map[string]any), "securityContext")
	}
	otherImage := func(pod map[string]any) {
		pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"] = "docker.io/example/trainer:1.4"
	}
	pod := hpcInput(t, s, "a", "16Gi", nil)
	denied := hpcInput(t, s, "b", "16Gi", otherFlavor)
	plain := hpcInput(t, s, "c", "16Gi", plainPod)
	elsewhere := hpcInput(t, s, "d", "16Gi", otherImage)

	tests := []struct {
		name  string
		path  []string
		in    ast.Value
		memo  Memo
		proof any // input.hpc.proved as the evaluation of path sees it
	}{
		{"decision", decisionPath, pod, memo(), true},
		{"the package", decisionPath[:2], pod, memo(), true},
		{"data", decisionPath[:1], pod, memo(), true},
		{"another document", []string{"interlink", "authz", "allow"}, pod, memo(), nil},
		{"no memo: the decision proves it itself", decisionPath, pod, Memo{}, nil},
		{"a pod without HPC settings", decisionPath, plain, memo(), true},
		{"a delete", decisionPath, withMember(pod.(ast.Object), ast.InternedTerm("operation"), ast.StringTerm("delete")), memo(), nil},
		{"the proof fails: a flavor not the tenant's", decisionPath, denied, memo(), nil},
		{"the proof fails: an image from elsewhere", decisionPath, elsewhere, memo(), nil},
		{"a caller's claim, the proof fails", decisionPath, claimsProved(denied), memo(), nil},
		{"a caller's claim, no memo", decisionPath, claimsProved(pod), Memo{}, nil},
		{"a caller's claim, another document", []string{"interlink", "authz", "deny"}, claimsProved(denied), memo(), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := w.e.withSharedProof(ctx, tc.path, tc.in, tc.memo)
			if err != nil {
				t.Fatal(err)
			}
			if p := proved(t, got); p != tc.proof {
				t.Errorf("input.hpc.proved = %v, want %v", p, tc.proof)
			}
		})
	}

	// The decision is the general rules', with and without the proof, and a caller's
	// claim changes nothing.
	for _, tc := range []struct {
		name    string
		in      ast.Value
		allowed bool
	}{
		{"proved", pod, true},
		{"without HPC settings", plain, true},
		{"an image from elsewhere, proof claimed", claimsProved(elsewhere), false},
		{"flavor not the tenant's", denied, false},
		{"flavor not the tenant's, proof claimed", claimsProved(denied), false},
	} {
		t.Run("decision/"+tc.name, func(t *testing.T) {
			plain, err := ast.JSON(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(w.eval(t, "data.interlink.authz.decision", false, plain))
			for _, m := range []Memo{{}, memo()} {
				res, err := w.e.EvalValue(ctx, decisionPath, tc.in, m)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := ast.JSON(res.Value)
				gj, _ := json.Marshal(got)
				if string(gj) != string(want) {
					t.Errorf("memo %q: decision\n got %s\nwant %s", m.Salt, gj, want)
				}
				if got.(map[string]any)["allowed"] != tc.allowed {
					t.Errorf("memo %q: allowed = %v, want %v", m.Salt, got.(map[string]any)["allowed"], tc.allowed)
				}
			}
		})
	}

	// Pods that differ in name and amounts share the proof: kept the second time it is
	// evaluated, as every memo entry, and found for the third pod.
	m := memo()
	m.Salt = []byte("shared proof")
	for i, tc := range []struct {
		name, memory string
		want         MemoOutcome
	}{{"p1", "1Gi", MemoMiss}, {"p2", "2Gi", MemoMiss}, {"p3", "3Gi", MemoHit}} {
		res, err := w.e.EvalValue(ctx, sharedProofPath, hpcInput(t, s, tc.name, tc.memory, nil), m)
		if err != nil {
			t.Fatal(err)
		}
		if res.Memo != tc.want || !ast.Boolean(true).Equal(res.Value) {
			t.Errorf("pod %d: proof %v (memo %s), want true (memo %s)", i+1, res.Value, res.Memo, tc.want)
		}
	}
}

// TestSharedProofGated: a site rule that adds to the proof turns the fast path off, as
// one that can reach the decision does, so that it can never prove a pod silent.
func TestSharedProofGated(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "site.rego", "package interlink.authz\n\n_fast_shared_proof := true\n")
	e := newEvaluator(t, Options{Dir: dir})
	if off := e.FastPathOff(); !strings.Contains(off, "data.interlink.authz._fast_shared_proof ("+filepath.Join(dir, "site.rego")) {
		t.Errorf("fast path off because %q, want the site's _fast_shared_proof named", off)
	}
}
