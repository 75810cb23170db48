package quota

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeData is a DataSource of fixed quotas, reloaded by bumping gen.
type fakeData struct {
	quotas atomic.Value // any
	gen    atomic.Uint64
	reads  atomic.Int64
}

func newFakeData(quotas any) *fakeData {
	d := &fakeData{}
	d.quotas.Store(&quotas)
	return d
}

func (d *fakeData) Eval(_ context.Context, path []string, _ map[string]any) (any, bool, error) {
	d.reads.Add(1)
	if fmt.Sprint(path) != "[interlink quotas]" {
		return nil, false, fmt.Errorf("unexpected path %v", path)
	}
	v := *d.quotas.Load().(*any)
	return v, v != nil, nil
}

func (d *fakeData) Generation() uint64 { return d.gen.Load() }

func (d *fakeData) set(quotas any) { d.quotas.Store(&quotas); d.gen.Add(1) }

const virtualLabel = "virtual-node.interlink/type"

func newTestTracker(quotas any) (*Tracker, *testingclock.FakeClock) {
	c := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	t := NewTracker(Options{
		TenantLabel:    "interlink.io/tenant",
		IsVirtual:      func(n *corev1.Node) bool { return n.Labels[virtualLabel] == "virtual-kubelet" },
		ReservationTTL: 30 * time.Second,
		Quotas:         newFakeData(quotas),
		Now:            c.Now,
	})
	t.UpsertNode(node("vk-1", true))
	t.UpsertNode(node("vk-2", true))
	t.UpsertNode(node("worker", false))
	t.UpsertNamespace(namespace("team-a", "tenant-a"))
	t.UpsertNamespace(namespace("team-a2", "tenant-a"))
	t.UpsertNamespace(namespace("team-b", ""))
	return t, c
}

func node(name string, virtual bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if virtual {
		n.Labels[virtualLabel] = "virtual-kubelet"
	}
	return n
}

func namespace(name, tenant string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if tenant != "" {
		ns.Labels["interlink.io/tenant"] = tenant
	}
	return ns
}

func rl(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

// pod is a pod of one container requesting reqs, bound to nodeName.
func pod(ns, name, nodeName string, reqs corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{
			{Name: "main", Resources: corev1.ResourceRequirements{Requests: reqs}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// usage renders a resource list canonically, for comparisons.
func usage(l corev1.ResourceList) string {
	b, _ := json.Marshal(l)
	return string(b)
}

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want corev1.ResourceList
	}{
		{"no resources: one pod", corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}, rl("pods", "1")},
		{"containers sum", corev1.PodSpec{Containers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "500m", "memory", "1Gi")}},
			{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "250m", "nvidia.com/gpu", "1")}},
		}}, rl("pods", "1", "cpu", "750m", "memory", "1Gi", "nvidia.com/gpu", "1")},
		{"init container larger than the sum wins", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "2")}}},
			Containers: []corev1.Container{
				{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "500m", "memory", "1Gi")}},
				{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "500m")}},
			},
		}, rl("pods", "1", "cpu", "2", "memory", "1Gi")},
		{"sum larger than the init containers wins", corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Resources: corev1.ResourceRequirements{Requests: rl("memory", "512Mi")}},
				{Resources: corev1.ResourceRequirements{Requests: rl("memory", "1536Mi")}},
			},
			Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("memory", "2Gi")}}},
		}, rl("pods", "1", "memory", "2Gi")},
		{"sidecar adds to the containers", corev1.PodSpec{
			InitContainers: []corev1.Container{{RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: rl("cpu", "100m")}}},
			Containers:     []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1")}}},
		}, rl("pods", "1", "cpu", "1100m")},
		{"overhead added", corev1.PodSpec{
			Overhead:   rl("cpu", "250m", "memory", "120Mi"),
			Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1")}}},
		}, rl("pods", "1", "cpu", "1250m", "memory", "120Mi")},
		{"limit stands for a missing request", corev1.PodSpec{Containers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1"), Limits: rl("cpu", "2", "memory", "2Gi")}},
		}}, rl("pods", "1", "cpu", "1", "memory", "2Gi")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodRequests(&tc.spec); !equalLists(got, tc.want) {
				t.Errorf("PodRequests = %s, want %s", usage(got), usage(tc.want))
			}
		})
	}
}

