package policies

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/astjson"
	"github.com/sar-bridge/sar-bridge/slurmjob"
)

// sar-bridge's input.hpc is what interLink's plugins would make of a pod on the HPC
// side, read once in Go the way the plugins read it (issue 32), so that the policy judges
// options and paths rather than parsing shell and sbatch syntax in Rego:
//
//	{"inert": bool, "sbatch_only": bool,
//	 "sbatch": {"options": {name: value or true}, "order": [name, ...], "error": msg or null},
//	 "runtime": {annotation: {"options": [name, ...], "error": msg or null}},
//	 "host_paths": [{"path": p, "from": what names it}, ...],
//	 "ids": [{"field": f, "kind": "uid" or "gid", "value": n}, ...],
//	 "words": [{"what": w, "error": msg}, ...],
//	 "pod_ip": {"valid": bool},
//	 "host_mode": bool,
//	 "writers": {annotation: "vk" or "other"}}
//
// sbatch is there when the pod sets slurm-job.vk.io/flags: the options sbatch reads from
// the #SBATCH lines the SLURM plugin writes (slurmjob.ParseFlags), by long name, or why
// they cannot be pinned down. runtime has an entry per container-runtime annotation the
// pod sets (singularity, enroot, HTCondor's singularity options). host_paths are the host
// paths the pod would mount: the sources of those options and hostPath volumes. ids are
// the runAsUser and runAsGroup of the pod and of every container. words are the values the
// plugins write unquoted into the job script that are not plain words (images, image
// roots, hostPath and mount paths, probe commands). pod_ip is there when the pod sets
// interlink.eu/pod-ip. host_mode is HTCondor's rule for running a pod's command on the
// host: the first container's image contains "host". inert is true when the pod sets
// none of these, so that nothing of the HPC rules applies to it but the tenant's
// defaults; sbatch_only when all it sets is a flags annotation that could be read (the
// default policy's fast path decides both). writers is not PodHPC's: the authorizer adds
// it, for the relay and the Data API, from the live pod's managedFields (who wrote
// pre-exec and wstunnel-client-commands: interLink's Virtual Kubelet, or someone else).

// HPC annotations the plugins read (FACTS.md; slurmjob names the SLURM plugin's).
const (
	FlavorAnnotation            = "slurm-job.vk.io/flavor"
	PreExecAnnotation           = "slurm-job.vk.io/pre-exec"
	MPIFlagsAnnotation          = "slurm-job.vk.io/mpi-flags"
	ImageRootAnnotation         = "slurm-job.vk.io/image-root"
	PodIPAnnotation             = "interlink.eu/pod-ip"
	WstunnelCommandsAnnotation  = "interlink.eu/wstunnel-client-commands"
	HTCondorSingularityOptions  = "htcondor-job.vk.io/singularity-options"
	HTCondorImageRootAnnotation = "htcondor-job.knoc.io/image-root"
)

// hpcAnnotations are every annotation the plugins read: a pod setting none of them, and
// none of the fields below, is inert.
var hpcAnnotations = []string{
	slurmjob.FlagsAnnotation, FlavorAnnotation, PreExecAnnotation, MPIFlagsAnnotation, ImageRootAnnotation,
	slurmjob.SingularityMountsAnnotation, slurmjob.SingularityOptionsAnnotation,
	slurmjob.EnrootMountsAnnotation, slurmjob.EnrootOptionsAnnotation,
	PodIPAnnotation, WstunnelCommandsAnnotation, HTCondorSingularityOptions, HTCondorImageRootAnnotation,
}

// runtimeAnnotations are the container-runtime annotations and their parsers.
var runtimeAnnotations = []struct {
	key   string
	parse func(string) (slurmjob.ContainerArgs, error)
}{
	{slurmjob.SingularityMountsAnnotation, slurmjob.ParseSingularityArgs},
	{slurmjob.SingularityOptionsAnnotation, slurmjob.ParseSingularityArgs},
	{slurmjob.EnrootMountsAnnotation, slurmjob.ParseEnrootArgs},
	{slurmjob.EnrootOptionsAnnotation, slurmjob.ParseEnrootArgs},
	{HTCondorSingularityOptions, slurmjob.ParseSingularityArgs},
}

