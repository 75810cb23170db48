package interlink.authz

# HPC (policies/rules/hpc): what a tenant's pod becomes on the HPC side (issue 32). sar-bridge reads
# the pod the way interLink's plugins do and puts the result in input.hpc
# (policies/hpc.go): the sbatch options of slurm-job.vk.io/flags, the options and
# host paths of the container-runtime annotations and hostPath volumes, the uids
# and gids, the values the plugins write unquoted. These rules judge them against
# the tenant's settings (data.interlink.hpc, read once per load in
# hpc_settings.rego). Shell outside the container (pre-exec, mpi-flags,
# wstunnel-client-commands, pod-ip) is the restricted annotations rule (restricted_annotations.rego).
#
# authz.rego's fast path proves every rule here silent (in its body for a pod that
# sets nothing of this or only sbatch options, in _fast_hpc_proved for any other) or
# leaves the decision to the general rules: a rule added here needs its proof there,
# and a sample under policies/rules/hpc/samples that it refuses (TestSamples decides
# each sample with the fast path's tables and without, and fails where they differ).

_hpc_table := data.interlink.hpc_settings.table

# The tenant's settings: its own, else those of "*".
_hpc := s if {
	s := _hpc_table.tenants[_hpc_tenant]
} else := _hpc_table.tenants["*"]

_hpc_tenant := t if {
	t := input.tenant
	is_string(t)
} else := ""

# The options of slurm-job.vk.io/flags that choose who pays or where the job
# runs: a value from the tenant's list, whoever the subject.
_hpc_value_lists := {"--account": "accounts_or_default", "--partition": "partitions", "--qos": "qos", "--reservation": "reservations"}

# Their lists, as data names them (an account is the tenant's account or one of
# its accounts).
_hpc_value_names := {"--account": "accounts", "--partition": "partitions", "--qos": "qos", "--reservation": "reservations"}

# Never from a pod: the job's uid and gid come from its securityContext, judged
# below (the plugin writes --uid from runAsUser).
_hpc_never := {"--uid", "--gid"}

_hpc_violations contains msg if {
	input.operation == "create"
	_hpc_flags_unreadable
	msg := sprintf("annotation %q cannot be read as the SLURM plugin and sbatch read it: %s", ["slurm-job.vk.io/flags", input.hpc.sbatch.error])
}

_hpc_violations contains msg if {
	input.operation == "create"
	some name, _ in input.hpc.sbatch.options
	name in _hpc_never
	msg := sprintf("sbatch option %s (annotation %q) is never allowed: the job's uid comes from the pod's securityContext.runAsUser, judged against tenant %q's uid ranges", [name, "slurm-job.vk.io/flags", _hpc_tenant])
}

_hpc_violations contains msg if {
	input.operation == "create"
	some name, value in input.hpc.sbatch.options
	list := _hpc_value_lists[name]
	not _hpc[list][value]
	msg := sprintf("sbatch option %s=%v (annotation %q) is not allowed for tenant %q: allowed %s: %s (data.interlink.hpc.tenants)", [name, value, "slurm-job.vk.io/flags", _hpc_tenant, _hpc_value_names[name], _hpc_allowed(list)])
}

_hpc_violations contains msg if {
	input.operation == "create"
	some name, _ in input.hpc.sbatch.options
	not name in _hpc_never
	not _hpc_value_lists[name]
	not _hpc.sbatch_options[name]
	not _restricted_allowed("slurm-job.vk.io/flags")
	msg := sprintf("sbatch option %s (annotation %q) is not allowed for tenant %q: allowed %s (data.interlink.hpc.tenants)", [name, "slurm-job.vk.io/flags", _hpc_tenant, _hpc_allowed("sbatch_options")])
}

# The flavor picks a site-configured set of sbatch flags, uid and defaults.
_hpc_violations contains msg if {
	input.operation == "create"
	v := input.pod.metadata.annotations["slurm-job.vk.io/flavor"]
	not _hpc.flavors[v]
	msg := sprintf("flavor %v (annotation %q) is not allowed for tenant %q: allowed %s (data.interlink.hpc.tenants)", [json.marshal(v), "slurm-job.vk.io/flavor", _hpc_tenant, _hpc_allowed("flavors")])
}

# Container-runtime options: pasted into the job script's command line.
_hpc_violations contains msg if {
	input.operation == "create"
	some key, args in input.hpc.runtime
	err := args.error
	is_string(err)
	msg := sprintf("annotation %q is refused: %s", [key, err])
}

_hpc_violations contains msg if {
	input.operation == "create"
	some key, args in input.hpc.runtime
	list := _hpc_runtime_list(key)
	some option in args.options
	not _hpc[list][option]
	msg := sprintf("option %s in annotation %q is not allowed for tenant %q: allowed %s (data.interlink.hpc.tenants)", [option, key, _hpc_tenant, _hpc_allowed(list)])
}

