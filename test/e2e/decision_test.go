package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// The bridge must run as sar-bridge/sar-bridge with exactly the base ClusterRole: it
// may create SubjectAccessReviews and read namespaces and nodes, and nothing else.
func TestBridgeIdentity(t *testing.T) {
	ctx := context.Background()
	cfg, err := suite.cluster.ServiceAccountConfig(ctx, "sar-bridge", "sar-bridge", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	user, _, err := cluster.WhoAmI(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if user != sa("sar-bridge", "sar-bridge") {
		t.Fatalf("token authenticates as %q", user)
	}
	c := suite.cluster
	groups := cluster.ServiceAccountGroups("sar-bridge")
	for _, tc := range []struct {
		verb, group, resource string
		want                  bool
	}{
		{"create", "authorization.k8s.io", "subjectaccessreviews", true},
		{"list", "", "namespaces", true},
		{"watch", "", "nodes", true},
		{"get", "", "nodes", true},
		{"list", "", "pods", true}, // tenant offload quotas: usage on virtual nodes
		{"get", "", "pods", true},  // who wrote the Virtual Kubelet's annotations (the relay reads the live pod)
		{"delete", "", "pods", false},
		{"create", "", "namespaces", false},
		{"get", "", "secrets", false},
		{"update", "", "nodes", false},
		{"create", "rbac.authorization.k8s.io", "rolebindings", false},
		{"patch", "", "pods", true}, // the quota reconciler labels the pods it confirmed charged
		{"update", "", "pods", false},
		{"watch", "sar-bridge.io", "offloadtenants", true}, // tenants as cluster objects
		{"get", "sar-bridge.io", "offloadtenants", true},
		{"update", "sar-bridge.io", "offloadtenants", false}, // the spec is the admin's
		{"patch", "sar-bridge.io", "offloadtenants", false},
		{"create", "sar-bridge.io", "offloadtenants", false},
		{"delete", "sar-bridge.io", "offloadtenants", false},
	} {
		got, err := c.Can(ctx, user, groups, authzAttrs(tc.verb, tc.group, tc.resource))
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s %s.%s: allowed=%v, want %v", tc.verb, tc.resource, tc.group, got, tc.want)
		}
	}
	// The quota ledger writes an OffloadTenant's status, and its reconciler's leader
	// election a Lease in the bridge's own namespace only.
	for _, tc := range []struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{authorizationv1.ResourceAttributes{Verb: "update", Group: "sar-bridge.io", Resource: "offloadtenants", Subresource: "status"}, true},
		{authorizationv1.ResourceAttributes{Verb: "patch", Group: "sar-bridge.io", Resource: "offloadtenants", Subresource: "status"}, true},
		{authorizationv1.ResourceAttributes{Verb: "delete", Group: "sar-bridge.io", Resource: "offloadtenants", Subresource: "status"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "sar-bridge", Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "sar-bridge", Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Name: "any"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "sar-bridge", Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "any"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "sar-bridge", Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "sar-bridge", Verb: "list", Group: "coordination.k8s.io", Resource: "leases"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}, false},
	} {
		got, err := c.Can(ctx, user, groups, tc.attrs)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%+v: allowed=%v, want %v", tc.attrs, got, tc.want)
		}
	}
}

