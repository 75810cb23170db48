package authorizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	k8sauthorizer "k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/sar-bridge/sar-bridge/decisionapi"
	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/internal/mapping"
	"github.com/sar-bridge/sar-bridge/policies"
)

// The fuzz targets use the fakes of the unit tests: newView's cluster, with a
// taint on vk-a for the protected-taint rules, and fakeReviewer with a fixed
// answer, whose record forget clears after each run so that memory stays flat
// over millions of runs.

func newFuzzView() *fakeView {
	v := newView()
	v.nodes["vk-a"].Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "a100", Effect: corev1.TaintEffectNoSchedule}}
	return v
}

// forget drops the reviews f has recorded.
func (f *fakeReviewer) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.specs = 0, nil
}

// denyAll answers every review with a denial.
var denyAll = rbacByVerb()

// impersonateAll lets every authenticated caller impersonate anyone.
var impersonateAll = k8sauthorizer.AuthorizerFunc(func(context.Context, k8sauthorizer.Attributes) (k8sauthorizer.Decision, string, error) {
	return k8sauthorizer.DecisionAllow, "fuzz: impersonate all", nil
})

// fuzzContext is the request context for flags: bit 0 adds an authenticated caller.
func fuzzContext(flags uint8) context.Context {
	ctx := context.Background()
	if flags&1 != 0 {
		ctx = request.WithUser(ctx, &user.DefaultInfo{Name: "system:serviceaccount:interlink:vk"})
	}
	return ctx
}

// fuzzPolicyData turns on every rule of the embedded policy: caps, protected taints
// and default limits.
const fuzzPolicyData = `{"interlink": {
  "limits": {"system:serviceaccounts:team-a": {"cpu": "4", "memory": "8Gi"},
             "devs": {"cpu": "16"}, "broken": {"cpu": "lots"}},
  "protected_taints": [{"key": "gpu", "value": "a100", "allowed_groups": ["gpu-users"], "allowed_users": ["alice"]}],
  "default_limits": {"cpu": "1", "memory": "1Gi"}}}`

func newFuzzEvaluator(tb testing.TB, dir string) *policies.Evaluator {
	tb.Helper()
	dataFile := filepath.Join(dir, "data.json")
	if err := os.WriteFile(dataFile, []byte(fuzzPolicyData), 0o600); err != nil {
		tb.Fatal(err)
	}
	eval, err := policies.New(context.Background(), policies.Options{DataFile: dataFile})
	if err != nil {
		tb.Fatal(err)
	}
	return eval
}

// newFuzzAuthorizers returns one Authorizer per flag combination, all with the real
// embedded policy and a reviewer that answers every review with answer. Bit 0:
// input.user is vouched for by an impersonation authorizer that lets every
// authenticated caller (see fuzzContext) impersonate anyone; bit 1: node access
// reviews.
func newFuzzAuthorizers(f *testing.F, answer func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)) ([4]*Authorizer, *fakeReviewer) {
	f.Helper()
	rev := &fakeReviewer{answer: answer}
	eval := newFuzzEvaluator(f, f.TempDir())
	maps, err := mapping.Parse([]string{"team-a=interlink.io", "tenant-b=tenant-b.interlink.io"})
	if err != nil {
		f.Fatal(err)
	}
	var out [4]*Authorizer
	for i := range out {
		cfg := Config{Mappings: maps, TenantLabel: "interlink.io/tenant", NodeAccess: i&2 != 0}
		cr := NewCachingReviewer(rev, cache.NewMemory(100), CachingReviewerOptions{AllowedTTL: time.Minute, DeniedTTL: time.Minute})
		out[i] = New(cfg, cr, newFuzzView(), eval, nil, nil)
		if i&1 != 0 {
			out[i].SetImpersonationAuthorizer(impersonateAll)
		}
	}
	return out, rev
}

