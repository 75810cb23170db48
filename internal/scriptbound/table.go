// Package scriptbound knows which strings of a pod, and of interLink's /create body,
// interLink's plugins write into what runs on the HPC side (job scripts, command lines,
// options), how they write each one, and whether a value is inert there.
//
// The table is an allowlist, not a list of dangers: a string whose field no row covers
// counts as written unquoted into a shell command line, so it must be a plain word.
// Rows say where a plugin quotes or escapes a value, runs it inside the container, or
// never writes it; only there may a value hold anything.
//
// Sources read (never copied): interlink-hq/interlink-slurm-plugin f8451d9
// (pkg/slurm/prepare.go, Create.go, probes.go, hooks.go), interlink-hq/
// interlink-htcondor-plugin 6f5ee3e (handles.py), interlink-hq/interLink
// (pkg/virtualkubelet/mesh.go, pkg/interlink/types.go).
package scriptbound

// Plugin names, as the node label interlink.io/plugin gives them.
const (
	SLURM    = "slurm"
	HTCondor = "htcondor"
)

// Plugins are the plugins the table describes, in its column order.
var Plugins = []string{SLURM, HTCondor}

// How is how a plugin writes a string.
type How int

const (
	// Unquoted: a word of a shell command line, or a file name in one (the default
	// for a field no row names). The value must pass the row's rule.
	Unquoted How = iota
	// DoubleQuoted: between double quotes, unescaped: the shell still expands $, `
	// and \ there, and a " ends the quotes.
	DoubleQuoted
	// Escaped: quoted by the plugin so that the shell reads it as itself (single
	// quotes with escaping), or written into a file no shell reads as code.
	Escaped
	// Parsed: read by one of the bridge's parsers, which refuses what the plugin or
	// sbatch could read differently (slurm-job.vk.io/flags, the container-runtime
	// options), and judged by the HPC rules.
	Parsed
	// Script: lines of the job script by design (pre-exec, wstunnel commands, a
	// jobScript): never inert; refused unless the tenant's data opens them or
	// interLink's Virtual Kubelet wrote them (the restricted annotations rule, policies/rules/restricted-annotations).
	Script
	// Unseen: the value the plugin writes is not in the pod (resolved later from a
	// Secret, a ConfigMap or the downward API): refused where the plugin writes it
	// unquoted.
	Unseen
	// NotWritten: the plugin reads it, if at all, to choose or compute, and writes
	// nothing of it.
	NotWritten
)

var howNames = map[How]string{
	Unquoted: "unquoted", DoubleQuoted: "double quotes, unescaped", Escaped: "escaped",
	Parsed: "parsed", Script: "script text", Unseen: "resolved later", NotWritten: "not written",
}

func (h How) String() string { return howNames[h] }

// Writing is how one plugin writes a field, and the rule its value must pass there.
type Writing struct {
	How  How
	Rule Rule // for Unquoted; DoubleQuoted always uses the rule DoubleQuotedText
	// Where is what the plugin makes of it (for the docs).
	Where string
}

// Row is one field of the table: a pattern (see Pattern) and how each plugin writes it.
type Row struct {
	Field    string
	SLURM    Writing
	HTCondor Writing
}

// For returns the row's Writing for a plugin.
func (r Row) For(plugin string) Writing {
	if plugin == HTCondor {
		return r.HTCondor
	}
	return r.SLURM
}

func w(h How, r Rule, where string) Writing { return Writing{How: h, Rule: r, Where: where} }

var (
	notWritten = w(NotWritten, 0, "")
	byParser   = w(Parsed, 0, "judged by the HPC rules (hpc.rego)")
)

