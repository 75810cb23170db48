package policies

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"

	"github.com/sar-bridge/sar-bridge/internal/scriptbound"
	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
)

// A model of what interLink's SLURM and HTCondor plugins write into the shell scripts
// that run on the HPC side, for the render property test (render_property_test.go).
// It is this project's reading of the plugins (interlink-hq/interlink-slurm-plugin
// f8451d9: pkg/slurm/prepare.go, probes.go, Create.go; interlink-hq/
// interlink-htcondor-plugin 6f5ee3e: handles.py), written anew: no plugin code is
// copied. It renders the lines that carry a pod string, with enough around them for a
// shell parser to read them in their real context, and records, for every byte, the
// pod string (if any) it came from.
//
// Simplifications (none of them moves a pod string out of a position it has):
//   - host paths are joined with "/" where the SLURM plugin uses filepath.Join (which
//     only cleans "/", "." and ".." segments);
//   - a configMap or secret volume's keys are its items[].path (the plugins mount
//     every key of the object interLink relays; the table judges items[].path and the
//     relayed keys alike, and only the pod is generated here);
//   - the plugins' helper functions, which hold no pod string, are left out, and so
//     are the enroot runtime and lifecycle hooks (single-quoted by the plugin);
//   - the SLURM plugin is configured as its defaults say (singularity, default options
//     --nv --no-eval --containall, no ImagePrefix), with EnableProbes on;
//   - env values and names go to the SLURM plugin's env file, which no shell runs.

// ostr is text and, for each of its bytes, the placement (an index into
// render.placed) of the pod string it came from; -1 is the plugin's own text.
type ostr struct {
	s string
	o []int32
}

func pluginText(s string) ostr {
	o := make([]int32, len(s))
	for i := range o {
		o[i] = -1
	}
	return ostr{s, o}
}

func cat(xs ...ostr) ostr {
	var b strings.Builder
	var o []int32
	for _, x := range xs {
		b.WriteString(x.s)
		o = append(o, x.o...)
	}
	return ostr{b.String(), o}
}

func (x ostr) slice(i, j int) ostr { return ostr{x.s[i:j], x.o[i:j]} }

// split is strings.Split, keeping the owners.
func (x ostr) split(sep string) []ostr {
	var out []ostr
	rest := x
	for {
		i := strings.Index(rest.s, sep)
		if i < 0 {
			return append(out, rest)
		}
		out = append(out, rest.slice(0, i))
		rest = rest.slice(i+len(sep), len(rest.s))
	}
}

func joinO(xs []ostr, sep string) ostr {
	parts := make([]ostr, 0, 2*len(xs))
	for i, x := range xs {
		if i > 0 {
			parts = append(parts, pluginText(sep))
		}
		parts = append(parts, x)
	}
	return cat(parts...)
}

// placed is one placement of a pod string in a script.
type placed struct {
	field string
	// ident: placed as part of a shell variable name (the SLURM plugin's probe PID
	// variables): it must stay inside that name.
	ident bool
}

// render collects the placements of one rendering.
type render struct {
	placed []placed
	// shifted: containers whose image the plugin writes as an empty word, so that the
	// container runtime reads the first of its command and args as its image, or as
	// one of its own options (not a shell matter: checked beside the scripts).
	shifted []string
}

// imageWord notes a container whose image word is empty while it has a command or args.
func (r *render) imageWord(img ostr, c any, field string) {
	if img.s != "" {
		return
	}
	for _, key := range []string{"command", "args"} {
		if len(jarr(c, key)) > 0 {
			r.shifted = append(r.shifted, fmt.Sprintf("%s.%s[0]", field, key))
			return
		}
	}
}

// tenant places v, a pod string, as it is.
func (r *render) tenant(field, v string) ostr {
	id := int32(len(r.placed))
	r.placed = append(r.placed, placed{field: field})
	o := make([]int32, len(v))
	for i := range o {
		o[i] = id
	}
	return ostr{v, o}
}

// words places v, an annotation the plugin pastes as several words of a command line
// (container-runtime options, which slurmjob's parser reads as words split at
// spaces), a placement per word: the spaces between them are the separators the
// parser judged, not part of any word.
func (r *render) words(field, v string) ostr {
	var parts []ostr
	for i, w := range strings.Split(v, " ") {
		if i > 0 {
			parts = append(parts, pluginText(" "))
		}
		parts = append(parts, r.tenant(field, w))
	}
	return cat(parts...)
}

// ident places v inside a shell variable name, with "-" replaced by "_" as the
// SLURM plugin does for its probe variables.
func (r *render) ident(field, v string) ostr {
	x := r.tenant(field, strings.ReplaceAll(v, "-", "_"))
	r.placed[len(r.placed)-1].ident = true
	return x
}

// quoteUnsafe is what al.essio.dev/pkg/shellescape's Quote (the SLURM plugin's)
// quotes: anything but \w@%+=:,./- (ASCII \w).
var quoteUnsafe = regexp.MustCompile(`[^\w@%+=:,./-]`)

// quoted places v as shellescape.Quote writes it: two single quotes when empty, as it is when it
// has only safe characters, else between single quotes, each ' written '"'"' (the
// pod's ' is then the one between the double quotes).
func (r *render) quoted(field, v string) ostr {
	if v == "" {
		return pluginText("''")
	}
	if !quoteUnsafe.MatchString(v) {
		return r.tenant(field, v)
	}
	x := r.tenant(field, v)
	parts := []ostr{pluginText("'")}
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' {
			parts = append(parts, pluginText(`'"`), x.slice(i, i+1), pluginText(`"'`))
			continue
		}
		parts = append(parts, x.slice(i, i+1))
	}
	parts = append(parts, pluginText("'"))
	return cat(parts...)
}

