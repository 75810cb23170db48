package authorizer

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	k8sjson "sigs.k8s.io/json"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/internal/sizedlru"
	"github.com/sar-bridge/sar-bridge/internal/strictjson"
	"github.com/sar-bridge/sar-bridge/internal/tenants"
	"github.com/sar-bridge/sar-bridge/policies"
)

// podRequest is a pod decision's input, decoded once: the document the policy sees, in
// its value form, and the typed fields the pipeline needs.
type podRequest struct {
	input     ast.Object
	derived   policies.SpecDerived // input.resources, input.tolerations and input.images
	hpc       ast.Value            // input.hpc: what the plugins make of the pod (annotations included, so not cached with the spec)
	Operation string
	Pod       podIdentity
	User      *inputUser
	NodeName  string // input.node.name, "" when not given
}

// decodePodInput checks a pod decision's input and decodes it for the policy (straight
// into Rego values); the pipeline reads the pod's identity from those values, and the
// user and node members as Go types. The pod must be one Kubernetes' strict decoding
// would accept: field names case-sensitive, no key twice, no field the Pod type lacks.
// "Spec", "Operator" or "ſperator" would otherwise mean one thing to a Go client that
// receives the pod (encoding/json folds case) and nothing to the policy; a pod with a
// field newer than this build is refused too, never judged blind.
//
// valid says raw is known to be valid JSON (Request.InputValid): its syntax is then not
// checked again.
func decodePodInput(raw []byte, valid bool, specs podSpecs) (podRequest, error) {
	decode := astjson.DecodeObject
	if valid {
		decode = astjson.DecodeValidObject
	}
	obj, fields, err := decode(raw, inputNames)
	if err != nil {
		return podRequest{}, inputErrorf("input: %v", err)
	}
	req := podRequest{input: obj}
	if f, ok := fields["operation"]; ok {
		switch op := f.Value.(type) {
		case ast.String:
			req.Operation = string(op)
		case ast.Null:
		default:
			return req, inputErrorf("input: operation must be a string, not %v", ast.ValueName(f.Value))
		}
	}
	if _, ok := decisionapi.Verb(req.Operation); !ok && req.Operation != "" {
		return req, inputErrorf("input.operation %q is not one of %s", req.Operation, strings.Join(decisionapi.Operations(), ", "))
	}
	pod, ok := fields["pod"]
	if _, isObject := pod.Value.(ast.Object); !ok || !isObject {
		return req, inputErrorf("input.pod is required and must be a JSON object")
	}
	if req.Pod, req.derived, err = specs.decode(pod.Raw, pod.Value); err != nil {
		return req, inputErrorf("input.pod is not a valid Pod: %v", err)
	}
	req.hpc = policies.PodHPC(pod.Value)
	if req.Pod.Namespace == "" {
		return req, inputErrorf("input.pod.metadata.namespace is required")
	}
	if req.Pod.Name == "" && req.Operation != "" && req.Operation != "create" {
		return req, inputErrorf("input.pod.metadata.name is required for %s", req.Operation)
	}
	if f, ok := fields["user"]; ok {
		if err := strictUnmarshal(f.Raw, &req.User, k8sjson.DisallowDuplicateFields); err != nil {
			return req, inputErrorf("input.user: %v", err)
		}
	}
	if f, ok := fields["node"]; ok {
		var node *struct {
			Name string `json:"name"`
		}
		if err := strictUnmarshal(f.Raw, &node, k8sjson.DisallowDuplicateFields); err != nil {
			return req, inputErrorf("input.node: %v", err)
		}
		if node != nil {
			req.NodeName = node.Name
		}
	}
	return req, nil
}

// derivedMembers are the input members the bridge derives from the pod (and, for
// input.hpc, from who wrote its annotations): policies.SpecDerived's and input.hpc, as
// decidePod adds them and DerivedInput shows them.
func (req podRequest) derivedMembers(hpc ast.Value) [][2]*ast.Term {
	return append(req.derived.Members(), ast.Item(key("hpc"), ast.NewTerm(hpc)))
}

