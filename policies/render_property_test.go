package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/internal/scriptbound"
	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
)

// The render property test: the default policy lets no pod string reach a shell on the
// HPC side outside a quoted, literal or in-container position. Random pods whose
// strings are drawn from a hostile alphabet are decided by the default policy; each
// pod it allows is rendered the way the plugin serving the node would write it (the
// model in render_model_test.go; every plugin for a node whose plugin the table does
// not describe) and every script is parsed by a real shell parser
// (mvdan.cc/sh/v3/syntax), which must find every byte of every pod string in a
// literal part of a single word, or in a whole-line comment (checkShell).
//
// When it was written (policy at 243fbe6) it found four holes, since closed: HTCondor's
// host mode refused only where data or the label named the plugin (now wherever the
// node's plugin is or may be HTCondor); an image written as an empty word, so that
// command[0] stood where singularity reads its image and options (empty images, and on
// HTCondor absolute images outside /cvmfs without htcondor-job.knoc.io/image-root, are
// refused: scriptbound.Image, htcondorImages); a namespace or uid with "/" or "."
// choosing the path job.slurm runs, and a container name with "." or "/" turning the
// SLURM plugin's probe variables into commands (scriptbound.Identifier).

// renderData opens nothing risky but lets ordinary pods through.
const renderData = `{"interlink": {"hpc": {
  "tenants": {"*": {
    "mount_prefixes": ["/scratch"],
    "singularity_options": ["--bind", "--nv"],
    "sbatch_options": ["--time"],
    "accounts": ["proj-a"], "account": "proj-a",
    "image_roots": ["/images"],
    "uid_ranges": [[20000, 20999]], "gid_ranges": [[20000, 20999]], "uid": 20001
  }},
  "auto_flavors": []
}}}`

// renderPods is how many pods the property test generates; under -race one in
// renderSampleEvery of them (inCorpusEvery), denser than the heavy tests' sample so
// that every node's share of allowed pods still means something.
const (
	renderPods        = 2400
	renderSampleEvery = 10
)

// Characters the shell, sbatch or the plugins read as more than themselves, and
// white space a parser may or may not split at.
const hostileChars = "$();|&`\n%#'\"\\*?[]~{}<> \t\u00a0\u2003"

// plainChars are the alphabet's characters that are no shell syntax.
const plainChars = "abcxyz0189/.-:="

// hostilePayloads are strings meant to break out of wherever they are written.
var hostilePayloads = []string{
	"$(id)", "`id`", "x;id", "a b", "x'y", `"$(id)"`, "x\nid", "*", "~root", "{a,b}", "a\u00a0b", "a\u2003b",
	"$HOME", "x|id", "x&id", "#x", `x\`, "'", `"`, "-c", "/scratch/$(id)", "/scratch/a b", "..", "x%y", "x=y;id",
	"\"; id; \"", "'; id; '", "-c id", "$((1+1))", "<(id)", "x>y", "a\tb",
}

// podGen draws a pod's strings: each from its plain choices, or with probability
// hostile from the hostile alphabet. escaped is the same for the strings the SLURM
// plugin quotes itself (command, args, env values).
type podGen struct {
	r                *rand.Rand
	hostile, escaped float64
}

func (g *podGen) maybe(p float64) bool { return g.r.Float64() < p }

// hostileString is a payload, or a random string of the whole alphabet (now and then
// of its plain characters only: what the table's rules let through unquoted).
func (g *podGen) hostileString() string {
	if g.maybe(0.4) {
		return hostilePayloads[g.r.IntN(len(hostilePayloads))]
	}
	hs, ps := []rune(hostileChars), []rune(plainChars)
	syntax := 2
	if g.maybe(0.3) {
		syntax = 0
	}
	var b strings.Builder
	for range 1 + g.r.IntN(10) {
		if g.r.IntN(5) < syntax {
			b.WriteRune(hs[g.r.IntN(len(hs))])
		} else {
			b.WriteRune(ps[g.r.IntN(len(ps))])
		}
	}
	return b.String()
}

// v is one of plain, or hostile.
func (g *podGen) v(plain ...string) string {
	if g.maybe(g.hostile) {
		return g.hostileString()
	}
	return plain[g.r.IntN(len(plain))]
}