// shellScript is one script a plugin writes (or one command line it runs through a
// shell), with its owners.
type shellScript struct {
	name string
	text ostr
}

// rendering is what one plugin makes of a pod.
type rendering struct {
	plugin  string
	scripts []shellScript
	r       *render
}

// JSON accessors for a decoded pod.
func jobj(v any, key string) map[string]any {
	m, _ := v.(map[string]any)
	o, _ := m[key].(map[string]any)
	return o
}

func jarr(v any, key string) []any {
	m, _ := v.(map[string]any)
	a, _ := m[key].([]any)
	return a
}

func jstr(v any, key string) (string, bool) {
	m, _ := v.(map[string]any)
	s, ok := m[key].(string)
	return s, ok
}

func jhas(v any, key string) bool {
	m, _ := v.(map[string]any)
	_, ok := m[key]
	return ok
}

func annField(key string) string { return fmt.Sprintf("metadata.annotations[%q]", key) }

// volumeByName is the pod's volume of that name and its index.
func volumeByName(spec map[string]any, name string) (map[string]any, int) {
	for i, v := range jarr(spec, "volumes") {
		if n, _ := jstr(v, "name"); n == name {
			m, _ := v.(map[string]any)
			return m, i
		}
	}
	return nil, -1
}

// volumeKey is a key a volume's data is written under (a relative path), where the
// pod names it.
type volumeKey struct {
	field, path string
}

// itemKeys are the items[].path of a configMap, secret or downwardAPI source.
func itemKeys(src any, field string) []volumeKey {
	var keys []volumeKey
	for k, it := range jarr(src, "items") {
		if p, ok := jstr(it, "path"); ok {
			keys = append(keys, volumeKey{fmt.Sprintf("%s.items[%d].path", field, k), p})
		}
	}
	return keys
}

// projectedKeys are the keys interLink gives a projected volume's data: the paths of
// its sources.
func projectedKeys(vol map[string]any, field string) []volumeKey {
	var keys []volumeKey
	for j, src := range jarr(jobj(vol, "projected"), "sources") {
		sf := fmt.Sprintf("%s.projected.sources[%d]", field, j)
		if tok := jobj(src, "serviceAccountToken"); tok != nil {
			if p, ok := jstr(tok, "path"); ok {
				keys = append(keys, volumeKey{sf + ".serviceAccountToken.path", p})
			}
		}
		for _, kind := range []string{"configMap", "secret", "downwardAPI"} {
			if s := jobj(src, kind); s != nil {
				keys = append(keys, itemKeys(s, sf+"."+kind)...)
			}
		}
	}
	return keys
}

// ---------------------------------------------------------------------------
// SLURM plugin
// ---------------------------------------------------------------------------

var uriScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+\-.]*://`)

// renderSLURM is job.slurm and job.sh as the SLURM plugin writes them for the pod,
// and the submission command line. It fails only where the project's parser of
// slurm-job.vk.io/flags does (a pod the policy refuses).
func renderSLURM(pod map[string]any) (rendering, error) {
	r := &render{}
	meta := jobj(pod, "metadata")
	ann := jobj(meta, "annotations")
	spec := jobj(pod, "spec")
	ns, _ := jstr(meta, "namespace")
	uid, _ := jstr(meta, "uid")
	name, _ := jstr(meta, "name")
	dir := func() ostr {
		return cat(pluginText("/data/"), r.tenant("metadata.namespace", ns), pluginText("-"), r.tenant("metadata.uid", uid))
	}

	// job.slurm
	slurm := []ostr{
		pluginText("#!/bin/bash\n"),
		cat(pluginText("#SBATCH --job-name="), r.tenant("metadata.uid", uid), pluginText("\n")),
		cat(pluginText("#SBATCH --output="), dir(), pluginText("/job.out\n")),
	}
	if flags, ok := jstr(ann, slurmjob.FlagsAnnotation); ok {
		opts, err := slurmjob.ParseFlags(flags)
		if err != nil {
			return rendering{}, fmt.Errorf("%s: %w", annField(slurmjob.FlagsAnnotation), err)
		}
		for _, o := range opts {
			slurm = append(slurm, cat(pluginText("#SBATCH "), r.tenant(annField(slurmjob.FlagsAnnotation), o.Flag), pluginText("\n")))
		}
	}
	if runAs, ok := jobj(spec, "securityContext")["runAsUser"]; ok {
		slurm = append(slurm, pluginText(fmt.Sprintf("#SBATCH --uid=%v\n", runAs)))
	}
	slurm = append(slurm, pluginText("#SBATCH --cpus-per-task=1\n#SBATCH --mem=1\n"))
	if ip, ok := jstr(ann, PodIPAnnotation); ok {
		slurm = append(slurm, cat(pluginText("export POD_IP="), r.tenant(annField(PodIPAnnotation), ip), pluginText("\n")))
	}
	slurm = append(slurm, cat(dir(), pluginText("/job.sh\n")))

	// job.sh
	sh := []ostr{
		pluginText("highestExitCode=0\n"),
		cat(pluginText(`printf '%s\n' "This pod `), r.tenant("metadata.name", name), pluginText("/"), r.tenant("metadata.uid", uid),
			pluginText(` has been submitted to SLURM node ${SLURMD_NODENAME}."`+"\n")),
		cat(pluginText("export workingPath="), dir(), pluginText("\n")),
		cat(pluginText("export SANDBOX="), dir(), pluginText("\n")),
	}
	for _, list := range []string{"initContainers", "containers"} {
		for ci, c := range jarr(spec, list) {
			sh = append(sh, slurmContainer(r, pod, list, ci, c, dir)...)
		}
	}
	sh = append(sh, pluginText("waitCtns\nendScript\n"))

	// SLURMBatchSubmit: go-execute runs /bin/bash -c with `sh -c "<sbatch> <path>"`,
	// and sh parses the inner text again.
	jobPath := func() ostr { return cat(dir(), pluginText("/job.slurm")) }
	return rendering{plugin: scriptbound.SLURM, r: r, scripts: []shellScript{
		{"job.slurm", cat(slurm...)},
		{"job.sh", cat(sh...)},
		{"sbatch command (bash -c)", cat(pluginText(`sh -c "sbatch `), jobPath(), pluginText(`"`))},
		{"sbatch command (sh -c)", cat(pluginText("sbatch "), jobPath())},
	}}, nil
}