// hpcRead collects input.hpc as the pod is walked.
type hpcRead struct {
	inert     bool
	others    bool // set: something besides a readable flags annotation
	sbatch    *ast.Term
	runtime   [][2]*ast.Term
	hostPaths []*ast.Term
	ids       []*ast.Term
	words     []*ast.Term
	podIP     *ast.Term
	hostMode  bool
}

// PodHPC is input.hpc for a pod value (input.pod); a pod that is not an object sets
// nothing the plugins read.
func PodHPC(pod ast.Value) ast.Value {
	r := hpcRead{inert: true}
	obj, ok := pod.(ast.Object)
	if !ok {
		return r.value()
	}
	annotations, _ := astjson.Find(obj, []*ast.Term{ast.StringTerm("metadata"), ast.StringTerm("annotations")}).(ast.Object)
	r.readAnnotations(annotations)
	if spec, ok := astjson.Find(obj, []*ast.Term{specKey}).(ast.Object); ok {
		r.readSpec(spec)
	}
	return r.value()
}

func (r *hpcRead) readAnnotations(annotations ast.Object) {
	if annotations == nil {
		return
	}
	get := func(key string) (string, bool) {
		t := annotations.Get(ast.StringTerm(key))
		if t == nil {
			return "", false
		}
		s, ok := t.Value.(ast.String)
		return string(s), ok
	}
	for _, key := range hpcAnnotations {
		if annotations.Get(ast.StringTerm(key)) != nil {
			r.inert = false
			r.others = r.others || key != slurmjob.FlagsAnnotation
		}
	}
	if v, ok := get(slurmjob.FlagsAnnotation); ok {
		var readable bool
		r.sbatch, readable = sbatchValue(v)
		r.others = r.others || !readable
	} else if annotations.Get(ast.StringTerm(slurmjob.FlagsAnnotation)) != nil {
		r.others = true // not a string
	}
	for _, ra := range runtimeAnnotations {
		v, ok := get(ra.key)
		if !ok {
			continue
		}
		args, err := ra.parse(v)
		options := make([]*ast.Term, 0, len(args.Options))
		for _, o := range args.Options {
			options = append(options, ast.StringTerm(o))
		}
		r.runtime = append(r.runtime, [2]*ast.Term{ast.StringTerm(ra.key), ast.ObjectTerm(
			ast.Item(ast.StringTerm("options"), ast.ArrayTerm(options...)),
			ast.Item(ast.StringTerm("error"), errorTerm(err)),
		)})
		if err == nil {
			for _, src := range args.Sources {
				r.hostPath(src, ra.key)
			}
		}
	}
	for _, key := range []string{ImageRootAnnotation, HTCondorImageRootAnnotation} {
		if v, ok := get(key); ok {
			r.word(fmt.Sprintf("annotation %q", key), v)
		}
	}
	if v, ok := get(PodIPAnnotation); ok {
		_, err := netip.ParseAddr(v)
		r.podIP = ast.ObjectTerm(ast.Item(ast.StringTerm("valid"), ast.BooleanTerm(err == nil)))
	}
}