// DerivedInput is a pod decision's input with what the bridge derives from its pod
// (policies.SpecDerived, input.hpc), checked and built by the decision's
// own code: what `sar-bridge test` evaluates a sample with, so a sample sees the
// input the server builds. Members the server reads from the cluster (review,
// namespace, node, tenant, quota) are the caller's, as given; input.hpc.writers, which
// needs the live pod, is left out.
func DerivedInput(raw []byte) (ast.Object, error) {
	req, err := decodePodInput(raw, false, newPodSpecs())
	if err != nil {
		return nil, err
	}
	return withMembers(req.input, req.derivedMembers(req.hpc)...), nil
}

// podType is a Pod's shape, for checking a pod as strict decoding would decode it.
var podType = func() *strictjson.Type {
	t, err := strictjson.For(reflect.TypeFor[corev1.Pod]())
	if err != nil {
		panic(fmt.Sprintf("the Pod type cannot be checked: %v", err)) // a build of the bridge that cannot work
	}
	return t
}()

// inputNames are the member names a pod decision's input is expected to hold: its own
// members, input.user's, and every field name of a Pod, so that decoding them allocates
// nothing.
var inputNames = astjson.NewNames(append([]string{"operation", "pod", "user", "node", "username", "uid", "groups", "extra"},
	podType.Names()...)...)

// podSpecs remembers the pod specs that were checked, by the hash of their bytes, with
// what the bridge derives from them: the pods of one Job or array job carry the same
// spec, and checking and deriving are most of a decision's cost when its policy
// evaluation comes from the memo. Bounded by bytes (issue 31): a pod of 5,000
// containers derives megabytes, and any user who may create a pod can send many.
//
// A spec is kept the second time it is seen, not the first (as the policy memo keeps
// results): the pods of a Job repeat theirs at once, while distinct specs never
// repeat, and keeping each of theirs only cost its size walk and insertion, grew the
// heap the garbage collector walks and pushed out the specs that do repeat.
type podSpecs struct {
	valid *sizedlru.Cache[[sha256.Size]byte, policies.SpecDerived]
	seen  *lru.Cache // hashes of specs checked once and not kept
}

// Bounds of podSpecs: an ordinary pod derives 1-2 KiB, a pod of 600 containers about
// 256 KiB; larger ones are derived again on every decision.
const (
	specCacheBytes      = 16 << 20
	specsSeenOnce       = 4096 // hashes of specs seen once, 32 bytes each
	specCacheEntryBytes = 256 << 10
	derivedEntryBytes   = 128 // the entry and its key, besides the values
)

func newPodSpecs() podSpecs {
	return podSpecs{valid: sizedlru.New[[sha256.Size]byte, policies.SpecDerived](specCacheBytes, specCacheEntryBytes), seen: lru.New(specsSeenOnce)}
}

// decode checks a pod, decoded to value from raw, as strict decoding into a Pod would
// (see decodePodInput), and gives the fields the pipeline reads in Go and what the
// bridge derives for the policy (policies.SpecDerived). raw must be valid
// JSON (a member DecodeObject returned). A spec seen before is not checked again.
func (p podSpecs) decode(raw []byte, value ast.Value) (podIdentity, policies.SpecDerived, error) {
	if _, ok := value.(ast.Object); !ok {
		return podIdentity{}, policies.SpecDerived{}, errors.New("not a JSON object")
	}
	spec, hasSpec := astjson.ValidMember(raw, "spec") // raw is a member DecodeObject checked: no key twice
	key := sha256.Sum256(spec)
	hit, seen := p.valid.Get(key)
	seen = seen && hasSpec
	var skip []string
	if seen {
		skip = []string{"spec"}
	}
	if err := podType.Check(value, skip...); err != nil {
		return podIdentity{}, policies.SpecDerived{}, err
	}
	if seen {
		return podIdentityOf(value), hit, nil
	}
	derived := policies.DeriveFromPod(value)
	if hasSpec {
		p.keep(key, derived)
	}
	return podIdentityOf(value), derived, nil
}

// keep remembers a checked spec's derived values when the spec was checked before, and
// otherwise that it was.
func (p podSpecs) keep(key [sha256.Size]byte, derived policies.SpecDerived) {
	if _, again := p.seen.Get(key); !again {
		p.seen.Add(key, struct{}{})
		return
	}
	p.seen.Remove(key)
	p.valid.Add(key, derived, derivedEntryBytes+derived.Size())
}