// slurmImage is the image as the SLURM plugin writes it: image-root prefixed to an
// image that is neither absolute nor a URI.
func slurmImage(r *render, ann map[string]any, c any, field string) ostr {
	image, _ := jstr(c, "image")
	img := r.tenant(field+".image", image)
	root, hasRoot := jstr(ann, ImageRootAnnotation)
	if strings.HasPrefix(image, "/") || uriScheme.MatchString(image) || !hasRoot || root == "" {
		return img
	}
	return cat(r.tenant(annField(ImageRootAnnotation), root), img)
}

// slurmContainer is a container's lines of job.sh: its runCtn (runInitCtn) line and,
// for a container with probes, their functions and calls.
func slurmContainer(r *render, pod map[string]any, list string, ci int, c any, dir func() ostr) []ostr {
	ann := jobj(jobj(pod, "metadata"), "annotations")
	spec := jobj(pod, "spec")
	field := fmt.Sprintf("spec.%s[%d]", list, ci)
	name, _ := jstr(c, "name")
	ctn := func() ostr { return r.tenant(field+".name", name) }
	cmd := jarr(c, "command")
	verb := "run"
	if len(cmd) > 0 {
		verb = "exec"
	}
	words := []ostr{pluginText("singularity " + verb + " --nv --no-eval --containall")}
	for _, key := range []string{slurmjob.SingularityMountsAnnotation, slurmjob.SingularityOptionsAnnotation} {
		v, _ := jstr(ann, key)
		words = append(words, r.words(annField(key), v))
	}
	words = append(words, pluginText("--env-file"), cat(dir(), pluginText("/"), ctn(), pluginText("_envfile.properties")))

	// The mounts: one element of " --bind <spec> " chunks.
	var binds []ostr
	bind := func(spec ...ostr) { binds = append(binds, cat(pluginText(" --bind "), cat(spec...), pluginText(" "))) }
	for mi, m := range jarr(c, "volumeMounts") {
		mf := fmt.Sprintf("%s.volumeMounts[%d]", field, mi)
		mname, _ := jstr(m, "name")
		mountPath, _ := jstr(m, "mountPath")
		vol, vi := volumeByName(spec, mname)
		if vol == nil {
			continue
		}
		vf := fmt.Sprintf("spec.volumes[%d]", vi)
		keyed := func(kind string, keys []volumeKey, mode string) {
			for _, k := range keys {
				bind(dir(), pluginText("/"+kind+"/"), r.tenant(mf+".name", mname), pluginText("/"), r.tenant(k.field, k.path),
					pluginText(":"), r.tenant(mf+".mountPath", mountPath), pluginText("/"), r.tenant(k.field, k.path), pluginText(":"+mode))
			}
		}
		switch {
		case jobj(vol, "hostPath") != nil:
			hp, _ := jstr(jobj(vol, "hostPath"), "path")
			bind(r.tenant(vf+".hostPath.path", hp), pluginText(":"), r.tenant(mf+".mountPath", mountPath), pluginText(":rw"))
		case jobj(vol, "projected") != nil:
			keyed("projectedVolumeMaps", projectedKeys(vol, vf), "ro")
		case jobj(vol, "downwardAPI") != nil:
			keyed("projectedVolumeMaps", itemKeys(jobj(vol, "downwardAPI"), vf+".downwardAPI"), "ro")
		case jobj(vol, "configMap") != nil:
			keyed("configMaps", itemKeys(jobj(vol, "configMap"), vf+".configMap"), "ro")
		case jobj(vol, "secret") != nil:
			keyed("secrets", itemKeys(jobj(vol, "secret"), vf+".secret"), "ro")
		case jobj(vol, "emptyDir") != nil:
			bind(dir(), pluginText("/emptyDirs/"), r.tenant(vf+".name", mname), pluginText(":"), r.tenant(mf+".mountPath", mountPath), pluginText(":rw"))
		}
	}
	image := slurmImage(r, ann, c, field)
	r.imageWord(image, c, field)
	words = append(words, cat(binds...), image)

	verbLine := "runCtn "
	if list == "initContainers" {
		verbLine = "runInitCtn "
	}
	line := []ostr{pluginText(verbLine), ctn(), pluginText(" "), joinO(words, " ")}
	for _, key := range []string{"command", "args"} {
		for k, v := range jarr(c, key) {
			s, _ := v.(string)
			line = append(line, pluginText(" "), r.quoted(fmt.Sprintf("%s.%s[%d]", field, key, k), s))
		}
	}
	line = append(line, pluginText("\n"))
	if list == "initContainers" {
		return []ostr{cat(line...)}
	}

	type probe struct {
		kind, typ string
		args      ostr
	}
	probes := map[string][]probe{}
	for _, kind := range []string{"startup", "readiness", "liveness"} {
		key := kind + "Probe"
		p := jobj(c, key)
		pf := field + "." + key
		switch {
		case p == nil:
			continue
		case jobj(p, "httpGet") != nil:
			h := jobj(p, "httpGet")
			str := func(k, def string) ostr {
				if v, _ := jstr(h, k); v != "" {
					return r.tenant(pf+".httpGet."+k, v)
				}
				return pluginText(def)
			}
			port := 0
			if n, ok := h["port"].(float64); ok {
				port = int(n)
			}
			args := cat(pluginText(`"`), str("scheme", "HTTP"), pluginText(`" "`), str("host", ""), pluginText(fmt.Sprintf(`" %d "`, port)),
				str("path", "/"), pluginText(`" 1`))
			probes[kind] = append(probes[kind], probe{kind, "http", args})
		case jobj(p, "exec") != nil:
			var words []ostr
			for k, v := range jarr(jobj(p, "exec"), "command") {
				s, _ := v.(string)
				words = append(words, cat(pluginText(`"`), r.tenant(fmt.Sprintf("%s.exec.command[%d]", pf, k), s), pluginText(`"`)))
			}
			probes[kind] = append(probes[kind], probe{kind, "exec", joinO(words, " ")})
		}
	}
	if len(probes) == 0 {
		return []ostr{cat(line...)}
	}
	out := []ostr{pluginText("cleanup_probes() {\n")}
	vars := map[string]string{"startup": "STARTUP", "readiness": "READINESS", "liveness": "LIVENESS"}
	for _, kind := range []string{"readiness", "liveness", "startup"} {
		for i := range probes[kind] {
			v := func() ostr {
				return cat(pluginText(vars[kind]+"_PROBE_"), r.ident(field+".name", name), pluginText(fmt.Sprintf("_%d_PID", i)))
			}
			out = append(out,
				cat(pluginText(`    if [ ! -z "$`), v(), pluginText("\" ]; then\n")),
				cat(pluginText("        kill $"), v(), pluginText(" 2>/dev/null || true\n    fi\n")))
		}
	}
	out = append(out, pluginText("}\ntrap cleanup_probes EXIT\n"), cat(line...),
		cat(pluginText("executeExecProbe() {\n    \"singularity\" exec \"--nv\" \"--no-eval\" \"--containall\" \""), slurmImage(r, ann, c, field),
			pluginText("\" timeout \"${1}\" \"${@:3}\"\n}\n(\n")))
	calls := func(kind, fn, indent string) {
		for i, p := range probes[kind] {
			out = append(out,
				cat(pluginText(indent+"# "+strings.ToUpper(kind[:1])+kind[1:]+fmt.Sprintf(" probe %d for ", i)), ctn(), pluginText("\n")),
				cat(pluginText(indent+fn+` "`+p.typ+`" "`), ctn(), pluginText(fmt.Sprintf(`" 0 10 1 1 3 "%s" %d `, kind, i)), p.args, pluginText(" &\n")),
				cat(pluginText(indent+vars[kind]+"_PROBE_"), r.ident(field+".name", name), pluginText(fmt.Sprintf("_%d_PID=$!\n", i))))
		}
	}
	wait := func(kind, indent string) {
		out = append(out, cat(pluginText(indent+`waitForProbes "`+kind+`" "`), ctn(), pluginText(fmt.Sprintf("\" %d\n", len(probes[kind])))),
			pluginText(indent+"if [ $? -eq 0 ]; then\n"))
	}
	if len(probes["startup"]) > 0 {
		calls("startup", "runStartupProbe", "")
		wait("startup", "")
	} else {
		out = append(out, pluginText("echo \"No startup probes defined, starting readiness/liveness probes directly.\"\nif true; then\n"))
	}
	if len(probes["readiness"]) > 0 {
		calls("readiness", "runProbe", "  ")
		wait("readiness", "  ")
	} else {
		out = append(out, pluginText("  echo \"No readiness probes defined, starting liveness probes directly.\"\n  if true; then\n"))
	}
	if len(probes["liveness"]) > 0 {
		calls("liveness", "runProbe", "    ")
	} else {
		out = append(out, cat(pluginText(`    printf "%s\n" "$(date -Is --utc) No liveness probes defined, all probes completed successfully for container `),
			ctn(), pluginText(".\"\n")))
	}
	out = append(out, pluginText("  else\n    exit 1\n  fi\nelse\n  exit 1\nfi\n) &\n"))
	return out
}