// Cases 1-3, 5 and 8: RBAC through SubjectAccessReview, tenant resolution and mapping.
func TestRBACDecisions(t *testing.T) {
	b := shared(t)
	offloadA := `RoleBinding "offload/team-a" of ClusterRole "interlink-offloader" to ServiceAccount "runner/team-a"`
	for _, tc := range []struct {
		name string
		in   map[string]any
		want want
	}{
		// 1: the example tenant's bound ServiceAccount.
		{"bound runner may create", input("create", newPod("team-a", "runner", "job-1")),
			allow("RBAC: allowed by " + offloadA)},
		{"bound runner may delete", input("delete", newPod("team-a", "runner", "job-1")), allow(offloadA)},
		{"bound runner may read status", input("status", newPod("team-a", "runner", "job-1")), allow(offloadA)},
		// 2: same namespace, other identities.
		{"other ServiceAccount may not create", input("create", newPod("team-a", "other", "job-1")),
			deny(mayNot(sa("team-a", "other"), "create", "pods.interlink.io", "team-a")...)},
		{"default ServiceAccount may not create", input("create", newPod("team-a", "", "job-1")),
			deny(mayNot(sa("team-a", "default"), "create", "pods.interlink.io", "team-a")...)},
		// 3: tenant-b maps to tenant-b.interlink.io; a binding on interlink.io is not enough.
		{"tenant-b runner bound on its group", input("create", newPod("project-b", "runner", "job-1")),
			allow(`RoleBinding "offload/project-b" of ClusterRole "tenant-b-offloader" to ServiceAccount "runner/project-b"`)},
		{"tenant-b legacy bound on interlink.io only", input("create", newPod("project-b", "legacy", "job-1")),
			deny(mayNot(sa("project-b", "legacy"), "create", "pods.tenant-b.interlink.io", "project-b")...)},
		{"team-a runner in tenant-b namespace", input("create", newPod("project-b", "team-a-runner", "job-1")),
			deny(mayNot(sa("project-b", "team-a-runner"), "create", "pods.tenant-b.interlink.io", "project-b")...)},
		// 5: namespace labels come from the cluster, not from the request.
		{"claimed tenant label ignored (team-a stays team-a)", input("create", newPod("team-a", "runner", "job-1"), func(in map[string]any) {
			in["namespace"] = map[string]any{"name": "team-a", "labels": map[string]string{"interlink.io/tenant": "tenant-b"}}
		}), allow(offloadA)},
		{"claimed tenant label ignored (orphan stays unmapped)", input("create", newPod("orphan", "runner", "job-1"), func(in map[string]any) {
			in["namespace"] = map[string]any{"name": "orphan", "labels": map[string]string{"interlink.io/tenant": "team-a"}}
		}), deny(`tenant "orphan"`)},
		{"pod labels do not pick the tenant", input("create", newPod("orphan", "runner", "job-1",
			withPodLabels(map[string]string{"interlink.io/tenant": "team-a"}))), deny(`tenant "orphan"`)},
		// 8: delete and status are reviewed with their own verbs and the pod's name.
		{"delete-only role may delete its pod", input("delete", newPod("team-a", "cleaner", "job-1")),
			allow(`RoleBinding "cleaner/team-a" of Role "pod-deleter" to ServiceAccount "cleaner/team-a"`)},
		{"delete-only role may not delete another pod", input("delete", newPod("team-a", "cleaner", "job-2")),
			deny(mayNot(sa("team-a", "cleaner"), "delete", "pods.interlink.io", "team-a")...)},
		{"delete-only role may not create", input("create", newPod("team-a", "cleaner", "job-1")),
			deny(mayNot(sa("team-a", "cleaner"), "create", "pods.interlink.io", "team-a")...)},
		{"delete-only role may not read status", input("status", newPod("team-a", "cleaner", "job-1")),
			deny(mayNot(sa("team-a", "cleaner"), "get", "pods.interlink.io", "team-a")...)},
		{"get-only role may read status", input("status", newPod("team-a", "watcher", "job-1")),
			allow(`RoleBinding "watcher/team-a" of Role "pod-reader" to ServiceAccount "watcher/team-a"`)},
		{"get-only role may not delete", input("delete", newPod("team-a", "watcher", "job-1")),
			deny(mayNot(sa("team-a", "watcher"), "delete", "pods.interlink.io", "team-a")...)},
		{"create reviews carry no name", input("create", newPod("team-a", "named", "job-1")),
			deny(mayNot(sa("team-a", "named"), "create", "pods.interlink.io", "team-a")...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := decide(t, b, tc.in, tc.want)
			if r.Result != nil && r.Result.Review == nil && tc.want.allowed {
				t.Errorf("allowed answer has no result.review: %s", r)
			}
		})
	}
}