// esc is v for a string the SLURM plugin quotes.
func (g *podGen) esc(plain ...string) string {
	if g.maybe(g.escaped) {
		return g.hostileString()
	}
	return plain[g.r.IntN(len(plain))]
}

func (g *podGen) uuid() string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := range 32 {
		if i == 8 || i == 12 || i == 16 || i == 20 {
			b.WriteByte('-')
		}
		b.WriteByte(hex[g.r.IntN(16)])
	}
	return b.String()
}

func (g *podGen) list(n int, f func() string) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = f()
	}
	return out
}

// pod is a random pod as interLink sends it (decoded JSON).
func (g *podGen) pod() map[string]any {
	ann := map[string]any{}
	if g.maybe(0.35) {
		ann[slurmjob.FlagsAnnotation] = g.v("--time=1:00:00", "-t 5", "--time=10 --account=proj-a", "--time='1:00:00'",
			"--time=$(id)", "--time=a;b|c&d", `--time="x"`, "--time=~", "--time=*")
	}
	if g.maybe(0.25) {
		ann[slurmjob.SingularityMountsAnnotation] = g.v("--bind /scratch/a:/data", "--bind /scratch/in:/in,/scratch/out:/out", "--nv")
	}
	if g.maybe(0.25) {
		ann[slurmjob.SingularityOptionsAnnotation] = g.v("--nv", "--bind /scratch/x-c:/x", "--nv --bind=/scratch/y:/y")
	}
	if g.maybe(0.2) {
		ann[ImageRootAnnotation] = g.v("/images", "/images/", "/images/sub/")
	}
	if g.maybe(0.25) {
		ann[PodIPAnnotation] = g.v("10.0.0.5", "::1", "fd00::a", "192.168.1.20")
	}
	if g.maybe(0.25) {
		ann[HTCondorSingularityOptions] = g.v("--nv", "--bind /scratch/a:/a", "--bind /scratch/x-c:/x")
	}
	if g.maybe(0.15) {
		ann[HTCondorImageRootAnnotation] = g.v("/images", "/images/")
	}
	if g.maybe(0.6) {
		ann["example.org/note"] = g.hostileString() // no plugin reads it
	}
	if g.maybe(0.15) {
		ann["slurm-job.vk.io/comment"] = g.v("plain", "a.b", "x=y")
	}
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{
			"name":        g.v("job-7f9c", "p", "train.1"),
			"namespace":   g.v("team-a", "ns1", "a-b"),
			"uid":         g.v(g.uuid(), g.uuid(), g.uuid()),
			"annotations": ann,
		},
	}
	var volumes []any
	for i := range g.r.IntN(4) {
		volumes = append(volumes, g.volume(i))
	}
	spec := map[string]any{"restartPolicy": "Never"}
	if len(volumes) > 0 {
		spec["volumes"] = volumes
	}
	var cs []any
	for i := range 1 + g.r.IntN(2) {
		cs = append(cs, g.container(fmt.Sprintf("c%d", i), i == 0, volumes, true))
	}
	spec["containers"] = cs
	if g.maybe(0.3) {
		spec["initContainers"] = []any{g.container("init", false, volumes, false)}
	}
	if g.maybe(0.2) {
		spec["securityContext"] = map[string]any{"runAsUser": []int{20001, 20500, 0, 30000}[g.r.IntN(4)]}
	}
	pod["spec"] = spec
	// As the bridge gets it: JSON (numbers as float64).
	b, err := json.Marshal(pod)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func (g *podGen) volume(i int) map[string]any {
	name := g.v(fmt.Sprintf("vol%d", i), fmt.Sprintf("data-%d", i))
	path := func() string { return g.v("token", "conf/app.yaml", "labels", "a/b.txt", "x_y-1") }
	items := func() []any {
		return g.list(1+g.r.IntN(2), func() string { return path() })
	}
	itemList := func(withKey bool) []any {
		var out []any
		for _, p := range items() {
			it := map[string]any{"path": p}
			if withKey {
				it["key"] = "k"
			} else {
				it["fieldRef"] = map[string]any{"fieldPath": "metadata.labels"}
			}
			out = append(out, it)
		}
		return out
	}
	v := map[string]any{"name": name}
	switch g.r.IntN(6) {
	case 0:
		v["hostPath"] = map[string]any{"path": g.v("/scratch/data", "/scratch/a/b", "/scratch/x.y", "/etc"), "type": "Directory"}
	case 1:
		var sources []any
		if g.maybe(0.7) {
			sources = append(sources, map[string]any{"serviceAccountToken": map[string]any{"path": path(), "expirationSeconds": 3600}})
		}
		if g.maybe(0.6) {
			sources = append(sources, map[string]any{"downwardAPI": map[string]any{"items": itemList(false)}})
		}
		if g.maybe(0.6) {
			sources = append(sources, map[string]any{"configMap": map[string]any{"name": "kube-root-ca.crt", "items": itemList(true)}})
		}
		v["projected"] = map[string]any{"sources": sources}
	case 2:
		v["downwardAPI"] = map[string]any{"items": itemList(false)}
	case 3:
		v["configMap"] = map[string]any{"name": "cm", "items": itemList(true)}
	case 4:
		v["secret"] = map[string]any{"secretName": "s", "items": itemList(true)}
	case 5:
		v["emptyDir"] = map[string]any{}
	}
	return v
}

