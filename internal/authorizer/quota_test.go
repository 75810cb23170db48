package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/internal/tenants"
	"github.com/sar-bridge/sar-bridge/policies"
)

// quotaEnv is an authorizer deciding with the default policy, whose tenants' quotas are
// OffloadTenant objects in a fake API, charged by the real ledger.
type quotaEnv struct {
	a      *Authorizer
	client client.Client
	dir    *liveDirectory
}

// liveDirectory answers from the fake API itself, so a decision sees the usage the
// ledger wrote (the real Directory follows it with an informer).
type liveDirectory struct{ c client.Client }

func (d *liveDirectory) Tenant(string) (string, bool, error) { return "", false, nil }
func (d *liveDirectory) Conflict(string) string              { return "" }
func (d *liveDirectory) Quota(tenant string) (*v1alpha1.OffloadTenant, bool) {
	var t v1alpha1.OffloadTenant
	if err := d.c.Get(context.Background(), client.ObjectKey{Name: tenant}, &t); err != nil || len(t.Spec.Hard) == 0 {
		return nil, false
	}
	return &t, true
}

func newQuotaEnv(tb testing.TB, hard corev1.ResourceList) quotaEnv {
	tb.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		tb.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1alpha1.OffloadTenant{}).
		WithObjects(&v1alpha1.OffloadTenant{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Generation: 1}, Spec: v1alpha1.OffloadTenantSpec{Group: "interlink.io", Hard: hard}}).Build()
	a := newTestAuthorizer(tb, Config{}, &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}, newView())
	dir := &liveDirectory{c: c}
	a.cfg.Tenants, a.cfg.Ledger = dir, tenants.NewLedger(c, nil, tenants.LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant})
	return quotaEnv{a: a, client: c, dir: dir}
}

func (e quotaEnv) used(tb testing.TB) corev1.ResourceList {
	tb.Helper()
	t, _ := e.dir.Quota("team-a")
	return t.Status.Used
}

func quotaPod(name string, extra ...string) json.RawMessage {
	uid := ""
	if len(extra) > 0 {
		uid = fmt.Sprintf(`, "uid": %q`, extra[0])
	}
	return json.RawMessage(fmt.Sprintf(`{"operation": "create", "pod": {"metadata": {"name": %q, "namespace": "team-a"%s},
		"spec": {"serviceAccountName": "runner", "nodeName": "vk-0", "containers": [{"name": "main", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}}]}}}`, name, uid))
}

func decideQuota(tb testing.TB, a *Authorizer, mode ChargeMode, in json.RawMessage) (bool, string) {
	tb.Helper()
	d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: in, Charge: mode})
	if err != nil {
		tb.Fatalf("Decide: %v", err)
	}
	r := jsonOf(d.Result).(map[string]any)
	return r["allowed"] == true, r["reason"].(string)
}

func TestDecideQuota(t *testing.T) {
	e := newQuotaEnv(t, corev1.ResourceList{"pods": resource.MustParse("2"), "cpu": resource.MustParse("2")})
	for _, name := range []string{"first", "second"} {
		if allowed, reason := decideQuota(t, e.a, ChargeByUID, quotaPod(name)); !allowed {
			t.Fatalf("%s: denied, %q", name, reason)
		}
	}
	// A pod counts its limit (1 cpu), not its request (100m): the third is over.
	allowed, reason := decideQuota(t, e.a, ChargeByUID, quotaPod("third"))
	want := `tenant "team-a" would use 3 cpu on virtual nodes, over its quota of 2 (2 in use, this pod holds 1); tenant "team-a" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod holds 1)`
	if allowed || reason != want {
		t.Fatalf("third pod: allowed %v, reason %q; want %q", allowed, reason, want)
	}
	if used := e.used(t); used.Cpu().String() != "2" || used.Pods().String() != "2" {
		t.Errorf("used %v, want 2 cpu and 2 pods", used)
	}
	// A caller cannot hand in its own usage.
	forged := json.RawMessage(strings.Replace(string(quotaPod("fourth")), `"operation"`, `"quota": {"tenant": {"pods": -5}, "request": {}, "hard": {"pods": 100}}, "operation"`, 1))
	if allowed, _ := decideQuota(t, e.a, ChargeByUID, forged); allowed {
		t.Fatal("a caller's input.quota was believed")
	}
}

// TestDecideChargesOnce: the same pod decided again (another front door, a retry) is
// charged once; a dry run, a workload's template or the mutating webhook charge nothing.
func TestDecideChargesOnce(t *testing.T) {
	e := newQuotaEnv(t, corev1.ResourceList{"pods": resource.MustParse("1")})
	if allowed, reason := decideQuota(t, e.a, ChargeNothing, quotaPod("dry", "uid-dry")); !allowed {
		t.Fatalf("dry run: denied, %q", reason)
	}
	if used := e.used(t); len(used) != 0 {
		t.Fatalf("dry runs charged %v", used)
	}
	for _, mode := range []ChargeMode{ChargeNew, ChargeStored, ChargeByUID} {
		if allowed, reason := decideQuota(t, e.a, mode, quotaPod("real", "uid-real")); !allowed {
			t.Fatalf("the same pod again: denied, %q", reason)
		}
	}
	if used := e.used(t); used.Pods().String() != "1" {
		t.Fatalf("used %v, want the pod charged once", used)
	}
	// Over the quota, a dry run is refused as the create would be.
	if allowed, _ := decideQuota(t, e.a, ChargeNothing, quotaPod("dry-over", "uid-dry-over")); allowed {
		t.Fatal("a dry run over the quota was allowed")
	}
}

