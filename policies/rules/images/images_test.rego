# Images (policies/rules/images): its tests, in the package of interLink's
# rules' tests, whose fixtures (base, annotated, ...) are in policies/rego/interlink_test.rego.
package interlink.interlink_test

import data.interlink.authz

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
