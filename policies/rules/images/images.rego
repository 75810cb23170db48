package interlink.authz

# Images (policies/rules/images): image registries per tenant, configured by
# data.interlink.image_registries (docs/policies.md):
#
#   image_registries: {tenant or "*": [registry or repository prefix, ...]}
#
# Cost, as in authz.rego: the rule tests the operation first, then fails at its
# first lookup when nothing is configured. authz.rego's fast path does not run
# it: it compares input.images, the repositories sar-bridge normalises in Go
# with this rule's grammar (policies/images.go, kept the same by a test), with
# each tenant's prefixes precomputed as sets (_pre_image_prefixes).
#
# With the restricted annotations rule, it is what interLink's rules add to
# violations through _interlink_violations: a policy directory's interlink.rego
# replaces both files (docs/policies.md, "Replacing a file").
_interlink_violations contains msg if {
	some msg in _images_violations
}

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
	msg := sprintf("%s %q %s a registry allowed for tenant %q (subject %q; allowed: %s)", [kind, _interlink_container_name(c, i), _image_phrase(image), _tenant, _subject_name, _image_allowed_list])
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
