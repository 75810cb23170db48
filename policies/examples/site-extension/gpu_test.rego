package interlink.site.gpu_test

import data.interlink.site.gpu

_pod(labels) := {"operation": "create", "tenant": "tenant-a", "pod": {
	"metadata": {"name": "train", "namespace": "team-a", "labels": labels},
	"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}}

test_gpu_pod_without_project_refused if {
	gpu.violations == {`container "main" asks for GPUs: label the pod with example.org/project`} with input as _pod({})
}

test_gpu_pod_with_project_passes if {
	count(gpu.violations) == 0 with input as _pod({"example.org/project": "p-7"})
}