// sbatchValue is input.hpc.sbatch for a flags annotation's value, and whether it
// could be read.
func sbatchValue(flags string) (*ast.Term, bool) {
	opts, err := slurmjob.ParseFlags(flags)
	if err != nil {
		return ast.ObjectTerm(
			ast.Item(ast.StringTerm("options"), ast.ObjectTerm()),
			ast.Item(ast.StringTerm("order"), ast.ArrayTerm()),
			ast.Item(ast.StringTerm("error"), errorTerm(err)),
		), false
	}
	byName := make([][2]*ast.Term, 0, len(opts))
	order := make([]*ast.Term, 0, len(opts))
	for _, o := range opts {
		v := ast.BooleanTerm(true)
		if o.HasValue {
			v = ast.StringTerm(o.Value)
		}
		byName = append(byName, ast.Item(ast.StringTerm(o.Name), v))
		order = append(order, ast.StringTerm(o.Name))
	}
	return ast.ObjectTerm(
		ast.Item(ast.StringTerm("options"), ast.ObjectTerm(byName...)),
		ast.Item(ast.StringTerm("order"), ast.ArrayTerm(order...)),
		ast.Item(ast.StringTerm("error"), ast.NullTerm()),
	), true
}

func errorTerm(err error) *ast.Term {
	if err == nil {
		return ast.NullTerm()
	}
	return ast.StringTerm(err.Error())
}

// Container lists, with the name a message gives their members.
var podContainerLists = []struct{ key, what string }{
	{"containers", "container"}, {"initContainers", "init container"}, {"ephemeralContainers", "ephemeral container"},
}

var probeKeys = []string{"livenessProbe", "readinessProbe", "startupProbe"}

func (r *hpcRead) readSpec(spec ast.Object) {
	r.ids = appendIDs(r.ids, spec, "spec.securityContext")
	if vols, ok := astjson.Find(spec, []*ast.Term{ast.StringTerm("volumes")}).(*ast.Array); ok {
		vols.Foreach(func(v *ast.Term) {
			name := stringAt(v.Value, "name")
			if p, ok := astjson.Find(v.Value, []*ast.Term{ast.StringTerm("hostPath"), ast.StringTerm("path")}).(ast.String); ok {
				what := fmt.Sprintf("hostPath volume %q", name)
				r.word(what, string(p))
				if clean, err := slurmjob.CleanHostPath(string(p)); err != nil {
					r.bad(what, err.Error())
				} else {
					r.hostPath(clean, what)
				}
			}
		})
	}
	for li, list := range podContainerLists {
		cs, ok := astjson.Find(spec, []*ast.Term{ast.StringTerm(list.key)}).(*ast.Array)
		if !ok {
			continue
		}
		for i := range cs.Len() {
			c := cs.Elem(i).Value
			name := stringAt(c, "name")
			field := fmt.Sprintf("spec.%s[%q].securityContext", list.key, name)
			r.ids = appendIDs(r.ids, c, field)
			what := fmt.Sprintf("%s %q", list.what, name)
			if image, ok := astjson.Find(c, []*ast.Term{ast.StringTerm("image")}).(ast.String); ok {
				r.word("image of "+what, string(image))
				if li == 0 && i == 0 && strings.Contains(string(image), "host") {
					r.hostMode = true
				}
			}
			if mounts, ok := astjson.Find(c, []*ast.Term{ast.StringTerm("volumeMounts")}).(*ast.Array); ok {
				mounts.Foreach(func(m *ast.Term) {
					if p, ok := astjson.Find(m.Value, []*ast.Term{ast.StringTerm("mountPath")}).(ast.String); ok {
						r.word(fmt.Sprintf("mountPath of volume %q in %s", stringAt(m.Value, "name"), what), string(p))
					}
				})
			}
			r.readProbes(c, what)
		}
	}
}

// readProbes checks what the SLURM plugin pastes into the job script, between double
// quotes, when it runs probes: exec commands and httpGet hosts and paths.
func (r *hpcRead) readProbes(c ast.Value, what string) {
	for _, probe := range probeKeys {
		p, ok := astjson.Find(c, []*ast.Term{ast.StringTerm(probe)}).(ast.Object)
		if !ok {
			continue
		}
		if cmd, ok := astjson.Find(p, []*ast.Term{ast.StringTerm("exec"), ast.StringTerm("command")}).(*ast.Array); ok {
			cmd.Foreach(func(t *ast.Term) {
				if s, ok := t.Value.(ast.String); ok {
					r.quoted(fmt.Sprintf("%s of %s", probe, what), string(s))
				}
			})
		}
		for _, k := range []string{"host", "path"} {
			if s, ok := astjson.Find(p, []*ast.Term{ast.StringTerm("httpGet"), ast.StringTerm(k)}).(ast.String); ok {
				r.quoted(fmt.Sprintf("%s of %s (httpGet %s)", probe, what, k), string(s))
			}
		}
	}
}

