package tenants

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
	"github.com/sar-bridge/sar-bridge/internal/virtualpods"
)

// ChargedAmountsAnnotation holds, on a pod the reconciler confirmed, the amounts it was
// charged (EncodeAmounts): what the pod holds of its tenant's quota until it ends.
const ChargedAmountsAnnotation = "sar-bridge.io/charged-amounts"

// PodSource is what the reconciler follows the pods of virtual nodes with: a
// virtualpods.Follower (given PodTransform), one per leadership term.
type PodSource interface {
	AddEventHandler(virtualpods.Handler) error
	Start(ctx context.Context) error
	HasSynced() bool
	Stop()
}

// EncodeAmounts is the canonical text of amounts: name=quantity pairs sorted by name,
// comma-separated, each quantity in its canonical form ("cpu=2,memory=4Gi,pods=1").
// Resource names hold neither ',' nor '='.
func EncodeAmounts(l corev1.ResourceList) string {
	parts := make([]string, 0, len(l))
	for _, name := range sortedNames(l) {
		q := l[name]
		parts = append(parts, string(name)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// DecodeAmounts reads EncodeAmounts' text.
func DecodeAmounts(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("amount %q is not name=quantity", part)
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("amount %q: %w", part, err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// PodTransform keeps of a pod what the reconciler reads (identity, node, phase, the
// charge label and annotation, what PodAmounts reads: the resources of its containers,
// and of the flags annotation only --cpus-per-task and --mem) before a pod informer
// stores it: pass it as virtualpods.Options.Transform.
func PodTransform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	annotations := keep(p.Annotations, ChargedAmountsAnnotation)
	if flags := readJobFlags(p.Annotations[slurmjob.FlagsAnnotation]).String(); flags != "" {
		if annotations == nil {
			annotations = make(map[string]string, 1)
		}
		annotations[slurmjob.FlagsAnnotation] = flags
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			Labels:      keep(p.Labels, ChargedLabel),
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			Containers:     resourcesOnly(p.Spec.Containers),
			InitContainers: resourcesOnly(p.Spec.InitContainers),
			Overhead:       p.Spec.Overhead,
			Resources:      p.Spec.Resources,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}, nil
}

func keep(m map[string]string, key string) map[string]string {
	v, ok := m[key]
	if !ok {
		return nil
	}
	return map[string]string{key: v}
}

// resourcesOnly keeps what PodAmounts reads of containers.
func resourcesOnly(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Resources: c.Resources}
	}
	return out
}

// podRecord is what the reconciler knows of one pod on a virtual node. Records are not
// modified once made: a snapshot may share them.
type podRecord struct {
	uid                   types.UID
	namespace, name, node string
	labelled              bool                // carries ChargedLabel (of any tenant)
	label                 string              // its value
	charged               corev1.ResourceList // the annotation's amounts; nil when absent or unreadable
	spec                  corev1.ResourceList // PodAmounts of the pod as it is now
	terminated            bool
}

// same says whether two records would count alike.
func (r *podRecord) same(o *podRecord) bool {
	return r.uid == o.uid && r.namespace == o.namespace && r.name == o.name && r.node == o.node &&
		r.labelled == o.labelled && r.label == o.label && r.terminated == o.terminated &&
		(r.charged == nil) == (o.charged == nil) && equality.Semantic.DeepEqual(r.charged, o.charged) &&
		equality.Semantic.DeepEqual(r.spec, o.spec)
}

func newRecord(node string, p *corev1.Pod) *podRecord {
	r := &podRecord{
		uid: p.UID, namespace: p.Namespace, name: p.Name, node: node,
		spec:       PodAmounts(p),
		terminated: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
	}
	r.label, r.labelled = p.Labels[ChargedLabel]
	if text, ok := p.Annotations[ChargedAmountsAnnotation]; ok {
		// An unreadable annotation (written by someone else) counts as none: the pod
		// then holds its spec's amounts.
		if amounts, err := DecodeAmounts(text); err == nil {
			r.charged = amounts
		}
	}
	return r
}

// confirmation is a pod this term labelled, until its informer shows the label: the
// watch may deliver the patch well after the status write that relies on it.
type confirmation struct {
	tenant  string
	amounts corev1.ResourceList
}

// podView is one leadership term's view of the pods of virtual nodes: a
// virtualpods.Handler. It is safe for concurrent use.
type podView struct {
	changed  func(namespace string) // a pod of the namespace changed in a way that counts
	released func(reason string)    // a confirmed pod stopped counting

	mu   sync.Mutex
	pods map[types.UID]*podRecord
	// vanished are confirmed pods that left the informer without being seen deleted or
	// ended: their virtual node went away or stopped being virtual, and the HPC job may
	// still run. They count until a GET says they are gone.
	vanished  map[types.UID]*podRecord
	confirmed map[types.UID]confirmation
}

func newPodView(changed func(string), released func(string)) *podView {
	return &podView{changed: changed, released: released,
		pods: map[types.UID]*podRecord{}, vanished: map[types.UID]*podRecord{}, confirmed: map[types.UID]confirmation{}}
}

var _ virtualpods.Handler = (*podView)(nil)

func (v *podView) OnAdd(node string, p *corev1.Pod) { v.upsert(node, p) }

func (v *podView) OnUpdate(node string, _, p *corev1.Pod) { v.upsert(node, p) }

func (v *podView) upsert(node string, p *corev1.Pod) {
	rec := newRecord(node, p)
	v.mu.Lock()
	prev := v.pods[rec.uid]
	v.pods[rec.uid] = rec
	delete(v.vanished, rec.uid)
	if c, ok := v.confirmed[rec.uid]; ok && rec.label == c.tenant && rec.charged != nil {
		delete(v.confirmed, rec.uid) // the informer has caught up
	}
	ended := prev != nil && !prev.terminated && rec.terminated && v.countedLocked(rec)
	v.mu.Unlock()
	if ended {
		v.released("ended")
	}
	if prev == nil || !prev.same(rec) {
		v.changed(rec.namespace)
	}
}

func (v *podView) OnDelete(_ string, p *corev1.Pod) {
	v.mu.Lock()
	rec, ok := v.pods[p.UID]
	delete(v.pods, p.UID)
	counted := ok && !rec.terminated && v.countedLocked(rec)
	deleted := counted && p.DeletionTimestamp != nil
	switch {
	case deleted || !counted:
		delete(v.confirmed, p.UID)
	default:
		// Gone from the informer, not seen deleted: the round asks the API.
		v.vanished[p.UID] = rec
	}
	v.mu.Unlock()
	if deleted {
		v.released("deleted")
	}
	if ok {
		v.changed(rec.namespace)
	}
}

// countedLocked says whether a pod holds a confirmed charge. Called with v.mu held.
func (v *podView) countedLocked(rec *podRecord) bool {
	_, ok := v.confirmed[rec.uid]
	return rec.labelled || ok
}

// confirm remembers that this term labelled the pod for tenant with amounts.
func (v *podView) confirm(uid types.UID, tenant string, amounts corev1.ResourceList) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.confirmed[uid] = confirmation{tenant: tenant, amounts: amounts}
}

// forget drops a vanished pod a GET found gone.
func (v *podView) forget(uid types.UID) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.vanished[uid]; ok {
		delete(v.vanished, uid)
		delete(v.confirmed, uid)
	}
}

