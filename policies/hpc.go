package policies

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/internal/scriptbound"
	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
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
//	 "pod_ip": {"valid": bool, "error": why not, or null},
//	 "host_mode": bool,
//	 "gpus": n,
//	 "flavor_sized": [field, ...],
//	 "script_bound": {plugin: [{"field": f, "row": pattern, "message": msg}, ...]},
//	 "bound_plugins": [plugin with findings in script_bound, ...],
//	 "writers": {annotation: "vk" or "other"}}
//
// sbatch is there when the pod sets slurm-job.vk.io/flags: the options sbatch reads from
// the #SBATCH lines the SLURM plugin writes (slurmjob.ParseFlags), by long name, or why
// they cannot be pinned down. runtime has an entry per container-runtime annotation the
// pod sets (singularity, enroot, HTCondor's singularity options). host_paths are the host
// paths the pod would mount: the sources of those options and hostPath volumes. ids are
// the runAsUser and runAsGroup of the pod and of every container. words are what Go refuses
// of the pod's sizing and paths (a hostPath that is relative or has a .. element, a
// memory limit the plugin would write as --mem=0). pod_ip is there when the pod sets
// interlink.eu/pod-ip. host_mode is HTCondor's rule for running a pod's command on the
// host: the first container's image contains "host". gpus is the sum of the containers'
// nvidia.com/gpu and amd.com/gpu limits, from which the SLURM plugin picks a flavor when
// the pod names none. flavor_sized are the limits the SLURM plugin would take from a
// flavor's defaults (readFlavorSized). script_bound has, for each plugin package scriptbound describes,
// every string of the pod that plugin would write where it is not inert (unquoted and
// not a plain word, between double quotes with $ in it, ...). inert is true when the pod sets
// none of these but script_bound (whose findings depend on the node's plugin), so that nothing of the HPC rules applies to it but the tenant's
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
	gpus      int64
	bound     []scriptbound.Finding
	// flavorSized are the containers' limits the SLURM plugin takes from a flavor's
	// defaults (see readFlavorSized).
	flavorSized []*ast.Term
}

// PodHPC is input.hpc for a pod value (input.pod); a pod that is not an object sets
// nothing the plugins read.
func PodHPC(pod ast.Value) ast.Value {
	r := hpcRead{inert: true}
	obj, ok := pod.(ast.Object)
	if !ok {
		return r.value()
	}
	annotations, _ := astjson.Find(obj, annotationsPath).(ast.Object)
	r.readAnnotations(annotations)
	if spec, ok := astjson.Find(obj, specPath).(ast.Object); ok {
		r.readSpec(spec)
		r.readFlavorSized(spec)
	}
	r.bound = scriptbound.CheckPod(obj)
	return r.value()
}

// Terms PodHPC looks up and builds with, made once: it runs on every pod decision.
var (
	annotationsPath = []*ast.Term{ast.StringTerm("metadata"), ast.StringTerm("annotations")}
	specPath        = []*ast.Term{specKey}
	volumesPath     = []*ast.Term{ast.StringTerm("volumes")}
	hostPathPath    = []*ast.Term{ast.StringTerm("hostPath"), ast.StringTerm("path")}
	imagePath       = []*ast.Term{ast.StringTerm("image")}
	hpcKeys         = func() map[string]*ast.Term {
		m := map[string]*ast.Term{}
		for _, k := range []string{"options", "order", "error", "valid", "inert", "sbatch_only", "runtime", "host_paths", "ids",
			"words", "host_mode", "sbatch", "pod_ip", "kind", "value", "path", "from", "what", "name"} {
			m[k] = ast.StringTerm(k)
		}
		for _, k := range hpcAnnotations {
			m[k] = ast.StringTerm(k)
		}
		return m
	}()
	// isHPCAnnotation is hpcAnnotations as a set.
	isHPCAnnotation = func() map[string]bool {
		m := map[string]bool{}
		for _, k := range hpcAnnotations {
			m[k] = true
		}
		return m
	}()
)

