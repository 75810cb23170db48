package interlink

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/scriptbound"
)

// screenBody judges what a /create body carries besides the pod (decided as a pod):
// interLink's per-container ConfigMaps, Secrets and projected volume maps, whose keys
// the plugins write as file names into their scripts, and jobScript, which the SLURM
// plugin runs on the host as it is. The node's plugin is not known here, so every
// plugin package scriptbound describes is asked. It returns why the body is refused,
// naming fields and characters, never values; "" when it is not.
func screenBody(raw []byte, allowJobScript bool) string {
	v, err := ast.ValueFromReader(bytes.NewReader(raw))
	if err != nil {
		return fmt.Sprintf("the body cannot be read: %v", err)
	}
	body, ok := v.(ast.Object)
	if !ok {
		return "the body is not a JSON object"
	}
	var msgs []string
	seen := map[string]bool{}
	for _, f := range scriptbound.CheckBody(body) {
		if !seen[f.Field] {
			seen[f.Field] = true
			msgs = append(msgs, f.Message())
		}
	}
	msgs = append(msgs, missingImages(body)...)
	if t := body.Get(ast.StringTerm("jobScript")); t != nil && !allowJobScript {
		switch s := t.Value.(type) {
		case ast.Null:
		case ast.String:
			if s != "" {
				msgs = append(msgs, "jobScript is set: the SLURM plugin writes it to jobScript.sh and runs it on the HPC host as it is (--interlink.allow-job-script lets it through)")
			}
		default:
			msgs = append(msgs, "jobScript must be a string")
		}
	}
	return strings.Join(msgs, "; ")
}

// missingImages: the API server requires every container's image, but a body is only
// what the caller sent, and the plugins write a missing image as an empty word, where
// the command's first word would then stand (an option of singularity's, say).
// (scriptbound refuses an empty image wherever the pod is decided.)
func missingImages(body ast.Object) []string {
	pod, _ := termValue(body, "pod").(ast.Object)
	spec, _ := termValue(pod, "spec").(ast.Object)
	var msgs []string
	for _, list := range []string{"initContainers", "containers"} {
		cs, ok := termValue(spec, list).(*ast.Array)
		if !ok {
			continue
		}
		for i := range cs.Len() {
			c, _ := cs.Elem(i).Value.(ast.Object)
			if _, ok := termValue(c, "image").(ast.String); !ok {
				msgs = append(msgs, fmt.Sprintf("pod.spec.%s[%d].image is missing: the plugins would write an empty word where the image goes, and the command's first word would take its place", list, i))
			}
		}
	}
	return msgs
}

// termValue is obj[key], nil when obj is nil or has no such member.
func termValue(obj ast.Object, key string) ast.Value {
	if obj == nil {
		return nil
	}
	if t := obj.Get(ast.StringTerm(key)); t != nil {
		return t.Value
	}
	return nil
}