// ---------------------------------------------------------------------------
// HTCondor plugin
// ---------------------------------------------------------------------------

// htcondorRoot and htcondorWD are the plugin's DataRootFolder and working directory.
const (
	htcondorRoot = ".knoc"
	htcondorWD   = "/home/condor"
)

// renderHTCondor is the job script the HTCondor plugin writes for the pod (singularity
// mode, or host mode when the first container's image contains "host"), and the
// condor_submit command line it runs through /bin/sh. No scripts when the plugin
// would fail before writing one.
func renderHTCondor(pod map[string]any) rendering {
	r := &render{}
	rd := rendering{plugin: scriptbound.HTCondor, r: r}
	meta := jobj(pod, "metadata")
	name, _ := jstr(meta, "name")
	uid, _ := jstr(meta, "uid")
	containers := jarr(jobj(pod, "spec"), "containers")
	if len(containers) == 0 {
		return rd
	}
	image0, _ := jstr(containers[0], "image")
	var script ostr
	var job ostr
	if strings.Contains(image0, "host") {
		// Host mode: #!<command[-1]>, then args[-1] split at "; ", one part a line.
		cmd, args := jarr(containers[0], "command"), jarr(containers[0], "args")
		if len(cmd) == 0 || len(args) == 0 {
			return rd
		}
		c, _ := cmd[len(cmd)-1].(string)
		a, _ := args[len(args)-1].(string)
		script = cat(pluginText("#!"), r.tenant(fmt.Sprintf("spec.containers[0].command[%d]", len(cmd)-1), c), pluginText("\n"),
			joinO(r.tenant(fmt.Sprintf("spec.containers[0].args[%d]", len(args)-1), a).split("; "), "\n"))
		job = cat(pluginText(htcondorRoot+"/"), r.tenant("metadata.name", name), pluginText("-"), r.tenant("metadata.uid", uid), pluginText(".jdl"))
	} else {
		// Singularity mode: only the last container's command line is written.
		var words []ostr
		for ci, c := range containers {
			var ok bool
			if words, ok = htcondorWords(r, pod, ci, c); !ok {
				return rd
			}
		}
		script = cat(pluginText("#!/bin/bash\n\n\n"), htcondorLine(words))
		job = cat(pluginText("./"+htcondorRoot+"/"), r.tenant("metadata.name", name), pluginText("-"), r.tenant("metadata.uid", uid), pluginText(".jdl"))
	}
	rd.scripts = []shellScript{
		{"job script", script},
		{"condor_submit command", cat(pluginText("condor_submit -pool cm.example.org -remote schedd.example.org "), job, pluginText(" -spool"))},
	}
	return rd
}

