package tenants

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/internal/sizedlru"
	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
)

// QuotaInput is input.quota for a create of a tenant with a quota (quota.rego):
//
//	{"tenant": used, "node": used on the target node, "request": what the pod holds,
//	 "hard": the tenant's hard amounts, "node_hard": its hard amounts on the node}
//
// each {resource: number} in base units (cores, bytes), so the policy compares without
// parsing quantities; "node" and "node_hard" are {} without a capped target node.
func QuotaInput(t *v1alpha1.OffloadTenant, node string, amounts corev1.ResourceList) ast.Value {
	return ast.NewObject(
		ast.Item(ast.StringTerm("tenant"), listValue(t.Status.Used)),
		ast.Item(ast.StringTerm("node"), listValue(t.Status.NodesUsed[node])),
		ast.Item(ast.StringTerm("request"), listValue(amounts)),
		ast.Item(ast.StringTerm("hard"), listValue(t.Spec.Hard)),
		ast.Item(ast.StringTerm("node_hard"), listValue(t.Spec.Nodes[node])),
	)
}

// listValue is a resource list as a Rego object of numbers, exact (a quantity's decimal).
func listValue(l corev1.ResourceList) *ast.Term {
	items := make([][2]*ast.Term, 0, len(l))
	for name, q := range l {
		items = append(items, ast.Item(ast.StringTerm(string(name)), ast.NumberTerm(json.Number(q.AsDec().String()))))
	}
	return ast.ObjectTerm(items...)
}

// AmountsCache remembers PodAmounts of pods by the hash of the canonical encoding of
// what it reads, the spec's resources and the flags annotation (the pods of one job
// share both), bounded in bytes. Safe for concurrent use.
type AmountsCache struct {
	byHash *sizedlru.Cache[[sha256.Size]byte, corev1.ResourceList]
}

// Bounds of AmountsCache: a pod may name thousands of extended resources.
const (
	amountsCacheBytes      = 4 << 20
	amountsCacheEntryBytes = 64 << 10
	amountsEntryBytes      = 128 // the entry and its key
	amountsResourceBytes   = 160 // a map entry: the name and a Quantity
)

// NewAmountsCache returns an empty cache.
func NewAmountsCache() *AmountsCache {
	return &AmountsCache{byHash: sizedlru.New[[sha256.Size]byte, corev1.ResourceList](amountsCacheBytes, amountsCacheEntryBytes)}
}

var (
	specPath  = []*ast.Term{ast.StringTerm("spec")}
	flagsPath = []*ast.Term{ast.StringTerm("metadata"), ast.StringTerm("annotations"), ast.StringTerm(slurmjob.FlagsAnnotation)}
	// What PodAmounts reads of a spec, and of each of its containers.
	specAmountKeys      = []*ast.Term{ast.StringTerm("containers"), ast.StringTerm("initContainers"), ast.StringTerm("overhead"), ast.StringTerm("resources")}
	containersKey       = ast.StringTerm("containers")
	initContainersKey   = ast.StringTerm("initContainers")
	containerAmountKeys = []*ast.Term{ast.StringTerm("resources"), ast.StringTerm("restartPolicy")}
)

// Amounts is PodAmounts of the pod in a decision's input (input.pod, already checked as
// a Pod). The returned list is shared: do not modify it.
func (c *AmountsCache) Amounts(pod ast.Value) (corev1.ResourceList, error) {
	spec := astjson.Find(pod, specPath)
	if spec == nil {
		return corev1.ResourceList{ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}, nil
	}
	// Keyed by what PodAmounts reads only: the pods of an indexed Job differ in their
	// hostnames and index variables, never in their resources.
	sized := amountsOf(spec)
	flags := astjson.Find(pod, flagsPath)
	key := sha256.Sum256(astjson.AppendCanonical(astjson.AppendCanonical(nil, sized), flags))
	if l, ok := c.byHash.Get(key); ok {
		return l, nil
	}
	j, err := ast.JSON(sized)
	if err != nil {
		return nil, fmt.Errorf("reading the pod's resources: %w", err)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("reading the pod's resources: %w", err)
	}
	var p corev1.Pod
	if err := json.Unmarshal(b, &p.Spec); err != nil {
		return nil, fmt.Errorf("reading the pod's resources: %w", err)
	}
	if s, ok := flags.(ast.String); ok {
		p.Annotations = map[string]string{slurmjob.FlagsAnnotation: string(s)}
	}
	l := PodAmounts(&p)
	c.byHash.Add(key, l, amountsEntryBytes+int64(len(l))*amountsResourceBytes)
	return l, nil
}

// amountsOf is the part of a pod spec PodAmounts reads: the containers' and init
// containers' resources and restart policies, in order, the overhead and the pod's
// resources. A spec that is not an object, or containers that are not arrays of
// objects, are kept whole (the decode then fails as it would have).
func amountsOf(spec ast.Value) ast.Value {
	obj, ok := spec.(ast.Object)
	if !ok {
		return spec
	}
	out := ast.NewObject()
	for _, k := range specAmountKeys {
		v := obj.Get(k)
		if v == nil {
			continue
		}
		if k.Equal(containersKey) || k.Equal(initContainersKey) {
			v = containerAmounts(v)
		}
		out.Insert(k, v)
	}
	return out
}

func containerAmounts(cs *ast.Term) *ast.Term {
	arr, ok := cs.Value.(*ast.Array)
	if !ok {
		return cs
	}
	out := make([]*ast.Term, arr.Len())
	for i := range arr.Len() {
		c, ok := arr.Elem(i).Value.(ast.Object)
		if !ok {
			return cs
		}
		kept := ast.NewObject()
		for _, k := range containerAmountKeys {
			if v := c.Get(k); v != nil {
				kept.Insert(k, v)
			}
		}
		out[i] = ast.NewTerm(kept)
	}
	return ast.ArrayTerm(out...)
}
