package interlink.interlink_test

import data.interlink.authz

# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

runner := "system:serviceaccount:team-a:runner"

admins := "system:serviceaccounts:hpc-admins"

review_ok := {"allowed": true, "denied": false, "reason": "RBAC: allowed", "attributes": []}

base := {
	"operation": "create",
	"pod": {
		"metadata": {"name": "p", "namespace": "team-a"},
		"spec": {"containers": [{"name": "main", "image": "busybox"}]},
	},
	"subject": {
		"username": runner,
		"uid": "",
		"groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"],
		"extra": {},
	},
	"tenant": "tenant-a",
	"tenant_label": "interlink.io/tenant",
	"group": "interlink.io",
	"namespace": {"name": "team-a", "labels": {}, "annotations": {}},
	"node": {"name": "vk-a", "found": true, "labels": {"interlink.io/tenant": "tenant-a"}, "taints": [], "allocatable": {}},
	"review": review_ok,
	"hpc": inert_hpc,
}

# input.hpc as sar-bridge derives it (policies/hpc.go): of a pod that sets nothing
# the HPC side reads, and of one that sets annotations the plugins read.
inert_hpc := {"inert": true, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 0, "flavor_sized": [], "script_bound": {"slurm": [], "htcondor": []}, "bound_plugins": []}

set_hpc := object.union(inert_hpc, {"inert": false})

admin := {"username": "system:serviceaccount:hpc-admins:ops", "uid": "", "groups": ["system:authenticated", admins], "extra": {}}

alice := {"username": "alice", "uid": "", "groups": ["system:authenticated"], "extra": {}}

annotated(annotations) := object.union(base, {
	"pod": object.union(base.pod, {"metadata": object.union(base.pod.metadata, {"annotations": annotations})}),
	"hpc": set_hpc,
})

# with_flags is annotated with flags, and their sbatch options as hpc.go reads them.
with_flags(annotations, options) := object.union(annotated(annotations), {"hpc": object.union(set_hpc, {"sbatch": {
	"options": options,
	"order": [name | some name, _ in options],
	"error": null,
}})})

as_subject(inp, s) := object.union(inp, {"subject": s})

with_spec(extra) := object.union(base, {"pod": object.union(base.pod, {"spec": object.union(base.pod.spec, extra)})})

images(list) := with_spec({"containers": [{"name": sprintf("c%d", [i]), "image": im} | some i, im in list]})

# Data as the shipped example (manifests/base): both keys for an admin group,
# alice by name for flags.
restricted := {
	"slurm-job.vk.io/pre-exec": {"users": [], "groups": [admins]},
	"slurm-job.vk.io/flags": {"users": ["alice"], "groups": [admins]},
}

registries := {
	"tenant-a": ["registry.example.org/team-a/", "docker.io/library/"],
	"tenant-b": ["registry.example.org"],
	"*": ["ghcr.io/example"],
}

# ---------------------------------------------------------------------------
# 6a. Restricted annotations
# ---------------------------------------------------------------------------

test_annotation_denied_by_default if {
	d := authz.decision with input as annotated({"slurm-job.vk.io/pre-exec": "rm -rf ~"})
	d.allowed == false
	d.reason == "annotation \"slurm-job.vk.io/pre-exec\" is restricted: subject \"system:serviceaccount:team-a:runner\" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)"
}

# Flags are judged option by option (hpc.rego): no option is allowed by default.
test_annotation_flags_denied_by_default if {
	d := authz.decision with input as with_flags({"slurm-job.vk.io/flags": "--partition=debug"}, {"--partition": "debug"})
	d.allowed == false
	d.reason == "sbatch option --partition=debug (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed partitions: none (data.interlink.hpc.tenants)"
}

test_annotation_absent_allowed_by_default if {
	authz.decision.allowed with input as object.union(annotated({"interlink.eu/pod-vpn": "true"}), {"hpc": inert_hpc})
}

