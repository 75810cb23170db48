package tenants

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

// flagGroups stands for the --openshift.mappings flags and the mappings file.
type flagGroups map[string]string

func (f flagGroups) Group(tenant string) (string, bool) {
	if g, ok := f.Named(tenant); ok {
		return g, true
	}
	g, ok := f["*"]
	return g, ok
}

func (f flagGroups) Named(tenant string) (string, bool) {
	if tenant == "*" {
		return "", false
	}
	g, ok := f[tenant]
	return g, ok
}

// dirTenant is an OffloadTenant as the API server would serve it to the dynamic client.
func dirTenant(t *testing.T, name, group string, namespaces []string, hard corev1.ResourceList) *unstructured.Unstructured {
	t.Helper()
	o := &v1alpha1.OffloadTenant{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "OffloadTenant"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.OffloadTenantSpec{Group: group, Namespaces: namespaces, Hard: hard},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func pods(n string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourcePods: resource.MustParse(n)}
}

// startDirectory runs a Directory over a fake dynamic client holding objs, until the test
// ends, and returns once its informer has listed them and is watching.
func startDirectory(t *testing.T, flags Groups, objs ...runtime.Object) (*Directory, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha1.Resource: "OffloadTenantList"}, objs...)
	d, err := NewDirectory(client, 0, flags)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(ctx.Done(), d.HasSynced) {
		t.Fatal("the informer never synced")
	}
	// The fake client drops events sent between its list and its watch: wait until an
	// object created now shows, so later changes are seen.
	probe := dirTenant(t, "zz-probe", "probe.io", nil, nil)
	if _, err := client.Resource(v1alpha1.Resource).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the probe tenant", func() bool { g, ok := d.Group("zz-probe"); return ok && g == "probe.io" })
	return d, client
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A tenant's group is its OffloadTenant's, else the flags'; an OffloadTenant and the flags
// that disagree leave it none, loudly.
func TestDirectoryGroup(t *testing.T) {
	d, _ := startDirectory(t, flagGroups{"team-a": "interlink.io", "legacy": "legacy.interlink.io", "both": "other.interlink.io", "*": "fallback.interlink.io"},
		dirTenant(t, "team-a", "interlink.io", nil, nil),
		dirTenant(t, "team-c", "team-c.interlink.io", nil, nil),
		dirTenant(t, "both", "both.interlink.io", nil, nil),
	)
	for _, tc := range []struct {
		tenant, group string
		ok            bool
		conflict      string
	}{
		{tenant: "team-c", group: "team-c.interlink.io", ok: true},   // the object only
		{tenant: "legacy", group: "legacy.interlink.io", ok: true},   // the flags only
		{tenant: "team-a", group: "interlink.io", ok: true},          // both, agreeing
		{tenant: "nobody", group: "fallback.interlink.io", ok: true}, // neither: the fallback
		{tenant: "both", group: "", ok: false, conflict: `tenant "both" is declared twice with different API groups: ` +
			`"both.interlink.io" by OffloadTenant both and "other.interlink.io" by --openshift.mappings (or its file): make them agree`},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			group, ok := d.Group(tc.tenant)
			if group != tc.group || ok != tc.ok {
				t.Errorf("Group(%q) = %q, %v; want %q, %v", tc.tenant, group, ok, tc.group, tc.ok)
			}
			if got := d.Conflict(tc.tenant); got != tc.conflict {
				t.Errorf("Conflict(%q) = %q\nwant %q", tc.tenant, got, tc.conflict)
			}
		})
	}
}

// Without flags or a mappings file, only the objects name groups.
func TestDirectoryGroupWithoutFlags(t *testing.T) {
	d, _ := startDirectory(t, nil, dirTenant(t, "team-a", "interlink.io", nil, nil))
	if g, ok := d.Group("team-a"); g != "interlink.io" || !ok {
		t.Errorf("Group(team-a) = %q, %v", g, ok)
	}
	if g, ok := d.Group("legacy"); g != "" || ok {
		t.Errorf("Group(legacy) = %q, %v; want none", g, ok)
	}
	if c := d.Conflict("team-a"); c != "" {
		t.Errorf("Conflict(team-a) = %q", c)
	}
}