func (g *podGen) container(name string, first bool, volumes []any, probes bool) map[string]any {
	images := []string{"busybox", "busybox:1.36", "ghcr.io/example/app:1.0", "/images/app.sif", "docker://alpine:3", "/cvmfs/unpacked.cern.ch/app", "app.sif"}
	hostMode := first && g.maybe(0.2)
	if hostMode {
		images = []string{"localhost:5000/app", "ghost/app"} // HTCondor's host mode
	}
	c := map[string]any{
		"name":      g.v(name, name+"-x", name+"-y"),
		"image":     g.v(images...),
		"resources": map[string]any{"limits": map[string]any{"cpu": "1", "memory": "1Gi"}},
	}
	if g.maybe(0.03) {
		c["image"] = "" // as a forged body may have it
	}
	switch g.r.IntN(4) {
	case 3:
		if hostMode {
			c["command"] = []any{g.v("/bin/sh", "/bin/bash")}
			c["args"] = []any{g.esc("id", "true", "hostname")}
		}
	case 0:
		c["command"] = []any{"/bin/sh", "-c"}
		c["args"] = []any{g.esc("echo hello", "sleep 10", "python train.py --epochs=3", "id", "/scratch/run.sh")}
	case 1:
		c["command"] = g.list(1+g.r.IntN(3), func() string { return g.esc("python", "train.py", "--lr=0.1", "/bin/true", "--bind=/:/host") })
	case 2:
		c["args"] = g.list(1+g.r.IntN(3), func() string { return g.esc("serve", "--port=8080", "x") })
	}
	if g.maybe(0.5) {
		var env []any
		for range 1 + g.r.IntN(3) {
			e := map[string]any{"name": g.v("EPOCHS", "A_B", "x1")}
			if g.maybe(0.15) {
				e["valueFrom"] = map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}
			} else {
				e["value"] = g.esc("10", "a", "[1,2]", "x:y")
			}
			env = append(env, e)
		}
		c["env"] = env
	}
	var mounts []any
	for _, v := range volumes {
		if g.maybe(0.7) {
			vn, _ := jstr(v, "name")
			mounts = append(mounts, map[string]any{"name": vn, "mountPath": g.v("/data", "/mnt/x", "/in/y-1", "/opt/a.b")})
		}
	}
	if len(mounts) > 0 {
		c["volumeMounts"] = mounts
	}
	if probes {
		for _, kind := range []string{"readinessProbe", "livenessProbe", "startupProbe"} {
			if !g.maybe(0.25) {
				continue
			}
			if g.maybe(0.5) {
				c[kind] = map[string]any{"exec": map[string]any{"command": g.list(1+g.r.IntN(3), func() string { return g.v("cat", "/tmp/ready", "-f") })}}
				continue
			}
			h := map[string]any{"path": g.v("/healthz", "/", "/a/b?x=1")}
			if g.maybe(0.5) {
				h["port"] = 8080
			} else {
				h["port"] = "http"
			}
			if g.maybe(0.3) {
				h["host"] = g.v("localhost", "10.0.0.1")
			}
			if g.maybe(0.3) {
				h["scheme"] = g.v("HTTP", "HTTPS")
			}
			c[kind] = map[string]any{"httpGet": h, "periodSeconds": 5}
		}
	}
	return c
}

