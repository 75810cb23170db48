package policies

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// TestImageReferenceIsTheRules: input.images normalises with the images rule's own
// grammar, so the fast path reads the repositories the rule would.
func TestImageReferenceIsTheRules(t *testing.T) {
	src, err := os.ReadFile("rules/images/images.rego")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "`"+ImageReference+"`") {
		t.Errorf("rules/images/images.rego's _image_name no longer uses policies.ImageReference; make them the same")
	}
}

// imageReferences are references of every shape the grammar tells apart.
var imageReferences = []string{
	"busybox", "busybox:1.36", "library/busybox", "docker.io/busybox", "index.docker.io/busybox",
	"docker.io/library/busybox:latest", "ghcr.io/example/app:v1", "ghcr.io/example/app@sha256:" + strings.Repeat("a", 64),
	"ghcr.io/example/app:v1@sha256:" + strings.Repeat("0", 64), "localhost/app", "localhost:5000/app", "registry.example.org:5000/team/app",
	"Upper/app", "example/app", "a/b/c/d", "my_app", "my__app", "my---app", "my.app", "registry.example.org.evil.com/x",
	"", " ", "BusyBox", "busybox:", "busybox@sha256:abc", "-busybox", "busybox/", "/busybox", "ghcr.io//app", "ghcr.io/app:" + strings.Repeat("x", 129),
	"ghcr.io/app:" + strings.Repeat("x", 128), "a..b", "a_-b", "docker.io", "ghcr.io", "x:y/z", "ünicode/app", "app\n", "app:tag\x00",
}

// TestImageRepositoryIsTheRules: ImageRepository gives the repository the rule's
// _image_name gives, and fails where it is undefined, for every reference above.
func TestImageRepositoryIsTheRules(t *testing.T) {
	e := newEvaluator(t, Options{})
	q, err := rego.New(rego.Query(`r := data.interlink.authz._image_name(input)`), rego.Compiler(e.compiler), rego.Store(e.store)).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range imageReferences {
		rs, err := q.Eval(context.Background(), rego.EvalInput(ref))
		if err != nil {
			t.Fatal(err)
		}
		want, wantOK := "", len(rs) == 1
		if wantOK {
			want = rs[0].Bindings["r"].(string)
		}
		got, ok := ImageRepository(ref)
		if got != want || ok != wantOK {
			t.Errorf("ImageRepository(%q) = %q, %v; the rule's _image_name: %q, %v", ref, got, ok, want, wantOK)
		}
	}
}

func TestPodImages(t *testing.T) {
	for _, tc := range []struct{ name, pod, want string }{
		{"every list, in order", `{"spec": {
			"containers": [{"name": "main", "image": "busybox:1.36"}, {"name": "side", "image": "ghcr.io/x/y@sha256:` + strings.Repeat("a", 64) + `"}],
			"initContainers": [{"name": "init", "image": "registry.example.org:5000/a"}],
			"ephemeralContainers": [{"name": "debug", "image": "Not A Reference"}]}}`,
			`[{"kind": "container", "name": "main", "repository": "docker.io/library/busybox"},
			  {"kind": "container", "name": "side", "repository": "ghcr.io/x/y"},
			  {"kind": "init container", "name": "init", "repository": "registry.example.org:5000/a"},
			  {"kind": "ephemeral container", "name": "debug", "repository": null}]`},
		{"no image, no name, not an object", `{"spec": {"containers": [{}, {"name": 7, "image": 7}, "x"], "initContainers": null}}`,
			`[{"kind": "container", "name": "", "repository": null},
			  {"kind": "container", "name": "", "repository": null},
			  {"kind": "container", "name": "", "repository": null}]`},
		{"no spec", `{}`, `[]`},
		{"no containers", `{"spec": {}}`, `[]`},
		{"a list that is not one", `{"spec": {"containers": [], "initContainers": {"a": {}}}}`, `null`},
		{"a spec that is not an object", `{"spec": []}`, `null`},
		{"a pod that is not an object", `"pod"`, `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ast.JSON(PodImages(ast.MustParseTerm(tc.pod).Value))
			if err != nil {
				t.Fatal(err)
			}
			var want any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			if string(gj) != string(wj) {
				t.Errorf("PodImages\n got %s\nwant %s", gj, wj)
			}
		})
	}
}
