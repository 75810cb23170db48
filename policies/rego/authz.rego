# Default sar-bridge policy for interLink pod decisions.
#
# Every document here must stay defined (and never raise a conflict error)
# for any input, including a missing input or fields of the wrong type:
# the HTTP layer relies on `decision` and `allow` always having a value.
# Hence every lookup is a type-checked reference with an `else`.
#
# Evaluation cost (issue 19). In OPA's evaluator a rule evaluation costs
# several times an expression, a comprehension or a built-in call about
# twice one, and walking an array in one body little; so:
#   - What depends on `data` only (caps per group, parsed and ranked; the
#     protected taints; invalid caps; the fast path's tables) is the document
#     `_precompute`. sar-bridge evaluates it once per policy or data load and
#     stores it at data.sar_bridge.precomputed.interlink.authz
#     (policies/precompute.go); `_static` reads it from there, or computes
#     the part the general rules need when it is absent (the opa CLI,
#     `opa test`, an OPA server), with the same results.
#   - `decision` has a fast path: an allowed create of a well-formed pod is
#     checked in one rule body against the profile of its subject, looked
#     up once: for the subject's user (when data names it) and the subset of
#     its groups data names, the caps, the restricted annotations and the
#     protected tolerations it may not use, all worked out at load
#     (_pre_profiles). Each check proves that the general rules find
#     nothing, or fails and leaves the decision to them, so it never decides
#     otherwise than they do; it is taken only where the profiles were
#     precomputed, and where the input holds what sar-bridge derives from
#     the pod: its amounts parsed (input.resources: a regex.match and a
#     units.parse per amount were most of a decision's cost) and its
#     tolerations by key (input.tolerations: three passes over the
#     tolerations were a quarter of what was left), and what the plugins
#     would make of it (input.hpc: options, paths, ids read in Go, so that a
#     pod with sbatch flags, mounts or uids is proved here too). Its cost is
#     the number of expressions it evaluates, a built-in call costing two or
#     three lookups, so every check is a lookup or a comparison; the checks
#     only pods that set more than sbatch options need are in
#     _fast_hpc_proved, called for those alone.
#   - The checks whose inputs the pods of a job share (all but caps and
#     quota: _fast_shared_silent) are a function the fast path calls unless
#     sar-bridge evaluated them apart for the same input and remembered the
#     answer (_fast_shared_proof, input.hpc.proved: policies/sharedproof.go);
#     the pods of a job differ in names and amounts, which the decision memo
#     keys on, but not in those.
#   - The general rules read input through references
#     (`input.pod.spec.containers`), never hand it to a function (a call
#     plugs and hashes its arguments); the few helpers left build messages
#     only. Amounts are reduced to the ones over their cap or invalid before
#     any rule looks at them, and tolerations to the ones of a protected key.
#   - Rules that apply to creates test `input.operation == "create"` first,
#     so OPA's rule index skips them all for delete and status.
#   - The fast path's proof holds for these rules only: sar-bridge keeps its
#     tables (data.sar_bridge.precomputed.interlink.authz.fast) only when
#     every rule decision can reach is embedded or in an extension package
#     (interlink.site.<name>, the site rules, which the fast path evaluates), and
#     drops them at load otherwise (policies/fastpath.go).
package interlink.authz

# ---------------------------------------------------------------------------
# Public documents
# ---------------------------------------------------------------------------

default allow := false

# Allowed when nothing denies: the review allowed and no rule, the embedded
# ones or a site's, added a message to deny (through a violation whose rule's
# action is deny, or directly). A review's refusal counts unless data sets the
# action of rule review below deny, which sar-bridge refuses at load without
# --policies.allow-relaxing-safety-rules.
allow if {
	_review_passes
	count(deny) == 0
}

_review_passes if _review_allowed

_review_passes if _action("review") != "deny"

