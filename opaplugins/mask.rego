package system.log

# The default decision log mask of sar-bridge. The event's input is the decision's
# input: the pod's env values and the copy of the whole pod kubectl keeps in an
# annotation (last-applied-configuration) can hold credentials, so they are removed before the event leaves the
# process. A bundle (or --policies) adds its own paths with more `mask contains`
# rules; OPA applies them all.

container_kinds := ["containers", "initContainers", "ephemeralContainers"]

mask contains sprintf("/input/pod/spec/%s/%d/env/%d/value", [kind, i, j]) if {
	some kind in container_kinds
	some i, j
	input.input.pod.spec[kind][i].env[j].value
}

# OPA's mask paths cannot name a key holding a slash: the annotations go whole.
mask contains "/input/pod/metadata/annotations" if {
	input.input.pod.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]
}