// Paths of the pod fields the pipeline reads in Go.
var (
	pathName               = []*ast.Term{key("metadata"), key("name")}
	pathNamespace          = []*ast.Term{key("metadata"), key("namespace")}
	pathUID                = []*ast.Term{key("metadata"), key("uid")}
	pathChargedLabel       = []*ast.Term{key("metadata"), key("labels"), key(tenants.ChargedLabel)}
	pathServiceAccountName = []*ast.Term{key("spec"), key("serviceAccountName")}
	pathServiceAccount     = []*ast.Term{key("spec"), key("serviceAccount")}
	pathNodeName           = []*ast.Term{key("spec"), key("nodeName")}
)

// podIdentity is what the pipeline reads of a pod in Go, read from the same value the
// policy sees (a pod podType checked): "" where the pod has no such field, or null.
type podIdentity struct {
	Namespace, Name string
	UID             types.UID
	ServiceAccount  string // spec.serviceAccountName, else the deprecated spec.serviceAccount
	NodeName        string // spec.nodeName
	Charged         string // the label tenants.ChargedLabel, as the input claims it
}

func podIdentityOf(pod ast.Value) podIdentity {
	str := func(path []*ast.Term) string {
		s, _ := astjson.Find(pod, path).(ast.String)
		return string(s)
	}
	id := podIdentity{Namespace: str(pathNamespace), Name: str(pathName), UID: types.UID(str(pathUID)),
		ServiceAccount: str(pathServiceAccountName), NodeName: str(pathNodeName), Charged: str(pathChargedLabel)}
	if id.ServiceAccount == "" {
		id.ServiceAccount = str(pathServiceAccount)
	}
	return id
}

// strictUnmarshal decodes with exact (case-sensitive) field names, and with the given
// strictness.
func strictUnmarshal(data []byte, v any, strict ...k8sjson.StrictOption) error {
	strictErrs, err := k8sjson.UnmarshalStrict(data, v, strict...)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return errors.Join(strictErrs...)
	}
	return nil
}

// The enrichment the bridge adds to the input, built directly as Rego values.

// objectValues keeps the values of namespaces and nodes by UID and resourceVersion:
// the informer's objects change only with their version, and most decisions name the
// same few. Values are never modified once built, so decisions share them. Bounded by
// bytes: a namespace's annotations alone may hold 256 KiB.
type objectValues struct {
	cache *sizedlru.Cache[objectVersion, ast.Value]
}

const (
	objectCacheBytes      = 16 << 20
	objectCacheEntryBytes = 1 << 20
	objectEntryBytes      = 192 // the entry and its key, besides the value
)

type objectVersion struct {
	kind    string
	uid, rv string
}

func newObjectValues() objectValues {
	return objectValues{cache: sizedlru.New[objectVersion, ast.Value](objectCacheBytes, objectCacheEntryBytes)}
}

// get returns the cached value of an object at this version, or builds and keeps it.
func (o objectValues) get(kind string, meta metav1.Object, build func() ast.Value) ast.Value {
	key := objectVersion{kind: kind, uid: string(meta.GetUID()), rv: meta.GetResourceVersion()}
	if key.uid == "" || key.rv == "" {
		return build() // not from an informer: nothing identifies this version
	}
	if v, ok := o.cache.Get(key); ok {
		return v
	}
	v := build()
	o.cache.Add(key, v, objectEntryBytes+int64(len(key.kind)+len(key.uid)+len(key.rv))+astjson.Size(v))
	return v
}

// getFor returns the cached value built for key (what identifies it, e.g. a subject's
// names), or builds and keeps it: the subject and review members repeat across a
// tenant's decisions and cost two dozen allocations each to build.
func (o objectValues) getFor(kind string, key []byte, build func() ast.Value) ast.Value {
	k := objectVersion{kind: kind, uid: string(key)}
	if v, ok := o.cache.Get(k); ok {
		return v
	}
	v := build()
	o.cache.Add(k, v, objectEntryBytes+int64(len(k.kind)+len(k.uid))+astjson.Size(v))
	return v
}

// appendField appends s, length first, so that no two lists of fields give one key.
func appendField(b []byte, s string) []byte {
	return append(append(strconv.AppendInt(b, int64(len(s)), 10), ':'), s...)
}

