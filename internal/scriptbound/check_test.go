package scriptbound

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func mustValue(t *testing.T, js string) ast.Value {
	t.Helper()
	v, err := ast.ValueFromReader(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// findings is "plugin field" of each finding, sorted.
func findings(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Plugin+" "+f.Field)
	}
	slices.Sort(out)
	return out
}

func TestCheckPod(t *testing.T) {
	for _, tc := range []struct {
		name, pod string
		want      []string
	}{
		{"plain pod", `{"metadata": {"name": "job-1", "namespace": "team-a", "uid": "0c6f2b9e-1b7a-4c2e-9a51-3f0d7f6f9e11",
		   "labels": {"a": "b c"}, "annotations": {"description": "any $(text)", "slurm-job.vk.io/flags": "--time=1:00:00 --job-name 'a b'"},
		   "managedFields": [{"fieldsV1": {"f:metadata": {"k:{\"name\":\"x\"}": {}}}}]},
		  "spec": {"containers": [{"name": "main", "image": "ghcr.io/x/y:1.0@sha256:abc", "command": ["sh", "-c", "echo $(date) && ls"],
		     "env": [{"name": "OPTS", "value": "-Xmx1g -Xms1g"}], "volumeMounts": [{"name": "data", "mountPath": "/data"}],
		     "resources": {"limits": {"cpu": "1"}}}],
		   "tolerations": [{"key": "a", "operator": "Exists"}], "nodeSelector": {"x": "y z"}}}`,
			[]string{"htcondor spec.containers[0].command[2]", "htcondor spec.containers[0].env[0].value"}},
		// Rule 6 judges pod-ip (policies.PodHPC: input.hpc.pod_ip.valid).
		{"pod-ip", `{"metadata": {"annotations": {"interlink.eu/pod-ip": "fe80::1%$(touch${IFS}owned)"}}}`, nil},
		{"downward item path", `{"spec": {"volumes": [{"name": "p", "projected": {"sources": [{"downwardAPI": {"items": [{"path": "x$(touch owned)", "fieldRef": {"fieldPath": "metadata.annotations['a']"}}]}},
		   {"serviceAccountToken": {"path": "tok;id", "audience": "a b"}}, {"configMap": {"name": "c", "items": [{"key": "k", "path": "sub/ok.txt"}]}}]}}]}}`,
			[]string{"htcondor spec.volumes[0].projected.sources[0].downwardAPI.items[0].path", "htcondor spec.volumes[0].projected.sources[1].serviceAccountToken.path",
				"slurm spec.volumes[0].projected.sources[0].downwardAPI.items[0].path", "slurm spec.volumes[0].projected.sources[1].serviceAccountToken.path"}},
		{"htcondor env and args", `{"spec": {"containers": [{"name": "c", "image": "busybox", "args": ["$(touch owned)"], "env": [{"name": "A", "value": "$(id)"}, {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}}`,
			[]string{"htcondor spec.containers[0].args[0]", "htcondor spec.containers[0].env[0].value", "htcondor spec.containers[0].env[1].valueFrom"}},
		{"probe", `{"spec": {"containers": [{"name": "c", "image": "i", "livenessProbe": {"exec": {"command": ["cat", "\"$(id)"]}, "periodSeconds": 5}}]}}`,
			[]string{"slurm spec.containers[0].livenessProbe.exec.command[1]"}},
		{"unknown annotation of a plugin", `{"metadata": {"annotations": {"slurm-job.vk.io/new-thing": "a;b", "interlink.eu/pod-vpn": "true"}}}`,
			[]string{`htcondor metadata.annotations["slurm-job.vk.io/new-thing"]`, `slurm metadata.annotations["slurm-job.vk.io/new-thing"]`}},
		{"unknown field counts as unquoted", `{"spec": {"volumes": [{"name": "n", "nfs": {"server": "a;b", "path": "/x"}}]}}`,
			[]string{"htcondor spec.volumes[0].nfs.server", "slurm spec.volumes[0].nfs.server"}},
		{"image as an option", `{"spec": {"initContainers": [{"name": "i", "image": "--bind=/:/host"}]}}`,
			[]string{"htcondor spec.initContainers[0].image", "slurm spec.initContainers[0].image"}},
		{"HTCondor: an absolute image without image-root", `{"spec": {"containers": [{"name": "c", "image": "/images/app.sif", "command": ["--bind=/:/host"]}, {"name": "d", "image": "/cvmfs/unpacked/x"}]}}`,
			[]string{"htcondor spec.containers[0].image"}},
		{"identifiers", `{"metadata": {"name": "a/b", "namespace": "x/../y", "uid": "u.v"}, "spec": {"containers": [{"name": "c0.y", "image": "i"}]}}`,
			[]string{"htcondor metadata.name", "htcondor metadata.namespace", "htcondor metadata.uid", "htcondor spec.containers[0].name",
				"slurm metadata.namespace", "slurm metadata.uid", "slurm spec.containers[0].name"}},
		{"empty image", `{"spec": {"containers": [{"name": "c", "image": ""}]}}`,
			[]string{"htcondor spec.containers[0].image", "slurm spec.containers[0].image"}},
		{"mount path", `{"spec": {"containers": [{"name": "c", "image": "i", "volumeMounts": [{"name": "d", "mountPath": "/d,/etc:/x"}]}]}}`,
			[]string{"htcondor spec.containers[0].volumeMounts[0].mountPath", "slurm spec.containers[0].volumeMounts[0].mountPath"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := findings(CheckPod(mustValue(t, tc.pod)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("findings\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestCheckBody(t *testing.T) {
	body := mustValue(t, `{"pod": {"metadata": {"annotations": {"x": "$(id)"}}},
	  "container": [{"name": "main", "projectedvolumemaps": [{"metadata": {"name": "p"}, "data": {"tok;id": "secret", "ok/path": "$(id)"}}],
	     "secrets": [{"metadata": {"name": "s"}, "data": {"k": "JChpZCk="}}]}],
	  "jobScript": "#!/bin/sh\nid", "jobConfig": {"x": "a b"}}`).(ast.Object)
	got := findings(CheckBody(body))
	want := []string{`htcondor container[0].projectedvolumemaps[0].data["tok;id"]`, `slurm container[0].projectedvolumemaps[0].data["tok;id"]`}
	if !slices.Equal(got, want) {
		t.Errorf("findings\n got %q\nwant %q", got, want)
	}
}

func TestMessages(t *testing.T) {
	fs := CheckPod(mustValue(t, `{"metadata": {"annotations": {"slurm-job.vk.io/image-root": "/x y"}}, "spec": {"containers": [{"name": "c", "image": "i", "args": ["a b"]}], "volumes": [{"name": "v", "nfs": {"server": "x\ny"}}]}}`))
	var msgs []string
	for _, f := range fs {
		msgs = append(msgs, f.Message())
	}
	slices.Sort(msgs)
	want := []string{
		`metadata.annotations["slurm-job.vk.io/image-root"] contains a space (byte 2): the SLURM plugin writes it unquoted into the job script; allowed: a plain word (letters, digits and _ . , : / = @ + -) not starting with -`,
		`spec.containers[0].args[0] contains a space (byte 1): the HTCondor plugin writes it unquoted into the job script; allowed: a plain word (letters, digits and _ . , : / = @ + -)`,
		`spec.volumes[0].nfs.server contains a line break (byte 1): no plugin is known to quote it, so it counts as written unquoted into the job script; allowed: a plain word (letters, digits and _ . , : / = @ + -)`,
		`spec.volumes[0].nfs.server contains a line break (byte 1): no plugin is known to quote it, so it counts as written unquoted into the job script; allowed: a plain word (letters, digits and _ . , : / = @ + -)`,
	}
	if !slices.Equal(msgs, want) {
		t.Errorf("messages\n got %q\nwant %q", msgs, want)
	}
}

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		v    string
		ok   bool
	}{
		{Word, "ghcr.io/x:1@sha256:ab", true}, {Word, "a b", false}, {Word, "#x", false}, {Word, "a\u00a0b", false}, {Word, "", true},
		{Path, "/scratch/a", true}, {Path, "/a:/b", false}, {Path, "/a,/b", false},
		{RelativePath, "a/b.txt", true}, {RelativePath, "/a", false}, {RelativePath, "a//b", false}, {RelativePath, "a/../b", false}, {RelativePath, "..a", true}, {RelativePath, "a=b", false},
		{Image, "busybox", true}, {Image, "-x", false},
		{IPAddress, "10.0.0.1", true}, {IPAddress, "fe80::1", true}, {IPAddress, "fe80::1%eth0", false}, {IPAddress, "010.0.0.1", false}, {IPAddress, "FE80::1", false},
		{DoubleQuotedText, "/healthz?x=1 y", true}, {DoubleQuotedText, "$x", false}, {DoubleQuotedText, "a\"b", false}, {DoubleQuotedText, "a\\b", false}, {DoubleQuotedText, "a\nb", false},
	} {
		if err := tc.rule.Check(tc.v); (err == nil) != tc.ok {
			t.Errorf("%v.Check(%q) = %v, want ok %v", tc.rule, tc.v, err, tc.ok)
		}
	}
}

func TestTablePatterns(t *testing.T) {
	for _, r := range Table {
		if _, err := parsePattern(r.Field); err != nil {
			t.Error(err)
		}
		for _, p := range Plugins {
			if wr := r.For(p); wr.How != NotWritten && wr.Where == "" {
				t.Errorf("%s: %s writes it (%v) but the table does not say where", r.Field, p, wr.How)
			}
		}
	}
	if _, err := compile(append(slices.Clone(Table), Table[0])); err == nil {
		t.Error("a field twice compiles")
	}
}

// The HPC page's table is this package's, so that the docs cannot drift from the rules.
func TestDocsShowTheTable(t *testing.T) {
	page, err := os.ReadFile("../../docs/hpc.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := Markdown(); !strings.Contains(string(page), want) {
		t.Errorf("docs/hpc.md does not show the table scriptbound.Table makes; put this in its section \"Inert by default\":\n%s", want)
	}
}
