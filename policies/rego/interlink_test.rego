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

# The restricted annotations and images rules' own tests are in
# policies/rules/restricted-annotations and policies/rules/images, in this
# package: they share these fixtures.
image_violations(inp) := v if {
	v := authz._interlink_violations with input as inp
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