// subjectKey identifies what subjectValue builds from s.
func subjectKey(s Subject) []byte {
	b := make([]byte, 0, 128)
	b = appendField(appendField(b, s.Username), s.UID)
	b = strconv.AppendInt(b, int64(len(s.Groups)), 10)
	for _, g := range s.Groups {
		b = appendField(b, g)
	}
	extra := make([]string, 0, len(s.Extra))
	for k := range s.Extra {
		extra = append(extra, k)
	}
	slices.Sort(extra)
	for _, k := range extra {
		b = strconv.AppendInt(appendField(b, k), int64(len(s.Extra[k])), 10)
		for _, v := range s.Extra[k] {
			b = appendField(b, v)
		}
	}
	return b
}

// key identifies what value builds from s.
func (s reviewSummary) key() []byte {
	b := make([]byte, 0, 128)
	b = strconv.AppendBool(strconv.AppendBool(b, s.Allowed), s.Denied)
	b = strconv.AppendInt(appendField(b, s.Reason), int64(len(s.Attributes)), 10)
	for _, a := range s.Attributes {
		for _, f := range [...]string{a.Namespace, a.Verb, a.Group, a.Resource, a.Name} {
			b = appendField(b, f)
		}
	}
	return b
}

// keyTerms are the member names of the input documents the bridge builds on every
// decision, and of the decision documents it reads, allocated once.
var keyTerms = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, k := range []string{
		"operation", "subject", "front_door", "tenant", "tenant_label", "group", "namespace", "node", "review", "resources", "tolerations", "images", "hpc",
		"username", "uid", "groups", "extra", "name", "labels", "annotations", "found", "taints", "allocatable",
		"key", "value", "effect", "metadata", "spec", "serviceAccountName", "serviceAccount", "nodeName", "allowed", "denied", "reason", "attributes", "verb", "resource",
		"modifications", "violations", "rule", "message", "action", // read from decisions
	} {
		m[k] = ast.StringTerm(k)
	}
	return m
}()

// key is the term of a member name of the input.
func key(name string) *ast.Term {
	if t, ok := keyTerms[name]; ok {
		return t
	}
	return ast.StringTerm(name)
}

// withMembers is obj with members added, replacing those of the same name, built at its
// final size rather than grown one member at a time.
func withMembers(obj ast.Object, members ...[2]*ast.Term) ast.Object {
	items := make([][2]*ast.Term, 0, obj.Len()+len(members))
	obj.Foreach(func(k, v *ast.Term) {
		for _, m := range members {
			if k.Value.Compare(m[0].Value) == 0 {
				return
			}
		}
		items = append(items, [2]*ast.Term{k, v})
	})
	return ast.NewObject(append(items, members...)...)
}

func subjectValue(s Subject) ast.Value {
	extra := make([][2]*ast.Term, 0, len(s.Extra))
	for k, v := range s.Extra {
		extra = append(extra, ast.Item(ast.StringTerm(k), stringsTerm(v)))
	}
	return ast.NewObject(
		ast.Item(key("username"), ast.StringTerm(s.Username)),
		ast.Item(key("uid"), ast.StringTerm(s.UID)),
		ast.Item(key("groups"), stringsTerm(s.Groups)),
		ast.Item(key("extra"), ast.ObjectTerm(extra...)),
	)
}

func namespaceValue(name string, ns *corev1.Namespace) ast.Value {
	var labels, annotations map[string]string
	if ns != nil {
		name, labels, annotations = ns.Name, ns.Labels, ns.Annotations
	}
	return ast.NewObject(
		ast.Item(key("name"), ast.StringTerm(name)),
		ast.Item(key("labels"), stringMapTerm(labels)),
		ast.Item(key("annotations"), stringMapTerm(annotations)),
	)
}

