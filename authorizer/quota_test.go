package authorizer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/sar-bridge/sar-bridge/cache"
	"github.com/sar-bridge/sar-bridge/mapping"
	"github.com/sar-bridge/sar-bridge/policies"
	"github.com/sar-bridge/sar-bridge/quota"
)

// newQuotaAuthorizer decides with the default policy and data, and a tracker that
// knows the given pods (all on virtual nodes).
func newQuotaAuthorizer(tb testing.TB, data string, pods int) (*Authorizer, *quota.Tracker, *testingclock.FakeClock) {
	tb.Helper()
	file := filepath.Join(tb.TempDir(), "data.json")
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		tb.Fatal(err)
	}
	eval, err := policies.New(context.Background(), policies.Options{DataFile: file})
	if err != nil {
		tb.Fatal(err)
	}
	clock := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	tracker := quota.NewTracker(quota.Options{TenantLabel: "interlink.io/tenant", Quotas: eval, Now: clock.Now})
	view := newView()
	for _, ns := range view.namespaces {
		tracker.UpsertNamespace(ns)
	}
	for i := range pods {
		tracker.UpsertPod(boundPod(fmt.Sprintf("running-%d", i), fmt.Sprintf("vk-%d", i%50)))
	}
	mappings, _ := mapping.Parse([]string{"team-a=interlink.io", "tenant-b=tenant-b.interlink.io"})
	rev := &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}
	cr := NewCachingReviewer(rev, cache.NewMemory(100), CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
	cfg := Config{Mappings: mappings, TenantLabel: "interlink.io/tenant", Quotas: tracker}
	return New(cfg, cr, view, eval, nil, nil), tracker, clock
}

func boundPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func quotaPod(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"operation": "create", "pod": {"metadata": {"name": %q, "namespace": "team-a"},
		"spec": {"serviceAccountName": "runner", "nodeName": "vk-0", "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}}}`, name))
}

func decideQuota(t *testing.T, a *Authorizer, in json.RawMessage) (bool, string) {
	t.Helper()
	d, err := a.Decide(context.Background(), decisionPath, in)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	r := jsonOf(d.Result).(map[string]any)
	return r["allowed"] == true, r["reason"].(string)
}

func TestDecideQuota(t *testing.T) {
	a, tracker, _ := newQuotaAuthorizer(t, `{"interlink": {"quotas": {"team-a": {"pods": 2}}}}`, 2)
	allowed, reason := decideQuota(t, a, quotaPod("third"))
	want := `tenant "team-a" would use 3 pods on virtual nodes, over its quota of 2 (2 in use, this pod requests 1)`
	if allowed || !strings.Contains(reason, want) {
		t.Fatalf("third pod: allowed %v, reason %q; want a deny naming %q", allowed, reason, want)
	}
	// A caller cannot hand in its own usage.
	forged := json.RawMessage(strings.Replace(string(quotaPod("third")), `"operation"`, `"quota": {"tenant": {"pods": -5}, "request": {}}, "operation"`, 1))
	if allowed, _ := decideQuota(t, a, forged); allowed {
		t.Fatal("a caller's input.quota was believed")
	}
	tracker.DeletePod("team-a", "running-0")
	if allowed, reason := decideQuota(t, a, quotaPod("third")); !allowed {
		t.Fatalf("after a delete: denied, %q", reason)
	}
	// The allowed create is reserved until the informer shows it.
	if allowed, _ := decideQuota(t, a, quotaPod("fourth")); allowed {
		t.Fatal("fourth pod allowed: the third was not reserved")
	}
}

// TestDecideQuotaMemoHitReserves: a memoised allow records its reservation too.
func TestDecideQuotaMemoHitReserves(t *testing.T) {
	a, _, clock := newQuotaAuthorizer(t, `{"interlink": {"quotas": {"team-a": {"pods": 1}}}}`, 0)
	if allowed, reason := decideQuota(t, a, quotaPod("x")); !allowed {
		t.Fatalf("first: %q", reason)
	}
	clock.Step(time.Minute) // the reservation expires; the same input again (now kept)
	if allowed, reason := decideQuota(t, a, quotaPod("x")); !allowed {
		t.Fatalf("first retry: %q", reason)
	}
	clock.Step(time.Minute)
	hits := testutil.ToFloat64(a.metrics.memo.WithLabelValues(string(policies.MemoHit)))
	if allowed, reason := decideQuota(t, a, quotaPod("x")); !allowed {
		t.Fatalf("retry: %q", reason)
	}
	if testutil.ToFloat64(a.metrics.memo.WithLabelValues(string(policies.MemoHit))) != hits+1 {
		t.Fatal("the retry was not a memo hit")
	}
	if allowed, _ := decideQuota(t, a, quotaPod("y")); allowed {
		t.Fatal("y allowed: the memo hit reserved nothing")
	}
}

// TestDecideWithoutQuotaKeepsInput: for a tenant without a quota the input is not
// touched (the memo keeps hitting across creates); a caller's input.quota becomes
// null.
func TestDecideWithoutQuotaKeepsInput(t *testing.T) {
	a, _, _ := newQuotaAuthorizer(t, `{"interlink": {"quotas": {"tenant-b": {"pods": 0}}}}`, 5)
	for i := range 4 {
		in := json.RawMessage(arrayJobPod(i, "1"))
		if i == 3 {
			in = json.RawMessage(strings.Replace(string(in), `{"pod"`, `{"quota": {"tenant": {}}, "pod"`, 1))
		}
		d, err := a.Decide(context.Background(), decisionPath, in)
		if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != true {
			t.Fatalf("decision %d: %v %v", i, jsonOf(d.Result), err)
		}
	}
	// The third pod is a hit (the memo keeps the second's result); the fourth's
	// input.quota, made null, is one more value the policy reads: a miss, and allowed.
	if hits := testutil.ToFloat64(a.metrics.memo.WithLabelValues(string(policies.MemoHit))); hits != 1 {
		t.Errorf("memo hits = %v, want 1 (the third pod)", hits)
	}
}

// BenchmarkDecideQuota: a decision of a tenant with a quota and 10,000 pods on
// virtual nodes, beside one of a tenant without (the same authorizer and data, every
// spec distinct so the memo never answers).
func BenchmarkDecideQuota(b *testing.B) {
	distinct := make([]json.RawMessage, 8192)
	for i := range distinct {
		distinct[i] = json.RawMessage(fmt.Sprintf(`{"pod": {"metadata": {"name": "p%d", "namespace": "team-a"},
			"spec": {"serviceAccountName": "runner", "nodeName": "vk-1", "containers": [{"name": "main", "resources": {"limits": {"cpu": "%dm"}}}]}}}`, i, 1+i))
	}
	for _, bc := range []struct{ name, data string }{
		{"no-quota", `{"interlink": {"quotas": {"tenant-b": {"pods": 10}}}}`},
		{"quota-10000-pods", `{"interlink": {"quotas": {"team-a": {"pods": 1000000, "cpu": "100000", "nodes": {"vk-1": {"cpu": "50000"}}}}}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a, _, _ := newQuotaAuthorizer(b, bc.data, 10_000)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				d, err := a.Decide(context.Background(), decisionPath, distinct[i%len(distinct)])
				if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != true {
					b.Fatalf("decision %v %v", jsonOf(d.Result), err)
				}
				i++
			}
		})
	}
}

// TestDecideWithoutReservation: a dry run or a workload's template is judged against the
// quota but reserves nothing.
func TestDecideWithoutReservation(t *testing.T) {
	a, _, _ := newQuotaAuthorizer(t, `{"interlink": {"quotas": {"team-a": {"pods": 1}}}}`, 0)
	ctx := WithoutReservation(context.Background())
	for range 3 {
		d, err := a.Decide(ctx, decisionPath, quotaPod("dry"))
		if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != true {
			t.Fatalf("dry run: %v %v", jsonOf(d.Result), err)
		}
	}
	if allowed, reason := decideQuota(t, a, quotaPod("real")); !allowed {
		t.Fatalf("a real create after dry runs: denied, %q", reason)
	}
	d, err := a.Decide(ctx, decisionPath, quotaPod("dry-over"))
	if err != nil || jsonOf(d.Result).(map[string]any)["allowed"] != false {
		t.Fatalf("a dry run over the quota: %v %v, want a denial", jsonOf(d.Result), err)
	}
}