// renderCase is a node a pod may be sent to: the data its policy is loaded with, its
// name and interlink.io/plugin label, and the plugins that may serve it as the policy
// resolves them (data.interlink.hpc.nodes, else the label, else hpc.default_plugin,
// else slurm; a plugin the table does not describe may be either).
type renderCase struct {
	name, data, node, label string
	plugins                 []string
}

// renderDataCondor is renderData for a site whose nodes run the HTCondor plugin unless
// they say otherwise, and where data names node vk-c's plugin.
var renderDataCondor = strings.Replace(renderData, `"auto_flavors": []`,
	`"auto_flavors": [], "default_plugin": "htcondor", "nodes": {"vk-c": {"plugin": "htcondor"}}`, 1)

var renderCases = []renderCase{
	{"label slurm", renderData, "vk-a", scriptbound.SLURM, []string{scriptbound.SLURM}},
	{"label htcondor", renderData, "vk-a", scriptbound.HTCondor, []string{scriptbound.HTCondor}},
	{"no label", renderData, "vk-a", "", []string{scriptbound.SLURM}},
	{"label of an unknown plugin", renderData, "vk-a", "pbs", []string{scriptbound.SLURM, scriptbound.HTCondor}},
	{"no label, default htcondor", renderDataCondor, "vk-a", "", []string{scriptbound.HTCondor}},
	{"data names htcondor, label slurm", renderDataCondor, "vk-c", scriptbound.SLURM, []string{scriptbound.HTCondor}},
}

// renderNode is the input's node.
func renderNode(name, label string) map[string]any {
	labels := map[string]any{"interlink.io/tenant": "tenant-a"}
	if label != "" {
		labels["interlink.io/plugin"] = label
	}
	return map[string]any{"name": name, "found": true, "labels": labels, "taints": []any{},
		"allocatable": map[string]any{"cpu": "8", "memory": "32Gi"}}
}

// renderInput is the bridge's input for a pod on a node.
func renderInput(t testing.TB, pod map[string]any, c renderCase) map[string]any {
	t.Helper()
	in := testInput(t, func(in map[string]any) {
		in["pod"] = pod
		in["node"] = renderNode(c.node, c.label)
		in["hpc"] = nil // set by bridged
	})
	return bridged(t, in)
}

// withModifications is the pod as the plugin gets it once the bridge has applied the
// decision's modifications (the pod's annotations, its runAsUser).
func withModifications(t testing.TB, pod map[string]any, d map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	mods, _ := d["modifications"].(map[string]any)
	meta := jobj(out, "metadata")
	if pa, _ := mods["pod_annotations"].(map[string]any); len(pa) > 0 {
		ann := jobj(meta, "annotations")
		if ann == nil {
			ann = map[string]any{}
			meta["annotations"] = ann
		}
		for k, v := range pa {
			ann[k] = v
		}
	}
	if u, ok := mods["run_as_user"]; ok {
		spec := jobj(out, "spec")
		sc := jobj(spec, "securityContext")
		if sc == nil {
			sc = map[string]any{}
			spec["securityContext"] = sc
		}
		if _, set := sc["runAsUser"]; !set {
			sc["runAsUser"] = u
		}
	}
	return out
}

// renderFor renders a pod for each plugin.
func renderFor(t testing.TB, plugins []string, pod map[string]any) []rendering {
	t.Helper()
	var out []rendering
	if slices.Contains(plugins, scriptbound.SLURM) {
		rd, err := renderSLURM(pod)
		if err != nil {
			// The policy refuses a flags annotation slurmjob.ParseFlags cannot read.
			t.Errorf("allowed pod whose %v: the SLURM plugin's #SBATCH lines cannot be pinned down", err)
		} else {
			out = append(out, rd)
		}
	}
	if slices.Contains(plugins, scriptbound.HTCondor) {
		out = append(out, renderHTCondor(pod))
	}
	return out
}

