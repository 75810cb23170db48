package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

// newPod returns a pod in ns running as ServiceAccount sa ("" = default) with one
// small container called "main".
func newPod(ns, sa, name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "0b5e3c9a-1111-4a2b-9c3d-" + "000000000001"},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			Containers:         []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// withContainer adds a container with equal cpu/memory requests and limits ("" = unset).
func withContainer(name, cpu, memory string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, container(name, cpu, memory))
	}
}

// onlyContainers replaces the containers.
func onlyContainers(cs ...corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers = cs }
}

func container(name, cpu, memory string) corev1.Container {
	rl := corev1.ResourceList{}
	if cpu != "" {
		rl[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		rl[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	c := corev1.Container{Name: name, Image: "busybox:1.36"}
	if len(rl) > 0 {
		c.Resources = corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}
	}
	return c
}

func withToleration(tol corev1.Toleration) podOpt {
	return func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, tol) }
}

func withNodeName(n string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeName = n }
}

func withPodLabels(l map[string]string) podOpt {
	return func(p *corev1.Pod) { p.Labels = l }
}

// input builds a decision input.
func input(op string, pod *corev1.Pod, extra ...func(map[string]any)) map[string]any {
	in := map[string]any{"operation": op, "pod": pod}
	for _, e := range extra {
		e(in)
	}
	return in
}

func onNode(name string) func(map[string]any) {
	return func(in map[string]any) { in["node"] = map[string]any{"name": name} }
}

// want is an expected decision: HTTP 200 with result.allowed == allowed and a reason
// containing every string in reason.
type want struct {
	allowed bool
	reason  []string
}

func allow(reason ...string) want { return want{allowed: true, reason: reason} }
func deny(reason ...string) want  { return want{allowed: false, reason: reason} }

// decide posts the input and checks the answer against w.
func decide(t *testing.T, b *cluster.Bridge, in map[string]any, w want) *cluster.Response {
	t.Helper()
	r, err := b.Decide(in)
	if err != nil {
		t.Fatalf("POST decision: %v", err)
	}
	checkDecision(t, r, w)
	return r
}

func checkDecision(t *testing.T, r *cluster.Response, w want) {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("want HTTP 200, got %s", r)
	}
	if r.Result == nil || r.Result.Allowed == nil {
		t.Fatalf("answer has no result.allowed (parse error: %v): %s", r.ParseError, r)
	}
	if r.Allowed() != w.allowed {
		t.Errorf("want allowed=%v, got %s", w.allowed, r)
	}
	for _, s := range w.reason {
		if !strings.Contains(r.Reason(), s) {
			t.Errorf("reason %q does not contain %q (answer %s)", r.Reason(), s, r)
		}
	}
	if r.DecisionID == "" {
		t.Errorf("answer has no decision_id: %s", r)
	}
}

// opaCodes are OPA's error codes (server/types in OPA).
var opaCodes = map[string]bool{"invalid_parameter": true, "invalid_operation": true, "internal_error": true}

// checkError checks an OPA-shaped error answer.
func checkError(t *testing.T, r *cluster.Response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("want HTTP %d, got %s", status, r)
	}
	if code != "" && r.Error.Code != code {
		t.Errorf("want code %q, got %q (%s)", code, r.Error.Code, r)
	}
	if code == "" && !opaCodes[r.Error.Code] {
		t.Errorf("want an OPA error code, got %q (%s)", r.Error.Code, r)
	}
	if strings.TrimSpace(r.Error.Message) == "" {
		t.Errorf("error answer has no message: %s", r)
	}
	if r.Allowed() {
		t.Errorf("an error answer carries allowed=true: %s", r)
	}
}

// metric reads a metric sum from a bridge.
func metric(t *testing.T, b *cluster.Bridge, name string, match map[string]string) float64 {
	t.Helper()
	v, err := b.MetricSum(name, match)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return v
}

const (
	reviewsTotal = "sar_bridge_reviews_total"
	cacheTotal   = "sar_bridge_review_cache_requests_total"
)

// poll calls f every interval until it returns true or the deadline passes; it returns
// how long it took and whether f succeeded.
func poll(deadline time.Duration, interval time.Duration, f func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if f() {
			return time.Since(start), true
		}
		if time.Since(start) > deadline {
			return time.Since(start), false
		}
		time.Sleep(interval)
	}
}

// Reason fragments.
func mayNot(user, verb, resource, ns string) []string {
	return []string{user + " may not " + verb + " " + resource, `in namespace "` + ns + `"`}
}

func sa(ns, name string) string { return cluster.ServiceAccountUser(ns, name) }

// bindOffloader binds ServiceAccount ns/name to the ClusterRole interlink-offloader with
// a RoleBinding of the same name, deleted at the end of the test; the caller may delete
// it earlier.
func bindOffloader(t *testing.T, ns, name string) []*unstructured.Unstructured {
	t.Helper()
	rb, err := suite.cluster.ApplyYAML(context.Background(), fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[2]s, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: %[2]s, namespace: %[1]s}
`, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), rb) })
	return rb
}

// pollDecision asks the bridge for the decision of next() every 200ms until done holds
// for the answer or within has passed; it returns the last answer and the time taken.
func pollDecision(t *testing.T, b *cluster.Bridge, within time.Duration, next func() map[string]any, done func(*cluster.Response) bool) (*cluster.Response, time.Duration, bool) {
	t.Helper()
	var last *cluster.Response
	took, ok := poll(within, 200*time.Millisecond, func() bool {
		r, err := b.Decide(next())
		if err != nil {
			t.Fatalf("POST decision: %v", err)
		}
		last = r
		return done(r)
	})
	return last, took, ok
}

func allowedAnswer(r *cluster.Response) bool { return r.Status == 200 && r.Allowed() }
func deniedAnswer(r *cluster.Response) bool  { return r.Status == 200 && !r.Allowed() }

// rule is a rule of a test Role: verbs on resources of one API group.
type rule struct {
	group            string
	resources, verbs []string
}

// podRule is verbs on pods.
func podRule(verbs ...string) rule { return rule{resources: []string{"pods"}, verbs: verbs} }

// podEditor is the YAML of a Role "pod-editor" in ns with rules and its RoleBinding
// "pod-editors" to subjects (userSubject, saSubject), to join with other documents:
// Kubernetes' own right to make pods, which the right to offload does not include (and
// the aggregated "edit" role has no rules here: no controller manager aggregates it).
func podEditor(ns string, rules []rule, subjects ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: pod-editor, namespace: %s}\nrules:\n", ns)
	for _, r := range rules {
		fmt.Fprintf(&b, "  - apiGroups: [%q]\n    resources: %s\n    verbs: %s\n", r.group, flowList(r.resources), flowList(r.verbs))
	}
	fmt.Fprintf(&b, "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: pod-editors, namespace: %s}\n", ns)
	b.WriteString("roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-editor}\nsubjects:\n")
	for _, s := range subjects {
		fmt.Fprintf(&b, "  - %s\n", s)
	}
	return b.String()
}

// userSubject and saSubject are RoleBinding subjects, as YAML flow mappings.
func userSubject(name string) string {
	return fmt.Sprintf("{kind: User, name: %q, apiGroup: rbac.authorization.k8s.io}", name)
}

func saSubject(ns, name string) string {
	return fmt.Sprintf("{kind: ServiceAccount, name: %q, namespace: %q}", name, ns)
}

// flowList is a YAML flow sequence of quoted strings.
func flowList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