# The container-runtime annotations input.hpc.runtime may have (runtimeAnnotations in
# policies/hpc.go); the fast path knows no other.
_hpc_runtime_annotations := {
	"slurm-job.vk.io/singularity-mounts", "slurm-job.vk.io/singularity-options",
	"slurm-job.vk.io/enroot-mounts", "slurm-job.vk.io/enroot-options",
	"htcondor-job.vk.io/singularity-options",
}

_hpc_runtime_list(key) := "enroot_options" if startswith(key, "slurm-job.vk.io/enroot-")

else := "singularity_options"

# Host paths the job would mount (runtime options, hostPath volumes): under a
# prefix of the tenant's, matched as paths (/scratch/team-a covers
# /scratch/team-a/x, not /scratch/team-ab; input.hpc's paths are clean and
# refused when they are relative or have a .. element).
_hpc_violations contains msg if {
	input.operation == "create"
	some hp in input.hpc.host_paths
	not _hpc_under(hp.path, "mount_prefixes")
	msg := sprintf("host path %q (%s) is not under a path allowed for tenant %q: allowed %s (data.interlink.hpc.tenants)", [hp.path, hp.from, _hpc_tenant, _hpc_allowed("mount_prefixes")])
}

# Image roots (each key read by name: the memo keys on what is read).
_hpc_violations contains msg if {
	input.operation == "create"
	v := input.pod.metadata.annotations["slurm-job.vk.io/image-root"]
	not _hpc_under(v, "image_roots")
	msg := _hpc_image_root_message("slurm-job.vk.io/image-root", v)
}

_hpc_violations contains msg if {
	input.operation == "create"
	v := input.pod.metadata.annotations["htcondor-job.knoc.io/image-root"]
	not _hpc_under(v, "image_roots")
	msg := _hpc_image_root_message("htcondor-job.knoc.io/image-root", v)
}

_hpc_image_root_message(key, v) := sprintf("image root %v (annotation %q) is not allowed for tenant %q: allowed %s (data.interlink.hpc.tenants)", [json.marshal(v), key, _hpc_tenant, _hpc_allowed("image_roots")])

_hpc_under(p, list) if {
	is_string(p)
	some prefix, _ in _hpc[list]
	_hpc_path_under(p, prefix)
}

_hpc_path_under(_, "/")

_hpc_path_under(p, p)

_hpc_path_under(p, prefix) if startswith(p, concat("", [prefix, "/"]))

# uids and gids: never 0 unless allow_root; inside the tenant's ranges.
_hpc_violations contains msg if {
	input.operation == "create"
	some id in input.hpc.ids
	id.value == 0
	not _hpc.allow_root
	msg := sprintf("%s 0 is not allowed: it is root on the HPC system (data.interlink.hpc.tenants: allow_root)", [id.field])
}

_hpc_violations contains msg if {
	input.operation == "create"
	some id in input.hpc.ids
	not _hpc_root_allowed(id)
	ranges := _hpc[concat("", [id.kind, "_ranges"])]
	not _hpc_in_ranges(id.value, ranges)
	msg := sprintf("%s %v is outside tenant %q's %s ranges %s (data.interlink.hpc.tenants)", [id.field, id.value, _hpc_tenant, id.kind, _hpc_ranges_text(ranges)])
}

_hpc_root_allowed(id) if {
	id.value == 0
	_hpc.allow_root
}

_hpc_in_ranges(v, ranges) if {
	some [lo, hi] in ranges
	lo <= v
	v <= hi
}

_hpc_ranges_text(ranges) := concat(", ", [sprintf("%v-%v", [lo, hi]) | some [lo, hi] in ranges]) if count(ranges) > 0

else := "(none configured)"

# Values the plugins write unquoted, or between double quotes, into the job
# script: plain words only.
_hpc_violations contains msg if {
	input.operation == "create"
	some w in input.hpc.words
	msg := sprintf("%s is refused: %s", [w.what, w.error])
}

# Inert by default: every string of the pod the node's plugin writes into the job
# script (package scriptbound's table: unquoted, between double quotes, or under no
# row at all) must be inert there, unless the tenant's data opens its field
# (open_fields: the table's pattern, or the field itself). The node's plugin is
# data.interlink.hpc.nodes' entry, else its interlink.io/plugin label, else
# data.interlink.hpc.default_plugin, else slurm (interLink's own); a plugin the
# table does not describe is judged as every plugin it describes.
_hpc_violations contains msg if {
	input.operation == "create"
	some plugin in _hpc_plugins
	some f in input.hpc.script_bound[plugin]
	not _hpc.open_fields[f.row]
	not _hpc.open_fields[f.field]
	msg := concat("", [f.message, _hpc_plugins_note, " (data.interlink.hpc.tenants: open_fields)"])
}

# Without it (input.hpc made by something else than sar-bridge), nothing says
# which strings are inert: refused.
_hpc_violations contains msg if {
	input.operation == "create"
	_hpc_input
	not _hpc_script_bound_input
	msg := "input.hpc.script_bound is missing: whether the pod's strings are inert where the plugins write them cannot be judged (sar-bridge adds it to every pod decision)"
}