// A claimed input.user is never taken at face value: with no authenticated caller to
// vouch for it, the request is refused (403, OPA error shape) and nothing is reviewed.
func TestInputUserNotTrusted(t *testing.T) {
	b := newBridge(t)
	in := input("create", newPod("team-a", "other", "job-1"), func(in map[string]any) {
		in["user"] = map[string]any{"username": sa("team-a", "runner"), "groups": []string{"system:masters", "system:serviceaccounts:team-a"}}
	})
	r, err := b.Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, r, 403, "unauthorized")
	if want := "input.user needs an authenticated caller"; !strings.Contains(r.Error.Message, want) {
		t.Errorf("message %q, want it to contain %q", r.Error.Message, want)
	}
	if got := metric(t, b, reviewsTotal, nil); got != 0 {
		t.Errorf("%s = %v after a refused input.user, want 0", reviewsTotal, got)
	}
}

// Case 4: an unmapped tenant is denied without asking the API server.
func TestUnmappedTenantSendsNoReview(t *testing.T) {
	b := newBridge(t)
	if got := metric(t, b, reviewsTotal, nil); got != 0 {
		t.Fatalf("fresh bridge: %s = %v, want 0", reviewsTotal, got)
	}
	decide(t, b, input("create", newPod("orphan", "runner", "job-1")), deny(`tenant "orphan"`))
	decide(t, b, input("create", newPod("ghost-ns", "runner", "job-1")), deny(`tenant "ghost"`))
	decide(t, b, input("delete", newPod("ghost-ns", "runner", "job-1")), deny(`tenant "ghost"`))
	if got := metric(t, b, reviewsTotal, nil); got != 0 {
		t.Errorf("after unmapped-tenant decisions: %s = %v, want 0", reviewsTotal, got)
	}
	// The counter does move for a mapped tenant.
	decide(t, b, input("create", newPod("team-a", "runner", "job-1")), allow(`RoleBinding "offload/team-a"`))
	if got := metric(t, b, reviewsTotal, map[string]string{"result": "allowed"}); got != 1 {
		t.Errorf(`after one mapped decision: %s{result="allowed"} = %v, want 1`, reviewsTotal, got)
	}
}

// Case 6: protected taints.
func TestProtectedTaints(t *testing.T) {
	b := shared(t)
	gpuExists := corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	gpuEqual := corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpEqual, Value: "a100", Effect: corev1.TaintEffectNoSchedule}
	gpuOther := corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpEqual, Value: "h100", Effect: corev1.TaintEffectNoSchedule}
	untracked := corev1.Toleration{Key: "example.com/spot", Operator: corev1.TolerationOpExists}
	keyless := corev1.Toleration{Operator: corev1.TolerationOpExists}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want want
	}{
		{"Exists on a protected key, allowed group", newPod("team-a", "runner", "gpu-1", withToleration(gpuExists)), deny("hpc.example/gpu")},
		{"Equal protected value, allowed group", newPod("team-a", "runner", "gpu-2", withToleration(gpuEqual)), allow(`RoleBinding "offload/team-a"`)},
		{"Equal protected value, other group", newPod("project-b", "runner", "gpu-3", withToleration(gpuEqual)), deny("hpc.example/gpu")},
		{"Exists on a protected key, other group", newPod("project-b", "runner", "gpu-4", withToleration(gpuExists)), deny("hpc.example/gpu")},
		{"Equal other value of a protected key, allowed group", newPod("team-a", "runner", "gpu-5", withToleration(gpuOther)), allow(`RoleBinding "offload/team-a"`)},
		{"untracked key", newPod("project-b", "runner", "spot-1", withToleration(untracked)), allow(`RoleBinding "offload/project-b"`)},
		{"keyless Exists", newPod("team-a", "runner", "all-1", withToleration(keyless)), deny()},
		{"keyless Exists, other group", newPod("project-b", "runner", "all-2", withToleration(keyless)), deny()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := decide(t, b, input("create", tc.pod), tc.want)
			if !tc.want.allowed && r.Reason() == "" {
				t.Errorf("denial without a reason: %s", r)
			}
		})
	}
	// Policies apply to create only: deleting such a pod is RBAC alone.
	decide(t, b, input("delete", newPod("team-a", "runner", "gpu-1", withToleration(gpuExists))), allow(`RoleBinding "offload/team-a"`))
}