// htcondorWords is a container's word list: singularity exec <options> <envs>
// [--bind <binds>] <image> <command...> <args...>; false where the plugin would fail.
func htcondorWords(r *render, pod map[string]any, ci int, c any) ([]ostr, bool) {
	meta := jobj(pod, "metadata")
	ann := jobj(meta, "annotations")
	field := fmt.Sprintf("spec.containers[%d]", ci)
	words := []ostr{pluginText("singularity"), pluginText("exec")}
	opts := pluginText("")
	if v, ok := jstr(ann, HTCondorSingularityOptions); ok {
		opts = r.words(annField(HTCondorSingularityOptions), v)
	}
	envs := htcondorEnvs(r, c, field)
	binds, ok := htcondorBinds(r, pod, c, field)
	if !ok {
		return nil, false
	}
	image, _ := jstr(c, "image")
	var img ostr
	switch {
	case strings.HasPrefix(image, "/") && !strings.HasPrefix(image, "/cvmfs"):
		if root, _ := jstr(ann, HTCondorImageRootAnnotation); root != "" {
			img = cat(r.tenant(annField(HTCondorImageRootAnnotation), root), r.tenant(field+".image", image))
		} else {
			img = pluginText("")
		}
	case strings.HasPrefix(image, "/cvmfs") || strings.HasPrefix(image, "docker://"):
		img = r.tenant(field+".image", image)
	default:
		img = cat(pluginText("docker://"), r.tenant(field+".image", image))
	}
	r.imageWord(img, c, field)
	hasCmd, hasArgs := jhas(c, "command"), jhas(c, "args")
	if hasCmd || hasArgs {
		words = append(words, opts)
	}
	words = append(words, envs)
	words = append(words, binds...)
	words = append(words, img)
	for _, key := range []string{"command", "args"} {
		for k, v := range jarr(c, key) {
			s, _ := v.(string)
			words = append(words, r.tenant(fmt.Sprintf("%s.%s[%d]", field, key, k), s))
		}
	}
	return words, true
}

// htcondorEnvs is the one word of --env NAME=VALUE options (NAME="VALUE" when the
// value starts with "["); "" when the container has no env list or an entry the
// plugin cannot read.
func htcondorEnvs(r *render, c any, field string) ostr {
	env, ok := c.(map[string]any)["env"].([]any)
	if !ok {
		return pluginText("")
	}
	var parts []ostr
	for k, e := range env {
		ef := fmt.Sprintf("%s.env[%d]", field, k)
		name, ok := jstr(e, "name")
		if !ok {
			return pluginText("")
		}
		m, _ := e.(map[string]any)
		raw, has := m["value"]
		n := r.tenant(ef+".name", name)
		switch v, isStr := raw.(string); {
		case !has || raw == nil:
			parts = append(parts, pluginText("--env "), n, pluginText("= "))
		case !isStr:
			return pluginText("")
		case strings.HasPrefix(v, "["):
			parts = append(parts, pluginText("--env "), n, pluginText(`="`), r.tenant(ef+".value", v), pluginText(`" `))
		default:
			parts = append(parts, pluginText("--env "), n, pluginText("="), r.tenant(ef+".value", v), pluginText(" "))
		}
	}
	return cat(parts...)
}