func equalLists(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// TestUsageSums drives the tracker with informer events and checks the tenant's
// sums, in total and on vk-1, after each.
func TestUsageSums(t *testing.T) {
	type step struct {
		name        string
		do          func(tr *Tracker)
		tenant      corev1.ResourceList // tenant-a's usage
		onVK1       corev1.ResourceList // tenant-a's usage on vk-1
		tenantBUsed corev1.ResourceList // team-b's (its own tenant)
	}
	cpu1 := rl("cpu", "1", "memory", "1Gi")
	steps := []step{
		{"nothing", func(*Tracker) {}, rl(), rl(), rl()},
		{"pending pod on a virtual node counts", func(tr *Tracker) { tr.UpsertPod(pod("team-a", "p1", "vk-1", cpu1)) },
			rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl()},
		{"second namespace of the tenant, other virtual node", func(tr *Tracker) { tr.UpsertPod(pod("team-a2", "p2", "vk-2", rl("cpu", "500m"))) },
			rl("pods", "2", "cpu", "1500m", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl()},
		{"pod on a node that is not virtual is ignored", func(tr *Tracker) { tr.UpsertPod(pod("team-a", "p3", "worker", cpu1)) },
			rl("pods", "2", "cpu", "1500m", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl()},
		{"unbound pod is ignored", func(tr *Tracker) { tr.UpsertPod(pod("team-a", "p4", "", cpu1)) },
			rl("pods", "2", "cpu", "1500m", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl()},
		{"other tenant apart", func(tr *Tracker) { tr.UpsertPod(pod("team-b", "q1", "vk-1", cpu1)) },
			rl("pods", "2", "cpu", "1500m", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"terminated pod stops counting", func(tr *Tracker) {
			p := pod("team-a2", "p2", "vk-2", rl("cpu", "500m"))
			p.Status.Phase = corev1.PodSucceeded
			tr.UpsertPod(p)
		}, rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"failed pod does not count", func(tr *Tracker) {
			p := pod("team-a", "p5", "vk-1", cpu1)
			p.Status.Phase = corev1.PodFailed
			tr.UpsertPod(p)
		}, rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"update moves a pod to another node", func(tr *Tracker) { tr.UpsertPod(pod("team-a", "p1", "vk-2", cpu1)) },
			rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl(), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"update changes requests", func(tr *Tracker) { tr.UpsertPod(pod("team-a", "p1", "vk-2", rl("cpu", "3"))) },
			rl("pods", "1", "cpu", "3"), rl(), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"node no longer virtual: its pods leave", func(tr *Tracker) { tr.UpsertNode(node("vk-2", false)) },
			rl(), rl(), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"node virtual again: they come back", func(tr *Tracker) { tr.UpsertNode(node("vk-2", true)) },
			rl("pods", "1", "cpu", "3"), rl(), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"node labelled virtual: the pod on it counts", func(tr *Tracker) { tr.UpsertNode(node("worker", true)) },
			rl("pods", "2", "cpu", "4", "memory", "1Gi"), rl(), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"namespace relabelled: its usage moves tenant", func(tr *Tracker) { tr.UpsertNamespace(namespace("team-b", "tenant-a")) },
			rl("pods", "3", "cpu", "5", "memory", "2Gi"), rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl()},
		{"namespace label removed: back to its own tenant", func(tr *Tracker) { tr.UpsertNamespace(namespace("team-b", "")) },
			rl("pods", "2", "cpu", "4", "memory", "1Gi"), rl(), rl("pods", "1", "cpu", "1", "memory", "1Gi")},
		{"delete", func(tr *Tracker) { tr.DeletePod("team-a", "p1"); tr.DeletePod("team-b", "q1") },
			rl("pods", "1", "cpu", "1", "memory", "1Gi"), rl(), rl()},
		{"delete of the last pod leaves nothing", func(tr *Tracker) { tr.DeletePod("team-a", "p3") }, rl(), rl(), rl()},
	}
	tr, _ := newTestTracker(nil)
	for _, s := range steps {
		s.do(tr)
		tr.mu.Lock()
		got, gotNode, gotB := tr.tenants["tenant-a"], tr.tenantNodes[cellKey{"tenant-a", "vk-1"}], tr.tenants["team-b"]
		tr.mu.Unlock()
		if !equalLists(got, s.tenant) || !equalLists(gotNode, s.onVK1) || !equalLists(gotB, s.tenantBUsed) {
			t.Fatalf("%s: tenant-a %s on vk-1 %s, team-b %s; want %s, %s, %s", s.name,
				usage(got), usage(gotNode), usage(gotB), usage(s.tenant), usage(s.onVK1), usage(s.tenantBUsed))
		}
	}
	if len(tr.cells) != 0 || len(tr.nsNodes) != 0 || len(tr.nodeNSs) != 0 || len(tr.tenantNodes) != 0 {
		t.Errorf("state left after every pod went: cells %v, nsNodes %v, nodeNSs %v, tenantNodes %v", tr.cells, tr.nsNodes, tr.nodeNSs, tr.tenantNodes)
	}
}

// podValue is a pod as a decision's input.pod.
func podValue(t testing.TB, p *corev1.Pod) ast.Value {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ast.ValueFromReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// holdUsage holds, reads input.quota and releases with allowed.
func holdUsage(t *testing.T, tr *Tracker, p *corev1.Pod, node string, allowed bool) (tenant, onNode string) {
	t.Helper()
	h, err := tr.Hold(context.Background(), Request{Tenant: "tenant-a", Node: node, Namespace: p.Namespace, Name: p.Name, UID: p.UID, Pod: podValue(t, p)})
	if err != nil || h == nil {
		t.Fatalf("Hold: %v %v", h, err)
	}
	defer h.Release(allowed)
	in := h.Input().(ast.Object)
	return in.Get(ast.StringTerm("tenant")).String(), in.Get(ast.StringTerm("node")).String()
}

func TestReservations(t *testing.T) {
	quotas := map[string]any{"tenant-a": map[string]any{"pods": 3}}
	cpu := rl("cpu", "1")
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, tr *Tracker, c *testingclock.FakeClock)
	}{
		{"an allowed create counts until it expires", func(t *testing.T, tr *Tracker, c *testingclock.FakeClock) {
			holdUsage(t, tr, pod("team-a", "new", "", cpu), "vk-1", true)
			if got, _ := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false); got != `{"cpu": 1, "pods": 1}` {
				t.Errorf("usage with a reservation = %s", got)
			}
			c.Step(30 * time.Second)
			if got, _ := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false); got != `{}` {
				t.Errorf("usage after the reservation expired = %s", got)
			}
		}},
		{"a denied create reserves nothing", func(t *testing.T, tr *Tracker, _ *testingclock.FakeClock) {
			holdUsage(t, tr, pod("team-a", "new", "", cpu), "vk-1", false)
			if got, _ := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false); got != `{}` {
				t.Errorf("usage = %s", got)
			}
		}},
		{"the informer showing the pod ends the reservation, by name", func(t *testing.T, tr *Tracker, _ *testingclock.FakeClock) {
			p := pod("team-a", "new", "", cpu)
			holdUsage(t, tr, p, "vk-1", true)
			p.Spec.NodeName = "vk-1"
			tr.UpsertPod(p)
			tenant, onNode := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false)
			if tenant != `{"cpu": 1, "pods": 1}` || onNode != `{"cpu": 1, "pods": 1}` {
				t.Errorf("usage = %s, on vk-1 %s: want the pod once", tenant, onNode)
			}
			if len(tr.resByKey)+len(tr.resByUID)+len(tr.resTenants) != 0 {
				t.Errorf("reservation left: %v", tr.resByKey)
			}
		}},
		{"the informer showing the pod ends the reservation, by UID", func(t *testing.T, tr *Tracker, _ *testingclock.FakeClock) {
			p := pod("team-a", "", "", cpu) // generateName: no name yet
			p.UID = "uid-generated"
			holdUsage(t, tr, p, "vk-1", true)
			p.Name, p.Spec.NodeName = "gen-x7", "worker"
			tr.UpsertPod(p)
			if got, _ := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false); got != `{}` {
				t.Errorf("usage = %s: want nothing (the pod landed on a node that is not virtual)", got)
			}
		}},
		{"a pod the informer shows already is not reserved again", func(t *testing.T, tr *Tracker, _ *testingclock.FakeClock) {
			p := pod("team-a", "bound", "vk-1", cpu)
			tr.UpsertPod(p)
			// interLink decides pods that exist: the pod is not part of its own usage.
			if tenant, onNode := holdUsage(t, tr, p, "vk-1", true); tenant != `{}` || onNode != `{}` {
				t.Errorf("usage of the pod's own decision = %s, %s", tenant, onNode)
			}
			if len(tr.queue) != 0 {
				t.Errorf("reserved a pod the informer counts")
			}
			if got, _ := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false); got != `{"cpu": 1, "pods": 1}` {
				t.Errorf("usage = %s", got)
			}
		}},
		{"a retried create does not count itself", func(t *testing.T, tr *Tracker, _ *testingclock.FakeClock) {
			p := pod("team-a", "retried", "", cpu)
			holdUsage(t, tr, p, "vk-1", true)
			if got, _ := holdUsage(t, tr, p, "vk-1", true); got != `{}` {
				t.Errorf("usage of the retry = %s", got)
			}
			if got, _ := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false); got != `{"cpu": 1, "pods": 1}` {
				t.Errorf("usage = %s: want the pod reserved once", got)
			}
		}},
		{"a reservation on another node counts for the tenant only", func(t *testing.T, tr *Tracker, _ *testingclock.FakeClock) {
			holdUsage(t, tr, pod("team-a", "new", "", cpu), "vk-2", true)
			if tenant, onNode := holdUsage(t, tr, pod("team-a", "other", "", cpu), "vk-1", false); tenant != `{"cpu": 1, "pods": 1}` || onNode != `{}` {
				t.Errorf("usage = %s, on vk-1 %s", tenant, onNode)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, c := newTestTracker(quotas)
			tc.run(t, tr, c)
		})
	}
}