// fuzzSeeds are valid and nearly valid inputs.
func fuzzSeeds() []string {
	pod := func(op, ns, name, spec, extra string) string {
		return fmt.Sprintf(`{"operation": %q, "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": %q, "namespace": %q, "labels": {"app": "x"}}, "spec": %s}%s}`, op, name, ns, spec, extra)
	}
	const (
		plain      = `{"serviceAccountName": "runner", "containers": [{"name": "main", "image": "busybox"}]}`
		limited    = `{"serviceAccountName": "runner", "containers": [{"name": "main", "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "500m"}}}], "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "0.5"}}}]}`
		overCap    = `{"containers": [{"name": "main", "resources": {"limits": {"cpu": "64", "memory": "1Ti"}}}]}`
		tolerating = `{"containers": [{"name": "main"}], "tolerations": [{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}, {"key": "other", "operator": "Exists"}, {"operator": "Exists"}]}`
		selecting  = `{"containers": [{"name": "main"}], "nodeName": "vk-a", "nodeSelector": {"interlink.io/tenant": "tenant-b"}, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "interlink.io/tenant", "operator": "In", "values": ["team-a", "tenant-b"]}]}]}}}}`
	)
	return []string{
		pod("create", "team-a", "p1", plain, ""),
		pod("", "team-a", "", plain, ""),
		pod("create", "team-a", "p1", limited, ""),
		pod("create", "team-a", "p1", overCap, ""),
		pod("create", "team-a", "p1", tolerating, ""),
		pod("create", "team-a", "p1", tolerating, `, "user": {"username": "alice", "uid": "u-1", "groups": ["gpu-users", "devs"], "extra": {"scopes": ["a", "b"]}}`),
		pod("create", "team-a", "p1", selecting, `, "node": {"name": "vk-b"}`),
		pod("create", "labelled", "p1", plain, `, "node": {"name": "vk-a"}`),
		pod("create", "team-a", "p1", plain, `, "node": {"name": "ghost-node"}`),
		pod("delete", "team-a", "p1", plain, ""),
		pod("status", "team-a", "p1", plain, `, "node": {"name": "vk-a"}`),
		pod("status", "orphan", "p1", plain, ""),
		pod("create", "ghost", "p1", plain, ""),
		pod("create", "team-a", "p1", plain, `, "review": {"allowed": true}, "subject": {"username": "system:admin"}, "tenant": "x", "namespace": {"labels": {}}`),
		pod("exec", "team-a", "p1", plain, ""),
		pod("delete", "team-a", "", plain, ""),
		`{"pod": {"metadata": {"namespace": "team-a"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": 3}}}]}}}`,
		`{"pod": {"metadata": {"namespace": 7}}}`,
		`{"pod": "p1"}`,
		`{"pod": null}`,
		`{"operation": 3, "pod": {}}`,
		`{}`,
		`[]`,
		`null`,
		`{"input": {"pod": {}}}`,
		`{"pod": {"metadata": {"namespace": "team-a"}}, "user": {"groups": ["x"]}}`,
	}
}

// addSeeds adds every seed with every flags value: bits 0-1 pick the configuration
// (see newFuzzAuthorizers), bit 2 the document (allow instead of decision).
func addSeeds(f *testing.F) {
	for _, s := range fuzzSeeds() {
		for flags := uint8(0); flags < 8; flags++ {
			f.Add([]byte(s), flags)
		}
	}
}

var (
	fuzzDecisionPath = []string{"interlink", "authz", "decision"}
	fuzzAllowPath    = []string{"interlink", "authz", "allow"}
)

func fuzzDocument(flags uint8) []string {
	if flags&4 != 0 {
		return fuzzAllowPath
	}
	return fuzzDecisionPath
}