# The common case, an allowed create, in one body (the fast path, see the
# top); any other input, and any the fast path is not sure of, takes the
# general rules, which define every other document.
decision := {
	"allowed": true,
	"reason": why,
	"modifications": modifications,
	"review": review,
	"violations": violations, # of the rules in warn or audit, if any (below)
} if {
	# Fast path (see the top): an allowed create, in one body, against the
	# profile of the subject precomputed for its user and the groups of it
	# that data names (_pre_profiles). It reads what sar-bridge adds to the
	# input (README, "Writing policies"): input.resources (null when an
	# amount is not a quantity string of the grammar below), where
	# largest[res] is the largest limit of res, or request where a container
	# sets no limit, of any container, parsed as units.parse does, and
	# unlimited the names of the containers that set no limit; and
	# input.tolerations, the pod's tolerations by key as the general rules
	# read them (null when they are not a list).
	input.operation == "create"

	# Review (policies/rules/review): an allowed review only, whose reason is
	# the decision's.
	review := input.review
	review.allowed == true
	why := review.reason
	is_string(why)

	# The subject's profile and the tenant.
	fast := data.sar_bridge.precomputed.interlink.authz.fast
	user := input.subject.username # any other than a string named user: "*"
	groups := input.subject.groups
	is_array(groups)
	profile := fast.profiles[object.get(fast.users, user, "*")][concat("", {fast.groups[g] | some g in groups})]
	tenant := input.tenant
	is_string(tenant)

	# The rules in warn or audit at some front door (data.interlink.enforcement:
	# fast.evaluated) are evaluated rather than proved silent: their checks
	# below stand aside (each tests it last, so that a pod that breaks no rule
	# pays nothing for it), and their violations are named and acted at the
	# end, as the general rules do. hpc and restricted-annotations, whose
	# checks are interleaved, are always proved: a pod that breaks one of them
	# in warn or audit takes the general rules.
	evaluated := fast.evaluated

	# Caps (policies/rules/caps): no container's amount over the subject's
	# caps (a cap is "none" where the subject has none: no number is greater).
	largest := input.resources.largest
	[1 | c := largest.cpu; c > profile.cpu; not evaluated.caps] == []
	[1 | m := largest.memory; m > profile.memory; not evaluated.caps] == []

	# HPC (policies/rules/hpc): the settings of a tenant whose settings are
	# readable (hpc_defaults: false otherwise), for the checks below and the
	# modifications.
	hpc := object.get(fast.hpc_defaults, tenant, fast.hpc_defaults["*"])
	is_object(hpc)
	hpc_input := input.hpc

	# The checks whose inputs the pods of a job share (_fast_shared_silent:
	# tolerations, tenant isolation, images, HPC), unless sar-bridge proved
	# them apart for this very input (_fast_shared_proof, input.hpc.proved).
	[1 | not hpc_input.proved == true; not _fast_shared_silent(profile, tenant, hpc)] == []

	# Quota (policies/rules/quota): for a tenant with a quota
	# (input.quota.request), its rules evaluated rather than proved silent
	# (they compare a few numbers sar-bridge puts in the input). Profiles exist
	# only where nothing else of the interLink and quota rules applies to every
	# pod (an unknown restricted key, data quotas).
	[1 | input.quota.request; _ = _quota_violations[_]; not evaluated.quota] == []

	# Site rules: the site's extension packages, evaluated rather than proved
	# silent (sar-bridge keeps the fast path's tables only when every other
	# rule decision can reach is embedded: policies/fastpath.go).
	[1 | some name; _ = data.interlink.site[name].violations[_]; not evaluated[concat(".", ["site", name])]] == []

	# The evaluated rules' violations: none whose action at this front door is
	# deny.
	violations := _fast_tail

	# Modifications: billing (policies/rules/billing), default limits and the
	# tenant's HPC defaults, as _pod_annotations, _resource_limits and
	# _hpc_run_as_user.
	pod_annotations := object.union(
		object.union(
			{"interlink.io/billing-project": p |
				p := input.namespace.labels["interlink.io/billing-project"]
				is_string(p)
			},
			{"slurm-job.vk.io/flags": _hpc_flags_with_account(a) |
				a := hpc.account
				not hpc_input.sbatch.options["--account"]
			},
		),
		_site_pod_annotations,
	)
	unlimited := input.resources.unlimited
	defaults := {name: d |
		d := fast.default_limits
		some name in unlimited
	}
	run_as_user := {k: v |
		some k, v in hpc.modifications
		not input.pod.spec.securityContext.runAsUser
	}
	modifications := object.union({"pod_annotations": pod_annotations, "resource_limits": defaults}, run_as_user)
} else := {
	"allowed": allow,
	"reason": reason,
	"modifications": modifications,
	"review": _review_doc,
	"violations": _decision_violations,
}