// A namespace listed by one OffloadTenant is that tenant's; listed by two, it is an
// error that names both; listed by none, the label (or the name) decides.
func TestDirectoryTenant(t *testing.T) {
	d, _ := startDirectory(t, nil,
		dirTenant(t, "team-a", "interlink.io", []string{"a-1", "a-2", "shared"}, nil),
		dirTenant(t, "team-b", "b.interlink.io", []string{"shared", "b-1"}, nil),
	)
	for _, tc := range []struct {
		namespace, tenant string
		ok                bool
		err               string
	}{
		{namespace: "a-1", tenant: "team-a", ok: true},
		{namespace: "a-2", tenant: "team-a", ok: true},
		{namespace: "b-1", tenant: "team-b", ok: true},
		{namespace: "elsewhere"},
		{namespace: "shared", err: `namespace "shared" is listed by the OffloadTenants team-a, team-b: list it in one`},
	} {
		t.Run(tc.namespace, func(t *testing.T) {
			tenant, ok, err := d.Tenant(tc.namespace)
			if gotErr := errString(err); tenant != tc.tenant || ok != tc.ok || gotErr != tc.err {
				t.Errorf("Tenant(%q) = %q, %v, %q; want %q, %v, %q", tc.namespace, tenant, ok, gotErr, tc.tenant, tc.ok, tc.err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A tenant has a quota when its OffloadTenant sets hard amounts, overall or per node.
func TestDirectoryQuota(t *testing.T) {
	perNode := dirTenant(t, "per-node", "n.interlink.io", nil, nil)
	if err := unstructured.SetNestedMap(perNode.Object, map[string]any{"vk-1": map[string]any{"pods": "2"}}, "spec", "nodes"); err != nil {
		t.Fatal(err)
	}
	d, _ := startDirectory(t, flagGroups{"flag-only": "f.interlink.io"},
		dirTenant(t, "capped", "interlink.io", nil, pods("10")),
		dirTenant(t, "uncapped", "u.interlink.io", nil, nil),
		perNode,
	)
	for _, tc := range []struct {
		tenant string
		hard   corev1.ResourceList // nil: no quota
	}{
		{"capped", pods("10")},
		{"per-node", corev1.ResourceList{}},
		{"uncapped", nil},
		{"flag-only", nil},
		{"nobody", nil},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			o, ok := d.Quota(tc.tenant)
			if ok != (tc.hard != nil) || ok != (o != nil) {
				t.Fatalf("Quota(%q) = %v, %v; want a quota: %v", tc.tenant, o, ok, tc.hard != nil)
			}
			if ok && (o.Name != tc.tenant || !o.Spec.Hard.Pods().Equal(*tc.hard.Pods())) {
				t.Errorf("Quota(%q) = %s with hard %v, want hard %v", tc.tenant, o.Name, o.Spec.Hard, tc.hard)
			}
		})
	}
	if got, want := d.WithQuota(), []string{"capped", "per-node"}; !slices.Equal(got, want) {
		t.Errorf("WithQuota() = %q, want %q", got, want)
	}
}

// Changes reach the directory: an edited group, namespaces and quota, and a deletion
// that hands the tenant back to the flags and frees its namespaces.
func TestDirectoryFollowsChanges(t *testing.T) {
	d, client := startDirectory(t, flagGroups{"team-a": "interlink.io"},
		dirTenant(t, "team-a", "interlink.io", []string{"a-1"}, pods("10")))
	ctx := context.Background()
	res := client.Resource(v1alpha1.Resource)

	edited := dirTenant(t, "team-a", "new.interlink.io", []string{"a-2"}, nil)
	if _, err := res.Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the edit", func() bool { return d.Conflict("team-a") != "" })
	if _, ok := d.Quota("team-a"); ok {
		t.Error("team-a keeps a quota after its hard amounts were removed")
	}
	if tenant, ok, err := d.Tenant("a-1"); ok || err != nil || tenant != "" {
		t.Errorf("a-1, no longer listed: %q %v %v", tenant, ok, err)
	}
	if tenant, ok, err := d.Tenant("a-2"); !ok || err != nil || tenant != "team-a" {
		t.Errorf("a-2, now listed: %q %v %v", tenant, ok, err)
	}

	if err := res.Delete(ctx, "team-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion", func() bool { return d.Conflict("team-a") == "" })
	if g, ok := d.Group("team-a"); g != "interlink.io" || !ok {
		t.Errorf("after the deletion Group(team-a) = %q, %v; want the flags' interlink.io", g, ok)
	}
	if tenant, ok, err := d.Tenant("a-2"); ok || err != nil || tenant != "" {
		t.Errorf("after the deletion a-2 is still listed: %q %v %v", tenant, ok, err)
	}
	if got := d.WithQuota(); len(got) != 0 {
		t.Errorf("after the deletion WithQuota() = %q", got)
	}
}

// A deletion the informer missed arrives as a tombstone; it removes the tenant all the same.
func TestDirectoryTombstone(t *testing.T) {
	d, _ := startDirectory(t, nil, dirTenant(t, "team-a", "interlink.io", []string{"a-1"}, pods("1")))
	o, ok := d.Quota("team-a")
	if !ok {
		t.Fatal("team-a has no quota")
	}
	d.set(cache.DeletedFinalStateUnknown{Key: "team-a", Obj: o}, true)
	if _, ok := d.Group("team-a"); ok {
		t.Error("team-a still has a group")
	}
	if _, ok, _ := d.Tenant("a-1"); ok {
		t.Error("a-1 is still listed")
	}
}

// The informer stores typed objects; an object the types cannot hold is an error that
// names it.
func TestToTenant(t *testing.T) {
	typed, err := toTenant(dirTenant(t, "team-a", "interlink.io", []string{"a-1"}, pods("3")))
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := typed.(*v1alpha1.OffloadTenant); !ok || o.Spec.Group != "interlink.io" || !slices.Equal(o.Spec.Namespaces, []string{"a-1"}) || o.Spec.Hard.Pods().Value() != 3 {
		t.Errorf("toTenant = %#v", typed)
	}
	bad := dirTenant(t, "broken", "interlink.io", nil, nil)
	bad.Object["spec"] = map[string]any{"group": 42}
	if _, err := toTenant(bad); err == nil || !strings.HasPrefix(err.Error(), "reading OffloadTenant broken: ") {
		t.Errorf("toTenant(group 42) = %v, want an error naming the object", err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "x"}
	if got, err := toTenant(tomb); err != nil || got != tomb {
		t.Errorf("toTenant(tombstone) = %v, %v; want it unchanged", got, err)
	}
}