// checkFuzzError fails unless err is one the pipeline may return for a pod input.
func checkFuzzError(t *testing.T, d Decision, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var (
		inputErr    *InputError
		unavailable *UnavailableError
		forbidden   *ForbiddenError
	)
	switch {
	case errors.As(err, &inputErr), errors.As(err, &unavailable), errors.As(err, &forbidden):
	case strings.HasPrefix(err.Error(), "evaluating policy: "):
		// The embedded policy promises defined documents and no conflicts for any
		// input: an evaluation error is a policy bug.
		t.Fatalf("policy evaluation failed: %v", err)
	default:
		t.Fatalf("unexpected error %T: %v", err, err)
	}
	if d.Defined || jsonOf(d.Result) != nil {
		t.Fatalf("an error came with a result: %#v", jsonOf(d.Result))
	}
}

// isAllowed reports whether a decision or allow document allows; ok is false when
// the document is undefined or has the wrong shape.
func isAllowed(path []string, d Decision) (allowed, ok bool) {
	if !d.Defined {
		return false, false
	}
	if reflect.DeepEqual(path, fuzzAllowPath) {
		b, ok := jsonOf(d.Result).(bool)
		return b, ok
	}
	m, ok := jsonOf(d.Result).(map[string]any)
	if !ok {
		return false, false
	}
	b, ok := m["allowed"].(bool)
	return b, ok
}

// FuzzDecide feeds arbitrary input to the whole pipeline with a reviewer that denies
// everything: whatever the input, nothing is allowed, and the documents stay defined.
func FuzzDecide(f *testing.F) {
	addSeeds(f)
	auths, rev := newFuzzAuthorizers(f, denyAll)
	f.Fuzz(func(t *testing.T, raw []byte, flags uint8) {
		defer rev.forget()
		path := fuzzDocument(flags)
		d, err := auths[flags&3].Decide(fuzzContext(flags), Request{Path: path, Input: json.RawMessage(raw)})
		checkFuzzError(t, d, err)
		if err != nil {
			return
		}
		allowed, ok := isAllowed(path, d)
		if !ok {
			t.Fatalf("%v has the wrong shape: %#v (defined %v)", path, jsonOf(d.Result), d.Defined)
		}
		if allowed {
			t.Fatalf("allowed although every review denies: %#v; input %s", jsonOf(d.Result), raw)
		}
	})
}

// FuzzAllowAllReviewer feeds arbitrary input to the pipeline with a reviewer that
// allows everything, so only the input checks and the policy stand between garbage
// and an allow. Whenever the answer is allowed:
//   - the input, read the way the policy reads it, holds a pod object with a
//     namespace, and an operation that is absent or one of create, delete, status;
//   - the same request spelled canonically (the pod re-encoded from its Go form,
//     which is what Kubernetes and interLink act on) is allowed as well: the verdict
//     must not hang on JSON spelling that Go ignores.
func FuzzAllowAllReviewer(f *testing.F) {
	addSeeds(f)
	auths, rev := newFuzzAuthorizers(f, allowAll)
	f.Fuzz(func(t *testing.T, raw []byte, flags uint8) {
		defer rev.forget()
		a, path, ctx := auths[flags&3], fuzzDocument(flags), fuzzContext(flags)
		d, err := a.Decide(ctx, Request{Path: path, Input: json.RawMessage(raw)})
		checkFuzzError(t, d, err)
		if err != nil {
			return
		}
		allowed, ok := isAllowed(path, d)
		if !ok {
			t.Fatalf("%v has the wrong shape: %#v (defined %v)", path, jsonOf(d.Result), d.Defined)
		}
		if !allowed {
			return
		}
		if err := policyVisibleShape(raw); err != nil {
			t.Fatalf("allowed, but %v; input %s", err, raw)
		}
		canonical, err := canonicalInput(raw)
		if err != nil {
			t.Fatalf("allowed, but the input does not decode again: %v", err)
		}
		d2, err := a.Decide(ctx, Request{Path: path, Input: canonical})
		if err != nil {
			t.Fatalf("canonical input %s: %v", canonical, err)
		}
		if allowed2, _ := isAllowed(path, d2); !allowed2 {
			t.Fatalf("input %s is allowed, but its canonical form %s is not: %#v", raw, canonical, jsonOf(d2.Result))
		}
	})
}

