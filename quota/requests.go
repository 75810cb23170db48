package quota

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/sar-bridge/sar-bridge/astjson"
	"github.com/sar-bridge/sar-bridge/sizedlru"
)

// ResourcePods is the count of pods in a usage or a request: 1 per pod.
const ResourcePods corev1.ResourceName = "pods"

// PodRequests is what a pod takes from its tenant's quota, summed as the scheduler
// sums it (component-helpers' PodRequests: per resource, the larger of the init
// containers' peak and the containers' sum, sidecars included, plus overhead), with
// "pods": 1. A container limit without a request counts as the request, as the API
// server's defaulting makes it for a stored pod, so a pod decided before it is stored
// and the same pod seen by the informer weigh the same.
func PodRequests(spec *corev1.PodSpec) corev1.ResourceList {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     defaultRequests(spec.Containers),
		InitContainers: defaultRequests(spec.InitContainers),
		Overhead:       spec.Overhead,
		Resources:      spec.Resources,
	}}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	reqs[ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	for name, q := range reqs {
		if q.IsZero() {
			delete(reqs, name)
		}
	}
	return reqs
}

// defaultRequests copies the containers' resources (and restart policies, which
// tell sidecars apart), a limit standing in for a missing request.
func defaultRequests(cs []corev1.Container) []corev1.Container {
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		reqs, copied := c.Resources.Requests, false
		for name, limit := range c.Resources.Limits {
			if _, ok := reqs[name]; ok {
				continue
			}
			if !copied {
				reqs, copied = cloneList(reqs), true
			}
			reqs[name] = limit
		}
		out[i] = corev1.Container{RestartPolicy: c.RestartPolicy, Resources: corev1.ResourceRequirements{Requests: reqs}}
	}
	return out
}

func cloneList(l corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(l)+2)
	for k, v := range l {
		out[k] = v
	}
	return out
}

// specResources is what PodRequests reads of a pod spec, decoded from a decision's
// input: the rest of the spec is skipped, not decoded.
type specResources struct {
	Containers     []containerResources         `json:"containers"`
	InitContainers []containerResources         `json:"initContainers"`
	Overhead       corev1.ResourceList          `json:"overhead"`
	Resources      *corev1.ResourceRequirements `json:"resources"`
}

type containerResources struct {
	Resources     corev1.ResourceRequirements    `json:"resources"`
	RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy"`
}

func (s specResources) podSpec() *corev1.PodSpec {
	spec := &corev1.PodSpec{Overhead: s.Overhead, Resources: s.Resources}
	for _, c := range s.Containers {
		spec.Containers = append(spec.Containers, corev1.Container{Resources: c.Resources, RestartPolicy: c.RestartPolicy})
	}
	for _, c := range s.InitContainers {
		spec.InitContainers = append(spec.InitContainers, corev1.Container{Resources: c.Resources, RestartPolicy: c.RestartPolicy})
	}
	return spec
}

// requestCache remembers the requests of pod specs by the hash of their canonical
// encoding: the pods of one job share a spec. Bounded by bytes: a pod may name
// thousands of extended resources.
type requestCache struct {
	byHash *sizedlru.Cache[[sha256.Size]byte, corev1.ResourceList]
}

const (
	requestCacheBytes      = 4 << 20
	requestCacheEntryBytes = 64 << 10
	requestEntryBytes      = 128 // the entry and its key
	requestResourceBytes   = 160 // a map entry: the name and a Quantity
)

func newRequestCache() requestCache {
	return requestCache{byHash: sizedlru.New[[sha256.Size]byte, corev1.ResourceList](requestCacheBytes, requestCacheEntryBytes)}
}

var specPath = []*ast.Term{ast.StringTerm("spec")}

// requests returns the requests of the pod in a decision's input (input.pod, already
// validated as a Pod by the authorizer). The returned list is shared: do not modify.
func (c requestCache) requests(pod ast.Value) (corev1.ResourceList, error) {
	spec := astjson.Find(pod, specPath)
	if spec == nil {
		return corev1.ResourceList{ResourcePods: *resource.NewQuantity(1, resource.DecimalSI)}, nil
	}
	key := sha256.Sum256(astjson.AppendCanonical(nil, spec))
	if l, ok := c.byHash.Get(key); ok {
		return l, nil
	}
	var s specResources
	if err := decodeValue(spec, &s); err != nil {
		return nil, fmt.Errorf("reading the pod's resources: %w", err)
	}
	l := PodRequests(s.podSpec())
	c.byHash.Add(key, l, requestEntryBytes+int64(len(l))*requestResourceBytes)
	return l, nil
}

// decodeValue decodes a Rego value as JSON into v.
func decodeValue(value ast.Value, v any) error {
	j, err := ast.JSON(value)
	if err != nil {
		return err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// numberValue is a quantity as a Rego number in its base unit (cores, bytes): exact,
// so the policy compares without parsing units.
func numberValue(q resource.Quantity) *ast.Term {
	return ast.NumberTerm(json.Number(q.AsDec().String()))
}

// listValue is a resource list as a Rego object of numbers.
func listValue(l corev1.ResourceList) *ast.Term {
	items := make([][2]*ast.Term, 0, len(l))
	for name, q := range l {
		items = append(items, ast.Item(ast.StringTerm(string(name)), numberValue(q)))
	}
	return ast.ObjectTerm(items...)
}

// add adds (sign 1) or subtracts (sign -1) src to dst, dropping resources that reach
// zero so that equal usages have equal lists.
func add(dst, src corev1.ResourceList, sign int) {
	for name, q := range src {
		cur := dst[name]
		if sign < 0 {
			cur.Sub(q)
		} else {
			cur.Add(q)
		}
		if cur.IsZero() {
			delete(dst, name)
		} else {
			dst[name] = cur
		}
	}
}