# The fast path's checks whose inputs the pods of one job share: the subject's
# profile, the tenant and its HPC settings, the tolerations, the node's and the
# pod's tenant labels, the images and what the HPC side reads of the pod, but
# not each pod's own amounts (caps) or its quota. decision calls it unless
# sar-bridge proved it apart (_fast_shared_proof).
_fast_shared_silent(profile, tenant, hpc) if {
	fast := data.sar_bridge.precomputed.interlink.authz.fast
	evaluated := fast.evaluated
	hpc_input := input.hpc

	# Protected taints (policies/rules/protected-taints): no toleration of a
	# protected key with an operator other than Equal, nor with a value the
	# subject may not use; with protected taints, no keyless Exists toleration
	# (limit 0, else "none").
	tolerations := input.tolerations
	keyless_exists := tolerations.keyless_exists
	[1 | not keyless_exists <= fast.keyless_exists_limit; not evaluated["protected-taints"]] == []
	[1 | some key, _ in fast.protected_keys; tolerations.other[key]; not evaluated["protected-taints"]] == []
	[1 |
		some key, denied in profile.denied_tolerations
		some value, _ in tolerations.equal[key]
		denied[value]
		not evaluated["protected-taints"]
	] == []

	# Tenant isolation (policies/rules/tenant-isolation): no tenant label, node
	# label, nodeSelector or required node affinity (In) of another tenant.
	label := input.tenant_label
	[v | v := input.node.labels[label]; v != tenant; not evaluated["tenant-isolation"]] == []
	[v | v := input.pod.spec.nodeSelector[label]; v != tenant; not evaluated["tenant-isolation"]] == []
	[1 |
		terms := input.pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
		is_array(terms)
		some term in terms
		exprs := term.matchExpressions
		is_array(exprs)
		some expr in exprs
		expr.key == label
		expr.operator == "In"
		values := expr.values
		is_array(values)
		some other in values
		other != tenant
		not evaluated["tenant-isolation"]
	] == []

	# Images (policies/rules/images): every container's repository, which
	# sar-bridge normalises as _image_name does (input.images), under a prefix
	# of the tenant's entry, else of "*" (fast.image_prefixes: null where no
	# entry applies, so images are not restricted): the containers under one
	# are all of them. (Where images is in warn or audit, no entry applies
	# here.)
	images := input.images
	image_prefixes := object.get(fast.image_prefixes, tenant, fast.image_prefixes["*"])
	[1 | image_prefixes != null; not _fast_images_under(images, image_prefixes)] == []

	# HPC (policies/rules/hpc), proved silent on what sar-bridge derives from
	# the pod in Go (input.hpc). Most pods set nothing the HPC side reads (inert) or only sbatch options that could be
	# read (sbatch_only); of the rules, only the ones on sbatch options, GPUs
	# and the node's plugin's findings can then apply, and are checked here.
	# Any other pod (a flavor, mounts, uids, restricted annotations...) is
	# checked by _fast_hpc_proved.
	is_object(hpc_input.script_bound)

	# Each option one of the tenant's, or, for a subject restricted_annotations
	# grants the flags, any option but those of fast.unfree_options (--uid,
	# --gid, and the ones of _hpc_value_lists, which need a listed value).
	[1 |
		not profile.restricted["slurm-job.vk.io/flags"]
		some name, value in hpc_input.sbatch.options
		not hpc.options[name]
		not hpc.values[name][value]
	] == []

	# Restricted annotations (policies/rules/restricted-annotations): the
	# subjects it grants slurm-job.vk.io/flags may set any option but those of
	# fast.unfree_options.
	[1 |
		profile.restricted["slurm-job.vk.io/flags"]
		some name, value in hpc_input.sbatch.options
		fast.unfree_options[name]
		not hpc.values[name][value]
	] == []

	# HPC (policies/rules/hpc): GPUs without a flavor only where the plugin's
	# own choice is the tenant's (gpu_auto).
	[1 | hpc_input.gpus > 0; not input.pod.metadata.annotations["slurm-job.vk.io/flavor"]; not hpc.gpu_auto] == []

	# Only the node's plugin's findings count; most pods have none, and then
	# the node's plugin is never looked up (a tenant's open_fields are left
	# to the general rules).
	bound := hpc_input.bound_plugins
	is_array(bound)
	[1 | some p in bound; p in _hpc_plugins] == []
	[1 |
		not hpc_input.inert == true
		not hpc_input.sbatch_only == true
		not _fast_hpc_proved(profile.restricted, hpc)
	] == []
}