// hpcKey is the term of a member name PodHPC reads or writes, shared when it is one of
// hpcKeys (terms used as keys are never modified).
func hpcKey(name string) *ast.Term {
	if t, ok := hpcKeys[name]; ok {
		return t
	}
	return ast.StringTerm(name)
}

func (r *hpcRead) readAnnotations(annotations ast.Object) {
	if annotations == nil {
		return
	}
	get := func(key string) (string, bool) {
		t := annotations.Get(hpcKey(key))
		if t == nil {
			return "", false
		}
		s, ok := t.Value.(ast.String)
		return string(s), ok
	}
	// One pass over the pod's annotations (a pod sets few) rather than a look-up of
	// each of hpcAnnotations.
	annotations.Foreach(func(k, _ *ast.Term) {
		if key, ok := k.Value.(ast.String); ok && isHPCAnnotation[string(key)] {
			r.inert = false
			r.others = r.others || string(key) != slurmjob.FlagsAnnotation
		}
	})
	if v, ok := get(slurmjob.FlagsAnnotation); ok {
		opts, err := slurmjob.ParseFlags(v)
		r.sbatch = sbatchValue(opts, err)
		r.others = r.others || err != nil
		if memZero.MatchString(lastValue(opts, "--mem")) {
			r.bad(fmt.Sprintf("annotation %q", slurmjob.FlagsAnnotation), "--mem=0 asks sbatch for all of the node's memory")
		}
	} else if annotations.Get(hpcKey(slurmjob.FlagsAnnotation)) != nil {
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
		r.runtime = append(r.runtime, [2]*ast.Term{hpcKey(ra.key), ast.ObjectTerm(
			ast.Item(hpcKey("options"), ast.ArrayTerm(options...)),
			ast.Item(hpcKey("error"), errorTerm(err)),
		)})
		if err == nil {
			for _, src := range args.Sources {
				r.hostPath(src, ra.key)
			}
		}
	}
	if v, ok := get(PodIPAnnotation); ok {
		// Exactly as netip prints it, without a zone: a zone is free text the plugin
		// would write into export POD_IP=... (scriptbound.IPAddress).
		err := scriptbound.IPAddress.Check(v)
		r.podIP = ast.ObjectTerm(ast.Item(hpcKey("valid"), ast.BooleanTerm(err == nil)), ast.Item(hpcKey("error"), errorTerm(err)))
	}
}

// memZero is a --mem value sbatch reads as "all the memory of the node".
var memZero = regexp.MustCompile(`^0+(\.0*)?[KMGTkmgt]?[Bb]?$`)

// lastValue is the value sbatch reads for a long option (a repeated key keeps the later
// value), "" when none.
func lastValue(opts []slurmjob.Option, name string) string {
	v := ""
	for _, o := range opts {
		if o.Name == name {
			v = o.Value
		}
	}
	return v
}

// sbatchValue is input.hpc.sbatch for a flags annotation's options as parsed.
func sbatchValue(opts []slurmjob.Option, err error) *ast.Term {
	if err != nil {
		return ast.ObjectTerm(
			ast.Item(hpcKey("options"), ast.ObjectTerm()),
			ast.Item(hpcKey("order"), ast.ArrayTerm()),
			ast.Item(hpcKey("error"), errorTerm(err)),
		)
	}
	byName := make([][2]*ast.Term, 0, len(opts))
	order := make([]*ast.Term, 0, len(opts))
	for _, o := range opts {
		v := ast.InternedTerm(true)
		if o.HasValue {
			v = ast.StringTerm(o.Value)
		}
		name := ast.StringTerm(o.Name) // one term for both: values are never modified
		byName = append(byName, ast.Item(name, v))
		order = append(order, name)
	}
	return ast.ObjectTerm(
		ast.Item(hpcKey("options"), objectOrEmpty(byName...)),
		ast.Item(hpcKey("order"), arrayOrEmpty(order...)),
		ast.Item(hpcKey("error"), ast.InternedNullTerm),
	)
}

