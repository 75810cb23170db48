package interlink.authz_test

import data.interlink.authz

# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

sa := "system:serviceaccount:team-a:runner"

team_group := "system:serviceaccounts:team-a"

review_ok := {
	"allowed": true,
	"denied": false,
	"reason": "RBAC: allowed by RoleBinding \"team-a/runner\"",
	"attributes": [{"namespace": "team-a", "verb": "create", "group": "interlink.io", "resource": "pods", "name": ""}],
}

subject := {
	"username": sa,
	"uid": "",
	"groups": ["system:serviceaccounts", team_group, "system:authenticated"],
	"extra": {},
}

main_container := {"name": "main", "image": "busybox"}

base := {
	"operation": "create",
	"pod": {
		"apiVersion": "v1",
		"kind": "Pod",
		"metadata": {"name": "p", "namespace": "team-a"},
		"spec": {"containers": [main_container]},
	},
	"subject": subject,
	"tenant": "tenant-a",
	"tenant_label": "interlink.io/tenant",
	"group": "interlink.io",
	"namespace": {"name": "team-a", "labels": {}, "annotations": {}},
	"node": {
		"name": "vk-a",
		"found": true,
		"labels": {"interlink.io/tenant": "tenant-a"},
		"taints": [],
		"allocatable": {"cpu": "8", "memory": "32Gi"},
	},
	"review": review_ok,
	"hpc": inert_hpc,
}

# input.hpc of a pod that sets nothing the HPC side reads (policies/hpc.go).
inert_hpc := {"inert": true, "sbatch_only": false, "runtime": {}, "host_paths": [], "ids": [], "words": [], "host_mode": false, "gpus": 0, "flavor_sized": [], "script_bound": {"slurm": [], "htcondor": []}, "bound_plugins": []}

# with_spec merges extra fields into the base pod spec.
with_spec(extra) := object.union(base, {"pod": object.union(base.pod, {"spec": object.union(base.pod.spec, extra)})})

# one_container builds a create input whose only container has resources r.
one_container(r) := with_spec({"containers": [{"name": "main", "image": "busybox", "resources": r}]})

limits := {
	team_group: {"cpu": "4", "memory": "8Gi"},
	"system:authenticated": {"cpu": "2000m", "memory": "16384Mi"},
	"some-other-group": {"cpu": "100", "memory": "1Ti"},
}

protected := [{
	"key": "hpc.example/reserved",
	"value": "gpu",
	"allowed_users": [sa],
	"allowed_groups": ["gpu-users"],
}]

other_subject := {"username": "alice", "uid": "", "groups": ["system:authenticated"], "extra": {}}

gpu_group_subject := {"username": "bob", "uid": "", "groups": ["system:authenticated", "gpu-users"], "extra": {}}

tol(t) := with_spec({"tolerations": [t]})

# ---------------------------------------------------------------------------
# Baseline (each rule's own tests are in policies/rules/<name>/, in this
# package: they share these fixtures)
# ---------------------------------------------------------------------------

test_plain_create_allowed if {
	authz.allow with input as base
	authz.decision == {
		"allowed": true,
		"reason": review_ok.reason,
		"modifications": {"pod_annotations": {}, "resource_limits": {}},
		"review": review_ok,
		"violations": [],
	} with input as base
	count(authz.deny) == 0 with input as base
}

test_violations_only_reason_when_review_allowed if {
	inp := with_spec({"nodeSelector": {"interlink.io/tenant": "tenant-b"}})
	authz.decision.reason == "nodeSelector interlink.io/tenant=tenant-b selects tenant \"tenant-b\", not the pod's tenant \"tenant-a\"" with input as inp
}

# Tenant isolation's tests (policies/rules/tenant-isolation).
node_b := {"name": "vk-b", "found": true, "labels": {"interlink.io/tenant": "tenant-b"}, "taints": []}

# ---------------------------------------------------------------------------
# Modifications: default limits (billing: policies/rules/billing)
# ---------------------------------------------------------------------------

default_limits := {"cpu": "1", "memory": "1Gi"}

test_mod_default_limits_for_containers_without_limits if {
	inp := with_spec({
		"containers": [
			{"name": "bare"},
			{"name": "requests-only", "resources": {"requests": {"cpu": "1"}}},
			{"name": "limited", "resources": {"limits": {"cpu": "1"}}},
			{"name": "empty-limits", "resources": {"limits": {}}},
			{"image": "unnamed"},
		],
		"initContainers": [{"name": "init"}],
	})
	authz.decision.modifications.resource_limits == {
		"bare": default_limits,
		"requests-only": default_limits,
		"empty-limits": default_limits,
		"init": default_limits,
	} with input as inp
		with data.interlink.default_limits as default_limits
}