# _fast_shared_silent as decision calls it, on the same profile, tenant and HPC
# settings, as a document of its own: sar-bridge evaluates it before the
# decision and sets input.hpc.proved when it holds (policies/sharedproof.go),
# remembering it like a decision, so the pods of a job, whose names and
# amounts differ, prove it once. input.hpc is the bridge's: a caller's proved
# is never read.
_fast_shared_proof if {
	input.operation == "create"
	fast := data.sar_bridge.precomputed.interlink.authz.fast
	user := input.subject.username
	groups := input.subject.groups
	is_array(groups)
	profile := fast.profiles[object.get(fast.users, user, "*")][concat("", {fast.groups[g] | some g in groups})]
	tenant := input.tenant
	is_string(tenant)
	hpc := object.get(fast.hpc_defaults, tenant, fast.hpc_defaults["*"])
	is_object(hpc)
	_fast_shared_silent(profile, tenant, hpc)
}

# The rest of the HPC rules (policies/rules/hpc) and the restricted annotations
# rule on the fast path, for a pod that sets more than sbatch options: each check
# proves that a rule of hpc.rego or restricted_annotations.rego finds nothing (the
# rule named), or fails and leaves the decision to them.
# restricted is the subject's profile's (the restricted annotations it may
# use), hpc the tenant's fast.hpc_defaults entry.
_fast_hpc_proved(restricted, hpc) if {
	hpc_input := input.hpc

	# Flags that could be read (_hpc_flags_unreadable).
	[1 | is_string(hpc_input.sbatch.error)] == []

	# A flavor of the tenant's.
	[1 | v := input.pod.metadata.annotations["slurm-job.vk.io/flavor"]; not hpc.flavors[v]] == []

	# Container-runtime options readable and of the tenant's lists; host
	# paths and image roots under its prefixes (as _hpc_under: p and "/"
	# starts with a prefix as a directory); uids and gids in its ranges, 0
	# only where allow_root.
	[1 | some _, args in hpc_input.runtime; is_string(args.error)] == []
	[1 | some key, args in hpc_input.runtime; some option in args.options; not hpc.runtime[key][option]] == []
	[1 |
		some hp in hpc_input.host_paths
		p := concat("", [hp.path, "/"])
		[1 | some d, _ in hpc.mount_dirs; startswith(p, d)] == []
	] == []

	# (Each annotation read by name: the memo keys on what is read.)
	[1 |
		v := input.pod.metadata.annotations["slurm-job.vk.io/image-root"]
		[1 | p := concat("", [v, "/"]); some d, _ in hpc.image_dirs; startswith(p, d)] == []
	] == []
	[1 |
		v := input.pod.metadata.annotations["htcondor-job.knoc.io/image-root"]
		[1 | p := concat("", [v, "/"]); some d, _ in hpc.image_dirs; startswith(p, d)] == []
	] == []
	[1 | some id in hpc_input.ids; id.value == 0; not hpc.allow_root] == []
	[1 |
		some id in hpc_input.ids
		id.value != 0
		[1 | some [lo, hi] in hpc.id_ranges[id.kind]; lo <= id.value; id.value <= hi] == []
	] == []

	# Nothing Go refused (words), no HTCondor host mode unless allowed.
	[1 | some _ in hpc_input.words] == []
	[1 | hpc_input.host_mode == true; not hpc.htcondor_host_mode; "htcondor" in _hpc_plugins] == []

	# Restricted annotations (policies/rules/restricted-annotations): the shell
	# annotations only where restricted_annotations grants them to the
	# subject, or pod-ip is an address, or the Virtual Kubelet wrote
	# wstunnel-client-commands (its mesh pre-exec is left to the general
	# rules).
	[1 | _ = input.pod.metadata.annotations["slurm-job.vk.io/pre-exec"]; not restricted["slurm-job.vk.io/pre-exec"]] == []
	[1 | _ = input.pod.metadata.annotations["slurm-job.vk.io/mpi-flags"]; not restricted["slurm-job.vk.io/mpi-flags"]] == []
	[1 |
		_ = input.pod.metadata.annotations["interlink.eu/wstunnel-client-commands"]
		not restricted["interlink.eu/wstunnel-client-commands"]
		not hpc_input.writers["interlink.eu/wstunnel-client-commands"] == "vk"
	] == []
	[1 |
		_ = input.pod.metadata.annotations["interlink.eu/pod-ip"]
		not hpc_input.pod_ip.valid == true
		not restricted["interlink.eu/pod-ip"]
	] == []
}

