package policies

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestPodHPC: input.hpc for each key and field the plugins read.
func TestPodHPC(t *testing.T) {
	const empty = `"runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false`
	tests := []struct {
		name, pod, want string
	}{
		{"nothing set", `{"metadata": {"name": "p", "annotations": {"x": "y"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}`,
			`{"inert": true, "sbatch_only": false, ` + empty + `}`},
		{"not an object", `"x"`, `{"inert": true, "sbatch_only": false, ` + empty + `}`},
		{"sbatch options, short aliases expanded", `{"metadata": {"annotations": {"slurm-job.vk.io/flags": "--time=1:00:00 -A proj"}}}`,
			`{"inert": false, "sbatch_only": true, ` + empty + `, "sbatch": {"options": {"--time": "1:00:00", "--account": "proj"}, "order": ["--time", "--account"], "error": null}}`},
		{"sbatch flags with a line break", `{"metadata": {"annotations": {"slurm-job.vk.io/flags": "--time=1\n--uid=0"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `, "sbatch": {"options": {}, "order": [], "error": "the value contains a line break (byte 8): write all options on one line (in YAML, a plain or >- scalar, not |)"}}`},
		{"singularity options and their host paths", `{"metadata": {"annotations": {"slurm-job.vk.io/singularity-options": "--bind /scratch/a/x:/data --nv"}}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {"slurm-job.vk.io/singularity-options": {"options": ["--bind", "--nv"], "error": null}},
			  "host_paths": [{"path": "/scratch/a/x", "from": "slurm-job.vk.io/singularity-options"}], "ids": [], "words": [], "host_mode": false}`},
		{"shell in runtime options", `{"metadata": {"annotations": {"slurm-job.vk.io/enroot-options": "--mount $(id):/x"}}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {"slurm-job.vk.io/enroot-options": {"options": [], "error": "contains '$' (byte 8): the plugin pastes this annotation into the job script's shell command line, where it would be shell syntax; only letters, digits, spaces and _ . , : / = @ + - are allowed"}},
			  "host_paths": [], "ids": [], "words": [], "host_mode": false}`},
		{"hostPath volumes", `{"spec": {"volumes": [{"name": "ok", "hostPath": {"path": "/scratch/a/"}}, {"name": "up", "hostPath": {"path": "/data/../etc"}}, {"name": "e", "emptyDir": {}}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [{"path": "/scratch/a", "from": "hostPath volume \"ok\""}], "ids": [],
			  "words": [{"what": "hostPath volume \"up\"", "error": "host path \"/data/../etc\" has a .. element; give the path without it"}], "host_mode": false}`},
		{"uids and gids, pod and containers", `{"spec": {"securityContext": {"runAsUser": 0, "runAsGroup": 100}, "containers": [{"name": "c", "securityContext": {"runAsUser": 20001}}], "initContainers": [{"name": "i", "securityContext": {"runAsGroup": 7}}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [
			    {"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 0},
			    {"field": "spec.securityContext.runAsGroup", "kind": "gid", "value": 100},
			    {"field": "spec.containers[\"c\"].securityContext.runAsUser", "kind": "uid", "value": 20001},
			    {"field": "spec.initContainers[\"i\"].securityContext.runAsGroup", "kind": "gid", "value": 7}],
			  "words": [], "host_mode": false}`},
		{"an image and a mount path the shell would read", `{"spec": {"containers": [{"name": "c", "image": "busybox;id", "volumeMounts": [{"name": "v", "mountPath": "/data x"}]}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [
			    {"what": "image of container \"c\"", "error": "\"busybox;id\" contains ';' (byte 7): the plugin writes it unquoted into the job script's shell command line; only letters, digits and _ . , : / = @ + - are allowed"},
			    {"what": "mountPath of volume \"v\" in container \"c\"", "error": "\"/data x\" contains ' ' (byte 5): the plugin writes it unquoted into the job script's shell command line; only letters, digits and _ . , : / = @ + - are allowed"}],
			  "host_mode": false}`},
		{"probe commands between double quotes", `{"spec": {"containers": [{"name": "c", "image": "busybox", "livenessProbe": {"exec": {"command": ["sh", "-c", "test -f /x"]}}, "readinessProbe": {"httpGet": {"path": "/$(id)"}}}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [
			    {"what": "readinessProbe of container \"c\" (httpGet path)", "error": "\"/$(id)\" contains '$': the plugin writes it between double quotes into the job script, where the shell would expand it"}],
			  "host_mode": false}`},
		{"pod IP, valid", `{"metadata": {"annotations": {"interlink.eu/pod-ip": "10.0.0.7"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `, "pod_ip": {"valid": true}}`},
		{"pod IP, shell", `{"metadata": {"annotations": {"interlink.eu/pod-ip": "1; rm -rf ~"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `, "pod_ip": {"valid": false}}`},
		{"HTCondor host mode: the first container's image", `{"spec": {"containers": [{"name": "c", "image": "registry.example/hostname-tools:1"}, {"name": "d", "image": "busybox"}]}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": true}`},
		{"image root the shell would read", `{"metadata": {"annotations": {"slurm-job.vk.io/image-root": "/cvmfs x"}}}`,
			`{"inert": false, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [
			    {"what": "annotation \"slurm-job.vk.io/image-root\"", "error": "\"/cvmfs x\" contains ' ' (byte 6): the plugin writes it unquoted into the job script's shell command line; only letters, digits and _ . , : / = @ + - are allowed"}],
			  "host_mode": false}`},
		{"shell annotations are not inert", `{"metadata": {"annotations": {"slurm-job.vk.io/pre-exec": "", "slurm-job.vk.io/flavor": "gpu"}}}`,
			`{"inert": false, "sbatch_only": false, ` + empty + `}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PodHPC(ast.MustParseTerm(tc.pod).Value)
			want := ast.MustParseTerm(tc.want).Value
			if got.Compare(want) != 0 {
				t.Errorf("PodHPC =\n%v\nwant\n%v", got, want)
			}
		})
	}
}