// Case 7: per-group resource caps name the offending container.
func TestResourceLimits(t *testing.T) {
	b := shared(t)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want want
	}{
		{"cpu over the group cap", newPod("team-a", "runner", "big-1", withContainer("hog", "3", "1Gi")), deny("hog")},
		{"memory over the group cap", newPod("team-a", "runner", "big-2", withContainer("fat", "500m", "8Gi")), deny("fat")},
		{"within the group cap", newPod("team-a", "runner", "ok-1", onlyContainers(container("main", "1500m", "2Gi"))), allow(`RoleBinding "offload/team-a"`)},
		{"no resources", newPod("team-a", "runner", "ok-2"), allow(`RoleBinding "offload/team-a"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := decide(t, b, input("create", tc.pod), tc.want)
			if !tc.want.allowed && r.Reason() == "" {
				t.Errorf("denial without a reason: %s", r)
			}
		})
	}
}

// Tenant isolation: a node labelled with another tenant is refused.
func TestTenantIsolation(t *testing.T) {
	b := shared(t)
	decide(t, b, input("create", newPod("team-a", "runner", "iso-1"), onNode("vk-b")), deny("tenant"))
	decide(t, b, input("create", newPod("team-a", "runner", "iso-2", withNodeName("vk-b"))), deny("tenant"))
	decide(t, b, input("create", newPod("project-b", "runner", "iso-3"), onNode("vk-b")), allow(`RoleBinding "offload/project-b"`))
	decide(t, b, input("create", newPod("team-a", "runner", "iso-4"), onNode("vk-1")), allow(`RoleBinding "offload/team-a"`))
}

// Case 10: an identical second decision is answered from the cache.
func TestReviewCache(t *testing.T) {
	b := shared(t)
	for _, tc := range []struct {
		name   string
		in     map[string]any
		want   want
		result string
	}{
		{"allowed", input("status", newPod("team-a", "runner", "cache-probe")), allow(`RoleBinding "offload/team-a"`), "allowed"},
		{"denied", input("status", newPod("team-a", "cache-stranger", "cache-probe")), deny(mayNot(sa("team-a", "cache-stranger"), "get", "pods.interlink.io", "team-a")...), "denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := metric(t, b, reviewsTotal, map[string]string{"result": tc.result})
			decide(t, b, tc.in, tc.want)
			first := metric(t, b, reviewsTotal, map[string]string{"result": tc.result})
			if first != before+1 {
				t.Errorf(`first decision: %s{result=%q} went %v -> %v, want +1`, reviewsTotal, tc.result, before, first)
			}
			all := metric(t, b, reviewsTotal, nil)
			hits := metric(t, b, cacheTotal, map[string]string{"result": "hit"})
			decide(t, b, tc.in, tc.want)
			if got := metric(t, b, reviewsTotal, nil); got != all {
				t.Errorf("second identical decision sent a review: %s %v -> %v", reviewsTotal, all, got)
			}
			if got := metric(t, b, cacheTotal, map[string]string{"result": "hit"}); got != hits+1 {
				t.Errorf(`second identical decision: %s{result="hit"} %v -> %v, want +1`, cacheTotal, hits, got)
			}
		})
	}
}

// Case 9: RBAC changes reach decisions within the cache TTLs.
func TestRBACChangesWithinTTL(t *testing.T) {
	const deniedTTL, allowedTTL = 2 * time.Second, 3 * time.Second
	b := newBridge(t, "--cache.denied-ttl=2s", "--cache.allowed-ttl=3s")
	ctx := context.Background()
	in := input("create", newPod("team-a", "late", "late-1"))
	decide(t, b, in, deny(mayNot(sa("team-a", "late"), "create", "pods.interlink.io", "team-a")...))

	rb := bindOffloader(t, "team-a", "late")

	same := func() map[string]any { return in }
	last, took, ok := pollDecision(t, b, deniedTTL+4*time.Second, same, allowedAnswer)
	if !ok {
		t.Fatalf("RoleBinding created: still not allowed after %s (denied TTL %s); last %s", took, deniedTTL, last)
	}
	checkDecision(t, last, allow(`RoleBinding "late/team-a" of ClusterRole "interlink-offloader" to ServiceAccount "late/team-a"`))
	t.Logf("allowed %s after the RoleBinding was created", took.Round(time.Millisecond))

	if err := suite.cluster.Delete(ctx, rb); err != nil {
		t.Fatal(err)
	}
	last, took, ok = pollDecision(t, b, allowedTTL+4*time.Second, same, deniedAnswer)
	if !ok {
		t.Fatalf("RoleBinding deleted: still allowed after %s (allowed TTL %s); last %s", took, allowedTTL, last)
	}
	checkDecision(t, last, deny(mayNot(sa("team-a", "late"), "create", "pods.interlink.io", "team-a")...))
	t.Logf("denied %s after the RoleBinding was deleted", took.Round(time.Millisecond))
}

// Case 13: --review.node-access requires `use` on the target virtual node.
func TestNodeAccessReview(t *testing.T) {
	b := newBridge(t, "--review.node-access")
	for _, tc := range []struct {
		name string
		in   map[string]any
		want want
	}{
		{"vk-1 via input.node", input("create", newPod("team-a", "pinned", "n-1"), onNode("vk-1")),
			allow(`RoleBinding "pinned-pods/team-a" of Role "pod-creator"`)},
		{"vk-2 via input.node", input("create", newPod("team-a", "pinned", "n-2"), onNode("vk-2")),
			deny(mayNot(sa("team-a", "pinned"), "use", "nodes.interlink.io", "team-a")...)},
		{"vk-1 via spec.nodeName", input("create", newPod("team-a", "pinned", "n-3", withNodeName("vk-1"))),
			allow(`RoleBinding "pinned-pods/team-a" of Role "pod-creator"`)},
		{"vk-2 via spec.nodeName", input("create", newPod("team-a", "pinned", "n-4", withNodeName("vk-2"))),
			deny(mayNot(sa("team-a", "pinned"), "use", "nodes.interlink.io", "team-a")...)},
		{"input.node wins over spec.nodeName", input("create", newPod("team-a", "pinned", "n-5", withNodeName("vk-1")), onNode("vk-2")),
			deny(mayNot(sa("team-a", "pinned"), "use", "nodes.interlink.io", "team-a")...)},
		{"offloader may use any node", input("create", newPod("team-a", "runner", "n-6"), onNode("vk-2")),
			allow(`RoleBinding "offload/team-a"`)},
		{"use on nodes alone is not enough", input("create", newPod("team-a", "cleaner", "n-7"), onNode("vk-1")),
			deny(mayNot(sa("team-a", "cleaner"), "create", "pods.interlink.io", "team-a")...)},
	} {
		t.Run(tc.name, func(t *testing.T) { decide(t, b, tc.in, tc.want) })
	}

	// Two reviews for a fresh allowed decision: pods and nodes (project-b's runner has
	// not been reviewed by this bridge yet).
	before := metric(t, b, reviewsTotal, nil)
	decide(t, b, input("create", newPod("project-b", "runner", "n-8"), onNode("vk-2")), allow(`RoleBinding "offload/project-b"`))
	if got := metric(t, b, reviewsTotal, nil); got != before+2 {
		t.Errorf("fresh decision with node access: %s %v -> %v, want +2", reviewsTotal, before, got)
	}

	// Without the flag, the node is not reviewed.
	decide(t, shared(t), input("create", newPod("team-a", "pinned", "n-9"), onNode("vk-2")),
		allow(`RoleBinding "pinned-pods/team-a" of Role "pod-creator"`))
}

func authzAttrs(verb, group, resource string) authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource}
}
