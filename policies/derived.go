package policies

import (
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
)

// SpecDerived is what sar-bridge derives for the policy from a pod alone, so that
// policies read it ready-made instead of walking the pod on every decision:
// input.resources (PodResources), input.tolerations (PodTolerations) and input.images
// (PodImages). It depends on nothing but the pod, so the bridge keeps it per spec;
// input.hpc, which depends on who wrote the pod's annotations too, is not part of it.
type SpecDerived struct {
	Resources, Tolerations, Images ast.Value
}

// DeriveFromPod is a pod value's (input.pod's) SpecDerived.
func DeriveFromPod(pod ast.Value) SpecDerived {
	return SpecDerived{Resources: PodResources(pod), Tolerations: PodTolerations(pod), Images: PodImages(pod)}
}

// Members are d as members of the input.
func (d SpecDerived) Members() [][2]*ast.Term {
	return [][2]*ast.Term{
		ast.Item(resourcesKey, ast.NewTerm(d.Resources)),
		ast.Item(tolerationsKey, ast.NewTerm(d.Tolerations)),
		ast.Item(imagesKey, ast.NewTerm(d.Images)),
	}
}

// Size is about the bytes d holds.
func (d SpecDerived) Size() int64 {
	return astjson.Size(d.Resources) + astjson.Size(d.Tolerations) + astjson.Size(d.Images)
}
