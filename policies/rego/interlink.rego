package interlink.authz

# interLink's own rules, restricted annotations and images (policies/rules/
# restricted-annotations, policies/rules/images), configured by data.interlink (README,
# "Writing policies"):
#
#   restricted_annotations: {key: {"users": [name, ...], "groups": [name, ...]}}
#   image_registries:       {tenant or "*": [registry or repository prefix, ...]}
#
# Cost, as in authz.rego: every rule tests the operation first, then fails
# at its first lookup when nothing is configured or the pod sets nothing
# restricted; input is read through references and data by key. Nothing
# needs precomputing: the one derived list, a tenant's image prefixes, is
# built once per decision from that tenant's entry alone.

# Both rules' messages: what authz.rego (or a policy directory's replacement
# of it) adds to violations.
_interlink_violations contains msg if {
	some msg in _restricted_annotations_violations
}

_interlink_violations contains msg if {
	some msg in _images_violations
}

# ---------------------------------------------------------------------------
# 6a. Restricted annotations
# ---------------------------------------------------------------------------

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

_restricted_annotation_message(key) := sprintf("annotation %q is restricted: subject %q is not among its allowed users %v or groups %v (data.interlink.restricted_annotations)", [key, _interlink_subject, _configured_names(key, "users"), _configured_names(key, "groups")])

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

# ---------------------------------------------------------------------------
# 6b. Image registries per tenant
# ---------------------------------------------------------------------------

# A tenant's entry, else the "*" entry, lists the prefixes its images must
# start with; with neither, images are not restricted. An image reference is
# first normalised as container runtimes do (_image_name): busybox:1.36 is
# docker.io/library/busybox, a digest or tag is dropped. An entry matches
# when that name equals it or continues it after a "/" (a trailing "/" in
# the entry changes nothing): "registry.example.org" matches
# registry.example.org/x but neither registry.example.org.evil.com/x nor
# registry.example.org:5000/x, and "docker.io/library/busybox" matches
# busybox:1.36 but not busybox-evil. An empty list allows no image.
_images_violations contains msg if {
	input.operation == "create"
	_ = data.interlink.image_registries
	prefixes := _image_prefixes
	some [kind, i, c] in array.concat(
		array.concat(
			[["container", j, x] | some j, x in input.pod.spec.containers],
			[["init container", j, x] | some j, x in input.pod.spec.initContainers],
		),
		[["ephemeral container", j, x] | some j, x in input.pod.spec.ephemeralContainers],
	)
	image := object.get({"c": c}, ["c", "image"], null)
	not _image_allowed(image, prefixes)
	msg := sprintf("%s %q %s a registry allowed for tenant %q (subject %q; allowed: %s)", [kind, _interlink_container_name(c, i), _image_phrase(image), _interlink_tenant, _interlink_subject, _image_allowed_list])
}

# The prefixes that apply to the pod's tenant, each ending in one "/"; an
# entry that is not a list of strings allows nothing.
_image_prefixes := _prefixes(entries) if {
	entries := data.interlink.image_registries[input.tenant]
} else := _prefixes(entries) if {
	entries := data.interlink.image_registries["*"]
}

_prefixes(entries) := [concat("", [trim_right(e, "/"), "/"]) |
	is_array(entries)
	some e in entries
	is_string(e)
	trim_right(e, "/") != ""
]

_image_allowed(image, prefixes) if {
	name := concat("", [_image_name(image), "/"])
	some p in prefixes
	startswith(name, p)
}

# The repository an image reference names, normalised (Docker's rules: the
# first component is a registry when it has a "." or ":", is localhost or
# has an upper-case letter; otherwise the registry is docker.io, where a
# one-component name is in library/); undefined when image is not a
# reference, so that it matches no entry.
_image_name(image) := name if {
	is_string(image)
	[[_, registry, path]] := regex.find_all_string_submatch_n(
		`^(?:([^/]*[.:][^/]*|localhost|[^/]*[A-Z][^/]*)/)?([a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$`,
		image, 1,
	)
	name := _image_join(registry, path)
}

_image_join(registry, path) := concat("/", [registry, path]) if {
	not registry in {"", "docker.io", "index.docker.io"}
} else := concat("/", ["docker.io", path]) if {
	contains(path, "/")
} else := concat("/", ["docker.io/library", path])

# Messages only.

_image_phrase(image) := sprintf("image %q is not from", [image]) if {
	_image_name(image) == image
} else := sprintf("image %q (%s) is not from", [image, name]) if {
	name := _image_name(image)
} else := sprintf("image %q is not an image reference, so not from", [image]) if {
	is_string(image)
} else := "has no image from"

# The entries of the tenant's list, as configured.
_image_allowed_list := concat(", ", entries) if {
	key := array.concat([t | t := input.tenant; _ = data.interlink.image_registries[t]], ["*"])[0]
	entries := [e | some e in data.interlink.image_registries[key]; is_string(e)]
	count(entries) > 0
} else := "none"

_interlink_container_name(c, i) := n if {
	n := c.name
	is_string(n)
	n != ""
} else := sprintf("#%d", [i])

# The subject and tenant, as the messages and checks read them. This file
# uses nothing of authz.rego's but _interlink_violations, so it still
# compiles when a policy directory replaces authz.rego.

_interlink_user := u if {
	u := input.subject.username
	is_string(u)
} else := ""

_interlink_subject := _interlink_user if {
	_interlink_user != ""
} else := "<unknown subject>"

_interlink_tenant := t if {
	t := input.tenant
	is_string(t)
} else := ""
