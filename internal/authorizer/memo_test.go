package authorizer

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sar-bridge/sar-bridge/internal/astjson"
	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
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
		{"second pod: its result kept now", arrayJobPod(1, "1"), false, true, "miss"},
		{"third pod", arrayJobPod(2, "1"), false, true, "hit"},
		{"fourth pod", arrayJobPod(3, "1"), false, true, "hit"},
		{"a pod asking more", arrayJobPod(4, "2"), false, true, "miss"},
		{"review now denies", arrayJobPod(5, "1"), true, false, "miss"},
		{"next pod, denied: kept now", arrayJobPod(6, "1"), false, false, "miss"},
		{"next pod, denied from the memo", arrayJobPod(7, "1"), false, false, "hit"},
	}
	for _, s := range steps {
		if s.flipReview {
			allowed.Store(false)
			reviewCache = cache.NewMemory(100)
			cr.cache = reviewCache
		}
		before := testutil.ToFloat64(a.metrics.memo.WithLabelValues(s.wantMemo))
		d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: []byte(s.input)})
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
		d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: []byte(arrayJobPod(i, "1"))})
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

// TestPodSpecsDecodeOnce: a spec checked twice is kept and not checked again, the rest
// of the pod still is, with the same errors; a spec that failed is never remembered.
func TestPodSpecsDecodeOnce(t *testing.T) {
	specs := newPodSpecs()
	const spec = `"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "containers": [{"name": "main"}]}`
	steps := []struct {
		name, pod string
		wantErr   string
		wantSpecs int
	}{
		{"first pod", `{"metadata": {"name": "a", "namespace": "team-a"}, ` + spec + `}`, "", 0},
		{"same spec, other pod", `{"metadata": {"name": "b", "namespace": "team-a"}, ` + spec + `}`, "", 1},
		{"same spec, third pod", `{"metadata": {"name": "b2", "namespace": "team-a"}, ` + spec + `}`, "", 1},
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
		case pod.ServiceAccount != "runner" || pod.NodeName != "vk-a" || pod.Namespace != "team-a":
			t.Fatalf("%s: decoded %+v", s.name, pod)
		}
		if n := specs.valid.Len(); n != s.wantSpecs {
			t.Fatalf("%s: %d specs remembered, want %d", s.name, n, s.wantSpecs)
		}
	}
}