// hostileReached: a rendered script holds a byte of a pod string that is shell syntax
// somewhere (the generator's hostile strings got through the policy).
func hostileReached(rds []rendering) bool {
	for _, rd := range rds {
		for _, sc := range rd.scripts {
			for i, o := range sc.text.o {
				if o >= 0 && strings.ContainsRune("$();|&`'\"\\*?[]~{}<>#\n", rune(sc.text.s[i])) {
					return true
				}
			}
		}
	}
	return false
}

var indexes = regexp.MustCompile(`\[\d+\]`)

// fieldKind groups fields alike for the report: one example each.
var fieldKind = strings.NewReplacer("initContainers[]", "*containers[]", "spec.containers[]", "spec.*containers[]",
	".command[]", ".command|args[]", ".args[]", ".command|args[]")

// TestRenderPropertyInert: no pod the default policy allows puts a byte of one of its
// strings into a shell on the HPC side outside a quoted, literal or in-container
// position, whatever the node's plugin.
func TestRenderPropertyInert(t *testing.T) {
	t.Run("the check can fail", testRenderCheckerCatches)
	start := time.Now()
	evaluators := map[string]*Evaluator{}
	for _, c := range renderCases {
		if evaluators[c.data] == nil {
			evaluators[c.data] = newEvaluator(t, Options{DataFile: writeFile(t, t.TempDir(), "data.json", c.data)})
		}
	}
	ctx := context.Background()
	type example struct {
		v     shellViolation
		pod   map[string]any
		node  renderCase
		n     int
		nodes map[string]bool
	}
	found := map[string]*example{}
	var tested, allowed, hostile, scripts int
	testedOn, allowedOn := map[string]int{}, map[string]int{}
	for i := range renderPods {
		if !inCorpusEvery(t, renderSampleEvery, i, "render-property") {
			continue
		}
		r := rand.New(rand.NewPCG(uint64(i), 0x5eed))
		c := renderCases[r.IntN(len(renderCases))]
		g := &podGen{r: r, hostile: []float64{0, 0, 0, 0.03, 0.1, 0.3, 1}[r.IntN(7)]}
		// Strings the SLURM plugin quotes are hostile more often where only it reads them.
		g.escaped = g.hostile
		if !slices.Contains(c.plugins, scriptbound.HTCondor) {
			g.escaped = 0.6
		}
		pod := g.pod()
		tested++
		testedOn[c.name]++
		got, defined, err := evaluators[c.data].Eval(ctx, []string{"interlink", "authz", "decision"}, renderInput(t, pod, c))
		if err != nil || !defined {
			t.Fatalf("pod %d: decision %v, %v", i, defined, err)
		}
		d, _ := got.(map[string]any)
		if d["allowed"] != true {
			continue
		}
		allowed++
		allowedOn[c.name]++
		rds := renderFor(t, c.plugins, withModifications(t, pod, d))
		if hostileReached(rds) {
			hostile++
		}
		for _, rd := range rds {
			scripts += len(rd.scripts)
			for _, v := range checkRendering(rd) {
				key := v.plugin + " " + v.script + " " + fieldKind.Replace(indexes.ReplaceAllString(v.field, "[]")) + " " + v.kind
				if ex := found[key]; ex != nil {
					ex.n++
					ex.nodes[c.name] = true
					continue
				}
				found[key] = &example{v: v, pod: pod, node: c, n: 1, nodes: map[string]bool{c.name: true}}
			}
		}
	}
	keys := make([]string, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ex := found[k]
		pj, _ := json.Marshal(ex.pod)
		var nodes []string
		for n := range ex.nodes {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		t.Errorf("%s\n%d allowed pods like it, on nodes: %s; this one on node %q:\npod: %s\n%s:\n%s",
			ex.v, ex.n, strings.Join(nodes, "; "), ex.node.name, pj, ex.v.script, ex.v.text)
	}
	var per []string
	for _, c := range renderCases {
		per = append(per, fmt.Sprintf("%s %d", c.name, allowedOn[c.name]))
	}
	t.Logf("%d pods generated, %d allowed (%s), %d of them with shell syntax in a rendered pod string; %d scripts checked; %v",
		tested, allowed, strings.Join(per, ", "), hostile, scripts, time.Since(start).Round(time.Millisecond))

	// The generator is varied enough for the check to mean something.
	stride := corpusStrideEvery(t, renderSampleEvery)
	if min := renderPods / stride * 9 / 10; tested < min {
		t.Errorf("%d pods tested, want at least %d", tested, min)
	}
	if allowed*5 < tested {
		t.Errorf("%d of %d pods allowed, want at least 20%%", allowed, tested)
	}
	for _, c := range renderCases {
		if allowedOn[c.name] == 0 || allowedOn[c.name]*20 < testedOn[c.name] {
			t.Errorf("%d of %d pods allowed on node %q, want at least 5%%", allowedOn[c.name], testedOn[c.name], c.name)
		}
	}
	if hostile*10 < allowed {
		t.Errorf("%d of %d allowed pods put shell syntax into a script, want at least 10%%", hostile, allowed)
	}
}

// testRenderCheckerCatches: the check can fail. Pods the policy would refuse, rendered
// without it, are reported; their quoted counterparts pass.
func testRenderCheckerCatches(t *testing.T) {
	pod := func(meta, spec string) map[string]any {
		var m map[string]any
		raw := fmt.Sprintf(`{"metadata": {"name": "p", "namespace": "team-a", "uid": "0c6f2b9e-1b7a-4c2e-9a51-3f0d7f6f9e11"%s}, "spec": %s}`, meta, spec)
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		return m
	}
	ann := func(k, v string) string {
		b, _ := json.Marshal(map[string]string{k: v})
		return `, "annotations": ` + string(b)
	}
	for _, tc := range []struct {
		name, plugin string
		pod          map[string]any
		want         []string // fields reported ("" for none)
	}{
		{"HTCondor: args $(id)", scriptbound.HTCondor,
			pod("", `{"containers": [{"name": "c", "image": "busybox", "command": ["/bin/sh", "-c"], "args": ["$(id)"]}]}`),
			[]string{"spec.containers[0].args[0]"}},
		{"HTCondor: an env value", scriptbound.HTCondor,
			pod("", `{"containers": [{"name": "c", "image": "busybox", "env": [{"name": "A", "value": "x y;id"}]}]}`),
			[]string{"spec.containers[0].env[0].value"}},
		{"HTCondor: host mode runs args on the host", scriptbound.HTCondor,
			pod("", `{"containers": [{"name": "c", "image": "ghost/app", "command": ["/bin/sh"], "args": ["id"]}]}`),
			[]string{"spec.containers[0].args[0]"}},
		{"HTCondor: a hostPath's base name", scriptbound.HTCondor,
			pod("", `{"volumes": [{"name": "v", "hostPath": {"path": "/scratch/a;id"}}], "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "v", "mountPath": "/d"}]}]}`),
			[]string{"spec.volumes[0].hostPath.path"}},
		{"SLURM: item path x;id", scriptbound.SLURM,
			pod("", `{"volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "x;id"}}]}}], "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "v", "mountPath": "/var/run/t"}]}]}`),
			[]string{"spec.volumes[0].projected.sources[0].serviceAccountToken.path"}},
		{"SLURM: pod-ip", scriptbound.SLURM,
			pod(ann(PodIPAnnotation, "10.0.0.5;id"), `{"containers": [{"name": "c", "image": "busybox"}]}`),
			[]string{`metadata.annotations["interlink.eu/pod-ip"]`}},
		{"SLURM: exec probe", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "c", "image": "busybox", "readinessProbe": {"exec": {"command": ["cat", "$(id)"]}}}]}`),
			[]string{"spec.containers[0].readinessProbe.exec.command[1]"}},
		{"SLURM: httpGet path", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "c", "image": "busybox", "livenessProbe": {"httpGet": {"path": "/h\"$(id)", "port": 80}}}]}`),
			[]string{"spec.containers[0].livenessProbe.httpGet.path"}},
		{"SLURM: a mountPath with a space", scriptbound.SLURM,
			pod("", `{"volumes": [{"name": "v", "hostPath": {"path": "/scratch/a"}}], "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "v", "mountPath": "/mnt/p x"}]}]}`),
			[]string{"spec.containers[0].volumeMounts[0].mountPath"}},
		{"SLURM: a glob", scriptbound.SLURM,
			pod("", `{"volumes": [{"name": "v", "hostPath": {"path": "/scratch/*"}}], "containers": [{"name": "c", "image": "busybox", "volumeMounts": [{"name": "v", "mountPath": "/d"}]}]}`),
			[]string{"spec.volumes[0].hostPath.path"}},
		{"SLURM: image", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "c", "image": "busybox;id"}]}`),
			[]string{"spec.containers[0].image"}},
		{"SLURM: singularity options", scriptbound.SLURM,
			pod(ann(slurmjob.SingularityOptionsAnnotation, "--nv;id"), `{"containers": [{"name": "c", "image": "busybox"}]}`),
			[]string{`metadata.annotations["slurm-job.vk.io/singularity-options"]`}},
		{"SLURM: a container name out of its probe variable", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "a.b", "image": "busybox", "readinessProbe": {"exec": {"command": ["true"]}}}]}`),
			[]string{"spec.containers[0].name"}},
		{"SLURM: an empty image", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "c", "image": "", "command": ["--bind=/:/host", "docker://busybox", "cat", "/host/etc/shadow"]}]}`),
			[]string{"spec.containers[0].command[0]"}},
		{"HTCondor: an absolute image without an image root", scriptbound.HTCondor,
			pod("", `{"containers": [{"name": "c", "image": "/images/app.sif", "command": ["--bind=/:/host", "docker://busybox", "id"]}]}`),
			[]string{"spec.containers[0].command[0]"}},
		{"SLURM: a uid that names another job.sh", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "c", "image": "busybox"}]}`),
			nil}, // replaced below
		// Quoted where they are written: nothing to report.
		{"SLURM: args, quoted", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "c", "image": "busybox", "command": ["/bin/sh", "-c"], "args": ["$(id); it's \"x\" \\ a b", "", "plain"]}]}`),
			[]string{}},
		{"SLURM: flags, a comment line", scriptbound.SLURM,
			pod(ann(slurmjob.FlagsAnnotation, "--time=$(id) --comment=a;b|c"), `{"containers": [{"name": "c", "image": "busybox"}]}`),
			[]string{}},
		{"SLURM: probes of a plain container", scriptbound.SLURM,
			pod("", `{"containers": [{"name": "c-1", "image": "busybox", "startupProbe": {"exec": {"command": ["cat", "/tmp/x"]}}, "livenessProbe": {"httpGet": {"path": "/h", "port": 80, "host": "localhost"}}}]}`),
			[]string{}},
		{"HTCondor: a plain pod", scriptbound.HTCondor,
			pod(ann(HTCondorSingularityOptions, "--bind /scratch/x-c:/x"), `{"volumes": [{"name": "v", "hostPath": {"path": "/scratch/a"}}, {"name": "cm", "configMap": {"name": "cm", "items": [{"key": "k", "path": "app.yaml"}]}}],
				"containers": [{"name": "c", "image": "busybox", "command": ["sleep"], "args": ["10"], "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
				"volumeMounts": [{"name": "v", "mountPath": "/d"}, {"name": "cm", "mountPath": "/etc/app"}]}]}`),
			[]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pod
			want := tc.want
			if tc.name == "SLURM: a uid that names another job.sh" {
				jobj(p, "metadata")["uid"] = "x/../../scratch/me"
				want = []string{"metadata.uid"}
			}
			var got []string
			var text []string
			for _, rd := range renderFor(t, []string{tc.plugin}, p) {
				for _, sc := range rd.scripts {
					text = append(text, "== "+sc.name+"\n"+sc.text.s)
				}
				for _, v := range checkRendering(rd) {
					got = append(got, v.field)
					t.Logf("reported: %s", v)
				}
			}
			for _, f := range want {
				found := false
				for _, g := range got {
					found = found || g == f
				}
				if !found {
					t.Errorf("%s not reported (got %q) in\n%s", f, got, strings.Join(text, "\n"))
				}
			}
			if len(want) == 0 && len(got) > 0 {
				t.Errorf("reported %q in\n%s", got, strings.Join(text, "\n"))
			}
		})
	}
}
