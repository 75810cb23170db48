# An extension package: sar-bridge evaluates its documents in every decision,
# its fast path included.
package interlink.site.gpu

# Refuse a pod that asks for GPUs without naming its project.
violations contains msg if {
	input.operation == "create"
	some c in input.pod.spec.containers
	c.resources.limits["nvidia.com/gpu"]
	not input.pod.metadata.labels["example.org/project"]
	msg := sprintf("container %q asks for GPUs: label the pod with example.org/project", [c.name])
}

# Tell the HPC side which tenant the pod belongs to.
pod_annotations["example.org/tenant"] := input.tenant