test_annotation_pre_exec_by_listed_group_allowed if {
	authz.decision.allowed with input as as_subject(annotated({"slurm-job.vk.io/pre-exec": "module load x"}), admin)
		with data.interlink.restricted_annotations as restricted
}

# Subjects listed for flags may set any option but --uid and --gid (hpc.rego).
test_annotation_flags_by_listed_user_allowed if {
	authz.decision.allowed with input as as_subject(with_flags({"slurm-job.vk.io/flags": "--time=1:00:00"}, {"--time": "1:00:00"}), alice)
		with data.interlink.restricted_annotations as restricted
}

test_annotation_pre_exec_by_user_listed_for_flags_only_denied if {
	d := authz.decision with input as as_subject(with_flags({"slurm-job.vk.io/pre-exec": "id", "slurm-job.vk.io/flags": "--time=1"}, {"--time": "1"}), alice)
		with data.interlink.restricted_annotations as restricted
	d.allowed == false
	d.reason == "annotation \"slurm-job.vk.io/pre-exec\" is restricted: subject \"alice\" is not among its allowed users [] or groups [\"system:serviceaccounts:hpc-admins\"] (data.interlink.restricted_annotations)"
}

test_annotation_by_someone_else_denied if {
	d := authz.decision with input as with_flags({"slurm-job.vk.io/pre-exec": "id", "slurm-job.vk.io/flags": "--time=1"}, {"--time": "1"})
		with data.interlink.restricted_annotations as restricted
	d.allowed == false
	d.reason == concat("; ", [
		"annotation \"slurm-job.vk.io/pre-exec\" is restricted: subject \"system:serviceaccount:team-a:runner\" is not among its allowed users [] or groups [\"system:serviceaccounts:hpc-admins\"] (data.interlink.restricted_annotations)",
		"sbatch option --time (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed none (data.interlink.hpc.tenants)",
	])
}

# Presence counts, whatever the value.
test_annotation_empty_value_restricted if {
	not authz.allow with input as annotated({"slurm-job.vk.io/pre-exec": ""})
}

# Opening a key to everyone is an explicit grant.
test_annotation_open_to_all_authenticated if {
	authz.allow with input as with_flags({"slurm-job.vk.io/flags": "--time=1"}, {"--time": "1"})
		with data.interlink.restricted_annotations as {"slurm-job.vk.io/flags": {"groups": ["system:authenticated"]}}
}

# Mistyped entries allow no one rather than everyone.
test_annotation_mistyped_entry_allows_no_one if {
	every entry in [{"users": "alice"}, {"groups": {"a": "system:authenticated"}}, "alice", [], null] {
		not authz.allow with input as as_subject(with_flags({"slurm-job.vk.io/flags": "--time=1"}, {"--time": "1"}), alice)
			with data.interlink.restricted_annotations as {"slurm-job.vk.io/flags": entry}
	}
}

test_annotation_unknown_key_in_data_refuses_creates if {
	d := authz.decision with input as base
		with data.interlink.restricted_annotations as object.union(restricted, {"slurm-job.vk.io/singularity-mounts": {"groups": [admins]}})
	d.allowed == false
	d.reason == "data.interlink.restricted_annotations names \"slurm-job.vk.io/singularity-mounts\", which the default policy cannot restrict (it restricts interlink.eu/pod-ip, interlink.eu/wstunnel-client-commands, slurm-job.vk.io/flags, slurm-job.vk.io/mpi-flags, slurm-job.vk.io/pre-exec): remove it, or check it in a policy of your own"
}

test_annotation_rules_ignored_for_delete_and_status if {
	every op in ["delete", "status"] {
		inp := object.union(annotated({"slurm-job.vk.io/pre-exec": "id"}), {"operation": op})
		authz.allow with input as inp
		count(authz._interlink_violations) == 0 with input as inp
			with data.interlink.restricted_annotations as {"x": {}}
	}
}

# ---------------------------------------------------------------------------
# 6b. Image registries
# ---------------------------------------------------------------------------

image_violations(inp) := v if {
	v := authz._interlink_violations with input as inp
		with data.interlink.image_registries as registries
}