// appendIDs adds the runAsUser and runAsGroup of the securityContext of obj.
func appendIDs(ids []*ast.Term, obj ast.Value, field string) []*ast.Term {
	for _, f := range []struct{ key, kind string }{{"runAsUser", "uid"}, {"runAsGroup", "gid"}} {
		n, ok := astjson.Find(obj, []*ast.Term{ast.StringTerm("securityContext"), ast.StringTerm(f.key)}).(ast.Number)
		if !ok {
			continue
		}
		ids = append(ids, ast.ObjectTerm(
			ast.Item(ast.StringTerm("field"), ast.StringTerm(field+"."+f.key)),
			ast.Item(ast.StringTerm("kind"), ast.StringTerm(f.kind)),
			ast.Item(ast.StringTerm("value"), ast.NewTerm(n)),
		))
	}
	return ids
}

func (r *hpcRead) hostPath(p, from string) {
	r.inert, r.others = false, true
	r.hostPaths = append(r.hostPaths, ast.ObjectTerm(
		ast.Item(ast.StringTerm("path"), ast.StringTerm(p)),
		ast.Item(ast.StringTerm("from"), ast.StringTerm(from)),
	))
}

// word records a value the plugins write unquoted, when it is not a plain word.
func (r *hpcRead) word(what, v string) {
	if err := slurmjob.PlainWord(v); err != nil {
		r.bad(what, fmt.Sprintf("%q %v", v, err))
	}
}

// quoted records a value the plugin writes between double quotes, when the shell would
// still expand something in it.
func (r *hpcRead) quoted(what, v string) {
	if i := strings.IndexAny(v, "$`\"\\\n\r"); i >= 0 {
		r.bad(what, fmt.Sprintf("%q contains %q: the plugin writes it between double quotes into the job script, where the shell would expand it", v, v[i]))
	}
}

func (r *hpcRead) bad(what, msg string) {
	r.inert, r.others = false, true
	r.words = append(r.words, ast.ObjectTerm(
		ast.Item(ast.StringTerm("what"), ast.StringTerm(what)),
		ast.Item(ast.StringTerm("error"), ast.StringTerm(msg)),
	))
}

func (r *hpcRead) value() ast.Value {
	if len(r.ids) > 0 || r.hostMode {
		r.inert, r.others = false, true
	}
	obj := ast.NewObject(
		ast.Item(ast.StringTerm("inert"), ast.BooleanTerm(r.inert)),
		ast.Item(ast.StringTerm("sbatch_only"), ast.BooleanTerm(!r.inert && !r.others)),
		ast.Item(ast.StringTerm("runtime"), ast.ObjectTerm(r.runtime...)),
		ast.Item(ast.StringTerm("host_paths"), ast.ArrayTerm(r.hostPaths...)),
		ast.Item(ast.StringTerm("ids"), ast.ArrayTerm(r.ids...)),
		ast.Item(ast.StringTerm("words"), ast.ArrayTerm(r.words...)),
		ast.Item(ast.StringTerm("host_mode"), ast.BooleanTerm(r.hostMode)),
	)
	if r.sbatch != nil {
		obj.Insert(ast.StringTerm("sbatch"), r.sbatch)
	}
	if r.podIP != nil {
		obj.Insert(ast.StringTerm("pod_ip"), r.podIP)
	}
	return obj
}

// stringAt is obj[key] when it is a string, else "".
func stringAt(obj ast.Value, key string) string {
	s, _ := astjson.Find(obj, []*ast.Term{ast.StringTerm(key)}).(ast.String)
	return string(s)
}
