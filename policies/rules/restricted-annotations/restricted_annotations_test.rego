# Restricted annotations (policies/rules/restricted-annotations): its tests, in the package of interLink's
# rules' tests, whose fixtures (base, annotated, ...) are in policies/rego/interlink_test.rego.
package interlink.interlink_test

import data.interlink.authz

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