func errorTerm(err error) *ast.Term {
	if err == nil {
		return ast.NullTerm()
	}
	return ast.StringTerm(err.Error())
}

// Container lists, with the name a message gives their members.
var podContainerLists = []struct {
	key, what string
	path      []*ast.Term // key's, in a pod's spec
}{
	{"containers", "container", []*ast.Term{ast.StringTerm("containers")}},
	{"initContainers", "init container", []*ast.Term{ast.StringTerm("initContainers")}},
	{"ephemeralContainers", "ephemeral container", []*ast.Term{ast.StringTerm("ephemeralContainers")}},
}

var probeKeys = []string{"livenessProbe", "readinessProbe", "startupProbe"}

func (r *hpcRead) readSpec(spec ast.Object) {
	r.ids = appendIDs(r.ids, spec, func() string { return "spec.securityContext" })
	if vols, ok := astjson.Find(spec, volumesPath).(*ast.Array); ok {
		vols.Foreach(func(v *ast.Term) {
			name := stringAt(v.Value, "name")
			if p, ok := astjson.Find(v.Value, hostPathPath).(ast.String); ok {
				what := fmt.Sprintf("hostPath volume %q", name)
				if clean, err := slurmjob.CleanHostPath(string(p)); err != nil {
					r.bad(what, err.Error())
				} else {
					r.hostPath(clean, what)
				}
			}
		})
	}
	for li, list := range podContainerLists {
		cs, ok := astjson.Find(spec, list.path).(*ast.Array)
		if !ok {
			continue
		}
		for i := range cs.Len() {
			c := cs.Elem(i).Value
			// The field is named only for a container that sets an id (most set none).
			r.ids = appendIDs(r.ids, c, func() string {
				return fmt.Sprintf("spec.%s[%q].securityContext", list.key, stringAt(c, "name"))
			})
			if image, ok := astjson.Find(c, imagePath).(ast.String); ok {
				if li == 0 && i == 0 && strings.Contains(string(image), "host") {
					r.hostMode = true
				}
			}
			if li == 0 {
				r.gpus += gpuLimits(c)
			}
			r.readMemoryLimit(c, list.key, i)
		}
	}
}

// readFlavorSized finds what the SLURM plugin sizes from a flavor's defaults: walking
// the init containers, then the containers, it gives a container without a cpu (or
// memory) limit the flavor's default when no earlier container set one, and writes the
// largest of those and the limits once any container sets one. Which flavor applies
// (the annotation, a GPU flavor, the plugin's default flavor) and its defaults are the
// plugin's configuration, so the job's size cannot be known: a tenant with a quota
// cannot be charged for it (quota.rego).
func (r *hpcRead) readFlavorSized(spec ast.Object) {
	type unsized struct{ list, i int }
	for _, res := range sizedResources {
		var before []unsized // named only when some container is limited (most pods: none or all)
		limited := false
		for li, list := range sizedLists {
			cs, ok := astjson.Find(spec, list.path).(*ast.Array)
			if !ok {
				continue
			}
			for i := range cs.Len() {
				if astjson.Find(cs.Elem(i).Value, res.path) != nil {
					limited = true
				} else if !limited {
					before = append(before, unsized{li, i})
				}
			}
		}
		if limited {
			for _, u := range before {
				r.flavorSized = append(r.flavorSized,
					ast.StringTerm(fmt.Sprintf("spec.%s[%d].resources.limits.%s", sizedLists[u.list].name, u.i, res.name)))
			}
		}
	}
}