// TestConcurrentCreates: 10 creates race for a quota of 3 pods; the tenant's lock
// and the reservations let exactly 3 through.
func TestConcurrentCreates(t *testing.T) {
	tr, _ := newTestTracker(map[string]any{"tenant-a": map[string]any{"pods": 3}})
	tr.UpsertPod(pod("team-b", "noise", "vk-1", rl("cpu", "1")))
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for i := range 10 {
		p := pod("team-a", fmt.Sprintf("race-%d", i), "", rl("cpu", "1"))
		v := podValue(t, p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := tr.Hold(context.Background(), Request{Tenant: "tenant-a", Node: "vk-1", Namespace: p.Namespace, Name: p.Name, Pod: v})
			if err != nil || h == nil {
				t.Errorf("Hold: %v %v", h, err)
				return
			}
			n := 0
			if used := h.Input().(ast.Object).Get(ast.StringTerm("tenant")).Value.(ast.Object).Get(ast.StringTerm("pods")); used != nil {
				n, _ = used.Value.(ast.Number).Int()
			}
			ok := n+1 <= 3 // the policy's check
			if ok {
				allowed.Add(1)
			}
			h.Release(ok)
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != 3 {
		t.Errorf("%d of 10 concurrent creates allowed under a quota of 3 pods, want 3", got)
	}
}

func TestHoldWithoutQuota(t *testing.T) {
	tr, _ := newTestTracker(map[string]any{"tenant-b": map[string]any{"pods": 1}})
	p := pod("team-a", "p", "", nil)
	h, err := tr.Hold(context.Background(), Request{Tenant: "tenant-a", Namespace: "team-a", Name: "p", Pod: podValue(t, p)})
	if err != nil || h != nil {
		t.Fatalf("Hold for a tenant without quota = %v, %v; want nil", h, err)
	}
	if len(tr.locks) != 0 {
		t.Errorf("a tenant without quota took a lock")
	}
}

// TestQuotaTenantsFollowReloads: the tenants with a quota are read once per policy
// generation, and again after a reload.
func TestQuotaTenantsFollowReloads(t *testing.T) {
	tr, _ := newTestTracker(nil)
	data := tr.opts.Quotas.(*fakeData)
	ctx := context.Background()
	for _, tc := range []struct {
		quotas any
		want   bool
	}{
		{nil, false},
		{map[string]any{"tenant-a": map[string]any{"pods": 1}}, true},
		{[]any{"tenant-a"}, false}, // mistyped: the policy denies every create
		{map[string]any{"tenant-b": map[string]any{}}, false},
	} {
		data.set(tc.quotas)
		for range 3 {
			if got, err := tr.hasQuota(ctx, "tenant-a"); err != nil || got != tc.want {
				t.Errorf("quotas %v: hasQuota = %v, %v; want %v", tc.quotas, got, err, tc.want)
			}
		}
	}
	if got := data.reads.Load(); got != 4 {
		t.Errorf("data read %d times for 4 generations", got)
	}
}

func TestHoldWaitsForSync(t *testing.T) {
	tr, _ := newTestTracker(map[string]any{"tenant-a": map[string]any{"pods": 1}})
	tr.synced = func() bool { return false }
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p := pod("team-a", "p", "", nil)
	if _, err := tr.Hold(ctx, Request{Tenant: "tenant-a", Namespace: "team-a", Name: "p", Pod: podValue(t, p)}); err != ErrNotSynced {
		t.Errorf("Hold before the first list = %v, want ErrNotSynced", err)
	}
}

func TestNumbersExact(t *testing.T) {
	for q, want := range map[string]string{"500m": "0.5", "1Gi": "1073741824", "2": "2", "1.5k": "1500", "100Mi": "104857600", "1e3": "1000"} {
		got := numberValue(resource.MustParse(q)).Value.(ast.Number)
		if f, _ := got.Float64(); fmt.Sprint(f) != want && got.String() != want {
			t.Errorf("%s → %s, want %s", q, got, want)
		}
	}
}

// BenchmarkHold is the tracker's share of a quota decision with 10,000 pods of the
// tenant on 50 virtual nodes: a lookup of running sums, not a scan.
func BenchmarkHold(b *testing.B) {
	tr, _ := newTestTracker(map[string]any{"tenant-a": map[string]any{"pods": 1_000_000}})
	for i := range 10_000 {
		tr.UpsertPod(pod("team-a", fmt.Sprintf("p%d", i), fmt.Sprintf("vk-%d", i%50), rl("cpu", "250m", "memory", "512Mi")))
	}
	v := podValue(b, pod("team-a", "new", "", rl("cpu", "1")))
	b.ReportAllocs()
	for b.Loop() {
		h, err := tr.Hold(context.Background(), Request{Tenant: "tenant-a", Node: "vk-1", Namespace: "team-a", Name: "new", Pod: v})
		if err != nil || h == nil {
			b.Fatal(err)
		}
		h.Release(false)
	}
}
