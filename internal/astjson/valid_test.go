package astjson

import (
	"encoding/json"
	"strings"
	"testing"
)

// validCases are documents at the edges of JSON's grammar, each with encoding/json's
// answer, which Valid must give too.
var validCases = []struct {
	doc  string
	want bool
}{
	{``, false},
	{` `, false},
	{`{}`, true},
	{` {"a": 1} `, true},
	{`{"a": 1,}`, false},
	{`{"a" 1}`, false},
	{`{"a": }`, false},
	{`{a: 1}`, false},
	{`{"a": 1}{}`, false},
	{`{"a": 1} x`, false},
	{`[]`, true},
	{`[1, 2]`, true},
	{`[1 2]`, false},
	{`[1,]`, false},
	{`[,1]`, false},
	{`[`, false},
	{`"x"`, true},
	{`"x`, false},
	{"\"a\x1fb\"", false},
	{"\"a\x7fb\"", true},
	{"\"\xff\xfe\"", true}, // invalid UTF-8: encoding/json accepts it
	{`"\u00e9\n\t\"\\\/\b\f\r"`, true},
	{`"\u00g9"`, false},
	{`"\u00e"`, false},
	{`"\x"`, false},
	{`"\`, false},
	{`true`, true},
	{`tru`, false},
	{`truex`, false},
	{`null`, true},
	{`nul`, false},
	{`false`, true},
	{`0`, true},
	{`-0`, true},
	{`01`, false},
	{`-`, false},
	{`-a`, false},
	{`1.`, false},
	{`1.5`, true},
	{`.5`, false},
	{`1e`, false},
	{`1e+`, false},
	{`1E-7`, true},
	{`1e07`, true},
	{`+1`, false},
	{`0x10`, false},
	{`[1.5e3, -0.0, 12345678901234567890123]`, true},
	{"{\"a\":\n[true,\tfalse,\rnull]}", true},
	{"{\"a\":\v1}", false},
	{strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth), true},
	{strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), false},
	{strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth), true},
	{strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1), false},
}

func TestValid(t *testing.T) {
	for _, tc := range validCases {
		if got := json.Valid([]byte(tc.doc)); got != tc.want {
			t.Fatalf("the case is wrong: json.Valid(%.40q) = %v", tc.doc, got)
		}
		if got := Valid([]byte(tc.doc)); got != tc.want {
			t.Errorf("Valid(%.40q) = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

// FuzzValid: Valid answers as encoding/json's Valid on any bytes.
func FuzzValid(f *testing.F) {
	for _, tc := range validCases {
		if len(tc.doc) < 1000 {
			f.Add([]byte(tc.doc))
		}
	}
	f.Add([]byte(interlinkPodJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", data, got, want)
		}
	})
}

// interlinkPodJSON is a pod as interLink's Virtual Kubelet forwards it.
const interlinkPodJSON = `{"input": {"pod": {"apiVersion": "v1", "kind": "Pod",
	"metadata": {"name": "pod-1", "namespace": "team-a", "uid": "6c1f0e8a-5b3d-4c2e-9f00-1",
		"labels": {"app": "bench", "batch.kubernetes.io/job-name": "bench"},
		"annotations": {"slurm-job.vk.io/flags": "--cpus-per-task=4 --time=01:00:00 --partition=gpu"}},
	"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "restartPolicy": "Never",
		"securityContext": {"runAsUser": 20042, "runAsGroup": 20042},
		"containers": [{"name": "main", "image": "ghcr.io/example/solver:1.4",
			"command": ["/bin/solver", "--input", "/data/in"],
			"env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
			"resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "500m", "memory": "1e3"}}}],
		"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}}}}`

// BenchmarkValid: Valid against encoding/json's Valid on a pod decision's body.
func BenchmarkValid(b *testing.B) {
	data := []byte(interlinkPodJSON)
	for _, bc := range []struct {
		name  string
		valid func([]byte) bool
	}{{"astjson", Valid}, {"encoding-json", json.Valid}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if !bc.valid(data) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
