# What each tenant's pods may become on the HPC side (data.interlink.hpc), read
# once per load for the HPC rules of interlink.authz (hpc.rego):
#
#   hpc:
#     tenants:
#       "*":                      # every tenant, unless its own entry says otherwise
#         sbatch_options: [--time, --gres, --job-name]
#       team-a:                   # key by key over "*"
#         accounts: [proj-a, proj-a-gpu]   # --account values it may name
#         account: proj-a                  # set when the pod names none
#         partitions: [cpu, gpu]           # --partition values
#         qos: [normal]                    # --qos values
#         reservations: []                 # --reservation values
#         flavors: [default, gpu]          # slurm-job.vk.io/flavor values
#         singularity_options: [--nv, --bind, --cleanenv]
#         enroot_options: [--mount, --rw]
#         mount_prefixes: [/scratch/team-a, /cvmfs]   # host paths it may mount
#         image_roots: [/cvmfs/unpacked.cern.ch]      # slurm-job.vk.io/image-root values
#         uid_ranges: [[20000, 20999]]     # runAsUser, pod and containers
#         gid_ranges: [[20000, 20999]]     # runAsGroup
#         uid: 20001                       # set when the pod sets no runAsUser
#         allow_root: false                # uid or gid 0
#         htcondor_host_mode: false        # HTCondor's run-on-the-host mode
#         open_fields: ["pod.spec.*containers[].args"]   # script-bound fields (a row of
#                                          # scriptbound.Table, or a field) left to the tenant
#     nodes:
#       vk-condor: {plugin: htcondor}      # else the node's interlink.io/plugin label
#     default_plugin: slurm                # a node's plugin when neither nodes nor its label say
#     auto_flavors: [gpu1, gpu2]           # what the SLURM plugin picks itself for a pod
#                                          # with GPU limits and no flavor ([]: none)
#
# Everything absent is closed: no option, value, flavor, path, uid or gid but those
# listed. This follows sar-bridge's precompute convention (policies/precompute.go): `table`
# reads the document sar-bridge stored at load, or computes it.
package interlink.hpc_settings

# {"tenants": {tenant or "*": settings}, "errors": {tenant or "*": [message]},
#  "nodes": {node: plugin}}; settings hold the lists as {value: true} objects, the
# ranges as [[min, max]], and uid, account, allow_root, htcondor_host_mode as given.
table := t if {
	t := data.sar_bridge.precomputed.interlink.hpc_settings
} else := _precompute

_precompute := {
	"tenants": {name: _settings(name) | some name in _names},
	"errors": {name: errs |
		some name in _names
		errs := _errors(name)
		count(errs) > 0
	},
	"nodes": {node: p |
		nodes := data.interlink.hpc.nodes
		is_object(nodes)
		some node, entry in nodes
		p := entry.plugin
		is_string(p)
	},
	"default_plugin": _default_plugin,
}

_default_plugin := p if {
	p := data.interlink.hpc.default_plugin
	is_string(p)
} else := null

# "*" always, and every tenant data names.
_names := {"*"} | {name |
	tenants := data.interlink.hpc.tenants
	is_object(tenants)
	some name, _ in tenants
	is_string(name)
}

# A tenant's entry over "*", key by key.
_entry(name) := object.union(_own_entry("*"), _own_entry(name))

_own_entry(name) := e if {
	e := data.interlink.hpc.tenants[name]
	is_object(e)
} else := {}

_list_keys := {
	"sbatch_options", "accounts", "partitions", "qos", "reservations", "flavors",
	"singularity_options", "enroot_options", "mount_prefixes", "image_roots", "open_fields",
}

_settings(name) := _settings_of(_entry(name))

_settings_of(e) := object.union(
	{key: {v: true | some v in object.get(e, key, []); is_string(v)} | some key in _list_keys},
	{
		"accounts_or_default": _accounts(e),
		"uid_ranges": _ranges(object.get(e, "uid_ranges", [])),
		"gid_ranges": _ranges(object.get(e, "gid_ranges", [])),
		"uid": _number_or_null(object.get(e, "uid", null)),
		"account": _account_or_null(object.get(e, "account", null)),
		"allow_root": object.get(e, "allow_root", false) == true,
		"htcondor_host_mode": object.get(e, "htcondor_host_mode", false) == true,
		"gpu_auto": _gpu_auto(e),
	},
)

# The flavors the SLURM plugin may pick by itself for a pod that asks for GPUs and
# names no flavor (data.interlink.hpc.auto_flavors: its GPU flavors and default
# flavor; [] when it has none): a tenant's pods may leave the choice to the plugin
# only when it may use every one of them. Unknown (not a list of strings): never.
_gpu_auto(e) if {
	auto := data.interlink.hpc.auto_flavors
	_strings(auto)
	every f in auto {
		f in object.get(e, "flavors", [])
	}
}

default _gpu_auto(_) := false

# The accounts a tenant may name: its list, and its default account.
_accounts(e) := object.union(
	{v: true | some v in e.accounts; is_string(v)},
	{a: true | a := _account_or_null(e.account); is_string(a)},
)

_ranges(rs) := [[lo, hi] | some [lo, hi] in rs; is_number(lo); is_number(hi); lo <= hi]

_number_or_null(n) := n if is_number(n)

else := null

_account_or_null(a) := a if {
	is_string(a)
	regex.match(`^[A-Za-z0-9_.+-]+$`, a)
} else := null

# What cannot be read as the shapes above: the tenant's creates are refused rather
# than judged by a setting that silently means something else.
_errors(name) := array.concat(
	array.concat(
		[sprintf("data.interlink.hpc.tenants[%q] must be an object, not %s", [name, type_name(e)]) |
			e := data.interlink.hpc.tenants[name]
			not is_object(e)
		],
		[sprintf("data.interlink.hpc.tenants: %s of tenant %q must be a list of strings", [key, name]) |
			e := _entry(name)
			some key in _list_keys
			v := e[key]
			not _strings(v)
		],
	),
	array.concat(
		[sprintf("data.interlink.hpc.tenants: %s of tenant %q must be a list of [min, max] numbers", [key, name]) |
			e := _entry(name)
			some key in ["uid_ranges", "gid_ranges"]
			v := e[key]
			count(_ranges(v)) != count(v)
		],
		array.concat(
			[sprintf("data.interlink.hpc.tenants: uid of tenant %q must be a number, not %v", [name, u]) |
				u := _entry(name).uid
				not is_number(u)
			],
			array.concat(
				[sprintf("data.interlink.hpc.tenants: account of tenant %q must be an account name (letters, digits, _ . + -), not %v", [name, a]) |
					a := _entry(name).account
					_account_or_null(a) == null
				],
				[sprintf("data.interlink.hpc.tenants: %s of tenant %q has %q, which is not an absolute path without //, . or .. elements nor a trailing /", [key, name, p]) |
					e := _entry(name)
					some key in ["mount_prefixes", "image_roots"]
					some p in e[key]
					is_string(p)
					not _clean_absolute(p)
				],
			),
		),
	),
)

_strings(v) if {
	is_array(v)
	every x in v {
		is_string(x)
	}
}

_clean_absolute("/")

_clean_absolute(p) if {
	startswith(p, "/")
	not endswith(p, "/")
	every elem in array.slice(split(p, "/"), 1, count(split(p, "/"))) {
		not elem in {"", ".", ".."}
	}
}
