package policies

import (
	"regexp"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

// sar-bridge's input.images gives policies the repository each container's image
// names, normalised as container runtimes do (the images rule's _image_name:
// busybox:1.36 is docker.io/library/busybox, a tag or digest is dropped), so that a
// rule on registries compares prefixes instead of running a regular expression per
// container on every decision (the images rule's fast check reads it):
//
//	[{"kind": "container" | "init container" | "ephemeral container", "name": n, "repository": r}, …]
//
// containers, then init containers, then ephemeral containers, in their order; name is
// "" when not a string; repository is null when the image is absent or not an image
// reference. input.images is null when the pod or its spec is not an object or a
// container list is neither a list nor null.

// ImageReference is the grammar of an image reference the images rule normalises
// (policies/rules/images/images.rego, _image_name), with the registry and the path as
// its two groups; TestImageReferenceIsTheRules keeps the two the same.
const ImageReference = `^(?:([^/]*[.:][^/]*|localhost|[^/]*[A-Z][^/]*)/)?([a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$`

var imageReference = regexp.MustCompile(ImageReference)

// Keys and values of input.images, allocated once.
var (
	imageKey, repositoryKey, kindKey = ast.StringTerm("image"), ast.StringTerm("repository"), ast.StringTerm("kind")
	imagesKey                        = ast.StringTerm("images")
	imageLists                       = [...]struct{ list, kind *ast.Term }{
		{containersKey, ast.StringTerm("container")},
		{ast.StringTerm("initContainers"), ast.StringTerm("init container")},
		{ast.StringTerm("ephemeralContainers"), ast.StringTerm("ephemeral container")},
	}
	emptyName = ast.StringTerm("")
)

// PodImages is input.images for a pod value (input.pod), or null.
func PodImages(pod ast.Value) ast.Value {
	spec, ok := podSpec(pod)
	if !ok {
		return ast.Null{}
	}
	var out []*ast.Term
	for _, l := range imageLists {
		if spec == nil {
			break
		}
		var list *ast.Array
		switch v := astjson.Member(spec, l.list).(type) {
		case nil, ast.Null:
			continue
		case *ast.Array:
			list = v
		default:
			return ast.Null{}
		}
		for i := range list.Len() {
			out = append(out, imageEntry(l.kind, list.Elem(i).Value))
		}
	}
	return ast.NewArray(out...)
}

// imageEntry is a container's member of input.images.
func imageEntry(kind *ast.Term, container ast.Value) *ast.Term {
	name, repository := emptyName, ast.InternedNullTerm
	if c, ok := container.(ast.Object); ok {
		if n, ok := stringMember(c, nameKey); ok && n != "" {
			name = ast.StringTerm(strings.Clone(n))
		}
		if image, ok := stringMember(c, imageKey); ok {
			if r, ok := ImageRepository(image); ok {
				repository = ast.StringTerm(r)
			}
		}
	}
	return ast.ObjectTerm(
		[2]*ast.Term{kindKey, kind},
		[2]*ast.Term{nameKey, name},
		[2]*ast.Term{repositoryKey, repository},
	)
}

// ImageRepository is the repository an image reference names, as the images rule
// normalises it (_image_name and _image_join); false when image is not a reference.
func ImageRepository(image string) (string, bool) {
	m := imageReference.FindStringSubmatch(image)
	if m == nil {
		return "", false
	}
	registry, path := m[1], m[2]
	switch {
	case registry != "" && registry != "docker.io" && registry != "index.docker.io":
		return registry + "/" + path, true
	case strings.Contains(path, "/"):
		return "docker.io/" + path, true
	default:
		return "docker.io/library/" + path, true
	}
}