test_images_unrestricted_without_data if {
	authz.allow with input as images(["evil.example.com/x:1", "busybox"])
}

test_images_from_allowed_registries if {
	inp := images([
		"registry.example.org/team-a/app:1.4",
		"registry.example.org/team-a/tools/cli@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"busybox",
		"busybox:1.36",
		"library/busybox",
		"docker.io/busybox:1.36",
		"index.docker.io/library/python:3.12-slim",
	])
	count(image_violations(inp)) == 0
	authz.allow with input as inp with data.interlink.image_registries as registries
}

test_images_lookalike_host_denied if {
	image_violations(images(["registry.example.org.evil.com/team-a/app:1"])) == {"container \"c0\" image \"registry.example.org.evil.com/team-a/app:1\" (registry.example.org.evil.com/team-a/app) is not from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)"}
}

test_images_prefix_ends_at_a_path_boundary if {
	every im in [
		"registry.example.org/team-ab/app:1", # team-a is a prefix of the string, not of the path
		"registry.example.org/app:1",
		"registry.example.org:5000/team-a/app:1", # another port is another registry
		"evil.com/registry.example.org/team-a/app",
	] {
		count(image_violations(images([im]))) == 1
	}
}

test_images_docker_hub_short_name_normalised if {
	image_violations(object.union(images(["busybox:1.36"]), {"tenant": "tenant-b"})) == {"container \"c0\" image \"busybox:1.36\" (docker.io/library/busybox) is not from a registry allowed for tenant \"tenant-b\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org)"}

	# A user's Docker Hub repository is not in library/.
	image_violations(images(["someone/busybox"])) == {"container \"c0\" image \"someone/busybox\" (docker.io/someone/busybox) is not from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)"}
}

test_images_repository_entry_matches_tags_not_lookalikes if {
	regs := {"tenant-a": ["docker.io/library/busybox"]}
	count(authz._interlink_violations) == 0 with input as images(["busybox", "busybox:1.36", "busybox@sha256:0123456789abcdef0123456789abcdef"])
		with data.interlink.image_registries as regs
	count(authz._interlink_violations) == 2 with input as images(["busybox-evil", "docker.io/library/busybox/sub"])
		with data.interlink.image_registries as object.union(regs, {"tenant-a": ["docker.io/library/busybox-x"]})
}

test_images_registry_entry_without_slash if {
	inp := object.union(images(["registry.example.org/anything/app:2", "registry.example.org/x"]), {"tenant": "tenant-b"})
	count(image_violations(inp)) == 0
}

test_images_localhost_and_uppercase_registries if {
	regs := {"tenant-a": ["localhost/", "localhost:5000", "Registry.Example"]}
	count(authz._interlink_violations) == 0 with input as images(["localhost/app", "localhost:5000/app:1", "Registry.Example/app"])
		with data.interlink.image_registries as regs

	# "localhostx" is a Docker Hub user, not a registry.
	count(authz._interlink_violations) == 1 with input as images(["localhostx/app"])
		with data.interlink.image_registries as regs
}

test_images_init_container_checked if {
	inp := with_spec({"initContainers": [{"name": "setup", "image": "quay.io/evil/setup:1"}]})
	image_violations(inp) == {"init container \"setup\" image \"quay.io/evil/setup:1\" (quay.io/evil/setup) is not from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)"}
	not authz.allow with input as inp with data.interlink.image_registries as registries
}

test_images_ephemeral_container_checked if {
	inp := with_spec({"ephemeralContainers": [{"name": "debug", "image": "quay.io/evil/debug"}]})
	count(image_violations(inp)) == 1
}

test_images_unnamed_container_by_index if {
	inp := with_spec({"containers": [{"name": "main", "image": "busybox"}, {"image": "quay.io/x"}]})
	image_violations(inp) == {"container \"#1\" image \"quay.io/x\" is not from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)"}
}