// htcondorBinds is ["--bind", "./<base>:<mountPath>,..."] or [""]; false where the
// plugin would fail (an emptyDir volume, a bind without ":").
func htcondorBinds(r *render, pod map[string]any, c any, field string) ([]ostr, bool) {
	if !jhas(c, "volumeMounts") {
		return []ostr{pluginText("")}, true
	}
	meta := jobj(pod, "metadata")
	spec := jobj(pod, "spec")
	ns, _ := jstr(meta, "namespace")
	uid, _ := jstr(meta, "uid")
	mounts := jarr(c, "volumeMounts")
	// Every configMap (secret) volume the container mounts, with its keys: the plugin
	// writes each object's keys into each such volume's directory.
	type objKeys struct {
		keys []volumeKey
	}
	var cms, secrets []objKeys
	for _, m := range mounts {
		mname, _ := jstr(m, "name")
		vol, vi := volumeByName(spec, mname)
		vf := fmt.Sprintf("spec.volumes[%d]", vi)
		if s := jobj(vol, "configMap"); s != nil {
			cms = append(cms, objKeys{itemKeys(s, vf+".configMap")})
		} else if s := jobj(vol, "secret"); s != nil {
			secrets = append(secrets, objKeys{itemKeys(s, vf+".secret")})
		}
	}
	var data []ostr
	// keyed: the binds of every mount of a volume of this kind; a configMap volume
	// gets the keys of every configMap (cross), a secret volume those of its own.
	keyed := func(kind string, objs []objKeys, cross bool) {
		nth := -1
		for mi, m := range mounts {
			mname, _ := jstr(m, "name")
			vol, vi := volumeByName(spec, mname)
			if jobj(vol, kind) == nil {
				continue
			}
			nth++
			mf := fmt.Sprintf("%s.volumeMounts[%d]", field, mi)
			mountPath, _ := jstr(m, "mountPath")
			vname, _ := jstr(vol, "name")
			for oi, o := range objs {
				if !cross && oi != nth {
					continue
				}
				for _, k := range o.keys {
					data = append(data, cat(pluginText(htcondorWD+"/"+htcondorRoot+"/"), r.tenant("metadata.namespace", ns), pluginText("-"),
						r.tenant("metadata.uid", uid), pluginText("/"+kind+"s/"), r.tenant(fmt.Sprintf("spec.volumes[%d].name", vi), vname),
						pluginText("/"), r.tenant(k.field, k.path), pluginText(":"), r.tenant(mf+".mountPath", mountPath),
						pluginText("/"), r.tenant(k.field, k.path)))
				}
			}
		}
	}
	for mi, m := range mounts {
		mname, _ := jstr(m, "name")
		vol, vi := volumeByName(spec, mname)
		switch {
		case vol == nil:
		case jobj(vol, "configMap") != nil:
			keyed("configMap", cms, true)
		case jobj(vol, "secret") != nil:
			keyed("secret", secrets, false)
		case jobj(vol, "emptyDir") != nil:
			return nil, false // mount_empty_dir fails on every emptyDir
		case jobj(vol, "hostPath") != nil:
			hp, _ := jstr(jobj(vol, "hostPath"), "path")
			mountPath, _ := jstr(m, "mountPath")
			data = append(data, cat(r.tenant(fmt.Sprintf("spec.volumes[%d].hostPath.path", vi), hp), pluginText(":"),
				r.tenant(fmt.Sprintf("%s.volumeMounts[%d].mountPath", field, mi), mountPath)))
		}
	}
	data = append(data, pluginText(""))
	all := joinO(data, ",")
	if all.s == "" {
		return []ostr{pluginText("")}, true
	}
	entries := all.split(",")
	var local []ostr
	for _, e := range entries[:len(entries)-1] {
		prefix := "./"
		if strings.Contains(e.s, "/cvmfs") {
			prefix = "/"
		}
		fields := e.split(":")
		if len(fields) < 2 {
			return nil, false
		}
		segs := fields[0].split("/")
		local = append(local, pluginText(prefix), segs[len(segs)-1], pluginText(":"), fields[1], pluginText(","))
	}
	if len(local) == 0 {
		return []ostr{pluginText("")}, true
	}
	return []ostr{pluginText("--bind"), cat(local...)}, true
}

// htcondorLine is the command line of the job script: a word after one containing
// "-c" wrapped in double quotes (unescaped), the words joined with spaces, every ""
// with the white space around it made one space, runs of spaces made one, and white
// space stripped at both ends (Python's re and str semantics: Unicode white space).
func htcondorLine(words []ostr) ostr {
	for i := 1; i < len(words); i++ {
		if strings.Contains(words[i-1].s, "-c") {
			words[i] = cat(pluginText(`"`), words[i], pluginText(`"`))
		}
	}
	rs, ro := toRunes(joinO(words, " "))
	// re.sub(r'\s*""\s*', ' ', line)
	var r2 []rune
	var o2 []int32
	for i := 0; i < len(rs); {
		j := i
		for j < len(rs) && pySpace(rs[j]) {
			j++
		}
		if j+1 < len(rs) && rs[j] == '"' && rs[j+1] == '"' {
			k := j + 2
			for k < len(rs) && pySpace(rs[k]) {
				k++
			}
			r2, o2 = append(r2, ' '), append(o2, -1)
			i = k
			continue
		}
		// No match starting at i: keep rs[i] (a match may start later in the run).
		r2, o2 = append(r2, rs[i]), append(o2, ro[i])
		i++
	}
	// re.sub(' {2,}', ' ', line)
	var r3 []rune
	var o3 []int32
	for i := 0; i < len(r2); {
		if r2[i] != ' ' {
			r3, o3 = append(r3, r2[i]), append(o3, o2[i])
			i++
			continue
		}
		j, owner := i, o2[i]
		for j < len(r2) && r2[j] == ' ' {
			if o2[j] == -1 {
				owner = -1 // the plugin would have written a space there anyway
			}
			j++
		}
		if j-i == 1 {
			owner = o2[i]
		}
		r3, o3 = append(r3, ' '), append(o3, owner)
		i = j
	}
	// .strip()
	lo, hi := 0, len(r3)
	for lo < hi && pySpace(r3[lo]) {
		lo++
	}
	for hi > lo && pySpace(r3[hi-1]) {
		hi--
	}
	return fromRunes(r3[lo:hi], o3[lo:hi])
}

