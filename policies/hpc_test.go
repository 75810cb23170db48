package policies

import (
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestPodHPC: input.hpc for each key and field the plugins read.
func TestPodHPC(t *testing.T) {
	const empty = `"runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 0, "flavor_sized": []`
	tests := []struct {
		name, pod, want string
		bound           []string // "plugin field" of input.hpc.script_bound (package scriptbound's findings)
	}{
		{"nothing set", `{"metadata": {"name": "p", "annotations": {"x": "y"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}`,
			`{"inert": true, "sbatch_only": false, ` + empty + `}`, nil},
		{"not an object", `"x"`, `{"inert": true, "sbatch_only": false, ` + empty + `}`, nil},
		{"sbatch options, short aliases expanded", `{"metadata": {"annotations": {"slurm-job.vk.io/flags": "--time=1:00:00 -A proj"}}}`,
			`{"inert": false, "sbatch_only": true, ` + empty + `, "sbatch": {"options": {"--time": "1:00:00", "--account": "proj"}, "order": ["--time", "--account"], "error": null}}`, nil},
		{"sbatch flags with a line break", `{"metadata": {"annotations": {"slurm-job.vk.io/flags": "--time=1\n--uid=0"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `, "sbatch": {"options": {}, "order": [], "error": "the value contains a line break (byte 8): write all options on one line (in YAML, a plain or >- scalar, not |)"}}`, nil},
		{"singularity options and their host paths", `{"metadata": {"annotations": {"slurm-job.vk.io/singularity-options": "--bind /scratch/a/x:/data --nv"}}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {"slurm-job.vk.io/singularity-options": {"options": ["--bind", "--nv"], "error": null}},
			  "host_paths": [{"path": "/scratch/a/x", "from": "slurm-job.vk.io/singularity-options"}], "ids": [], "words": [], "host_mode": false, "gpus": 0, "flavor_sized": []}`, nil},
		{"shell in runtime options", `{"metadata": {"annotations": {"slurm-job.vk.io/enroot-options": "--mount $(id):/x"}}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {"slurm-job.vk.io/enroot-options": {"options": [], "error": "contains '$' (byte 8): the plugin pastes this annotation into the job script's shell command line, where it would be shell syntax; only letters, digits, spaces and _ . , : / = @ + - are allowed"}},
			  "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 0, "flavor_sized": []}`, nil},
		{"hostPath volumes", `{"spec": {"volumes": [{"name": "ok", "hostPath": {"path": "/scratch/a/"}}, {"name": "up", "hostPath": {"path": "/data/../etc"}}, {"name": "e", "emptyDir": {}}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [{"path": "/scratch/a", "from": "hostPath volume \"ok\""}], "ids": [],
			  "words": [{"what": "hostPath volume \"up\"", "error": "host path \"/data/../etc\" has a .. element; give the path without it"}], "host_mode": false, "gpus": 0, "flavor_sized": []}`, nil},
		{"uids and gids, pod and containers", `{"spec": {"securityContext": {"runAsUser": 0, "runAsGroup": 100}, "containers": [{"name": "c", "securityContext": {"runAsUser": 20001}}], "initContainers": [{"name": "i", "securityContext": {"runAsGroup": 7}}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [
			    {"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 0},
			    {"field": "spec.securityContext.runAsGroup", "kind": "gid", "value": 100},
			    {"field": "spec.containers[\"c\"].securityContext.runAsUser", "kind": "uid", "value": 20001},
			    {"field": "spec.initContainers[\"i\"].securityContext.runAsGroup", "kind": "gid", "value": 7}],
			  "words": [], "host_mode": false, "gpus": 0, "flavor_sized": []}`, nil},
		{"an image and a mount path the shell would read", `{"spec": {"containers": [{"name": "c", "image": "busybox;id", "volumeMounts": [{"name": "v", "mountPath": "/data x"}]}]}}`,
			`{"inert": true, "sbatch_only": false, ` + empty + `}`,
			[]string{"htcondor spec.containers[0].image", "htcondor spec.containers[0].volumeMounts[0].mountPath", "slurm spec.containers[0].image", "slurm spec.containers[0].volumeMounts[0].mountPath"}},
		{"probe commands between double quotes", `{"spec": {"containers": [{"name": "c", "image": "busybox", "livenessProbe": {"exec": {"command": ["sh", "-c", "test -f /x"]}}, "readinessProbe": {"httpGet": {"path": "/$(id)"}}}]}}`,
			`{"inert": true, "sbatch_only": false, ` + empty + `}`,
			[]string{"slurm spec.containers[0].readinessProbe.httpGet.path"}},
		{"GPUs: the SLURM plugin picks a flavor", `{"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2", "amd.com/gpu": "1"}}}], "initContainers": [{"name": "i", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}`,
			`{"inert": true, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 3, "flavor_sized": []}`, nil},
		{"a memory limit the plugin would write as --mem=0", `{"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"memory": "1Ki"}}}, {"name": "d", "image": "i", "resources": {"limits": {"memory": "1Mi"}}}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "host_mode": false, "gpus": 0, "flavor_sized": [], "words": [
			    {"what": "spec.containers[0].resources.limits.memory", "error": "1Ki is under 1Mi: the SLURM plugin would write --mem=0, which sbatch reads as all of the node's memory"}]}`, nil},
		{"sbatch --mem=0: all of the node's memory", `{"metadata": {"annotations": {"slurm-job.vk.io/flags": "--mem=0 --time=1"}}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "host_mode": false, "gpus": 0, "flavor_sized": [],
			  "sbatch": {"options": {"--mem": "0", "--time": "1"}, "order": ["--mem", "--time"], "error": null},
			  "words": [{"what": "annotation \"slurm-job.vk.io/flags\"", "error": "--mem=0 asks sbatch for all of the node's memory"}]}`, nil},
		{"limits the SLURM plugin takes from a flavor's defaults", `{"spec": {"initContainers": [{"name": "i", "image": "i"}], "containers": [{"name": "side", "image": "i", "resources": {"limits": {"memory": "64Mi"}}}, {"name": "c", "image": "i", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}}`,
			`{"inert": true, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 0,
			  "flavor_sized": ["spec.initContainers[0].resources.limits.cpu", "spec.containers[0].resources.limits.cpu", "spec.initContainers[0].resources.limits.memory"]}`, nil},
		{"pod IP with a zone", `{"metadata": {"annotations": {"interlink.eu/pod-ip": "fe80::1%$(touch${IFS}owned)"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `, "pod_ip": {"valid": false, "error": "has a zone (%…): its text would reach the job script"}}`, nil},
		{"pod IP, valid", `{"metadata": {"annotations": {"interlink.eu/pod-ip": "10.0.0.7"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `, "pod_ip": {"valid": true, "error": null}}`, nil},
		{"pod IP, shell", `{"metadata": {"annotations": {"interlink.eu/pod-ip": "1; rm -rf ~"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `, "pod_ip": {"valid": false, "error": "is not an IP address"}}`, nil},
		{"HTCondor host mode: the first container's image", `{"spec": {"containers": [{"name": "c", "image": "registry.example/hostname-tools:1"}, {"name": "d", "image": "busybox"}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": true, "gpus": 0, "flavor_sized": []}`, nil},
		{"image root the shell would read", `{"metadata": {"annotations": {"slurm-job.vk.io/image-root": "/cvmfs x"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `}`,
			[]string{`slurm metadata.annotations["slurm-job.vk.io/image-root"]`}},
		{"shell annotations are not inert", `{"metadata": {"annotations": {"slurm-job.vk.io/pre-exec": "", "slurm-job.vk.io/flavor": "gpu"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PodHPC(ast.MustParseTerm(tc.pod).Value).(ast.Object)
			var bound []string
			for _, p := range []string{"htcondor", "slurm"} {
				fs := got.Get(ast.StringTerm("script_bound")).Value.(ast.Object).Get(ast.StringTerm(p)).Value.(*ast.Array)
				fs.Foreach(func(f *ast.Term) {
					bound = append(bound, p+" "+string(f.Value.(ast.Object).Get(ast.StringTerm("field")).Value.(ast.String)))
				})
			}
			var boundPlugins []string
			got.Get(ast.StringTerm("bound_plugins")).Value.(*ast.Array).Foreach(func(p *ast.Term) {
				boundPlugins = append(boundPlugins, string(p.Value.(ast.String)))
			})
			var wantPlugins []string
			for _, b := range tc.bound {
				if p, _, _ := strings.Cut(b, " "); !slices.Contains(wantPlugins, p) {
					wantPlugins = append(wantPlugins, p)
				}
			}
			slices.Sort(boundPlugins)
			if !slices.Equal(boundPlugins, wantPlugins) {
				t.Errorf("bound_plugins %q, want %q", boundPlugins, wantPlugins)
			}
			rest := ast.NewObject()
			got.Foreach(func(k, v *ast.Term) {
				if k.Value.Compare(ast.String("script_bound")) != 0 && k.Value.Compare(ast.String("bound_plugins")) != 0 {
					rest.Insert(k, v)
				}
			})
			got = rest
			want := ast.MustParseTerm(tc.want).Value
			if got.Compare(want) != 0 {
				t.Errorf("PodHPC =\n%v\nwant\n%v", got, want)
			}
			if !slices.Equal(bound, tc.bound) {
				t.Errorf("script_bound %q, want %q", bound, tc.bound)
			}
		})
	}
}

// BenchmarkPodHPC derives input.hpc for the pod of benchInput (two containers, env,
// tolerations, flags): it runs on every pod decision, the memo's hits included.
func BenchmarkPodHPC(b *testing.B) {
	pod := ast.MustParseTerm(benchPod).Value
	b.ReportAllocs()
	for b.Loop() {
		PodHPC(pod)
	}
}