// What readFlavorSized reads, in the plugin's order.
var (
	sizedResources = []struct {
		name string
		path []*ast.Term
	}{
		{"cpu", []*ast.Term{ast.StringTerm("resources"), ast.StringTerm("limits"), ast.StringTerm("cpu")}},
		{"memory", []*ast.Term{ast.StringTerm("resources"), ast.StringTerm("limits"), ast.StringTerm("memory")}},
	}
	sizedLists = []struct {
		name string
		path []*ast.Term
	}{
		{"initContainers", []*ast.Term{ast.StringTerm("initContainers")}},
		{"containers", []*ast.Term{ast.StringTerm("containers")}},
	}
)

var oneMi = resource.MustParse("1Mi")

// gpuResources are the limits the SLURM plugin counts when it picks a GPU flavor.
var gpuResources = []string{"nvidia.com/gpu", "amd.com/gpu"}

// gpuPaths are where a container's gpuResources limits are.
var gpuPaths = func() [][]*ast.Term {
	var ps [][]*ast.Term
	for _, name := range gpuResources {
		ps = append(ps, []*ast.Term{ast.StringTerm("resources"), ast.StringTerm("limits"), ast.StringTerm(name)})
	}
	return ps
}()

func gpuLimits(c ast.Value) int64 {
	var n int64
	for _, path := range gpuPaths {
		if s, ok := astjson.Find(c, path).(ast.String); ok {
			if q, err := resource.ParseQuantity(string(s)); err == nil {
				n += q.Value()
			}
		}
	}
	return n
}

// readMemoryLimit refuses a memory limit the SLURM plugin would write as --mem=0 (it
// writes the limit in MiB rounded down), which sbatch reads as all of a node's memory.
func (r *hpcRead) readMemoryLimit(c ast.Value, list string, i int) {
	s, ok := astjson.Find(c, sizedResources[1].path).(ast.String)
	if !ok {
		return
	}
	q, err := resource.ParseQuantity(string(s))
	if err != nil || q.Cmp(oneMi) >= 0 {
		return
	}
	r.bad(fmt.Sprintf("spec.%s[%d].resources.limits.memory", list, i),
		fmt.Sprintf("%s is under 1Mi: the SLURM plugin would write --mem=0, which sbatch reads as all of the node's memory", string(s)))
}

// idFields are the securityContext fields appendIDs reads.
var idFields = []struct {
	key, kind string
	path      []*ast.Term
}{
	{"runAsUser", "uid", []*ast.Term{ast.StringTerm("securityContext"), ast.StringTerm("runAsUser")}},
	{"runAsGroup", "gid", []*ast.Term{ast.StringTerm("securityContext"), ast.StringTerm("runAsGroup")}},
}

// appendIDs adds the runAsUser and runAsGroup of the securityContext of obj; field
// names that securityContext, called only when it sets one.
func appendIDs(ids []*ast.Term, obj ast.Value, field func() string) []*ast.Term {
	for _, f := range idFields {
		n, ok := astjson.Find(obj, f.path).(ast.Number)
		if !ok {
			continue
		}
		ids = append(ids, ast.ObjectTerm(
			ast.Item(fieldKey, ast.StringTerm(field()+"."+f.key)),
			ast.Item(hpcKey("kind"), ast.StringTerm(f.kind)),
			ast.Item(hpcKey("value"), ast.NewTerm(n)),
		))
	}
	return ids
}

func (r *hpcRead) hostPath(p, from string) {
	r.inert, r.others = false, true
	r.hostPaths = append(r.hostPaths, ast.ObjectTerm(
		ast.Item(hpcKey("path"), ast.StringTerm(p)),
		ast.Item(hpcKey("from"), ast.StringTerm(from)),
	))
}

func (r *hpcRead) bad(what, msg string) {
	r.inert, r.others = false, true
	r.words = append(r.words, ast.ObjectTerm(
		ast.Item(hpcKey("what"), ast.StringTerm(what)),
		ast.Item(hpcKey("error"), ast.StringTerm(msg)),
	))
}