// pySpace is Python's str.isspace (and re's \s for str patterns).
func pySpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

func toRunes(x ostr) ([]rune, []int32) {
	var rs []rune
	var ro []int32
	for i, r := range x.s {
		rs, ro = append(rs, r), append(ro, x.o[i])
	}
	return rs, ro
}

func fromRunes(rs []rune, ro []int32) ostr {
	var b strings.Builder
	var o []int32
	for i, r := range rs {
		n, _ := b.WriteRune(r)
		for range n {
			o = append(o, ro[i])
		}
	}
	return ostr{b.String(), o}
}

// ---------------------------------------------------------------------------
// The shell check
// ---------------------------------------------------------------------------

// shellViolation is a pod string a script does not hold inertly.
type shellViolation struct {
	plugin, script, field, why string
	kind                       string // why, in a few words
	text                       string // the script
}

func (v shellViolation) String() string {
	return fmt.Sprintf("%s plugin, %s: %s %s", v.plugin, v.script, v.field, v.why)
}

// unitInfo is a place where bytes are inert: a word (its literal parts), a whole-line
// comment, or a variable name.
type unitInfo struct {
	start, end int
	command    bool // the word names the command to run
	comment    bool
}

// checkRendering checks every script of a rendering, and that no command or args
// take the image's place on the container runtime's command line.
func checkRendering(rd rendering) []shellViolation {
	var out []shellViolation
	for _, f := range rd.r.shifted {
		v := shellViolation{plugin: rd.plugin, field: f, kind: "image position",
			why: "takes the image's place on singularity's command line: the container's image is written as an empty word, so singularity reads this as its image or as an option of its own (--bind=/:/host)"}
		for _, sc := range rd.scripts {
			if sc.name == "job.sh" || sc.name == "job script" {
				v.script, v.text = sc.name+" (singularity's arguments)", sc.text.s
			}
		}
		out = append(out, v)
	}
	for _, sc := range rd.scripts {
		for _, v := range checkShell(sc, rd.r.placed) {
			v.plugin = rd.plugin
			out = append(out, v)
		}
	}
	return out
}

