package system.log

# The default decision log mask of sar-bridge, applied by OPA's decision log plugin to
# every event before it leaves the process. The event's input is the decision's input,
# and several parts of a pod can carry credentials:
#
#   - env values of containers, init containers and ephemeral containers: removed;
#   - annotations: interLink's mesh writes the WireGuard private key into
#     slurm-job.vk.io/pre-exec and interlink.eu/wireguard-client-snippet and the
#     wstunnel password into interlink.eu/wstunnel-client-commands (the rathole client
#     key into interlink.eu/rathole-client-commands), and kubectl keeps a copy of the
#     whole pod, env values included, in last-applied-configuration. Their values, and
#     the value of any annotation whose key or value looks like a credential, are
#     replaced by the marker;
#   - command and args elements (and the exec commands of probes and lifecycle hooks)
#     that carry a credential: `--password=x` becomes `--password=**masked**`, the
#     element after a bare credential flag (`--token`, `abc`) becomes the marker, and
#     any other element that looks like a credential (a shell script holding one)
#     becomes the marker whole;
#   - probe and lifecycle httpGet header values whose name or value looks like a
#     credential, the same annotation rules for the namespace's annotations and for the
#     pod annotations a decision's result adds, and what input.hpc read from the pod
#     (sbatch option values, words and parse errors) that looks like a credential.
#
# Replaced values keep their place (keys stay, array elements are replaced, never
# deleted, so indices do not shift) and hold the marker, so the event says what was
# masked; OPA lists the replaced paths in the event's `masked`, the removed ones in
# `erased`. OPA's mask paths cannot name a key holding a slash, so annotations are
# replaced by a copy of the whole object with the sensitive values masked.
#
# A bundle (or --policies) adds its own paths with more `mask contains` rules, and can
# extend this mask through its partial sets: `secret_annotations contains "key"` masks
# one more annotation, `credential_patterns contains "regexp"` adds to what looks like
# a credential (RE2 syntax, matched case-insensitively). OPA applies removals before
# upserts, so a bundle's removal of the annotations would be undone by the masked copy:
# a bundle that wants annotations gone whole sets `drop_annotations := true`.

# The value masked strings and elements are replaced by.
marker := "**masked**"

# Annotations whose values are scripts or configurations that carry credentials.
secret_annotations contains "kubectl.kubernetes.io/last-applied-configuration"

secret_annotations contains "slurm-job.vk.io/pre-exec"

secret_annotations contains "interlink.eu/wireguard-client-snippet"

secret_annotations contains "interlink.eu/wstunnel-client-commands"

secret_annotations contains "interlink.eu/rathole-client-commands"

# What looks like a credential, in an annotation's key or value, a flag's name, an
# element of a command or a header: regular expressions, matched case-insensitively
# anywhere in the string. `private[-_. ]?key` covers WireGuard's `PrivateKey =` and PEM's
# `BEGIN ... PRIVATE KEY`.
credential_patterns contains p if {
	some p in {
		`passw(or)?d`, `passphrase`, `secret`, `token`, `api[-_.]?key`, `private[-_. ]?key`,
		`access[-_.]?key`, `credential`, `authorization`, `bearer`,
	}
}

# Credentials in a URL's user info: scheme://user:password@host.
_url_userinfo := `[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]*@`

_credential_re := sprintf("(?i)(%s|%s)", [concat("|", credential_patterns), _url_userinfo])

# A flag naming a credential with no value of its own: its value is the next element.
_credential_flag_re := sprintf(`(?i)^-{1,2}[a-z0-9_.-]*(%s)[a-z0-9_.-]*$`, [concat("|", credential_patterns)])

# A name=value (or name:value) element whose name names a credential: group 1 is what
# is kept, the name and the separator.
_credential_assignment_re := sprintf(`(?i)^(-{0,2}[a-z0-9_.-]*(%s)[a-z0-9_.-]*[=:])`, [concat("|", credential_patterns)])

default drop_annotations := false

container_kinds := ["containers", "initContainers", "ephemeralContainers"]

# Env values, removed.
mask contains sprintf("/input/pod/spec/%s/%d/env/%d/value", [kind, i, j]) if {
	some kind in container_kinds
	some i, j
	input.input.pod.spec[kind][i].env[j].value
}

# Annotations: the object is replaced by a copy with the sensitive values masked, when
# one is (or removed whole, with drop_annotations).
_annotation_holders := {
	"/input/pod/metadata/annotations": ["input", "pod", "metadata", "annotations"],
	"/input/namespace/annotations": ["input", "namespace", "annotations"],
	"/result/modifications/pod_annotations": ["result", "modifications", "pod_annotations"],
}

