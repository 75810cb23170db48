// Package quota keeps what each tenant's pods on virtual nodes request, for the
// tenant offload quotas of the default policy (data.interlink.quotas, quota.rego).
//
// Usage is kept as running sums, updated by informer events (pods bound to nodes,
// namespaces for the tenant, nodes for which are virtual), so a decision reads it in
// constant time whatever the number of pods. A create the bridge allows is reserved
// until the informer shows the pod, so two creates that race cannot both fit the
// last slot of a quota.
package quota

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sar-bridge/sar-bridge/mapping"
)

// DefaultReservationTTL is how long an allowed create counts against its tenant's
// quota before the informer shows its pod.
const DefaultReservationTTL = 30 * time.Second

// maxSyncWait bounds how long a decision waits for the first list of pods.
const maxSyncWait = 5 * time.Second

// ErrNotSynced means the usage is not known yet: no quota decision can be made.
var ErrNotSynced = errors.New("tenant offload usage not known yet: the pods on virtual nodes have not been listed (the bridge needs list and watch on pods)")

// DataSource reads the policy's data: policies.Reloader.
type DataSource interface {
	Eval(ctx context.Context, path []string, input map[string]any) (any, bool, error)
	// Generation changes when the policy or its data is reloaded.
	Generation() uint64
}