// checkShell parses a script as bash (mvdan.cc/sh/v3/syntax, comments kept) and
// reports every placement of a pod string in it whose bytes are not all inert in one
// unit:
//   - a word's literal parts: the inside of '…' (not $'…' escapes), a literal inside
//     "…" (no \), an unquoted literal without * ? [ ] { } ~ or \; never within an
//     expansion ($…, ${…}, $(…), `…`, $((…)), <(…), globs, braces); one word only (a
//     value split into two words is a violation);
//   - a comment that is a whole line (only blanks before its #, which the plugin wrote),
//     not the #! line;
//   - the word that names the command: only as a path component (after a "/" the
//     plugin wrote, without "/" of its own);
//   - ident placements: a variable's name, in an assignment or a plain $NAME/${NAME}.
func checkShell(sc shellScript, places []placed) []shellViolation {
	text, owner := sc.text.s, sc.text.o
	byPlace := map[int32][]int{}
	var order []int32
	for i, o := range owner {
		if o < 0 {
			continue
		}
		if _, seen := byPlace[o]; !seen {
			order = append(order, o)
		}
		byPlace[o] = append(byPlace[o], i)
	}
	if len(order) == 0 {
		return nil
	}
	f, err := parseBash(text, sc.name)
	if err != nil {
		return []shellViolation{{script: sc.name, field: strings.Join(blame(sc, places, order), ", "), kind: "unreadable",
			why: fmt.Sprintf("makes the script unreadable for the shell: %v", err), text: text}}
	}
	n := len(text)
	unit := make([]int32, n)
	ident := make([]int32, n)
	for i := range unit {
		unit[i], ident[i] = -1, -1
	}
	var units []unitInfo
	newUnit := func(u unitInfo) int32 {
		units = append(units, u)
		return int32(len(units) - 1)
	}
	off := func(p syntax.Pos) int { return int(p.Offset()) }
	markLit := func(l *syntax.Lit, id int32, quoted bool) {
		for i := off(l.ValuePos); i < off(l.ValueEnd) && i < n; i++ {
			c := text[i]
			if c == '\\' || !quoted && strings.IndexByte("*?[]{}~", c) >= 0 {
				continue
			}
			unit[i] = id
		}
	}
	var expansions [][2]int
	var comments []syntax.Comment
	commandWords := map[*syntax.Word]bool{}
	syntax.Walk(f, func(node syntax.Node) bool {
		switch x := node.(type) {
		case *syntax.CallExpr:
			if len(x.Args) > 0 {
				commandWords[x.Args[0]] = true
			}
		case *syntax.Word:
			id := newUnit(unitInfo{start: off(x.Pos()), end: off(x.End()), command: commandWords[x]})
			for _, part := range x.Parts {
				switch p := part.(type) {
				case *syntax.Lit:
					markLit(p, id, false)
				case *syntax.SglQuoted:
					start := off(p.Left) + 1
					if p.Dollar {
						start++
					}
					for i := start; i < off(p.Right); i++ {
						if !p.Dollar || text[i] != '\\' {
							unit[i] = id
						}
					}
				case *syntax.DblQuoted:
					for _, dp := range p.Parts {
						if l, ok := dp.(*syntax.Lit); ok {
							markLit(l, id, true)
						}
					}
				}
			}
		case *syntax.Assign:
			if x.Name != nil {
				id := newUnit(unitInfo{start: off(x.Name.Pos()), end: off(x.Name.End())})
				for i := off(x.Name.Pos()); i < off(x.Name.End()); i++ {
					ident[i] = id
				}
			}
		case *syntax.ParamExp:
			expansions = append(expansions, [2]int{off(x.Pos()), off(x.End())})
			if x.Param != nil && x.Exp == nil && x.Repl == nil && x.Slice == nil && x.Index == nil && !x.Excl && !x.Length {
				id := newUnit(unitInfo{start: off(x.Param.Pos()), end: off(x.Param.End())})
				for i := off(x.Param.Pos()); i < off(x.Param.End()); i++ {
					ident[i] = id
				}
			}
		case *syntax.CmdSubst, *syntax.ArithmExp, *syntax.ProcSubst, *syntax.ExtGlob, *syntax.BraceExp, *syntax.ArithmCmd:
			expansions = append(expansions, [2]int{off(x.Pos()), off(x.End())})
		case *syntax.Comment:
			comments = append(comments, *x)
		}
		return true
	})
	for _, e := range expansions {
		for i := e[0]; i < e[1] && i < n; i++ {
			unit[i] = -1
		}
	}
	for _, c := range comments {
		start := off(c.Hash)
		end := min(start+1+len(c.Text), n)
		if start == 0 && strings.HasPrefix(c.Text, "!") || owner[start] >= 0 {
			continue // the #! line names the interpreter; a pod's # is its own
		}
		j := start - 1
		for j >= 0 && (text[j] == ' ' || text[j] == '\t') && owner[j] < 0 {
			j--
		}
		if j >= 0 && (text[j] != '\n' || owner[j] >= 0) {
			continue // after a command on its line
		}
		id := newUnit(unitInfo{start: start, end: end, comment: true})
		for i := start + 1; i < end; i++ {
			unit[i] = id
		}
	}

	var out []shellViolation
	report := func(o int32, kind, why string, args ...any) {
		out = append(out, shellViolation{script: sc.name, field: places[o].field, kind: kind, why: fmt.Sprintf(why, args...), text: text})
	}
	where := func(i int) string {
		line := 1 + strings.Count(text[:i], "\n")
		r, _ := utf8.DecodeRuneInString(text[i:])
		return fmt.Sprintf("%q at line %d, byte %d", r, line, i)
	}
	for _, o := range order {
		bytes := byPlace[o]
		if places[o].ident {
			id := ident[bytes[0]]
			for _, i := range bytes {
				c := text[i]
				if ident[i] < 0 || ident[i] != id || !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
					report(o, "variable name", "leaves the variable name it is written into: %s", where(i))
					break
				}
			}
			continue
		}
		id := unit[bytes[0]]
		bad := -1
		for _, i := range bytes {
			if unit[i] < 0 || unit[i] != id {
				bad = i
				break
			}
		}
		switch {
		case bad >= 0 && unit[bad] >= 0:
			report(o, "split", "is split into two words (or a word and a comment): %s", where(bad))
		case bad >= 0 && strings.HasPrefix(text, "#!") && !strings.Contains(text[:bad], "\n"):
			report(o, "interpreter", "names the interpreter of the script (its #! line): %s", where(bad))
		case bad >= 0:
			report(o, "syntax", "reaches the shell outside a quoted or literal position: %s", where(bad))
		case units[id].command && !pathComponent(text, owner, units[id], bytes):
			u := units[id]
			report(o, "command", "chooses the command the shell runs (it is in the first word, %q)", text[u.start:u.end])
		}
	}
	return out
}

// pathComponent: the bytes, in the word that names the command, hold no "/", come
// after a "/" the plugin wrote, and the path component they are in is not "." or "..".
func pathComponent(text string, owner []int32, u unitInfo, bytes []int) bool {
	first, last := bytes[0], bytes[len(bytes)-1]
	for _, i := range bytes {
		if text[i] == '/' {
			return false
		}
	}
	start, pluginSlash := -1, false
	for i := first - 1; i >= u.start; i-- {
		if text[i] == '/' {
			if start < 0 {
				start = i + 1
			}
			if owner[i] < 0 {
				pluginSlash = true
				break
			}
		}
	}
	end := u.end
	if i := strings.IndexByte(text[last:u.end], '/'); i >= 0 {
		end = last + i
	}
	comp := ""
	if start >= 0 {
		comp = text[start:end]
	}
	return pluginSlash && comp != "." && comp != ".."
}

func parseBash(text, name string) (*syntax.File, error) {
	return syntax.NewParser(syntax.KeepComments(true), syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text), name)
}

// blame names the pod strings that make a script unparsable: with every pod string
// made plain ("x" for each byte) but one, those with which it still fails; all of
// them when none does alone.
func blame(sc shellScript, places []placed, order []int32) []string {
	plain := func(keep int32) string {
		b := []byte(sc.text.s)
		for i, o := range sc.text.o {
			if o >= 0 && o != keep {
				b[i] = 'x'
			}
		}
		return string(b)
	}
	var fields []string
	for _, o := range order {
		if _, err := parseBash(plain(o), sc.name); err != nil {
			fields = append(fields, places[o].field)
		}
	}
	if len(fields) == 0 {
		for _, o := range order {
			fields = append(fields, places[o].field)
		}
	}
	slices.Sort(fields)
	return slices.Compact(fields)
}