# Review reason first (it is the root cause when the SAR refused), then the
# policy's own messages in a stable order; only what denies (a rule in warn or
# audit allows, and says so in violations).
reason := _review_reason if {
	allow
} else := concat("; ", array.concat(_review_deny_part, [m | some m in sort(deny); not m in _review_deny_part]))

_review_deny_part := [] if {
	count(_review_part) == 0
} else := _review_part if {
	_action("review") == "deny"
} else := []

# All deny messages: the review refusal and every violation of a rule whose
# action here is deny.
deny contains msg if {
	some msg in _review_deny_part
}

deny contains msg if {
	some [rule, msg] in _named_violations
	_action(rule) == "deny"
}

default modifications := {"pod_annotations": {}, "resource_limits": {}}

modifications := object.union(
	{
		"pod_annotations": _pod_annotations,
		"resource_limits": _resource_limits,
	},
	_hpc_run_as_user,
) if {
	input.operation == "create"
}

# ---------------------------------------------------------------------------
# Data-only documents, computed once per load
# ---------------------------------------------------------------------------

# Images (policies/rules/images) on the fast path: every member of images
# (input.images) names a repository under one of prefixes ({prefix: true},
# each ending in "/", as _image_prefixes lists them): the members under one
# are all of them.
_fast_images_under(images, prefixes) if {
	is_array(images)
	count({i |
		some i, c in images
		repository := c.repository
		is_string(repository)
		name := concat("", [repository, "/"])
		some p, _ in prefixes
		startswith(name, p)
	}) == count(images)
}

# The fast path's violations: none where no rule is in warn or audit, and
# else _fast_violations (undefined where one denies).
_fast_tail := [] if {
	not data.sar_bridge.precomputed.interlink.authz.fast.relaxed
} else := _fast_violations(data.sar_bridge.precomputed.interlink.authz.fast.evaluated)

# The fast path's violations where some rule is in warn or audit: those of
# the rules it evaluates (evaluated), named as _rule_violations names them
# (_violations_of),
# each with its action at this front door, and none denying (undefined: the
# general rules decide).
_fast_violations(evaluated) := [{"rule": r, "message": m, "action": a} | some [r, m, a] in sort(acted)] if {
	acted := {[r, m, _action(r)] | some r, _ in evaluated; some m in _violations_of(r)}
	[1 | some [_, _, "deny"] in acted] == []
}

# The rules in warn or audit at some front door, which the fast path
# evaluates, but hpc and restricted-annotations (always proved there).
_pre_evaluated := {rule: true |
	enforcement := data.interlink.enforcement
	is_object(enforcement)
	some rule, setting in enforcement
	_pre_relaxes(setting)
	not rule in {"hpc", "restricted-annotations", "review", "interlink.authz"}
}

_pre_relaxes(setting) if setting in {"warn", "audit"}

_pre_relaxes(setting) if {
	is_object(setting)
	some action in setting
	action in {"warn", "audit"}
}

# The document sar-bridge precomputes: _pre_general plus "fast", the tables
# of the fast path, which are only worth building once per load (so the
# fast path is taken only where they were precomputed).
_precompute := object.union(_pre_general, {"fast": object.union(
	{
		"groups": _pre_group_codes,
		"users": {u: concat("", ["user:", u]) | some u in _pre_named_users},
		"profiles": _pre_profiles,
		"protected_keys": _pre_general.protected_keys,
		"keyless_exists_limit": _pre_keyless_exists_limit,
		"hpc_defaults": _pre_hpc_defaults,
		"unfree_options": {name: true | some name in (_hpc_never | {n | some n, _ in _hpc_value_lists})},
		"image_prefixes": _pre_image_prefixes,
		"evaluated": _pre_evaluated,
		"relaxed": count(_pre_evaluated) > 0,
	},
	{"default_limits": d | d := _pre_general.default_limits},
)})