// vanishedOf lists the vanished pods of the namespaces tenantOf maps to tenant.
func (v *podView) vanishedOf(tenant string, tenantOf func(string) string) []*podRecord {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []*podRecord
	for _, rec := range v.vanished {
		if tenantOf(rec.namespace) == tenant {
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].uid < out[j].uid })
	return out
}

// snapshot copies what a round reads: records are shared, maps are not.
func (v *podView) snapshot() *podSnapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := &podSnapshot{
		byUID:     make(map[types.UID]*podRecord, len(v.pods)+len(v.vanished)),
		byName:    make(map[types.NamespacedName][]*podRecord, len(v.pods)+len(v.vanished)),
		confirmed: make(map[types.UID]confirmation, len(v.confirmed)),
	}
	for _, m := range []map[types.UID]*podRecord{v.pods, v.vanished} {
		for uid, rec := range m {
			s.byUID[uid] = rec
			key := types.NamespacedName{Namespace: rec.namespace, Name: rec.name}
			s.byName[key] = append(s.byName[key], rec)
		}
	}
	for uid, c := range v.confirmed {
		s.confirmed[uid] = c
	}
	return s
}

// podSnapshot is the pods as one round sees them.
type podSnapshot struct {
	byUID     map[types.UID]*podRecord
	byName    map[types.NamespacedName][]*podRecord
	confirmed map[types.UID]confirmation
}

// find is the pod a charge was made for: by UID when the charge knows it, else by
// namespace and name (a running pod before an ended one of the same name).
func (s *podSnapshot) find(c chargeID) *podRecord {
	if c.uid != "" {
		return s.byUID[c.uid]
	}
	var found *podRecord
	for _, rec := range s.byName[types.NamespacedName{Namespace: c.namespace, Name: c.name}] {
		if found == nil || found.terminated && !rec.terminated {
			found = rec
		}
	}
	return found
}

// holding is a pod counted in its tenant's usage, with what it holds.
type holding struct {
	rec     *podRecord
	amounts corev1.ResourceList
}

// holdings lists the pods counted against tenant: confirmed (labelled, or patched by
// this term) and not ended, in the tenant's namespaces, whatever tenant the label
// names (a label copied into another tenant's namespace charges that namespace's
// tenant). A pod holds the larger of what it was charged and what it asks now
// (PodAmounts of the live pod), per resource: a resize, or a flags annotation changed,
// that shrinks an offloaded pod frees nothing (the HPC job keeps its size), and a label
// or annotation written by hand cannot make a pod count less than it asks.
func (s *podSnapshot) holdings(tenant string, tenantOf func(string) string) []holding {
	var out []holding
	tenants := map[string]string{}
	for uid, rec := range s.byUID {
		c, patched := s.confirmed[uid]
		if rec.terminated || !rec.labelled && !patched {
			continue
		}
		t, ok := tenants[rec.namespace]
		if !ok {
			t = tenantOf(rec.namespace)
			tenants[rec.namespace] = t
		}
		if t != tenant {
			continue
		}
		amounts := maxAmounts(rec.spec, rec.charged, c.amounts)
		amounts[ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
		out = append(out, holding{rec: rec, amounts: amounts})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rec.uid < out[j].rec.uid })
	return out
}

// maxAmounts is the larger of each resource over the lists, as a new list.
func maxAmounts(lists ...corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, l := range lists {
		for name, q := range l {
			if cur, ok := out[name]; !ok || q.Cmp(cur) > 0 {
				out[name] = q.DeepCopy()
			}
		}
	}
	return out
}

var _ PodSource = (*virtualpods.Follower)(nil)
