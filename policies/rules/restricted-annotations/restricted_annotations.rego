package interlink.authz

# Restricted annotations (policies/rules/restricted-annotations), configured by
# data.interlink.restricted_annotations (docs/policies.md):
#
#   restricted_annotations: {key: {"users": [name, ...], "groups": [name, ...]}}
#
# Cost, as in authz.rego: every rule tests the operation first, then fails at its
# first lookup when nothing is configured or the pod sets nothing restricted;
# input is read through references and data by key.
#
# With the images rule (policies/rules/images), it is what interLink's rules add to
# violations through _interlink_violations: a policy directory's interlink.rego
# replaces both files (docs/policies.md, "Replacing a file").
_interlink_violations contains msg if {
	some msg in _restricted_annotations_violations
}

# interLink's plugins put these annotations into the job script as shell, run
# outside the container under the plugin's HPC account (FACTS.md; policies/hpc.go):
#
#   slurm-job.vk.io/pre-exec                 script text before the job
#   slurm-job.vk.io/mpi-flags                prepended to the container's command
#   interlink.eu/wstunnel-client-commands    script text
#   interlink.eu/pod-ip                      `export POD_IP=<value>`, unquoted
#
# So they are refused whether or not data names them (fail closed): data only
# says who may use them (restricted_annotations), and without an entry nobody
# may. To open one to every subject, list the group system:authenticated. Two
# values pass without an entry, as they are no shell of the pod's: a pod-ip that
# is an IP address, and what the Virtual Kubelet itself wrote for interLink's
# mesh networking (see _written_by_vk). slurm-job.vk.io/flags is judged option by
# option (hpc.rego); subjects listed for it may set any option but --uid and
# --gid, with the values of the options that choose who pays or where it runs
# still checked.
#
# Each key is read by name, never the annotations as a whole: the decision
# memo keys on what the policy reads, and the pods of an indexed Job differ
# in their batch.kubernetes.io/job-completion-index annotation. Data cannot
# add keys for the same reason; a key this policy does not know is refused
# (see below) rather than silently left unchecked.
_restricted_annotations_violations contains msg if {
	input.operation == "create"
	v := input.pod.metadata.annotations["slurm-job.vk.io/pre-exec"]
	not _restricted_allowed("slurm-job.vk.io/pre-exec")
	not _mesh_pre_exec(v)
	msg := _restricted_annotation_message("slurm-job.vk.io/pre-exec")
}

_restricted_annotations_violations contains msg if {
	input.operation == "create"
	_ = input.pod.metadata.annotations["slurm-job.vk.io/mpi-flags"]
	not _restricted_allowed("slurm-job.vk.io/mpi-flags")
	msg := _restricted_annotation_message("slurm-job.vk.io/mpi-flags")
}

_restricted_annotations_violations contains msg if {
	input.operation == "create"
	_ = input.pod.metadata.annotations["interlink.eu/wstunnel-client-commands"]
	not _restricted_allowed("interlink.eu/wstunnel-client-commands")
	not input.hpc.writers["interlink.eu/wstunnel-client-commands"] == "vk"
	msg := _restricted_annotation_message("interlink.eu/wstunnel-client-commands")
}

_restricted_annotations_violations contains msg if {
	input.operation == "create"
	_ = input.pod.metadata.annotations["interlink.eu/pod-ip"]
	not input.hpc.pod_ip.valid == true
	not _restricted_allowed("interlink.eu/pod-ip")
	msg := sprintf("annotation %q %s: the SLURM plugin writes it unquoted into the job script (export POD_IP=...); %s", ["interlink.eu/pod-ip", _pod_ip_error, _restricted_annotation_message("interlink.eu/pod-ip")])
}

# Why pod-ip is not an address as Go prints it (never the value: the message
# reaches the pod's status and the logs).
_pod_ip_error := e if {
	e := input.hpc.pod_ip.error
	is_string(e)
} else := "is not an IP address"

# The subject may use key: a listed user, or in a listed group (data read once;
# a "list" that is not one names no one).
_restricted_allowed(key) if {
	us := data.interlink.restricted_annotations[key].users
	is_array(us)
	input.subject.username in us
}

_restricted_allowed(key) if {
	gs := data.interlink.restricted_annotations[key].groups
	is_array(gs)
	some g in input.subject.groups
	g in gs
}

# interLink's full-mesh networking: the Virtual Kubelet prepends its generated
# script to pre-exec, a heredoc the SLURM plugin writes to mesh.sh and runs, and
# patches the annotation into the pod in the API server. sar-bridge (the relay,
# the Data API) reads the live pod: input.hpc.writers[key] is "vk" when the value
# sent is the live one and the pod's managedFields give it to a field manager of
# the Virtual Kubelet (--interlink.vk-field-managers). The value must then be the
# heredoc and nothing after it: the VK puts a tenant's own pre-exec right after
# its script, and that text stays refused.
_mesh_pre_exec(v) if {
	input.hpc.writers["slurm-job.vk.io/pre-exec"] == "vk"
	startswith(v, "cat <<'EOFMESH' > $TMPDIR/mesh.sh\n")
	endswith(v, "\nEOFMESH")
	count(indexof_n(v, "\nEOFMESH")) == 1
}

_restricted_annotation_message(key) := sprintf("annotation %q is restricted: subject %q is not among its allowed users %v or groups %v (data.interlink.restricted_annotations)", [key, _subject_name, _configured_names(key, "users"), _configured_names(key, "groups")])

# The names configured for key, as the rules above read them.
_configured_names(key, kind) := [n | ns := data.interlink.restricted_annotations[key][kind]; is_array(ns); some n in ns]

# The keys restricted above; authz.rego's fast path and _precompute read this
# file's documents (_restricted_annotation_keys, _unknown_restricted_keys) so
# that what it proves is what these rules check: each subject profile lists the
# keys restricted_annotations grants it (_pre_restricted_allows, as
# _restricted_allowed), and _fast_hpc_proved checks the annotations above
# against it.
_restricted_annotation_keys := {
	"slurm-job.vk.io/flags", "slurm-job.vk.io/pre-exec", "slurm-job.vk.io/mpi-flags",
	"interlink.eu/wstunnel-client-commands", "interlink.eu/pod-ip",
}

# Keys the admin restricts that this policy cannot (data alone).
_unknown_restricted_keys contains key if {
	configured := data.interlink.restricted_annotations
	is_object(configured)
	some key, _ in configured
	not key in _restricted_annotation_keys
}

# A key the admin meant to restrict must not go unenforced: every create is
# refused until it is removed (or checked by a policy of one's own).
_restricted_annotations_violations contains msg if {
	input.operation == "create"
	some key in _unknown_restricted_keys
	msg := sprintf("data.interlink.restricted_annotations names %q, which the default policy cannot restrict (it restricts %s): remove it, or check it in a policy of your own", [key, concat(", ", sort(_restricted_annotation_keys))])
}