mask contains {"op": "upsert", "path": path, "value": _masked_annotations(annotations)} if {
	not drop_annotations
	some path, ref in _annotation_holders
	annotations := object.get(input, ref, null)
	is_object(annotations)
	some k, v in annotations
	_secret_annotation(k, v)
}

mask contains path if {
	drop_annotations
	some path, ref in _annotation_holders
	is_object(object.get(input, ref, null))
}

_masked_annotations(annotations) := {k: _masked_annotation(k, v) | some k, v in annotations}

_masked_annotation(k, v) := marker if _secret_annotation(k, v)

else := v

_secret_annotation(k, _) if k in secret_annotations

_secret_annotation(k, _) if _credential_text(k)

_secret_annotation(_, v) if _credential_text(v)

_credential_text(s) if {
	is_string(s)
	regex.match(_credential_re, s)
}

# Command and args, read as one command line (the kubelet appends args to command, so a
# flag ending command names the first element of args).
mask contains {"op": "upsert", "path": path, "value": masked} if {
	some kind in container_kinds
	some i
	c := input.input.pod.spec[kind][i]
	command := _array_at(c, "command")
	args := _array_at(c, "args")
	line := array.concat(command, args)
	some j, _ in line
	masked := _masked_element(line, j)
	path := _line_path(kind, i, count(command), j)
}

_array_at(obj, key) := obj[key] if is_array(obj[key])

else := []

_line_path(kind, i, n, j) := sprintf("/input/pod/spec/%s/%d/command/%d", [kind, i, j]) if j < n

else := sprintf("/input/pod/spec/%s/%d/args/%d", [kind, i, j - n])

# Probes and lifecycle hooks: their exec commands as command lines, their httpGet
# header values by name or value.
_hooks := [["livenessProbe"], ["readinessProbe"], ["startupProbe"], ["lifecycle", "postStart"], ["lifecycle", "preStop"]]

mask contains {"op": "upsert", "path": path, "value": masked} if {
	some kind in container_kinds
	some i
	c := input.input.pod.spec[kind][i]
	some hook in _hooks
	command := object.get(c, array.concat(hook, ["exec", "command"]), null)
	is_array(command)
	some j, _ in command
	masked := _masked_element(command, j)
	path := sprintf("/input/pod/spec/%s/%d/%s/exec/command/%d", [kind, i, concat("/", hook), j])
}

mask contains {"op": "upsert", "path": path, "value": marker} if {
	some kind in container_kinds
	some i
	c := input.input.pod.spec[kind][i]
	some hook in _hooks
	headers := object.get(c, array.concat(hook, ["httpGet", "httpHeaders"]), null)
	is_array(headers)
	some j, h in headers
	_secret_annotation(h.name, h.value)
	path := sprintf("/input/pod/spec/%s/%d/%s/httpGet/httpHeaders/%d/value", [kind, i, concat("/", hook), j])
}

# The element j of a command line, masked; undefined when it carries no credential.
_masked_element(line, j) := marker if {
	j > 0
	_credential_flag(line[j - 1])
} else := concat("", [m[1], marker]) if {
	not _credential_flag(line[j])
	is_string(line[j])
	some m in regex.find_all_string_submatch_n(_credential_assignment_re, line[j], 1)
} else := marker if {
	not _credential_flag(line[j])
	_credential_text(line[j])
}

_credential_flag(s) if {
	is_string(s)
	regex.match(_credential_flag_re, s)
}

# input.hpc is read from the pod: words errors quote the values they refuse, sbatch's
# options are the flags annotation's values, the errors may quote what they could not
# read. The options and runtime objects are keyed by names OPA's paths may not reach
# (an annotation's key), so they are replaced by masked copies.
mask contains {"op": "upsert", "path": sprintf("/input/hpc/words/%d/error", [i]), "value": marker} if {
	some i, w in input.input.hpc.words
	_credential_text(w.error)
}

mask contains {"op": "upsert", "path": "/input/hpc/sbatch/options", "value": masked} if {
	options := input.input.hpc.sbatch.options
	some value in options
	_credential_text(value)
	masked := {k: _masked_string(v) | some k, v in options}
}

mask contains {"op": "upsert", "path": "/input/hpc/sbatch/error", "value": marker} if {
	_credential_text(input.input.hpc.sbatch.error)
}

mask contains {"op": "upsert", "path": "/input/hpc/runtime", "value": masked} if {
	runtime := input.input.hpc.runtime
	some read in runtime
	_credential_text(read.error)
	masked := {k: _masked_runtime(r) | some k, r in runtime}
}

_masked_string(s) := marker if _credential_text(s)

else := s

_masked_runtime(r) := object.union(r, {"error": marker}) if _credential_text(r.error)

else := r