// Table is every field the plugins are known to read, from the create body's root: the
// pod is "pod", interLink's per-container data "container[]". A field under no row is
// Unquoted with the rule Word. Rows are matched most specific first (see Pattern).
var Table = []Row{
	// The pod's metadata.
	{"pod.metadata", notWritten, notWritten},
	{"pod.metadata.name", w(DoubleQuoted, 0, "job.sh's banner, printf \"…\""), w(Unquoted, FileName, "file names and the condor_submit command line")},
	{"pod.metadata.namespace", w(Unquoted, Identifier, "the job's directory: export workingPath=…, #SBATCH --output, the sbatch command line"), w(Unquoted, Identifier, "data directory names")},
	{"pod.metadata.uid", w(Unquoted, Identifier, "the job's directory, #SBATCH --job-name, enroot names"), w(Unquoted, Identifier, "file names and the condor_submit command line")},
	// Annotations are read by name; a name under a plugin's prefix that no row lists
	// counts as unquoted.
	{`pod.metadata.annotations["slurm-job.vk.io/*"]`, w(Unquoted, Word, "an annotation of the plugin's this table does not know"), w(Unquoted, Word, "an annotation of the plugins' this table does not know")},
	{`pod.metadata.annotations["htcondor-job.vk.io/*"]`, w(Unquoted, Word, "an annotation of the plugins' this table does not know"), w(Unquoted, Word, "an annotation of the plugin's this table does not know")},
	{`pod.metadata.annotations["htcondor-job.knoc.io/*"]`, w(Unquoted, Word, "an annotation of the plugins' this table does not know"), w(Unquoted, Word, "an annotation of the plugin's this table does not know")},
	{`pod.metadata.annotations["interlink.eu/*"]`, w(Unquoted, Word, "an annotation of interLink's this table does not know"), w(Unquoted, Word, "an annotation of interLink's this table does not know")},
	{`pod.metadata.annotations["slurm-job.vk.io/flags"]`, w(Parsed, 0, "#SBATCH lines, one per option (slurmjob.ParseFlags)"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/flavor"]`, w(Parsed, 0, "picks a configured flavor (its sbatch flags, uid, defaults)"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/pre-exec"]`, w(Script, 0, "lines of job.slurm"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/mpi-flags"]`, w(Script, 0, "prepended to the container's command line, unquoted"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/singularity-mounts"]`, w(Parsed, 0, "options of the singularity command line, unquoted (slurmjob.ParseSingularityArgs)"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/singularity-options"]`, w(Parsed, 0, "options of the singularity command line, unquoted (slurmjob.ParseSingularityArgs)"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/enroot-mounts"]`, w(Parsed, 0, "options of the enroot command line, unquoted (slurmjob.ParseEnrootArgs)"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/enroot-options"]`, w(Parsed, 0, "options of the enroot command line, unquoted (slurmjob.ParseEnrootArgs)"), notWritten},
	{`pod.metadata.annotations["slurm-job.vk.io/image-root"]`, w(Unquoted, Image, "prefixed to the image on the runCtn line"), notWritten},
	{`pod.metadata.annotations["htcondor-job.vk.io/singularity-options"]`, notWritten, w(Parsed, 0, "options of the singularity command line, unquoted (slurmjob.ParseSingularityArgs)")},
	{`pod.metadata.annotations["htcondor-job.knoc.io/image-root"]`, notWritten, w(Unquoted, Image, "prefixed to the image, unquoted")},
	{`pod.metadata.annotations["interlink.eu/pod-ip"]`, w(Parsed, IPAddress, "export POD_IP=…, unquoted: the restricted annotations rule requires an IP address (the rule IPAddress) unless data.interlink.restricted_annotations names the subject"), notWritten},
	{`pod.metadata.annotations["interlink.eu/wstunnel-client-commands"]`, w(Script, 0, "lines of job.slurm"), notWritten},
	{`pod.metadata.annotations["interlink.eu/wireguard-client-snippet"]`, notWritten, notWritten},
	{`pod.metadata.annotations["interlink.eu/pod-vpn"]`, notWritten, notWritten},
	{`pod.metadata.annotations["interlink.eu/wstunnel-extra-ports"]`, notWritten, notWritten},

	// The pod's spec: every string not listed here is Unquoted.
	{"pod.spec.affinity", notWritten, notWritten},
	{"pod.spec.tolerations", notWritten, notWritten},
	{"pod.spec.nodeSelector", notWritten, notWritten},
	{"pod.spec.nodeName", notWritten, notWritten},
	{"pod.spec.serviceAccountName", notWritten, notWritten},
	{"pod.spec.serviceAccount", notWritten, notWritten},
	{"pod.spec.schedulerName", notWritten, notWritten},
	{"pod.spec.priorityClassName", notWritten, notWritten},
	{"pod.spec.runtimeClassName", notWritten, notWritten},
	{"pod.spec.restartPolicy", notWritten, notWritten},
	{"pod.spec.dnsPolicy", notWritten, notWritten},
	{"pod.spec.dnsConfig", notWritten, notWritten},
	{"pod.spec.hostname", notWritten, notWritten},
	{"pod.spec.subdomain", notWritten, notWritten},
	{"pod.spec.hostAliases", notWritten, notWritten},
	{"pod.spec.imagePullSecrets", notWritten, notWritten},
	{"pod.spec.preemptionPolicy", notWritten, notWritten},
	{"pod.spec.readinessGates", notWritten, notWritten},
	{"pod.spec.topologySpreadConstraints", notWritten, notWritten},
	{"pod.spec.overhead", notWritten, notWritten},
	{"pod.spec.resourceClaims", notWritten, notWritten},
	{"pod.spec.resources", notWritten, notWritten},
	{"pod.spec.schedulingGates", notWritten, notWritten},
	{"pod.spec.os", notWritten, notWritten},
	{"pod.spec.securityContext", notWritten, notWritten},
	{"pod.spec.securityContext.runAsUser", byParser, notWritten},
	{"pod.spec.volumes[].name", w(Unquoted, Identifier, "a directory of the bind source on the runCtn line"), w(Unquoted, Identifier, "a directory name")},
	{"pod.spec.volumes[].hostPath.path", w(Unquoted, Path, "--bind source on the runCtn line"), w(Unquoted, Path, "transfer_input_files of the submit file")},
	{"pod.spec.volumes[].hostPath.type", notWritten, notWritten},
	{"pod.spec.volumes[].configMap", notWritten, notWritten},
	{"pod.spec.volumes[].configMap.items[].path", w(Unquoted, RelativePath, "a file name in the --bind spec"), w(Unquoted, RelativePath, "a file name in the --bind spec")},
	{"pod.spec.volumes[].secret", notWritten, notWritten},
	{"pod.spec.volumes[].secret.items[].path", w(Unquoted, RelativePath, "a file name in the --bind spec"), w(Unquoted, RelativePath, "a file name in the --bind spec")},
	{"pod.spec.volumes[].downwardAPI", notWritten, notWritten},
	{"pod.spec.volumes[].downwardAPI.items[].path", w(Unquoted, RelativePath, "a file name in the --bind spec (interLink keys the volume's data by it)"), w(Unquoted, RelativePath, "a file name in the --bind spec")},
	{"pod.spec.volumes[].projected", notWritten, notWritten},
	{"pod.spec.volumes[].projected.sources[].configMap.items[].path", w(Unquoted, RelativePath, "a file name in the --bind spec (interLink keys the volume's data by it)"), w(Unquoted, RelativePath, "a file name in the --bind spec")},
	{"pod.spec.volumes[].projected.sources[].secret.items[].path", w(Unquoted, RelativePath, "a file name in the --bind spec (interLink keys the volume's data by it)"), w(Unquoted, RelativePath, "a file name in the --bind spec")},
	{"pod.spec.volumes[].projected.sources[].downwardAPI.items[].path", w(Unquoted, RelativePath, "a file name in the --bind spec (interLink keys the volume's data by it)"), w(Unquoted, RelativePath, "a file name in the --bind spec")},
	{"pod.spec.volumes[].projected.sources[].serviceAccountToken.path", w(Unquoted, RelativePath, "a file name in the --bind spec (interLink keys the volume's data by it)"), w(Unquoted, RelativePath, "a file name in the --bind spec")},
	{"pod.spec.volumes[].emptyDir", notWritten, notWritten},
	{"pod.spec.volumes[].persistentVolumeClaim", notWritten, notWritten},
	{"pod.spec.volumes[].ephemeral", notWritten, notWritten},
	{"pod.spec.volumes[].csi", notWritten, notWritten},
	{"pod.spec.volumes[].image", notWritten, notWritten},

	// Containers (init and ephemeral ones alike).
	{"pod.spec.*containers[].name", w(Unquoted, Identifier, "runCtn <name>, file names, probe variable names"), w(Unquoted, Identifier, "a directory name")},
	{"pod.spec.*containers[].image", w(Unquoted, Image, "the image on the runCtn line; enroot import"), w(Unquoted, Image, "the image on the singularity command line")},
	{"pod.spec.*containers[].command", w(Escaped, 0, "single-quoted after the image: runs in the container"), w(Unquoted, Word, "joined after the image, unquoted")},
	{"pod.spec.*containers[].args", w(Escaped, 0, "single-quoted after the image: runs in the container"), w(Unquoted, Word, "joined after the image, unquoted")},
	{"pod.spec.*containers[].env[].name", w(Unquoted, Word, "NAME= in the env file"), w(Unquoted, Word, "--env NAME=value, unquoted")},
	{"pod.spec.*containers[].env[].value", w(Escaped, 0, "single-quoted in the env file"), w(Unquoted, Word, "--env NAME=value, unquoted")},
	{"pod.spec.*containers[].env[].valueFrom", w(Escaped, 0, "resolved by interLink, single-quoted in the env file"), w(Unseen, 0, "resolved by interLink, then --env NAME=value, unquoted")},
	{"pod.spec.*containers[].envFrom", w(Escaped, 0, "resolved by interLink, single-quoted in the env file"), w(Unseen, 0, "resolved by interLink, then --env NAME=value, unquoted")},
	{"pod.spec.*containers[].volumeMounts[].name", w(Unquoted, Identifier, "a directory of the bind source"), notWritten},
	{"pod.spec.*containers[].volumeMounts[].mountPath", w(Unquoted, Path, "--bind destination on the runCtn line"), w(Unquoted, Path, "--bind destination, unquoted")},
	{"pod.spec.*containers[].volumeMounts[].subPath", notWritten, notWritten},
	{"pod.spec.*containers[].volumeMounts[].subPathExpr", notWritten, notWritten},
	{"pod.spec.*containers[].volumeMounts[].mountPropagation", notWritten, notWritten},
	{"pod.spec.*containers[].volumeMounts[].recursiveReadOnly", notWritten, notWritten},
	{"pod.spec.*containers[].resources", notWritten, notWritten},
	{"pod.spec.*containers[].resizePolicy", notWritten, notWritten},
	{"pod.spec.*containers[].securityContext", notWritten, notWritten},
	{"pod.spec.*containers[].securityContext.runAsUser", byParser, notWritten},
	{"pod.spec.*containers[].ports", notWritten, notWritten},
	{"pod.spec.*containers[].workingDir", notWritten, notWritten},
	{"pod.spec.*containers[].imagePullPolicy", notWritten, notWritten},
	{"pod.spec.*containers[].terminationMessagePath", notWritten, notWritten},
	{"pod.spec.*containers[].terminationMessagePolicy", notWritten, notWritten},
	{"pod.spec.*containers[].restartPolicy", notWritten, notWritten},
	{"pod.spec.*containers[].restartPolicyRules", notWritten, notWritten},
	{"pod.spec.*containers[].targetContainerName", notWritten, notWritten},
	{"pod.spec.*containers[].lifecycle", w(Escaped, 0, "single-quoted hook commands and URLs"), notWritten},
	{"pod.spec.*containers[].*Probe", notWritten, notWritten},
	{"pod.spec.*containers[].*Probe.exec.command", w(DoubleQuoted, 0, "runProbe \"…\" in job.sh"), notWritten},
	{"pod.spec.*containers[].*Probe.httpGet.host", w(DoubleQuoted, 0, "runProbe \"…\" in job.sh"), notWritten},
	{"pod.spec.*containers[].*Probe.httpGet.path", w(DoubleQuoted, 0, "runProbe \"…\" in job.sh"), notWritten},
	{"pod.spec.*containers[].*Probe.httpGet.scheme", w(DoubleQuoted, 0, "runProbe \"…\" in job.sh"), notWritten},

	// What interLink adds to the pod in the /create body.
	{"pod.status", notWritten, notWritten},
	{"container[].name", w(Unquoted, Identifier, "matched to the pod's containers"), w(Unquoted, Identifier, "matched to the pod's containers")},
	{"container[].configMaps[]", notWritten, notWritten},
	{"container[].configMaps[].data{}", w(Unquoted, RelativePath, "file names in the --bind spec"), w(Unquoted, RelativePath, "file names in the --bind spec and transfer_input_files")},
	{"container[].configMaps[].binaryData{}", w(Unquoted, RelativePath, "file names in the --bind spec"), w(Unquoted, RelativePath, "file names in the --bind spec and transfer_input_files")},
	{"container[].secrets[]", notWritten, notWritten},
	{"container[].secrets[].data{}", w(Unquoted, RelativePath, "file names in the --bind spec"), w(Unquoted, RelativePath, "file names in the --bind spec and transfer_input_files")},
	{"container[].secrets[].stringData{}", w(Unquoted, RelativePath, "file names in the --bind spec"), w(Unquoted, RelativePath, "file names in the --bind spec and transfer_input_files")},
	{"container[].projectedvolumemaps[]", notWritten, notWritten},
	{"container[].projectedvolumemaps[].data{}", w(Unquoted, RelativePath, "file names in the --bind spec"), w(Unquoted, RelativePath, "file names in the --bind spec and transfer_input_files")},
	{"container[].projectedvolumemaps[].binaryData{}", w(Unquoted, RelativePath, "file names in the --bind spec"), w(Unquoted, RelativePath, "file names in the --bind spec and transfer_input_files")},
	{"jobConfig", notWritten, notWritten},
	{"jobScript", w(Script, 0, "written to jobScript.sh and run on the host"), notWritten},
}