// policyVisibleShape checks the input as the policy sees it: plain, case-sensitive
// JSON.
func policyVisibleShape(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var in map[string]any
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("input is not a JSON object: %v", err)
	}
	if op, hasOp := in["operation"]; hasOp {
		s, _ := op.(string)
		if _, known := decisionapi.Verb(s); !known && s != "" {
			return fmt.Errorf("input.operation is %#v", op)
		}
	}
	pod, _ := in["pod"].(map[string]any)
	if pod == nil {
		return errors.New("input.pod is not an object")
	}
	meta, _ := pod["metadata"].(map[string]any)
	if ns, _ := meta["namespace"].(string); ns == "" {
		return errors.New("input.pod.metadata.namespace is not a non-empty string")
	}
	return nil
}

// canonicalInput re-encodes the request from its Go form, as encoding/json (which
// folds case) reads it.
func canonicalInput(raw []byte) (json.RawMessage, error) {
	var req struct {
		Operation string          `json:"operation"`
		Pod       json.RawMessage `json:"pod"`
		User      *inputUser      `json:"user"`
		Node      *struct {
			Name string `json:"name"`
		} `json:"node"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Pod, &pod); err != nil {
		return nil, err
	}
	canon := map[string]any{"operation": req.Operation, "pod": &pod}
	if req.User != nil {
		canon["user"] = req.User
	}
	if req.Node != nil {
		canon["node"] = req.Node
	}
	return json.Marshal(canon)
}

// TestCaseVariantKeysReachThePolicy: keys that differ from the Pod's only by case (or by
// Unicode folding) must never let the policy judge another pod than a Go client would
// run. encoding/json folds case; the policy does not. Such pods are refused.
func TestCaseVariantKeysReachThePolicy(t *testing.T) {
	maps, err := mapping.Parse([]string{"team-a=interlink.io"})
	if err != nil {
		t.Fatal(err)
	}
	cr := NewCachingReviewer(&fakeReviewer{answer: allowAll}, cache.NewMemory(100), CachingReviewerOptions{AllowedTTL: time.Minute})
	a := New(Config{Mappings: maps, TenantLabel: "interlink.io/tenant"}, cr, newFuzzView(), newFuzzEvaluator(t, t.TempDir()), nil, nil)
	for _, in := range []string{
		`{"operation": "create", "Pod": {"metadata": {"namespace": "team-a"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "64"}}}]}}}`,
		`{"operation": "create", "pod": {"metadata": {"namespace": "team-a"}, "Spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "64"}}}]}}}`,
		`{"operation": "create", "pod": {"metadata": {"namespace": "team-a"}, "spec": {"containers": [{"name": "c", "Resources": {"limits": {"cpu": "64"}}}]}}}`,
		`{"operation": "create", "pod": {"metadata": {"namespace": "team-a"}, "spec": {"containers": [{"name": "c"}]}, "Spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "64"}}}]}}}`,
		`{"operation": "create", "pod": {"metadata": {"namespace": "team-a"}, "spec": {"containers": [{"name": "c"}], "tolerations": [{"key": "gpu", "Operator": "Exists"}]}}}`,
		`{"operation": "create", "pod": {"metadata": {"namespace": "team-a"}, "spec": {"containers": [{"name": "c"}], "tolerations": [{"key": "gpu", "ſperator": "Exists"}]}}}`,
	} {
		d, err := a.Decide(context.Background(), Request{Path: fuzzDecisionPath, Input: json.RawMessage(in)})
		if err != nil {
			continue // rejecting the spelling is a fix too
		}
		if allowed, _ := isAllowed(fuzzDecisionPath, d); allowed {
			t.Errorf("allowed: %s", in)
		}
	}
}