// Keys of what value adds for the HPC rules of issue 39, made once.
var (
	gpusKey, flavorSizedKey, scriptBoundKey = ast.StringTerm("gpus"), ast.StringTerm("flavor_sized"), ast.StringTerm("script_bound")
	boundPluginsKey                         = ast.StringTerm("bound_plugins")
	fieldKey, rowKey, messageKey            = ast.StringTerm("field"), ast.StringTerm("row"), ast.StringTerm("message")
	pluginKeys                              = func() map[string]*ast.Term {
		m := map[string]*ast.Term{}
		for _, p := range scriptbound.Plugins {
			m[p] = ast.StringTerm(p)
		}
		return m
	}()
)

func (r *hpcRead) value() ast.Value {
	// script_bound does not count: which plugin's findings apply depends on the node,
	// so the fast path (authz.rego) reads them for the node's plugin.
	if len(r.ids) > 0 || r.hostMode {
		r.inert, r.others = false, true
	}
	bound := make([][2]*ast.Term, 0, len(scriptbound.Plugins))
	var boundPlugins []*ast.Term
	for _, p := range scriptbound.Plugins {
		var fs []*ast.Term
		for _, f := range r.bound {
			if f.Plugin == p {
				fs = append(fs, ast.ObjectTerm(
					ast.Item(fieldKey, ast.StringTerm(f.Field)),
					ast.Item(rowKey, ast.StringTerm(f.Row)),
					ast.Item(messageKey, ast.StringTerm(f.Message())),
				))
			}
		}
		bound = append(bound, ast.Item(pluginKeys[p], arrayOrEmpty(fs...)))
		if len(fs) > 0 {
			boundPlugins = append(boundPlugins, pluginKeys[p])
		}
	}
	obj := ast.NewObject(
		ast.Item(hpcKey("inert"), ast.InternedTerm(r.inert)),
		ast.Item(hpcKey("sbatch_only"), ast.InternedTerm(!r.inert && !r.others)),
		ast.Item(hpcKey("runtime"), objectOrEmpty(r.runtime...)),
		ast.Item(hpcKey("host_paths"), arrayOrEmpty(r.hostPaths...)),
		ast.Item(hpcKey("ids"), arrayOrEmpty(r.ids...)),
		ast.Item(hpcKey("words"), arrayOrEmpty(r.words...)),
		ast.Item(hpcKey("host_mode"), ast.InternedTerm(r.hostMode)),
		ast.Item(gpusKey, ast.InternedTerm(int(r.gpus))),
		ast.Item(flavorSizedKey, arrayOrEmpty(r.flavorSized...)),
		ast.Item(scriptBoundKey, objectOrEmpty(bound...)),
		ast.Item(boundPluginsKey, arrayOrEmpty(boundPlugins...)),
	)
	if r.sbatch != nil {
		obj.Insert(hpcKey("sbatch"), r.sbatch)
	}
	if r.podIP != nil {
		obj.Insert(hpcKey("pod_ip"), r.podIP)
	}
	return obj
}

// arrayOrEmpty is ast.ArrayTerm, but OPA's shared empty array for no terms, and objectOrEmpty
// likewise: most pods have none of most of input.hpc's lists, and the evaluator never
// modifies a value (it shares the store's).
func arrayOrEmpty(terms ...*ast.Term) *ast.Term {
	if len(terms) == 0 {
		return ast.InternedEmptyArray
	}
	return ast.ArrayTerm(terms...)
}

func objectOrEmpty(items ...[2]*ast.Term) *ast.Term {
	if len(items) == 0 {
		return ast.InternedEmptyObject
	}
	return ast.ObjectTerm(items...)
}

// stringAt is obj[key] when it is a string, else "".
func stringAt(obj ast.Value, key string) string {
	s, _ := astjson.Find(obj, []*ast.Term{hpcKey(key)}).(ast.String)
	return string(s)
}