_hpc_script_bound_input if is_object(input.hpc.script_bound)

_hpc_plugins := {_hpc_plugin} if {
	input.hpc.script_bound[_hpc_plugin]
} else := {p | some p, _ in input.hpc.script_bound}

_hpc_plugin := p if {
	p := _hpc_node_plugin
} else := p if {
	p := _hpc_table.default_plugin
	is_string(p)
} else := "slurm"

_hpc_plugins_note := "" if {
	input.hpc.script_bound[_hpc_plugin]
} else := sprintf(" (node %q is served by plugin %q, which sar-bridge does not know: judged as every plugin it knows)", [input.node.name, _hpc_plugin])

# GPUs without a flavor: the SLURM plugin picks a flavor from the pod's GPU limits
# by itself (its sbatch flags, uid and defaults), which the flavor rule above never
# saw. Unless every flavor it may pick (data.interlink.hpc.auto_flavors) is one of
# the tenant's, the pod must name one.
_hpc_violations contains msg if {
	input.operation == "create"
	input.hpc.gpus > 0
	"slurm" in _hpc_plugins
	not input.pod.metadata.annotations["slurm-job.vk.io/flavor"]
	not _hpc.gpu_auto
	msg := sprintf("the pod's containers ask for %v GPUs (nvidia.com/gpu, amd.com/gpu limits) and it names no flavor: the SLURM plugin would pick a GPU flavor itself (data.interlink.hpc.auto_flavors: %s), not all of which tenant %q may use; name one of its flavors in annotation %q: allowed %s (data.interlink.hpc.tenants)", [input.hpc.gpus, _hpc_auto_flavors_text, _hpc_tenant, "slurm-job.vk.io/flavor", _hpc_allowed("flavors")])
}

_hpc_auto_flavors_text := json.marshal(data.interlink.hpc.auto_flavors) if data.interlink.hpc.auto_flavors

else := "not configured"

# HTCondor's host mode: a first container whose image contains "host" runs its
# command on the worker, without a container.
_hpc_violations contains msg if {
	input.operation == "create"
	input.hpc.host_mode == true
	"htcondor" in _hpc_plugins
	not _hpc.htcondor_host_mode
	msg := sprintf("the first container's image contains \"host\": the HTCondor plugin serving node %q would run its command on the host, without a container; tenant %q may not (data.interlink.hpc.tenants: htcondor_host_mode)", [input.node.name, _hpc_tenant])
}

# The plugin serving the target node: data, else the node's label.
_hpc_node_plugin := p if {
	p := _hpc_table.nodes[input.node.name]
} else := p if {
	p := input.node.labels["interlink.io/plugin"]
}

# Data the tenant's settings cannot be read from: its creates are refused.
_hpc_violations contains msg if {
	input.operation == "create"
	errs := _hpc_table.errors[_hpc_tenant]
	some msg in errs
}

_hpc_violations contains msg if {
	input.operation == "create"
	not _hpc_table.tenants[_hpc_tenant]
	some msg in _hpc_table.errors["*"]
}

# Without input.hpc (the policy run without sar-bridge), a pod that sets anything
# the HPC side reads cannot be judged: refused.
_hpc_violations contains msg if {
	input.operation == "create"
	not _hpc_input
	msg := "input.hpc is missing: what the pod becomes on the HPC side cannot be judged (sar-bridge adds it to every pod decision)"
}

# (A call on an undefined reference is undefined, and so is `not` of it: the
# test is a rule of its own.)
_hpc_input if is_object(input.hpc)

# The listed values, for messages.
_hpc_allowed(list) := concat(", ", sort([v | some v, _ in _hpc[list]])) if count(_hpc[list]) > 0

else := "none"

# ---------------------------------------------------------------------------
# Modifications: the tenant's defaults, for a pod that names none
# ---------------------------------------------------------------------------

# The tenant's account when the pod's flags name no --account (appended, so the
# job's account is the tenant's whatever the flavor says: the plugin writes the
# pod's flags after the flavor's and sbatch keeps the later value).
_hpc_pod_annotations := {"slurm-job.vk.io/flags": flags} if {
	account := _hpc.account
	is_string(account)
	not input.hpc.sbatch.options["--account"]
	not _hpc_flags_unreadable
	flags := _hpc_flags_with_account(account)
} else := {}

_hpc_flags_unreadable if is_string(input.hpc.sbatch.error)

_hpc_flags_with_account(account) := concat("", [v, " --account=", account]) if {
	v := input.pod.metadata.annotations["slurm-job.vk.io/flags"]
	trim_space(v) != ""
} else := concat("", ["--account=", account])

# The tenant's uid when the pod sets no runAsUser (the plugin writes --uid from
# it).
_hpc_run_as_user := {"run_as_user": uid} if {
	uid := _hpc.uid
	is_number(uid)
	not input.pod.spec.securityContext.runAsUser
} else := {}