test_mod_no_default_limits_configured if {
	authz.decision.modifications.resource_limits == {} with input as base
	authz.decision.modifications.resource_limits == {} with input as base with data.interlink.default_limits as {}
}

test_mod_duplicate_container_names_no_conflict if {
	inp := with_spec({"containers": [{"name": "x"}], "initContainers": [{"name": "x"}]})
	authz.decision.modifications.resource_limits == {"x": default_limits} with input as inp
		with data.interlink.default_limits as default_limits
}

test_mod_empty_for_delete_and_status if {
	inp := object.union(base, {"namespace": {"labels": {"interlink.io/billing-project": "proj-42"}}})
	every op in ["delete", "status"] {
		m := authz.decision.modifications with input as object.union(inp, {"operation": op})
			with data.interlink.default_limits as default_limits
		m == {"pod_annotations": {}, "resource_limits": {}}
	}
}

# ---------------------------------------------------------------------------
# delete / status follow the review alone
# ---------------------------------------------------------------------------

bad_pod := object.union(
	with_spec({
		"containers": [{"name": "main", "resources": {"limits": {"cpu": "64"}}}],
		"tolerations": [{"operator": "Exists"}],
		"nodeSelector": {"interlink.io/tenant": "tenant-b"},
	}),
	{"node": node_b},
)

test_bad_pod_denied_on_create if {
	d := authz.deny with input as bad_pod with data.interlink.limits as limits with data.interlink.protected_taints as protected
	count(d) == 4
}

test_delete_and_status_follow_review if {
	every op in ["delete", "status"] {
		inp := object.union(bad_pod, {"operation": op})
		d := authz.decision with input as inp with data.interlink.limits as limits with data.interlink.protected_taints as protected
		d.allowed == true
		d.reason == review_ok.reason
		count(authz.deny) == 0 with input as inp with data.interlink.limits as limits with data.interlink.protected_taints as protected
	}
}

test_delete_denied_by_review if {
	inp := object.union(base, {"operation": "delete", "review": {"allowed": false, "reason": "RBAC: cannot delete"}})
	authz.decision.allowed == false with input as inp
	authz.decision.reason == "RBAC: cannot delete" with input as inp
}

# ---------------------------------------------------------------------------
# Robustness: always defined, never an error
# ---------------------------------------------------------------------------

empty_decision := {
	"allowed": false,
	"reason": "subject access review did not allow the request",
	"modifications": {"pod_annotations": {}, "resource_limits": {}},
	"review": null,
	"violations": [{"rule": "review", "message": "subject access review did not allow the request", "action": "deny"}],
}

test_no_input_defined if {
	authz.allow == false
	authz.decision == empty_decision
}

test_empty_input_defined if {
	authz.allow == false with input as {}
	authz.decision == empty_decision with input as {}
}

test_non_object_input_defined if {
	every inp in ["x", 1, [], null, true] {
		authz.allow == false with input as inp
		authz.decision.allowed == false with input as inp
	}
}

test_odd_field_types_defined if {
	odd := {
		"operation": "create",
		"pod": {"spec": {
			"containers": [1, "x", null, {"name": 5, "resources": "big"}, {"resources": {"limits": {"cpu": null, "memory": ["1Gi"]}}}],
			"initContainers": "none",
			"tolerations": [1, {"key": 5, "operator": "Exists"}, {"key": "k", "operator": 7}],
			"nodeSelector": "tenant-b",
			"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [1, {"matchExpressions": "x"}]}}},
		}},
		"subject": {"username": 7, "groups": "system:authenticated"},
		"tenant": 3,
		"tenant_label": ["x"],
		"namespace": "team-a",
		"node": "vk",
		"review": {"allowed": true, "reason": 12},
	}
	d := authz.decision with input as odd
		with data.interlink.limits as [1]
		with data.interlink.protected_taints as {"key": "x"}
		with data.interlink.default_limits as "1"
	is_boolean(d.allowed)
	is_string(d.reason)
	is_object(d.modifications)
}

test_odd_pod_with_caps_and_taints_defined if {
	odd := object.union(base, {"pod": {"spec": {
		"containers": [{"resources": {"limits": {"memory": ["1Gi"]}}}, {"name": "m", "resources": {"requests": {"cpu": true}}}],
		"tolerations": [{"key": 5, "operator": "Exists"}],
	}}})
	d := authz.decision with input as odd
		with data.interlink.limits as {team_group: "4", "system:authenticated": {"memory": "1Gi", "cpu": "1"}}
		with data.interlink.protected_taints as [1, {"key": 2}, {"key": "k"}]
	d.allowed == false
	contains(d.reason, "container \"#0\" has an invalid memory quantity")
	contains(d.reason, "container \"m\" has an invalid cpu quantity true")
	contains(d.reason, "toleration without key")
}