func TestPodIdentityOf(t *testing.T) {
	for _, tt := range []struct {
		name, pod string
		want      podIdentity
	}{
		{"all fields", `{"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"serviceAccountName": "sa", "serviceAccount": "old", "nodeName": "vk"}}`,
			podIdentity{Namespace: "ns", Name: "p", UID: "u", ServiceAccount: "sa", NodeName: "vk"}},
		{"the deprecated service account", `{"metadata": {"namespace": "ns"}, "spec": {"serviceAccount": "old"}}`,
			podIdentity{Namespace: "ns", ServiceAccount: "old"}},
		{"nulls and absent fields", `{"metadata": {"name": null}, "spec": null}`, podIdentity{}},
		{"escaped field names", `{"metadata": {"n\u0061mespace": "ns"}, "spec": {"node\u004eame": "vk"}}`,
			podIdentity{Namespace: "ns", NodeName: "vk"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			value, _, err := astjson.DecodeObject([]byte(tt.pod), inputNames)
			if err != nil {
				t.Fatal(err)
			}
			if got := podIdentityOf(value); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// recordingEvaluator keeps the input of the last evaluation.
type recordingEvaluator struct {
	Evaluator
	last ast.Value
}

func (r *recordingEvaluator) EvalValue(ctx context.Context, path []string, input ast.Value, memo policies.Memo) (policies.Result, error) {
	r.last = input
	return r.Evaluator.EvalValue(ctx, path, input, memo)
}

// TestDecideReplacesCallerMembers: what the bridge adds to the input replaces a caller's
// members of the same name (a caller cannot vouch for its own review); the caller's
// other members are kept as sent.
func TestDecideReplacesCallerMembers(t *testing.T) {
	a := newTestAuthorizer(t, Config{}, &fakeReviewer{answer: denyAll}, newView())
	rec := &recordingEvaluator{Evaluator: a.evaluator}
	a.evaluator = rec
	input := `{"pod": {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {"serviceAccountName": "runner", "containers": [{"name": "c"}]}},
		"review": {"allowed": true}, "subject": {"username": "system:admin"}, "tenant": "other", "group": "x",
		"resources": {"largest": {}}, "tolerations": {}, "images": [{"repository": "ghcr.io/allowed"}], "hpc": {"inert": false, "writers": {"slurm-job.vk.io/pre-exec": "vk"}}, "front_door": "relay", "note": "kept"}`
	d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: json.RawMessage(input)})
	if err != nil {
		t.Fatal(err)
	}
	if outcome, _ := summarize(d.Result, d.Defined); outcome != "denied" {
		t.Fatalf("outcome %q, want denied", outcome)
	}
	in := rec.last.(ast.Object)
	for _, tt := range []struct{ path, want string }{
		{"review.allowed", "false"},
		{"subject.username", `"` + saRunner + `"`},
		{"tenant", `"team-a"`},
		{"group", `"interlink.io"`},
		{"resources.largest", "{}"},
		{"tolerations.keyless_exists", "0"},
		{"images", `[{"kind": "container", "name": "c", "repository": null}]`},
		{"hpc.inert", "true"},
		{"note", `"kept"`},
		{"operation", `"create"`},
		{"front_door", `"data_api"`}, // the Request's (none: the Data API), never the caller's
	} {
		var path []*ast.Term
		for _, p := range strings.Split(tt.path, ".") {
			path = append(path, ast.StringTerm(p))
		}
		if got := astjson.Find(in, path); got == nil || got.String() != tt.want {
			t.Errorf("input.%s = %v, want %s", tt.path, got, tt.want)
		}
	}
	if n := in.Len(); n != 15 {
		t.Errorf("input has %d members, want 15 (the caller's pod and note, and thirteen added): %v", n, in)
	}
}

// TestDecisionsKeepNoInput: what a decision leaves behind (the spec cache's derived
// values, a memoised result) holds no term of its request's input. One shared term
// would keep the whole decoded input alive (astjson cuts terms from shared blocks):
// with a container's name shared, each of 2,000 distinct pods with 64 env vars kept
// 23 kB; with none, under 2 kB (derived values; the memo keeps no result of a spec
// seen once).
func TestDecisionsKeepNoInput(t *testing.T) {
	var env strings.Builder
	for i := range 64 {
		fmt.Fprintf(&env, `{"name": "VAR_%d", "value": "%s"},`, i, strings.Repeat("v", 100))
	}
	pod := func(i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"pod": {"metadata": {"name": "p-%d", "namespace": "team-a"},
			"spec": {"serviceAccountName": "runner", "nodeName": "vk-a", "containers": [{"name": "main",
			"env": [%s {"name": "LAST"}], "resources": {"requests": {"cpu": "%dm"}}}]}}}`, i, env.String(), 1+i))
	}
	const pods = 2000
	inputs := make([]json.RawMessage, pods)
	for i := range inputs {
		inputs[i] = pod(i)
	}
	a := newTestAuthorizer(t, Config{}, &fakeReviewer{answer: rbacByVerb(saRunner + " create pods.interlink.io")}, newView())
	decide := func(in json.RawMessage) {
		d, err := a.Decide(context.Background(), Request{Path: decisionPath, Input: in})
		if outcome, _ := summarize(d.Result, d.Defined); err != nil || outcome != "allowed" {
			t.Fatalf("decision %v %v", jsonOf(d.Result), err)
		}
	}
	decide(inputs[0]) // the policy's compiled query and the review cache are no part of it
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, in := range inputs[1:] {
		decide(in)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	perDecision := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / (pods - 1)
	if perDecision > 8<<10 {
		t.Errorf("each decision left %d bytes on the heap, want at most 8 kB: a decoded input is kept", perDecision)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(inputs)
}