// Options configures a Tracker.
type Options struct {
	// TenantLabel is the namespace label naming the tenant (--tenant.label).
	TenantLabel string
	// IsVirtual tells virtual nodes apart (--admission.node-selector).
	IsVirtual func(*corev1.Node) bool
	// ReservationTTL bounds a reservation; DefaultReservationTTL when zero.
	ReservationTTL time.Duration
	// Quotas is where data.interlink.quotas is read, at every reload.
	Quotas DataSource
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// quotasPath is data.interlink.quotas: its keys are the tenants with a quota.
var quotasPath = []string{"interlink", "quotas"}

// Tracker keeps tenants' usage on virtual nodes and the reservations of the creates
// just allowed. It is safe for concurrent use.
type Tracker struct {
	opts     Options
	requests requestCache
	quotas   atomic.Pointer[quotaSet]
	synced   func() bool // the informers' handlers have had their first list

	mu          sync.Mutex // guards everything below
	pods        map[podKey]*podEntry
	podUIDs     map[types.UID]podKey
	nsTenant    map[string]string // namespaces seen, by their tenant
	nodes       map[string]bool   // nodes seen: virtual or not
	cells       map[cellKey]*cell
	nsNodes     map[string]map[string]struct{} // namespace → nodes with a cell
	nodeNSs     map[string]map[string]struct{} // node → namespaces with a cell
	tenants     map[string]corev1.ResourceList
	tenantNodes map[cellKey]corev1.ResourceList // (tenant, node) → usage
	// Reservations, by pod and in sums like the informer's; queue is in order of
	// expiry (one TTL for all), so expired ones are dropped from its front.
	resByKey       map[podKey]*reservation
	resByUID       map[types.UID]*reservation
	resTenants     map[string]corev1.ResourceList
	resTenantNodes map[cellKey]corev1.ResourceList
	queue          []*reservation
	locks          map[string]chan struct{} // one decision at a time per tenant with a quota
}

type podKey struct{ namespace, name string }

// podEntry is what a pod adds to its cell; usage is nil when it counts for nothing
// (terminated, or not bound).
type podEntry struct {
	uid   types.UID
	node  string
	usage corev1.ResourceList
}

// cellKey is a (namespace, node) pair, or a (tenant, node) pair in tenantNodes.
type cellKey struct{ a, node string }

// cell is the usage of a namespace's counted pods on one node.
type cell struct {
	usage corev1.ResourceList
	pods  int
}

type reservation struct {
	key     podKey // zero when the create named no pod
	uid     types.UID
	tenant  string
	node    string
	usage   corev1.ResourceList
	expires time.Time
	dropped bool
}

type quotaSet struct {
	gen     uint64
	tenants map[string]bool
}

// NewTracker returns a Tracker fed by nothing yet: see Start, or the event methods
// in tests. Until Start, it reports itself synced.
func NewTracker(opts Options) *Tracker {
	if opts.ReservationTTL <= 0 {
		opts.ReservationTTL = DefaultReservationTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.IsVirtual == nil {
		opts.IsVirtual = func(*corev1.Node) bool { return true }
	}
	return &Tracker{
		opts: opts, requests: newRequestCache(), synced: func() bool { return true },
		pods: map[podKey]*podEntry{}, podUIDs: map[types.UID]podKey{},
		nsTenant: map[string]string{}, nodes: map[string]bool{},
		cells: map[cellKey]*cell{}, nsNodes: map[string]map[string]struct{}{}, nodeNSs: map[string]map[string]struct{}{},
		tenants: map[string]corev1.ResourceList{}, tenantNodes: map[cellKey]corev1.ResourceList{},
		resByKey: map[podKey]*reservation{}, resByUID: map[types.UID]*reservation{},
		resTenants: map[string]corev1.ResourceList{}, resTenantNodes: map[cellKey]corev1.ResourceList{},
		locks: map[string]chan struct{}{},
	}
}

// ---------------------------------------------------------------------------
// Informer events
// ---------------------------------------------------------------------------

// UpsertPod counts a pod as it is now, in place of what it counted before, and ends
// its reservation: from now on the informer accounts for it.
func (t *Tracker) UpsertPod(p *corev1.Pod) {
	key := podKey{p.Namespace, p.Name}
	next := &podEntry{uid: p.UID, node: p.Spec.NodeName}
	if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		next.usage = PodRequests(&p.Spec)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unreserve(key, p.UID)
	t.removePodLocked(key)
	t.pods[key] = next
	t.podUIDs[p.UID] = key
	if next.usage != nil {
		t.applyCell(p.Namespace, next.node, next.usage, 1)
	}
}

// DeletePod forgets a pod.
func (t *Tracker) DeletePod(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removePodLocked(podKey{namespace, name})
}

func (t *Tracker) removePodLocked(key podKey) {
	old, ok := t.pods[key]
	if !ok {
		return
	}
	delete(t.pods, key)
	if t.podUIDs[old.uid] == key {
		delete(t.podUIDs, old.uid)
	}
	if old.usage != nil {
		t.applyCell(key.namespace, old.node, old.usage, -1)
	}
}

// UpsertNamespace follows a namespace's tenant label: its usage moves to its new tenant.
func (t *Tracker) UpsertNamespace(ns *corev1.Namespace) {
	t.setTenant(ns.Name, mapping.Tenant(ns.Name, ns.Labels, t.opts.TenantLabel), true)
}

// deleteNamespace: a namespace the cluster does not have is its own tenant, as in the
// authorizer.
func (t *Tracker) DeleteNamespace(name string) { t.setTenant(name, name, false) }

func (t *Tracker) setTenant(ns, tenant string, known bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.tenantOf(ns)
	if known {
		t.nsTenant[ns] = tenant
	} else {
		delete(t.nsTenant, ns)
	}
	if old == tenant {
		return
	}
	for node := range t.nsNodes[ns] {
		if t.virtual(node) {
			u := t.cells[cellKey{ns, node}].usage
			t.addTenant(old, node, u, -1)
			t.addTenant(tenant, node, u, 1)
		}
	}
}

// UpsertNode follows whether a node is virtual: its pods' usage joins or leaves
// their tenants'.
func (t *Tracker) UpsertNode(n *corev1.Node) { t.setVirtual(n.Name, t.opts.IsVirtual(n), true) }

// deleteNode: a node the cluster does not have counts as virtual (see virtual).
func (t *Tracker) DeleteNode(name string) { t.setVirtual(name, true, false) }

func (t *Tracker) setVirtual(node string, virtual, known bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.virtual(node)
	if known {
		t.nodes[node] = virtual
	} else {
		delete(t.nodes, node)
	}
	if old == virtual {
		return
	}
	sign := -1
	if virtual {
		sign = 1
	}
	for ns := range t.nodeNSs[node] {
		t.addTenant(t.tenantOf(ns), node, t.cells[cellKey{ns, node}].usage, sign)
	}
}

// tenantOf is a namespace's tenant: its label, else its name.
func (t *Tracker) tenantOf(ns string) string {
	if tenant, ok := t.nsTenant[ns]; ok {
		return tenant
	}
	return ns
}

// virtual reports whether a node is virtual. A node not seen (yet) counts as one, as
// in the admission webhooks: a pod bound to it may well be offloaded.
func (t *Tracker) virtual(node string) bool {
	if v, ok := t.nodes[node]; ok {
		return v
	}
	return true
}

// applyCell adds (sign 1) or removes (-1) a pod's usage in its namespace's cell on
// its node, and in its tenant's sums when the node is virtual.
func (t *Tracker) applyCell(ns, node string, usage corev1.ResourceList, sign int) {
	k := cellKey{ns, node}
	c, ok := t.cells[k]
	if !ok {
		c = &cell{usage: corev1.ResourceList{}}
		t.cells[k] = c
		addIndex(t.nsNodes, ns, node)
		addIndex(t.nodeNSs, node, ns)
	}
	add(c.usage, usage, sign)
	if c.pods += sign; c.pods <= 0 {
		delete(t.cells, k)
		dropIndex(t.nsNodes, ns, node)
		dropIndex(t.nodeNSs, node, ns)
	}
	if t.virtual(node) {
		t.addTenant(t.tenantOf(ns), node, usage, sign)
	}
}

func (t *Tracker) addTenant(tenant, node string, usage corev1.ResourceList, sign int) {
	addUsage(t.tenants, tenant, usage, sign)
	addUsage(t.tenantNodes, cellKey{tenant, node}, usage, sign)
}

func addUsage[K comparable](m map[K]corev1.ResourceList, k K, usage corev1.ResourceList, sign int) {
	l, ok := m[k]
	if !ok {
		l = corev1.ResourceList{}
		m[k] = l
	}
	add(l, usage, sign)
	if len(l) == 0 {
		delete(m, k)
	}
}

func addIndex(m map[string]map[string]struct{}, k, v string) {
	s, ok := m[k]
	if !ok {
		s = map[string]struct{}{}
		m[k] = s
	}
	s[v] = struct{}{}
}

func dropIndex(m map[string]map[string]struct{}, k, v string) {
	if s, ok := m[k]; ok {
		delete(s, v)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}

// ---------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------

// Request names the pod of a create decision.
type Request struct {
	Tenant    string
	Node      string // the target node, "" when none
	Namespace string
	Name      string // "" when the create names no pod (generateName)
	UID       types.UID
	Pod       ast.Value // input.pod
}

// Hold is a create decision of a tenant with a quota in progress: the tenant's other
// creates wait until it is released.
type Hold struct {
	t       *Tracker
	req     Request
	request corev1.ResourceList
	input   ast.Value
	unlock  chan struct{}
	once    sync.Once
}

// Hold returns the usage a create of req.Tenant is decided against, holding the
// tenant's other creates until Release; nil when the tenant has no quota, which
// costs a map lookup. The pod itself is never part of the usage: a pod the informer
// already shows (interLink decides pods that exist) or reserved before (a retried
// create) is left out.
func (t *Tracker) Hold(ctx context.Context, req Request) (*Hold, error) {
	has, err := t.hasQuota(ctx, req.Tenant)
	if err != nil || !has {
		return nil, err
	}
	if err := t.waitForSync(ctx); err != nil {
		return nil, err
	}
	request, err := t.requests.requests(req.Pod)
	if err != nil {
		return nil, err
	}
	unlock := t.lock(req.Tenant)
	select {
	case unlock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the other creates of tenant %q: %w", req.Tenant, ctx.Err())
	}
	t.mu.Lock()
	used, nodeUsed := t.usageLocked(req)
	t.mu.Unlock()
	in := [][2]*ast.Term{
		ast.Item(ast.StringTerm("tenant"), listValue(used)),
		ast.Item(ast.StringTerm("request"), listValue(request)),
	}
	if req.Node != "" {
		in = append(in, ast.Item(ast.StringTerm("node"), listValue(nodeUsed)))
	}
	return &Hold{t: t, req: req, request: request, input: ast.NewObject(in...), unlock: unlock}, nil
}

// Input is the value of input.quota.
func (h *Hold) Input() ast.Value { return h.input }

// Release ends the hold; allowed reserves the pod's request until the informer shows
// the pod or the reservation expires. Later calls do nothing.
func (h *Hold) Release(allowed bool) {
	h.once.Do(func() {
		if allowed {
			h.t.reserve(h.req, h.request)
		}
		<-h.unlock
	})
}

// lock is the tenant's decision lock, a channel so that a waiting decision can give
// up with its context.
func (t *Tracker) lock(tenant string) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.locks[tenant]
	if !ok {
		l = make(chan struct{}, 1)
		t.locks[tenant] = l
	}
	return l
}

// usageLocked is the tenant's usage and reservations, in total and on the target
// node, without the pod being decided: sums kept up to date, so a decision costs the
// same whatever the number of pods.
func (t *Tracker) usageLocked(req Request) (used, nodeUsed corev1.ResourceList) {
	t.expireLocked()
	node := cellKey{req.Tenant, req.Node}
	used, nodeUsed = cloneList(t.tenants[req.Tenant]), cloneList(t.tenantNodes[node])
	add(used, t.resTenants[req.Tenant], 1)
	add(nodeUsed, t.resTenantNodes[node], 1)
	own := podKey{req.Namespace, req.Name}
	if key, ok := t.lookupPod(own, req.UID); ok {
		if e := t.pods[key]; e.usage != nil && t.virtual(e.node) && t.tenantOf(key.namespace) == req.Tenant {
			subtractOn(used, nodeUsed, e.usage, e.node == req.Node)
		}
	}
	r := t.resByKey[own]
	if req.Name == "" {
		r = t.resByUID[req.UID]
	}
	if r != nil && r.tenant == req.Tenant {
		subtractOn(used, nodeUsed, r.usage, r.node == req.Node)
	}
	return used, nodeUsed
}

func subtractOn(used, nodeUsed, usage corev1.ResourceList, onNode bool) {
	add(used, usage, -1)
	if onNode {
		add(nodeUsed, usage, -1)
	}
}

// expireLocked drops the reservations past their TTL.
func (t *Tracker) expireLocked() {
	now := t.opts.Now()
	for len(t.queue) > 0 && (t.queue[0].dropped || !now.Before(t.queue[0].expires)) {
		t.dropReservation(t.queue[0])
		t.queue[0] = nil
		t.queue = t.queue[1:]
	}
}

// lookupPod finds a pod the informer shows, by namespace and name or by UID.
func (t *Tracker) lookupPod(key podKey, uid types.UID) (podKey, bool) {
	if key.name != "" {
		if _, ok := t.pods[key]; ok {
			return key, true
		}
	}
	if uid != "" {
		if k, ok := t.podUIDs[uid]; ok {
			return k, true
		}
	}
	return podKey{}, false
}

// reserve counts an allowed create until the informer shows its pod; a pod it shows
// already is counted by its sums.
func (t *Tracker) reserve(req Request, request corev1.ResourceList) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := podKey{req.Namespace, req.Name}
	if _, seen := t.lookupPod(key, req.UID); seen {
		return
	}
	if req.Name == "" {
		key = podKey{}
		t.unreserve(key, req.UID)
	} else {
		t.unreserve(key, "")
	}
	r := &reservation{key: key, uid: req.UID, tenant: req.Tenant, node: req.Node, usage: request, expires: t.opts.Now().Add(t.opts.ReservationTTL)}
	t.queue = append(t.queue, r)
	addUsage(t.resTenants, r.tenant, r.usage, 1)
	addUsage(t.resTenantNodes, cellKey{r.tenant, r.node}, r.usage, 1)
	if key.name != "" {
		t.resByKey[key] = r
	}
	if req.Name == "" && req.UID != "" {
		t.resByUID[req.UID] = r // a named create is found by its name only: UIDs come from the caller
	}
}

// unreserve ends the reservations of a pod, by name or by UID.
func (t *Tracker) unreserve(key podKey, uid types.UID) {
	if r, ok := t.resByKey[key]; ok && key.name != "" {
		t.dropReservation(r)
	}
	if r, ok := t.resByUID[uid]; ok && uid != "" {
		t.dropReservation(r)
	}
}

// dropReservation ends a reservation; it leaves the queue when it reaches its front.
func (t *Tracker) dropReservation(r *reservation) {
	if r.dropped {
		return
	}
	r.dropped = true
	addUsage(t.resTenants, r.tenant, r.usage, -1)
	addUsage(t.resTenantNodes, cellKey{r.tenant, r.node}, r.usage, -1)
	if t.resByKey[r.key] == r {
		delete(t.resByKey, r.key)
	}
	if t.resByUID[r.uid] == r {
		delete(t.resByUID, r.uid)
	}
}

// hasQuota reports whether data.interlink.quotas names the tenant, read again after
// every policy or data reload.
func (t *Tracker) hasQuota(ctx context.Context, tenant string) (bool, error) {
	gen := t.opts.Quotas.Generation() // before reading: the data is at least this new
	s := t.quotas.Load()
	if s == nil || s.gen != gen {
		v, _, err := t.opts.Quotas.Eval(ctx, quotasPath, nil)
		if err != nil {
			return false, fmt.Errorf("reading data.interlink.quotas: %w", err)
		}
		s = &quotaSet{gen: gen, tenants: map[string]bool{}}
		// Not an object: no tenant has a usage to see, and the policy denies every
		// create (quota_limits.rego).
		if m, ok := v.(map[string]any); ok {
			for k := range m {
				s.tenants[k] = true
			}
		}
		t.quotas.Store(s)
	}
	return s.tenants[tenant], nil
}

// waitForSync holds a decision until the informers' first lists are in, within the
// request's deadline and maxSyncWait.
func (t *Tracker) waitForSync(ctx context.Context) error {
	if t.synced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxSyncWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !t.synced() {
		select {
		case <-ctx.Done():
			return ErrNotSynced
		case <-tick.C:
		}
	}
	return nil
}