test_pod_without_spec_allowed_by_review if {
	inp := object.union(base, {"pod": {}})
	authz.allow with input as inp with data.interlink.limits as limits with data.interlink.protected_taints as protected
}

test_allow_matches_decision if {
	every inp in [base, bad_pod, {}] {
		a := authz.allow with input as inp with data.interlink.limits as limits
		d := authz.decision with input as inp with data.interlink.limits as limits
		a == d.allowed
	}
}

# ---------------------------------------------------------------------------
# Rules the issue-19 rewrite touched
# ---------------------------------------------------------------------------

test_non_create_skips_violations if {
	every op in ["delete", "status", "Create"] {
		count(authz.violations) == 0 with input as object.union(bad_pod, {"operation": op})
			with data.interlink.limits as limits
			with data.interlink.protected_taints as protected
	}
}

# ---------------------------------------------------------------------------
# Precomputed document and fast path (issue 19)
# ---------------------------------------------------------------------------

# The fast path reads input.resources and input.tolerations, which
# sar-bridge adds to every pod decision (policies/resources.go,
# policies/tolerations.go): bridged(inp) adds them the same way.
bridged(inp) := object.union(inp, {"resources": bridge_resources(inp.pod), "tolerations": bridge_tolerations(inp.pod), "images": bridge_images(inp.pod)})

# input.images as policies.PodImages makes it (for containers; the tests'
# pods have no others): each repository normalised by the rule's own
# _image_name, null where it is undefined.
bridge_images(pod) := [{"kind": "container", "name": object.get(c, "name", ""), "repository": bridge_repository(c)} | some c in pod.spec.containers]

bridge_repository(c) := r if {
	r := authz._image_name(c.image)
} else := null

bridge_tolerations(pod) := {"equal": by_value, "other": other, "keyless_exists": count(keyless)} if {
	ts := [t | some t in bridge_toleration_list(pod); is_object(t)]
	other := {k: true | some t in ts; k := t.key; is_string(k); bridge_operator(t) != "Equal"}
	by_value := {k: {v: true | some t2 in ts; t2.key == k; bridge_operator(t2) == "Equal"; v := bridge_value(t2)} |
		some t in ts
		k := t.key
		is_string(k)
		bridge_operator(t) == "Equal"
	}
	keyless := [1 | some t in ts; t.operator == "Exists"; not bridge_keyed(t)]
} else := null

bridge_toleration_list(pod) := [] if {
	object.get(pod, ["spec", "tolerations"], null) == null
	is_object(object.get(pod, "spec", {}))
} else := pod.spec.tolerations if is_array(pod.spec.tolerations)

bridge_operator(t) := op if {
	op := t.operator
	is_string(op)
	op != ""
} else := "Equal"

bridge_value(t) := v if {
	v := t.value
	is_string(v)
} else := ""

bridge_keyed(t) if {
	is_string(t.key)
	t.key != ""
}

bridge_resources(pod) := {"containers": entries, "largest": largest, "unlimited": unlimited} if {
	cs := array.concat(
		[c | some c in object.get(pod, ["spec", "containers"], [])],
		[c | some c in object.get(pod, ["spec", "initContainers"], [])],
	)
	entries := [bridge_container(c) | some c in cs]
	count(entries) == count(cs)
	largest := {res: max([v | some e in entries; v := object.union(e.requests, e.limits)[res]]) |
		some e in entries
		some res, _ in object.union(e.requests, e.limits)
	}
	unlimited := [name |
		some i, e in entries
		name := e.name
		name != ""
		e.limits == {}
		not name in [n | some j, e2 in entries; j < i; e2.limits == {}; n := e2.name]
	]
} else := null

bridge_container(c) := {"name": bridge_name(c), "limits": bridge_amounts(c, "limits"), "requests": bridge_amounts(c, "requests")}

bridge_name(c) := c.name if is_string(c.name)

else := ""