test_images_missing_or_invalid_denied if {
	image_violations(with_spec({"containers": [{"name": "a"}, {"name": "b", "image": ""}, {"name": "c", "image": "Busybox//x"}, {"name": "d", "image": 7}]})) == {
		"container \"a\" has no image from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)",
		"container \"b\" image \"\" is not an image reference, so not from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)",
		"container \"c\" image \"Busybox//x\" is not an image reference, so not from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)",
		"container \"d\" has no image from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: registry.example.org/team-a/, docker.io/library/)",
	}
}

test_images_tenant_without_entry_unrestricted if {
	regs := {"tenant-b": ["registry.example.org"]}
	authz.allow with input as images(["quay.io/anything:1"]) with data.interlink.image_registries as regs
}

test_images_star_entry_is_the_fallback if {
	inp := object.union(images(["ghcr.io/example/app:1", "registry.example.org/team-a/app"]), {"tenant": "tenant-c"})
	image_violations(inp) == {"container \"c1\" image \"registry.example.org/team-a/app\" is not from a registry allowed for tenant \"tenant-c\" (subject \"system:serviceaccount:team-a:runner\"; allowed: ghcr.io/example)"}

	# A tenant's own entry replaces it.
	count(image_violations(images(["ghcr.io/example/app:1"]))) == 1
}

test_images_empty_list_allows_none if {
	inp := images(["busybox"])
	authz._interlink_violations == {"container \"c0\" image \"busybox\" (docker.io/library/busybox) is not from a registry allowed for tenant \"tenant-a\" (subject \"system:serviceaccount:team-a:runner\"; allowed: none)"} with input as inp
		with data.interlink.image_registries as {"tenant-a": [], "*": ["docker.io/"]}

	# So does an entry that is not a list.
	count(authz._interlink_violations) == 1 with input as inp
		with data.interlink.image_registries as {"tenant-a": "docker.io/"}
}

test_images_ignored_for_delete if {
	authz.allow with input as object.union(images(["quay.io/x"]), {"operation": "delete"})
		with data.interlink.image_registries as registries
}

# ---------------------------------------------------------------------------
# The virtual-node.interlink/no-schedule toleration (interLink's docs)
# ---------------------------------------------------------------------------

interlink_tolerations := [
	{"key": "virtual-node.interlink/no-schedule", "operator": "Exists"},
	{"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"},
]

# manifests/base's protected taint, and one more.
protected := [
	{"key": "hpc.example/gpu", "value": "a100", "allowed_users": [], "allowed_groups": ["system:serviceaccounts:team-a"]},
	{"key": "hpc.example/reserved", "value": "bigmem", "allowed_users": [], "allowed_groups": ["gpu-users"]},
]

test_interlink_toleration_allowed_by_default if {
	every t in interlink_tolerations {
		d := authz.decision with input as with_spec({"tolerations": [t]})
		d.allowed == true
		d.reason == "RBAC: allowed"
	}
}

test_interlink_toleration_allowed_with_protected_taints if {
	every t in interlink_tolerations {
		inp := with_spec({"tolerations": [t, {"key": "hpc.example/gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}]})
		authz.decision.allowed == true with input as inp
			with data.interlink.protected_taints as protected
			with data.interlink.restricted_annotations as restricted
			with data.interlink.image_registries as registries
	}
}

# And with the precomputed document sar-bridge stores.
test_interlink_toleration_allowed_with_precomputed if {
	pre := authz._precompute with data.interlink.protected_taints as protected
	every t in interlink_tolerations {
		d := authz.decision with input as with_spec({"tolerations": [t]})
			with data.interlink.protected_taints as protected
			with data.sar_bridge.precomputed.interlink.authz as pre
		d.allowed == true
	}
}

# Protecting the key itself refuses it (Exists covers the protected taint):
# the shipped data must not.
test_interlink_toleration_refused_if_its_key_is_protected if {
	d := authz.decision with input as with_spec({"tolerations": [interlink_tolerations[0]]})
		with data.interlink.protected_taints as [{"key": "virtual-node.interlink/no-schedule", "value": "true", "allowed_groups": ["x"]}]
	d.allowed == false
}