# The image prefixes of each tenant data.interlink.image_registries names, and
# of "*" (null without its entry: images not restricted), as sets: what
# _image_prefixes lists for them ({} where the entry allows no image); "*"
# alone where images is in warn or audit (the fast path evaluates it).
_pre_image_prefixes := {"*": null} if {
	_pre_evaluated.images
} else := object.union({"*": null}, {tenant: {p: true | some p in _prefixes(entries)} |
	registries := data.interlink.image_registries
	is_object(registries)
	some tenant, entries in registries
})

# The tenants' HPC settings as the fast path reads them (the lists of hpc.rego's
# rules, its defaults as modifications), by tenant and "*"; false for a tenant
# whose settings have errors (its pods take the general rules, which refuse
# them).
_pre_hpc_defaults := object.union(
	{name: _pre_hpc_default(settings) | some name, settings in data.interlink.hpc_settings._precompute.tenants},
	{name: false |
		some name, _ in data.interlink.hpc_settings._precompute.tenants
		_pre_hpc_failed(name)
	},
)

# A prefix as a directory, ending in "/": a path p is under it (_hpc_path_under)
# when p and "/" starts with it.
_pre_dir("/") := "/"

_pre_dir(p) := concat("", [p, "/"]) if p != "/"

_pre_hpc_failed(name) if data.interlink.hpc_settings._precompute.errors[name]

_pre_hpc_failed(name) if {
	name != "*"
	data.interlink.hpc_settings._precompute.errors["*"]
}

_pre_hpc_default(settings) := object.union(
	{
		"modifications": {"run_as_user": u | u := settings.uid; is_number(u)},
		"options": {name: true |
			some name, _ in settings.sbatch_options
			not name in _hpc_never
			not _hpc_value_lists[name]
		},
		"values": {name: settings[list] | some name, list in _hpc_value_lists},
		"gpu_auto": settings.gpu_auto,
		"flavors": settings.flavors,
		"runtime": {key: settings[_hpc_runtime_list(key)] | some key in _hpc_runtime_annotations},
		"htcondor_host_mode": settings.htcondor_host_mode,
		"mount_dirs": {_pre_dir(p): true | some p, _ in settings.mount_prefixes},
		"image_dirs": {_pre_dir(p): true | some p, _ in settings.image_roots},
		"id_ranges": {"uid": settings.uid_ranges, "gid": settings.gid_ranges},
		"allow_root": settings.allow_root,
	},
	{"account": a | a := settings.account; is_string(a)},
)

# Every group and user data names: caps and protected taints. A subject's
# profile depends on these alone.
_pre_named_groups := ({g |
	some [g, _, _, _] in _pre_caps
} | {g |
	some p in _pre_general.protected[_][_]
	some g, _ in p.groups
}) | {g |
	some key in _restricted_annotation_keys
	gs := data.interlink.restricted_annotations[key].groups
	is_array(gs)
	some g in gs
	is_string(g)
}

# How many keyless Exists tolerations (which tolerate every taint) a pod may
# have: none where taints are protected.
_pre_keyless_exists_limit := 0 if {
	count(_pre_protected) > 0
} else := "none"

_pre_named_users := {u |
	some p in _pre_general.protected[_][_]
	some u, _ in p.users
} | {u |
	some key in _restricted_annotation_keys
	us := data.interlink.restricted_annotations[key].users
	is_array(us)
	some u in us
	is_string(u)
	u != ""
}

