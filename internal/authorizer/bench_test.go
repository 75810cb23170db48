package authorizer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sar-bridge/sar-bridge/policies"
)

// BenchmarkDecide measures one pod decision end to end in process: with the review
// answered by the cache and every pod spec distinct (so the decision memo never hits),
// with the pods of an array job (memo hits), and with every review asked of the (fake)
// API for comparison.
func BenchmarkDecide(b *testing.B) {
	// More distinct specs than the memo holds, cycled: every evaluation is a miss.
	distinct := make([]json.RawMessage, 8192)
	for i := range distinct {
		distinct[i] = json.RawMessage(fmt.Sprintf(`{"pod": {"metadata": {"name": "p%d", "namespace": "team-a"},
			"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "containers": [{"name": "main", "resources": {"limits": {"cpu": "%dm"}}}]}}}`, i, 1+i))
	}
	// The same, with the pod interLink's Virtual Kubelet forwards for a Job's pod.
	interlink := make([]json.RawMessage, 8192)
	for i := range interlink {
		interlink[i] = json.RawMessage(interlinkPod(i))
	}
	// make bench-http's HPC pod: sbatch flags granted by restricted_annotations, a
	// flavor and a GPU, a bind mount, a uid and gid of the tenant's (hpcPolicyData).
	hpc := make([]json.RawMessage, 8192)
	for i := range hpc {
		hpc[i] = json.RawMessage(hpcPod(i))
	}
	arrayJob := make([]json.RawMessage, 1000)
	for i := range arrayJob {
		arrayJob[i] = json.RawMessage(arrayJobPod(i, "1"))
	}
	for _, bc := range []struct {
		name           string
		inputs         []json.RawMessage
		reviewEachTime bool
		data           string // policy data; "" for none
		inputValid     bool   // the input comes checked, as the Data API server's does
	}{
		{"cache-hit", distinct, false, "", false},
		{"cache-hit/interlink-pod", interlink, false, "", false},
		{"cache-hit/hpc", hpc, false, hpcPolicyData, false},
		{"cache-hit/hpc-server", hpc, false, hpcPolicyData, true},
		{"array-job", arrayJob, false, "", false},
		{"review-each-time", distinct, true, "", false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
			t := &testing.T{}
			a := newTestAuthorizer(t, Config{}, rev, newView())
			if bc.data != "" {
				dataFile := filepath.Join(b.TempDir(), "data.json")
				if err := os.WriteFile(dataFile, []byte(bc.data), 0o600); err != nil {
					b.Fatal(err)
				}
				eval, err := policies.New(context.Background(), policies.Options{DataFile: dataFile})
				if err != nil {
					b.Fatal(err)
				}
				a.evaluator = eval
			}
			if bc.reviewEachTime {
				a.reviewer.allowedTTL = 0 // every decision asks the (fake) API
			}
			b.ReportAllocs()
			i := 0
			cpu := processCPU()
			for b.Loop() {
				d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: bc.inputs[i%len(bc.inputs)], InputValid: bc.inputValid})
				if outcome, _ := summarize(d.Result, d.Defined); err != nil || outcome != "allowed" {
					b.Fatalf("decision %v %v", jsonOf(d.Result), err)
				}
				i++
			}
			// The process's CPU time per decision: on a loaded machine ns/op (wall time)
			// mostly measures the wait for a core.
			if cpu := processCPU() - cpu; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// interlinkPod is a Job's pod as interLink's Virtual Kubelet forwards it (make
// bench-http's template), with its own name and memory request.
func interlinkPod(i int) string {
	return fmt.Sprintf(`{"pod": {"apiVersion": "v1", "kind": "Pod",
	"metadata": {"name": "pod-%[1]d", "namespace": "team-a", "uid": "6c1f0e8a-5b3d-4c2e-9f00-%[1]d",
		"labels": {"app": "bench", "batch.kubernetes.io/controller-uid": "0b9c7f4e-2a61-4f6d-8d2e-3c5a1e7b9f10",
			"batch.kubernetes.io/job-name": "bench", "batch.kubernetes.io/job-completion-index": "%[1]d"},
		"annotations": {"batch.kubernetes.io/job-completion-index": "%[1]d"}},
	"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "restartPolicy": "Never",
		"nodeSelector": {"interlink.io/tenant": "team-a"},
		"containers": [{"name": "main", "image": "ghcr.io/example/solver:1.4",
			"command": ["/bin/solver", "--input", "/data/in", "--output", "/data/out"],
			"env": [{"name": "OMP_NUM_THREADS", "value": "1"},
				{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}],
			"resources": {"requests": {"cpu": "500m", "memory": "%[1]d"}}}],
		"tolerations": [
			{"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"},
			{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
			{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}}}`, 1+i)
}

// hpcPolicyData is what make bench-http adds to the policy data for its hpc workload
// (test/cmd/bench-http): restricted_annotations grants slurm-job.vk.io/flags to the
// tenant's service accounts, the tenant has HPC settings, and its images must come from
// its registry.
const hpcPolicyData = `{"interlink": {
	"image_registries": {"team-a": ["ghcr.io/example"]},
	"restricted_annotations": {"slurm-job.vk.io/flags": {"users": [], "groups": ["system:serviceaccounts:team-a"]}},
	"hpc": {"auto_flavors": ["gpu"], "tenants": {"team-a": {
		"sbatch_options": ["--job-name", "--time"], "partitions": ["cpu", "gpu"], "flavors": ["default", "gpu"],
		"singularity_options": ["--bind", "--nv"], "mount_prefixes": ["/scratch/team-a"],
		"uid_ranges": [[20000, 20999]], "gid_ranges": [[20000, 20999]]}}}}}`

// hpcPod is interlinkPod with what SLURM users add, as make bench-http's hpc workload
// sends it.
func hpcPod(i int) string {
	p := interlinkPod(i)
	p = strings.Replace(p, `"annotations": {`, `"annotations": {"slurm-job.vk.io/flags": "--cpus-per-task=4 --time=01:00:00 --partition=gpu",
		"slurm-job.vk.io/flavor": "gpu", "slurm-job.vk.io/singularity-mounts": "--bind /scratch/team-a/data:/data", `, 1)
	p = strings.Replace(p, `"restartPolicy": "Never",`, `"restartPolicy": "Never", "securityContext": {"runAsUser": 20042, "runAsGroup": 20042},`, 1)
	return strings.Replace(p, `"resources": {"requests"`, `"resources": {"limits": {"nvidia.com/gpu": "1"}, "requests"`, 1)
}