// nodeValue describes the target node as the cluster knows it, whatever the caller said.
func nodeValue(name string, node *corev1.Node) ast.Value {
	if name == "" {
		return ast.Null{}
	}
	if node == nil {
		return ast.NewObject(
			ast.Item(key("name"), ast.StringTerm(name)),
			ast.Item(key("found"), ast.InternedTerm(false)),
			ast.Item(key("labels"), ast.ObjectTerm()),
			ast.Item(key("taints"), ast.ArrayTerm()),
			ast.Item(key("allocatable"), ast.ObjectTerm()),
		)
	}
	taints := make([]*ast.Term, 0, len(node.Spec.Taints))
	for _, t := range node.Spec.Taints {
		taints = append(taints, ast.ObjectTerm(
			ast.Item(key("key"), ast.StringTerm(t.Key)),
			ast.Item(key("value"), ast.StringTerm(t.Value)),
			ast.Item(key("effect"), ast.StringTerm(string(t.Effect))),
		))
	}
	allocatable := make([][2]*ast.Term, 0, len(node.Status.Allocatable))
	for k, q := range node.Status.Allocatable {
		allocatable = append(allocatable, ast.Item(ast.StringTerm(string(k)), ast.StringTerm(q.String())))
	}
	return ast.NewObject(
		ast.Item(key("name"), ast.StringTerm(node.Name)),
		ast.Item(key("found"), ast.InternedTerm(true)),
		ast.Item(key("labels"), stringMapTerm(node.Labels)),
		ast.Item(key("taints"), ast.ArrayTerm(taints...)),
		ast.Item(key("allocatable"), ast.ObjectTerm(allocatable...)),
	)
}

func (s reviewSummary) value() ast.Value {
	attrs := make([]*ast.Term, 0, len(s.Attributes))
	for _, a := range s.Attributes {
		attrs = append(attrs, ast.ObjectTerm(
			ast.Item(key("namespace"), ast.StringTerm(a.Namespace)),
			ast.Item(key("verb"), ast.StringTerm(a.Verb)),
			ast.Item(key("group"), ast.StringTerm(a.Group)),
			ast.Item(key("resource"), ast.StringTerm(a.Resource)),
			ast.Item(key("name"), ast.StringTerm(a.Name)),
		))
	}
	return ast.NewObject(
		ast.Item(key("allowed"), ast.BooleanTerm(s.Allowed)),
		ast.Item(key("denied"), ast.BooleanTerm(s.Denied)),
		ast.Item(key("reason"), ast.StringTerm(s.Reason)),
		ast.Item(key("attributes"), ast.ArrayTerm(attrs...)),
	)
}

func stringsTerm(v []string) *ast.Term {
	terms := make([]*ast.Term, len(v))
	for i, s := range v {
		terms[i] = ast.StringTerm(s)
	}
	return ast.ArrayTerm(terms...)
}

func stringMapTerm(m map[string]string) *ast.Term {
	items := make([][2]*ast.Term, 0, len(m))
	for k, v := range m {
		items = append(items, ast.Item(ast.StringTerm(k), ast.StringTerm(v)))
	}
	return ast.ObjectTerm(items...)
}

// frontDoorTerms are the front doors' input values, allocated once.
var frontDoorTerms = map[FrontDoor]*ast.Term{
	FrontDoorRelay:     ast.StringTerm(string(FrontDoorRelay)),
	FrontDoorAdmission: ast.StringTerm(string(FrontDoorAdmission)),
	FrontDoorDataAPI:   ast.StringTerm(string(FrontDoorDataAPI)),
}

// frontDoorTerm is input.front_door: the front door's name, the Data API's when unset.
func frontDoorTerm(f FrontDoor) *ast.Term {
	if t, ok := frontDoorTerms[f]; ok {
		return t
	}
	return ast.StringTerm(f.name())
}

// stringOrNull is s, or null when it is empty.
func stringOrNull(s string) *ast.Term {
	if s == "" {
		return ast.NullTerm()
	}
	return ast.StringTerm(s)
}

// memoSalt is what a decision's result depends on beyond the policy and the input
// fields it reads: the reviews' outcome and the versions of the namespace and node
// the input was built from. Lengths prefix each part.
func memoSalt(summary reviewSummary, ns *corev1.Namespace, node *corev1.Node, tenant, group string) []byte {
	parts := [...]string{strconv.FormatBool(summary.Allowed) + " " + strconv.FormatBool(summary.Denied), summary.Reason, tenant, group, "", "", ""}
	if ns != nil {
		parts[4], parts[5] = string(ns.UID), ns.ResourceVersion
	}
	if node != nil {
		parts[6] = node.ResourceVersion
	}
	n := 0
	for _, p := range parts {
		n += len(p) + 8
	}
	b := make([]byte, 0, n) // one allocation: the salt is built on every decision
	for _, p := range parts {
		b = appendField(b, p)
	}
	return b
}