# The profiles of subjects: {user key: {subset key: profile}}, by "*" for a
# user data does not name, else "user:" and the name (at most 16 named
# users have profiles), and by the subset of named groups the subject is in
# (every subset of up to 8 groups, else none or one; its key is
# _pre_profile_key):
#
#   cpu, memory:         the subject's cap (its groups' largest), or "none"
#   denied_tolerations:  {key: {value: true}}, the protected taints it
#                        may not tolerate (keys it may tolerate left out)
#
# A subset with a mistyped cap has no profile (its subjects are denied by
# the general rules); nor has any, where the interLink or quota rules apply to every pod
# (an unknown restricted key, mistyped quotas).
_pre_profiles := {} if {
	count(_unknown_restricted_keys) > 0
} else := {} if {
	_ = data.interlink.quotas
} else := {ukey: {_pre_profile_key(sub): _pre_profile(user, sub) |
	some sub in _pre_group_subsets(sort(_pre_named_groups))
	count([1 | some g, _ in sub; _pre_cap_errors[g]]) == 0
} |
	some [ukey, user] in array.concat([["*", null]], [[concat("", ["user:", u]), u] | count(_pre_named_users) <= 16; some u in _pre_named_users])
}

# A named group's code, its index in sorted order and ";": codes are
# prefix-free, so the concatenation of a subset's codes in sorted order (as
# concat gives a set's) names that subset alone; the fast path finds a
# subject's profile by it.
_pre_group_codes := {g: sprintf("%d;", [i]) | some i, g in sort(_pre_named_groups)}

_pre_profile_key(sub) := concat("", {_pre_group_codes[g] | some g, _ in sub})

_pre_profile(user, sub) := {
	"cpu": _pre_profile_cap(sub, "cpu"),
	"memory": _pre_profile_cap(sub, "memory"),
	"restricted": {key: true |
		some key in _restricted_annotation_keys
		_pre_restricted_allows(key, user, sub)
	},
	"denied_tolerations": {key: denied |
		some key, values in _pre_general.protected
		denied := {value: true |
			some value, entries in values
			some e in entries
			not _pre_entry_allows(e, user, sub)
		}
		count(denied) > 0
	},
}

_pre_profile_cap(sub, res) := vs[0] if {
	vs := [c.value | some c in _pre_general.caps[res]; sub[c.group]]
	count(vs) > 0
} else := "none"

# The subject may use restricted annotation key (restricted_annotations.rego's
# _restricted_allowed); a user "*" (null) is named by no list.
_pre_restricted_allows(key, user, _) if {
	is_string(user)
	us := data.interlink.restricted_annotations[key].users
	is_array(us)
	user in us
}

_pre_restricted_allows(key, _, sub) if {
	gs := data.interlink.restricted_annotations[key].groups
	is_array(gs)
	some g in gs
	sub[g]
}

_pre_entry_allows(e, user, _) if e.users[user]

_pre_entry_allows(e, _, sub) if {
	some g, _ in sub
	e.groups[g]
}

_pre_group_subsets(groups) := [{g: true | some j, g in groups; bits.and(mask, bits.lsh(1, j)) != 0} |
	count(groups) <= 8
	some mask in numbers.range(0, bits.lsh(1, count(groups)) - 1)
] if {
	count(groups) <= 8
} else := array.concat([{}], [{g: true} | some g in groups])

# _static and _pre_general, the part of the precomputed document the general rules
# read, are in authz_helpers.rego (the rule files read them); the caps and protected
# taints documents they are built from are the rules' own (policies/rules/caps,
# policies/rules/protected-taints).

# ---------------------------------------------------------------------------
# Violations: the built-in rules and the site rules
# ---------------------------------------------------------------------------

# The built-in rules, by name, each in its own document and file
# (policies/rules/<name>/ has its Rego, its tests and its samples, decided three
# ways by TestSamples): caps, protected taints, tenant isolation, restricted
# annotations and images (through _interlink_violations), quota, HPC. The shared
# input helpers are in authz_helpers.rego.
violations contains msg if {
	some msg in _caps_violations
}

violations contains msg if {
	some msg in _protected_taints_violations
}

violations contains msg if {
	some msg in _tenant_isolation_violations
}

violations contains msg if {
	some msg in _interlink_violations
}

violations contains msg if {
	some msg in _quota_violations
}

violations contains msg if {
	some msg in _hpc_violations
}

# Site rules: a site's own rules, in extension packages (README, "Writing
# policies"): package interlink.site.<name> may define violations (a set of
# messages, each refusing the pod) and pod_annotations (an object merged into
# modifications.pod_annotations). The fast path evaluates them too, so they
# keep it; rules added to this package instead turn it off (still counted).
violations contains msg if {
	some name
	some m in data.interlink.site[name].violations
	msg := _message(m)
}