bridge_amounts(c, kind) := {} if {
	object.get(c, ["resources", kind], null) == null
} else := {res: units.parse(raw) | some res, raw in c.resources[kind]} if {
	amounts := c.resources[kind]
	is_object(amounts)
	every raw in amounts {
		is_string(raw)
		regex.match(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?[0-9]{1,3})?$`, raw)
	}
}

fast_cases := [bridged(inp) | some inp in unbridged_fast_cases]

unbridged_fast_cases := [
	base,
	one_container({"limits": {"cpu": "3500m", "memory": "12Gi"}}),
	one_container({"limits": {"cpu": "4.5"}}),
	one_container({"requests": {"cpu": "8"}}),
	one_container({"limits": {"cpu": null}, "requests": {"cpu": "5"}}),
	one_container({"limits": {"cpu": "lots"}}),
	one_container({"limits": {"cpu": 2}}),
	with_spec({"initContainers": [{"name": "setup", "resources": {"limits": {"memory": "32Gi"}}}]}),
	with_spec({"containers": [{"name": "bare"}, {"name": "limited", "resources": {"limits": {"cpu": "1"}}}]}),
	with_spec({
		"containers": [{"name": "bare"}, {"name": "bare"}, {}, {"name": "empty", "resources": {"limits": {}}}],
		"initContainers": [{"name": "bare", "resources": {"limits": null}}, {"name": "init"}],
	}),
	tol({"key": "hpc.example/reserved", "operator": "Equal", "value": "gpu"}),
	tol({"key": "hpc.example/reserved", "operator": "Exists"}),
	tol({"key": "other/taint", "operator": "Exists"}),
	tol({"operator": "Exists"}),
	object.union(tol({"key": "hpc.example/reserved", "value": "gpu"}), {"subject": other_subject}),
	object.union(tol({"key": "hpc.example/reserved", "value": "gpu"}), {"subject": gpu_group_subject}),
	with_spec({"nodeSelector": {"interlink.io/tenant": "tenant-b"}}),
	object.union(base, {"node": node_b}),
	object.union(base, {"namespace": {"labels": {"interlink.io/billing-project": "proj-42"}}}),
	object.union(base, {"review": {"allowed": false, "reason": "RBAC: denied"}}),
	bad_pod,
	tol({"key": "hpc.example/reserved", "operator": "Equal", "value": "other"}),
	object.union(tol({"key": "hpc.example/reserved", "operator": 7, "value": "gpu"}), {"subject": gpu_group_subject}),
	object.union(tol({"key": "hpc.example/reserved", "value": ["gpu"]}), {"subject": other_subject}),
	tol({"key": "", "operator": "Exists"}),
	tol({"key": 5, "operator": "Exists"}),
	tol({"key": "hpc.example/reserved", "operator": "Like"}),
	with_spec({"tolerations": [
		{"key": "hpc.example/reserved", "value": "other"},
		{"key": "hpc.example/reserved", "value": "gpu"},
	]}),
	with_spec({"tolerations": [1, {"key": "other/taint", "operator": "Exists"}]}),
	with_spec({"tolerations": {"key": "other/taint"}}),
]

# With the precomputed document in data, as sar-bridge stores it, every
# decision is the one the general rules make without it.
test_precomputed_decides_as_computed if {
	every inp in fast_cases {
		pre := authz._precompute with data.interlink.limits as limits
			with data.interlink.protected_taints as protected
			with data.interlink.default_limits as default_limits
		d := authz.decision with input as inp
			with data.interlink.limits as limits
			with data.interlink.protected_taints as protected
			with data.interlink.default_limits as default_limits
			with data.sar_bridge.precomputed.interlink.authz as pre
		d == authz.decision with input as inp
			with data.interlink.limits as limits
			with data.interlink.protected_taints as protected
			with data.interlink.default_limits as default_limits
	}
}

# The allowed create of a well-formed pod is decided by the fast path: the
# general rules, which read allow, are not consulted.
test_fast_path_decides_allowed_create if {
	pre := authz._precompute with data.interlink.limits as limits
		with data.interlink.protected_taints as protected
		with data.interlink.default_limits as default_limits
	every inp in [fast_cases[0], fast_cases[1], fast_cases[8], fast_cases[9], fast_cases[10], fast_cases[15], fast_cases[21]] {
		d := authz.decision with input as inp
			with data.interlink.limits as limits
			with data.interlink.protected_taints as protected
			with data.interlink.default_limits as default_limits
			with data.sar_bridge.precomputed.interlink.authz as pre
			with authz.allow as "general rules"
		d.allowed == true
	}
}

# Without it (the opa CLI, an OPA server), the general rules decide.
test_general_rules_without_precomputed if {
	d := authz.decision with input as base with authz.allow as "general rules"
	d.allowed == "general rules"
}

# A subject's profile key, as the fast path finds it: the codes of its
# named groups, in any order and with repeats.
profile_key(pre, groups) := concat("", {pre.fast.groups[g] | some g in groups})

# Named groups have prefix-free codes in sorted order; a subset's key is its
# codes in sorted order, whatever order and repeats the subject's groups
# come in, and groups data does not name add nothing.
test_precompute_group_codes if {
	pre := authz._precompute with data.interlink.limits as limits
		with data.interlink.protected_taints as protected
	pre.fast.groups == {"gpu-users": "0;", "some-other-group": "1;", "system:authenticated": "2;", team_group: "3;"}
	profile_key(pre, [team_group, "unnamed", "gpu-users", team_group]) == "0;3;"
	profile_key(pre, ["gpu-users", team_group]) == "0;3;"
	profile_key(pre, ["unnamed"]) == ""

	# A profile for each of the 16 subsets, under its key.
	{key | some key, _ in pre.fast.profiles["*"]} == {concat("", {code |
		some i, code in ["0;", "1;", "2;", "3;"]
		bits.and(mask, bits.lsh(1, i)) != 0
	}) |
		some mask in numbers.range(0, 15)
	}
}

test_precompute_caps_ranked if {
	pre := authz._precompute with data.interlink.limits as limits
	[c.raw | some c in pre.caps.cpu] == ["100", "4", "2000m"]
	[c.raw | some c in pre.caps.memory] == ["1Ti", "16384Mi", "8Gi"]

	# The subject of base is in two capped groups: the larger cap of each wins.
	key := profile_key(pre, ["system:authenticated", team_group, team_group])
	pre.fast.profiles["*"][key].cpu == 4
	pre.fast.profiles["*"][key].memory == 17179869184

	# In no capped group, no cap: "none" sorts after every number.
	pre.fast.profiles["*"][""].cpu == "none"
}

test_precompute_mistyped_cap_not_tabulated if {
	pre := authz._precompute with data.interlink.limits as {team_group: {"cpu": "four"}, "system:authenticated": {"cpu": "2"}}
	pre.cap_errors == {team_group: ["invalid cpu cap four configured for group \"system:serviceaccounts:team-a\""]}
	pre.fast.groups[team_group] # named, so the keys below are defined
	not pre.fast.profiles["*"][profile_key(pre, [team_group])]
	not pre.fast.profiles["*"][profile_key(pre, [team_group, "system:authenticated"])]
	pre.fast.profiles["*"][profile_key(pre, ["system:authenticated"])].cpu == 2
}

# A user data names has profiles of its own; others share "*".
test_precompute_profiles_by_user if {
	pre := authz._precompute with data.interlink.protected_taints as protected
	pre.fast.users == {sa: concat("", ["user:", sa])}
	pre.fast.profiles["*"][""].denied_tolerations == {"hpc.example/reserved": {"gpu": true}}
	pre.fast.profiles["*"][profile_key(pre, ["gpu-users"])].denied_tolerations == {}
	pre.fast.profiles[concat("", ["user:", sa])][""].denied_tolerations == {}
}

# The tenants' HPC settings for the fast path: a tenant with errors, or every
# tenant when "*" has them, has none (the general rules refuse its pods).
test_precompute_hpc_defaults if {
	pre := authz._precompute with data.interlink.hpc.tenants as {"*": {"uid": 20000, "sbatch_options": ["--time", "--uid", "--account"]}, "team-x": {"account": "proj-x", "partitions": ["cpu"]}, "bad": {"uid": "root"}}
	no_values := {"--account": {}, "--partition": {}, "--qos": {}, "--reservation": {}}
	no_runtime := {
		"slurm-job.vk.io/singularity-mounts": {}, "slurm-job.vk.io/singularity-options": {},
		"slurm-job.vk.io/enroot-mounts": {}, "slurm-job.vk.io/enroot-options": {},
		"htcondor-job.vk.io/singularity-options": {},
	}
	closed := {
		"gpu_auto": false, "flavors": {}, "runtime": no_runtime, "htcondor_host_mode": false,
		"mount_dirs": {}, "image_dirs": {}, "id_ranges": {"uid": [], "gid": []}, "allow_root": false,
	}
	pre.fast.hpc_defaults == {
		"*": object.union(closed, {"modifications": {"run_as_user": 20000}, "options": {"--time": true}, "values": no_values}),
		"team-x": object.union(closed, {
			"account": "proj-x", "modifications": {"run_as_user": 20000}, "options": {"--time": true},
			"values": object.union(no_values, {"--account": {"proj-x": true}, "--partition": {"cpu": true}}),
		}),
		"bad": false,
	}
	pre.fast.unfree_options == {"--uid": true, "--gid": true, "--account": true, "--partition": true, "--qos": true, "--reservation": true}
	dirs := authz._precompute with data.interlink.hpc.tenants as {"*": {"mount_prefixes": ["/", "/scratch/a"], "image_roots": ["/cvmfs"], "uid_ranges": [[1, 2]], "allow_root": true}}
	dirs.fast.hpc_defaults["*"].mount_dirs == {"/": true, "/scratch/a/": true}
	dirs.fast.hpc_defaults["*"].image_dirs == {"/cvmfs/": true}
	dirs.fast.hpc_defaults["*"].id_ranges == {"uid": [[1, 2]], "gid": []}
	dirs.fast.hpc_defaults["*"].allow_root == true
	broken := authz._precompute with data.interlink.hpc.tenants as {"*": {"mount_prefixes": ["scratch"]}, "team-x": {}}
	broken.fast.hpc_defaults == {"*": false, "team-x": false}
}

# Where the restricted annotations or quota rules apply to every pod, there is
# no profile, so no fast path.
test_precompute_no_profiles if {
	unknown := authz._precompute with data.interlink.restricted_annotations as {"example.org/x": {"users": ["bob"]}}
	unknown.fast.profiles == {}
	quotas := authz._precompute with data.interlink.quotas as ["tenant-a"]
	quotas.fast.profiles == {}
}

# Without input.resources, input.tolerations or, where image registries are
# set, input.images (a caller that is not sar-bridge, an amount the bridge
# could not parse, tolerations or containers that are not a list), the general
# rules decide.
test_fast_path_needs_bridged_input if {
	registries := {"tenant-a": ["ghcr.io/example", "docker.io/library/"]}
	pre := authz._precompute with data.interlink.limits as limits
		with data.interlink.protected_taints as protected
		with data.interlink.image_registries as registries
	every inp in [
		base,
		object.union(bridged(base), {"resources": null}),
		object.union(bridged(base), {"tolerations": null}),
		object.remove(bridged(base), ["tolerations"]),
		object.union(object.remove(bridged(base), ["tolerations"]), {"tolerations": {"equal": {}, "other": {}}}),
		object.union(object.remove(bridged(base), ["images"]), {"images": null}),
		object.union(object.remove(bridged(base), ["images"]), {"images": {"main": "docker.io/library/busybox"}}),
		object.remove(bridged(base), ["images"]),
	] {
		d := authz.decision with input as inp
			with data.interlink.limits as limits
			with data.interlink.protected_taints as protected
			with data.interlink.image_registries as registries
			with data.sar_bridge.precomputed.interlink.authz as pre
			with authz.allow as "general rules"
		d.allowed == "general rules"
	}
}

# The same input with input.images, as the bridge derives it for the pod's
# busybox, takes the fast path; with an image from elsewhere, the general rules.
test_fast_path_reads_input_images if {
	images_decision("docker.io/library/busybox").allowed == true
	images_decision("docker.io/library/busybox").violations == []
	images_decision("quay.io/busybox").allowed == "general rules"
	images_decision(null).allowed == "general rules"
}

images_decision(repository) := d if {
	registries := {"tenant-a": ["ghcr.io/example", "docker.io/library/"]}
	pre := authz._precompute with data.interlink.limits as limits
		with data.interlink.protected_taints as protected
		with data.interlink.image_registries as registries
	d := authz.decision with input as object.union(bridged(base), {"images": [{"kind": "container", "name": "main", "repository": repository}]})
		with data.interlink.limits as limits
		with data.interlink.protected_taints as protected
		with data.interlink.image_registries as registries
		with data.sar_bridge.precomputed.interlink.authz as pre
		with authz.allow as "general rules"
}

# ---------------------------------------------------------------------------
# Rule 8: a site's extension packages (data.interlink.site.<name>)
# ---------------------------------------------------------------------------

sites := {
	"gpu": {"violations": {"gpu pods need a project"}, "pod_annotations": {"example.org/a": "1"}},
	"audit": {"violations": [], "pod_annotations": {"example.org/b": "2", "interlink.io/billing-project": "site"}},
}

# A site's violation refuses the pod, the fast path's domain included, and
# its message is the reason.
test_site_violations_refuse if {
	pre := authz._precompute
	every precomputed in [{}, {"interlink": {"authz": pre}}] {
		d := authz.decision with input as base
			with data.interlink.site as sites
			with data.sar_bridge.precomputed as precomputed
		d.allowed == false
		d.reason == "gpu pods need a project"
	}
}

# A message that is not a string still refuses, shown as text.
test_site_violation_not_a_string if {
	d := authz.decision with input as base with data.interlink.site as {"x": {"violations": [7]}}
	d.allowed == false
	d.reason == "7"
}

# Sites' annotations join the modifications, over the billing project, on
# both paths; with no site violation the fast path still decides.
test_site_pod_annotations if {
	pre := authz._precompute
	inp := object.union(fast_cases[0], {"namespace": {"labels": {"interlink.io/billing-project": "proj-42"}}})
	no_violations := {"gpu": {"pod_annotations": sites.gpu.pod_annotations}, "audit": sites.audit}
	want := {"example.org/a": "1", "example.org/b": "2", "interlink.io/billing-project": "site"}
	fast := authz.decision with input as inp
		with data.interlink.site as no_violations
		with data.sar_bridge.precomputed.interlink.authz as pre
		with authz.allow as "general rules"
	fast.allowed == true
	fast.modifications.pod_annotations == want
	general := authz.decision with input as inp with data.interlink.site as no_violations
	general.modifications.pod_annotations == want
}

# A site's deny message counts as a violation does.
test_deny_counts if {
	d := authz.decision with input as base with authz.deny as {"site deny"}
	d.allowed == false
	d.reason == "site deny"
}

# The fast path decides a pod whose only HPC setting is sbatch options the tenant
# may use, and appends the tenant's account as the general rules do.
test_fast_path_takes_listed_sbatch_options if {
	hpc_data := {"tenants": {"*": {"sbatch_options": ["--time"], "partitions": ["cpu"], "account": "proj-a"}}}
	pre := authz._precompute with data.interlink.hpc as hpc_data
	inp := object.union(fast_cases[0], {
		"pod": {"metadata": {"annotations": {"slurm-job.vk.io/flags": "--time=1 -p cpu"}}},
		"hpc": object.union(inert_hpc, {"inert": false, "sbatch_only": true, "sbatch": {"options": {"--time": "1", "--partition": "cpu"}, "order": ["--time", "--partition"], "error": null}}),
	})
	fast := authz.decision with input as inp
		with data.interlink.hpc as hpc_data
		with data.sar_bridge.precomputed.interlink.authz as pre
		with authz.allow as "general rules"
	fast.allowed == true
	fast.modifications.pod_annotations == {"slurm-job.vk.io/flags": "--time=1 -p cpu --account=proj-a"}
	general := authz.decision with input as inp with data.interlink.hpc as hpc_data
	general.modifications == fast.modifications

	# An option not listed: the general rules decide (and refuse).
	other := object.union(inp, {"hpc": {"sbatch": {"options": {"--mail-user": "a@b"}}}})
	d := authz.decision with input as other
		with data.interlink.hpc as hpc_data
		with data.sar_bridge.precomputed.interlink.authz as pre
		with authz.allow as "general rules"
	d.allowed == "general rules"

	# Unless restricted_annotations grants the subject the flags: then any option
	# but --uid, --gid and the listed values' is the subject's to set.
	granted := {"slurm-job.vk.io/flags": {"groups": [team_group]}}
	pre_granted := authz._precompute with data.interlink.hpc as hpc_data
		with data.interlink.restricted_annotations as granted
	g := authz.decision with input as other
		with data.interlink.hpc as hpc_data
		with data.interlink.restricted_annotations as granted
		with data.sar_bridge.precomputed.interlink.authz as pre_granted
		with authz.allow as "general rules"
	g.allowed == true
	never := object.union(inp, {"hpc": {"sbatch": {"options": {"--uid": "0"}}}})
	n := authz.decision with input as never
		with data.interlink.hpc as hpc_data
		with data.interlink.restricted_annotations as granted
		with data.sar_bridge.precomputed.interlink.authz as pre_granted
		with authz.allow as "general rules"
	n.allowed == "general rules"
}

# ---------------------------------------------------------------------------
# Enforcement actions: every violation names its rule; data sets each rule's
# action (deny, warn, audit), per front door (policies/enforcement.go)
# ---------------------------------------------------------------------------

over_cap := one_container({"limits": {"cpu": "4.5", "memory": "1Gi"}})

over_cap_msg := "container \"main\" sets cpu limit 4.5 over the cap 4 for group \"system:serviceaccounts:team-a\""

other_tenant_msg := "nodeSelector interlink.io/tenant=tenant-b selects tenant \"tenant-b\", not the pod's tenant \"tenant-a\""

at_door(inp, door) := object.union(inp, {"front_door": door})

# Deny is the default: the violation is named and denies.
test_enforcement_default_deny if {
	d := authz.decision with input as at_door(over_cap, "admission") with data.interlink.limits as limits
	d.allowed == false
	d.reason == over_cap_msg
	d.violations == [{"rule": "caps", "message": over_cap_msg, "action": "deny"}]
}

# warn and audit allow; the reason is the review's; the violation says so.
test_enforcement_warn_and_audit_allow if {
	every action in ["warn", "audit"] {
		d := authz.decision with input as at_door(over_cap, "relay")
			with data.interlink.limits as limits
			with data.interlink.enforcement as {"caps": action}
		d.allowed == true
		d.reason == review_ok.reason
		d.violations == [{"rule": "caps", "message": over_cap_msg, "action": action}]
		count(authz.deny) == 0 with input as at_door(over_cap, "relay")
			with data.interlink.limits as limits
			with data.interlink.enforcement as {"caps": action}
	}
}

# Per front door: a door named takes its action, the others "default", else deny;
# an input without front_door (the opa CLI) takes the default.
test_enforcement_per_front_door if {
	enforcement := {"caps": {"default": "audit", "admission": "warn", "relay": "deny"}}
	cases := [["admission", "warn"], ["relay", "deny"], ["data_api", "audit"]]
	every c in cases {
		[door, action] := c
		d := authz.decision with input as at_door(over_cap, door)
			with data.interlink.limits as limits
			with data.interlink.enforcement as enforcement
		d.violations == [{"rule": "caps", "message": over_cap_msg, "action": action}]
		d.allowed == action != "deny"
	}
	no_door := authz.decision with input as over_cap with data.interlink.limits as limits with data.interlink.enforcement as enforcement
	no_door.violations[0].action == "audit"
	only_admission := authz.decision with input as at_door(over_cap, "relay")
		with data.interlink.limits as limits
		with data.interlink.enforcement as {"caps": {"admission": "warn"}}
	only_admission.allowed == false
}

# Anything but warn or audit denies (sar-bridge refuses such data at load).
test_enforcement_unknown_action_denies if {
	every bad in ["Warn", "off", 1, null, {"default": ["warn"]}] {
		d := authz.decision with input as at_door(over_cap, "admission")
			with data.interlink.limits as limits
			with data.interlink.enforcement as {"caps": bad}
		d.allowed == false
		d.violations[0].action == "deny"
	}
}

# Only deny counts in reason; violations list every rule, sorted by rule then message.
test_enforcement_mixed_sorted if {
	inp := at_door(object.union(over_cap, {"pod": {"spec": {"nodeSelector": {"interlink.io/tenant": "tenant-b"}}}}), "admission")
	d := authz.decision with input as inp
		with data.interlink.limits as limits
		with data.interlink.enforcement as {"caps": "warn"}
	d.allowed == false
	d.reason == other_tenant_msg
	d.violations == [
		{"rule": "caps", "message": over_cap_msg, "action": "warn"},
		{"rule": "tenant-isolation", "message": other_tenant_msg, "action": "deny"},
	]
}

# The review's refusal is rule review: deny unless data relaxes it (which
# sar-bridge accepts only with --policies.allow-relaxing-safety-rules).
test_enforcement_review if {
	inp := at_door(object.union(base, {"review": {"allowed": false, "denied": false, "reason": "RBAC: denied"}}), "admission")
	d := authz.decision with input as inp
	d.allowed == false
	d.reason == "RBAC: denied"
	d.violations == [{"rule": "review", "message": "RBAC: denied", "action": "deny"}]
	a := authz.decision with input as inp with data.interlink.enforcement as {"review": "audit"}
	a.allowed == true
	a.violations == [{"rule": "review", "message": "RBAC: denied", "action": "audit"}]
}

# A site package is site.<name>; a message added to this package's violations
# is interlink.authz (with its action), one added to deny directly always denies.
test_enforcement_site_names if {
	d := authz.decision with input as at_door(base, "admission")
		with data.interlink.site as sites
		with data.interlink.enforcement as {"site.gpu": "warn"}
	d.allowed == true
	d.violations == [{"rule": "site.gpu", "message": "gpu pods need a project", "action": "warn"}]
	own := authz.decision with input as at_door(base, "admission")
		with authz.violations as {"paused"}
		with data.interlink.enforcement as {"interlink.authz": "audit"}
	own.allowed == true
	own.violations == [{"rule": "interlink.authz", "message": "paused", "action": "audit"}]
	direct := authz.decision with input as at_door(base, "admission")
		with authz.deny as {"site deny"}
		with data.interlink.enforcement as {"interlink.authz": "audit"}
	direct.allowed == false
	direct.violations == [{"rule": "interlink.authz", "message": "site deny", "action": "deny"}]
}

# The fast path is not taken for a pod in warn (it proves no rule finds
# anything): the general rules decide, as without the precomputed tables.
test_enforcement_warn_takes_general_rules if {
	pre := authz._precompute with data.interlink.limits as limits with data.interlink.enforcement as {"caps": "warn"}
	inp := at_door(over_cap, "admission")
	d := authz.decision with input as inp
		with data.interlink.limits as limits
		with data.interlink.enforcement as {"caps": "warn"}
		with data.sar_bridge.precomputed.interlink.authz as pre
	d.allowed == true
	d.violations == [{"rule": "caps", "message": over_cap_msg, "action": "warn"}]
}

# Image registries are checked on the fast path against each tenant's prefixes,
# as sets; "*" is null without its entry (images not restricted).
test_precompute_image_prefixes if {
	none := authz._precompute
	none.fast.image_prefixes == {"*": null}
	pre := authz._precompute with data.interlink.image_registries as {"*": ["docker.io/", "ghcr.io/x"], "team-a": ["registry.example.org//", "/", 7], "team-b": "ghcr.io", "team-c": []}
	pre.fast.image_prefixes == {"*": {"docker.io/": true, "ghcr.io/x/": true}, "team-a": {"registry.example.org/": true}, "team-b": {}, "team-c": {}}
	count(pre.fast.profiles) > 0
	odd := authz._precompute with data.interlink.image_registries as ["ghcr.io"]
	odd.fast.image_prefixes == {"*": null}
}
