package authorizer

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/cache"
	"github.com/sar-bridge/sar-bridge/mapping"
	"github.com/sar-bridge/sar-bridge/policies"
)

// arrayJobPod is one pod of an array job: only its name and uid vary.
func arrayJobPod(i int, cpu string) string {
	return fmt.Sprintf(`{"pod": {"metadata": {"name": "job-%d", "uid": "u-%d", "namespace": "team-a"},
		"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "containers": [{"name": "main", "resources": {"limits": {"cpu": %q}}}]}}}`, i, i, cpu)
}

// TestDecideMemo: the pods of one array job share a policy evaluation, each decision
// keeps its own id, and a change of what the policy reads, or of the review outcome,
// is evaluated afresh.
func TestDecideMemo(t *testing.T) {
	eval, err := policies.New(context.Background(), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	maps, _ := mapping.Parse([]string{"team-a=interlink.io"})
	var allowed atomic.Bool
	allowed.Store(true)
	rev := &fakeReviewer{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: allowed.Load(), Reason: "RBAC"}, nil
	}}
	reviewCache := cache.NewMemory(100)
	cr := NewCachingReviewer(rev, reviewCache, CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
	reg := prometheus.NewRegistry()
	a := New(Config{Mappings: maps, TenantLabel: "interlink.io/tenant"}, cr, newView(), eval, NewMetrics(reg), nil)

	ids := map[string]bool{}
	steps := []struct {
		name        string
		input       string
		flipReview  bool // deny from now on, and forget cached reviews
		wantAllowed bool
		wantMemo    string
	}{
		{"first pod of the job", arrayJobPod(0, "1"), false, true, "miss"},
		{"second pod", arrayJobPod(1, "1"), false, true, "hit"},
		{"third pod", arrayJobPod(2, "1"), false, true, "hit"},
		{"a pod asking more", arrayJobPod(3, "2"), false, true, "miss"},
		{"review now denies", arrayJobPod(4, "1"), true, false, "miss"},
		{"next pod, denied from the memo", arrayJobPod(5, "1"), false, false, "hit"},
	}
	for _, s := range steps {
		if s.flipReview {
			allowed.Store(false)
			reviewCache = cache.NewMemory(100)
			cr.cache = reviewCache
		}
		before := testutil.ToFloat64(a.metrics.memo.WithLabelValues(s.wantMemo))
		d, err := a.Decide(context.Background(), decisionPath, []byte(s.input))
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := jsonOf(d.Result).(map[string]any)["allowed"]; got != s.wantAllowed {
			t.Fatalf("%s: allowed %v, want %v", s.name, got, s.wantAllowed)
		}
		if ids[d.ID] {
			t.Fatalf("%s: decision id %s reused", s.name, d.ID)
		}
		ids[d.ID] = true
		if got := testutil.ToFloat64(a.metrics.memo.WithLabelValues(s.wantMemo)); got != before+1 {
			t.Fatalf("%s: not a memo %s", s.name, s.wantMemo)
		}
	}
}

// TestDecideSeesNewObjectVersions: a namespace's new version (a label changed) reaches
// the policy at once, through the cached input values and the memo alike.
func TestDecideSeesNewObjectVersions(t *testing.T) {
	view := newView()
	a := newTestAuthorizer(t, Config{}, &fakeReviewer{answer: allowAll}, view)
	billing := func(i int) any {
		t.Helper()
		d, err := a.Decide(context.Background(), decisionPath, []byte(arrayJobPod(i, "1")))
		if err != nil {
			t.Fatal(err)
		}
		mods := jsonOf(d.Result).(map[string]any)["modifications"].(map[string]any)
		return mods["pod_annotations"].(map[string]any)["interlink.io/billing-project"]
	}
	if got := billing(0); got != "proj-7" {
		t.Fatalf("billing project %v, want proj-7", got)
	}
	ns := view.namespaces["team-a"].DeepCopy()
	ns.Labels["interlink.io/billing-project"] = "proj-8"
	ns.ResourceVersion = "2"
	view.namespaces["team-a"] = ns
	if got := billing(1); got != "proj-8" {
		t.Fatalf("after the label changed: billing project %v, want proj-8", got)
	}
}

// TestPodSpecsDecodeOnce: a spec that decoded strictly is not decoded again, the rest of
// the pod still is, with the same errors; a spec that failed is never remembered.
func TestPodSpecsDecodeOnce(t *testing.T) {
	specs := newPodSpecs()
	const spec = `"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "containers": [{"name": "main"}]}`
	steps := []struct {
		name, pod string
		wantErr   string
		wantSpecs int
	}{
		{"first pod", `{"metadata": {"name": "a", "namespace": "team-a"}, ` + spec + `}`, "", 1},
		{"same spec, other pod", `{"metadata": {"name": "b", "namespace": "team-a"}, ` + spec + `}`, "", 1},
		{"same spec, bad metadata", `{"metadata": {"name": 7, "namespace": "team-a"}, ` + spec + `}`, "metadata.name", 1},
		{"same spec, unknown pod field", `{"metadata": {"name": "c"}, "Spec": {}, ` + spec + `}`, `unknown field "Spec"`, 1},
		{"bad spec", `{"metadata": {"name": "d"}, "spec": {"bogus": 1}}`, `unknown field "spec.bogus"`, 1},
		{"bad spec again", `{"metadata": {"name": "e"}, "spec": {"bogus": 1}}`, `unknown field "spec.bogus"`, 1},
	}
	for _, s := range steps {
		value, err := ast.ValueFromReader(strings.NewReader(s.pod))
		if err != nil {
			t.Fatal(err)
		}
		pod, _, err := specs.decode([]byte(s.pod), value)
		switch {
		case s.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), s.wantErr) {
				t.Fatalf("%s: err %v, want %q", s.name, err, s.wantErr)
			}
		case err != nil:
			t.Fatalf("%s: %v", s.name, err)
		case pod.Spec.ServiceAccountName != "runner" || pod.Spec.NodeName != "vk-a" || pod.Namespace != "team-a":
			t.Fatalf("%s: decoded %+v", s.name, pod)
		}
		if n := specs.valid.Len(); n != s.wantSpecs {
			t.Fatalf("%s: %d specs remembered, want %d", s.name, n, s.wantSpecs)
		}
	}
}