# ---------------------------------------------------------------------------
# Enforcement: every violation named by its rule, each rule's action from data
# ---------------------------------------------------------------------------

# Every violation as [rule, message]: the built-in rules by their directory
# name under policies/rules/, a site package interlink.site.<name> as
# site.<name>, and a message added to violations in this package by a site
# (docs/policies.md, "Rules added to the policy's own package") as
# interlink.authz.
_named_violations := set() if {
	# Every rule's message is in violations: none there, none anywhere (the cost of
	# naming them is left to pods that have some).
	count(violations) == 0
} else := _rule_violations | {["interlink.authz", msg] |
	some msg in violations
	not _rule_messages[msg]
}

_rule_violations := {[rule, m] |
	some rule in array.concat(_builtin_rules, [concat(".", ["site", name]) | some name, _ in data.interlink.site])
	some m in _violations_of(rule)
}

# The rules that add to violations, by name; each rule's messages.
_builtin_rules := ["caps", "protected-taints", "tenant-isolation", "restricted-annotations", "images", "quota", "hpc"]

_violations_of("caps") := _caps_violations

_violations_of("protected-taints") := _protected_taints_violations

_violations_of("tenant-isolation") := _tenant_isolation_violations

_violations_of("restricted-annotations") := _restricted_annotations_violations

_violations_of("images") := _images_violations

_violations_of("quota") := _quota_violations

_violations_of("hpc") := _hpc_violations

_violations_of(rule) := {_message(m) | some m in data.interlink.site[name].violations} if {
	startswith(rule, "site.")
	name := substring(rule, 5, -1)
}

_rule_messages := {m | some [_, m] in _rule_violations}

# The action of a rule at this front door (input.front_door: relay, admission,
# data_api): data.interlink.enforcement[rule] is an action for every front
# door, or an object of actions by front door with a "default" for the others.
# sar-bridge checks the data at load (policies/enforcement.go); anything but
# warn or audit is deny.
_action(rule) := a if {
	a := _action_setting(rule)
	a in {"warn", "audit"}
} else := "deny"

_action_setting(rule) := a if {
	a := data.interlink.enforcement[rule][input.front_door]
} else := a if {
	a := data.interlink.enforcement[rule]["default"]
} else := a if {
	a := data.interlink.enforcement[rule]
	is_string(a)
}

# The decision's violations: every violation with its rule and action, sorted
# by rule, then message; the review's refusal is rule review; a message a site
# added to deny directly always denies (rule interlink.authz).
_decision_violations := [] if {
	count(_named_violations) == 0
	count(_review_part) == 0
	count(deny) == 0
} else := [{"rule": r, "message": m, "action": a} | some [r, m, a] in sort(_acted_violations)]

_acted_violations := ({[r, m, _action(r)] | some [r, m] in _named_violations} | {["review", m, _action("review")] | some m in _review_part}) | {["interlink.authz", m, "deny"] |
	some m in deny
	not m in _review_part
	not _named_messages[m]
}

_named_messages := {m | some [_, m] in _named_violations}

# A message as text: a site's message that is not a string still refuses.
_message(m) := m if is_string(m)

else := sprintf("%v", [m])

# The site's annotations; two sites setting one key to different values is an
# evaluation error (no decision, never an allow).
_site_pod_annotations := {k: v |
	some name
	some k, v in data.interlink.site[name].pod_annotations
}

# ---------------------------------------------------------------------------
# Modifications: billing (policies/rules/billing), default limits, HPC defaults
# ---------------------------------------------------------------------------

# The billing project and the tenant's HPC defaults (hpc.rego), then the site's
# annotations (which win on a shared key).
_pod_annotations := object.union(object.union(_billing_annotation, _hpc_pod_annotations), _site_pod_annotations)

# Iterate a set of names so duplicate container names cannot produce a
# conflicting object key. An explicit null or {} counts as "no limits";
# anything else is the caller's choice and is left alone.
_resource_limits := {name: defaults |
	some name in {name |
		some c in _all_containers
		name := c.name
		is_string(name)
		name != "" # a synthetic "#i" name would patch nothing
		count([1 | l := c.resources.limits; l != null; l != {}]) == 0
	}
} if {
	defaults := _static.default_limits
} else := {}