// TestDecideQuotaRace: decisions that all saw room (the policy allowed) are settled by
// the ledger: exactly the quota's worth is allowed, the rest denied with its message.
func TestDecideQuotaRace(t *testing.T) {
	e := newQuotaEnv(t, corev1.ResourceList{"pods": resource.MustParse("10")})
	var wg sync.WaitGroup
	var allowed, denied atomic.Int64
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, reason := decideQuota(t, e.a, ChargeByUID, quotaPod(fmt.Sprintf("p%d", i), fmt.Sprintf("uid-%d", i)))
			switch {
			case ok:
				allowed.Add(1)
			case strings.Contains(reason, "over its quota of 10"):
				denied.Add(1)
			default:
				t.Errorf("reason %q", reason)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 10 || denied.Load() != 50 {
		t.Fatalf("%d allowed, %d denied; want 10 and 50", allowed.Load(), denied.Load())
	}
}

type failingLedger struct{}

func (failingLedger) Charge(context.Context, tenants.Request) error {
	return errors.New("the API server is down")
}

func (failingLedger) Prior(context.Context, *v1alpha1.OffloadTenant, tenants.Request) (corev1.ResourceList, error) {
	return nil, nil
}

// TestDecideLedgerDown: a charge that cannot be written is no decision (503), never an
// allow.
func TestDecideLedgerDown(t *testing.T) {
	e := newQuotaEnv(t, corev1.ResourceList{"pods": resource.MustParse("10")})
	e.a.cfg.Ledger = failingLedger{}
	_, err := e.a.Decide(context.Background(), Request{Path: decisionPath, Input: quotaPod("p")})
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), "the API server is down") {
		t.Fatalf("error %v, want an UnavailableError", err)
	}
}

// TestDecideWithoutQuotaKeepsInput: for a tenant without a quota the input is not
// touched (the memo keeps hitting across creates); a caller's input.quota becomes null.
func TestDecideWithoutQuotaKeepsInput(t *testing.T) {
	e := newQuotaEnv(t, nil)
	for i := range 4 {
		in := json.RawMessage(arrayJobPod(i, "1"))
		if i == 3 {
			in = json.RawMessage(strings.Replace(string(in), `{"pod"`, `{"quota": {"tenant": {}}, "pod"`, 1))
		}
		d, err := e.a.Decide(context.Background(), Request{Path: decisionPath, Input: in})
		if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != true {
			t.Fatalf("decision %d: %v %v", i, jsonOf(d.Result), err)
		}
	}
	if hits := testutil.ToFloat64(e.a.metrics.memo.WithLabelValues(string(policies.MemoHit))); hits != 1 {
		t.Errorf("memo hits = %v, want 1 (the third pod)", hits)
	}
}

// BenchmarkDecideQuota: a decision of a tenant with a quota beside one of a tenant
// without, as the bridge makes them: the ledger charges from its slice (a fake API
// behind it), the directory answers from a snapshot as the informer does, and the
// pods are an indexed Job's (each its own name, UID, hostname and index), so the memo
// never answers.
func BenchmarkDecideQuota(b *testing.B) {
	distinct := make([]json.RawMessage, 8192)
	for i := range distinct {
		distinct[i] = json.RawMessage(fmt.Sprintf(`{"operation": "create", "pod": {"metadata": {"name": "array-%d", "namespace": "team-a", "uid": "u%d",
			"annotations": {"batch.kubernetes.io/job-completion-index": "%d"}},
			"spec": {"serviceAccountName": "runner", "nodeName": "vk-1", "hostname": "array-%d", "containers": [{"name": "main",
				"env": [{"name": "JOB_COMPLETION_INDEX", "value": "%d"}], "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "4", "memory": "8Gi"}}}]}}}`, i, i, i, i, i))
	}
	for _, bc := range []struct {
		name string
		hard corev1.ResourceList
	}{
		{"no-quota", nil},
		{"quota", corev1.ResourceList{"pods": resource.MustParse("1000000000"), "cpu": resource.MustParse("1000000000")}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newQuotaEnv(b, bc.hard)
			snapshot, ok := e.dir.Quota("team-a")
			e.a.cfg.Tenants = snapshotDirectory{snapshot, ok}
			e.a.cfg.Ledger = tenants.NewLedger(e.client, nil, tenants.LedgerOptions{Running: noPods{}, TenantOf: namespaceTenant, MaxPending: 1 << 30,
				Slices: tenants.SliceOptions{Holder: "bench"}})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				d, err := e.a.Decide(context.Background(), Request{Path: decisionPath, Input: distinct[i%len(distinct)]})
				if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != true {
					b.Fatalf("decision %v %v", jsonOf(d.Result), err)
				}
				i++
			}
		})
	}
}

// snapshotDirectory answers with one OffloadTenant, as an informer holds it between
// events.
type snapshotDirectory struct {
	t  *v1alpha1.OffloadTenant
	ok bool
}

func (snapshotDirectory) Tenant(string) (string, bool, error) { return "", false, nil }
func (snapshotDirectory) Conflict(string) string              { return "" }
func (d snapshotDirectory) Quota(string) (*v1alpha1.OffloadTenant, bool) {
	return d.t, d.ok
}

// noPods is a view of the virtual nodes' pods where none runs: nothing to adopt.
type noPods struct{}

func (noPods) VirtualPods(context.Context) ([]*corev1.Pod, error) { return nil, nil }

func namespaceTenant(namespace string) string { return namespace }
