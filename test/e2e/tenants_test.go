package e2e

// Tenants as cluster objects, as an admin meets them with the real kubectl against the
// real kube-apiserver: the OffloadTenant CRD that manifests/base and the chart install,
// `kubectl apply` of a tenant, `kubectl get` and `kubectl describe` of it, the CRD's
// validation of the API group, and the API group of its own that a tenant's `*` grant
// on its offload group cannot reach.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	tenantCRDFile = "sar-bridge.io_offloadtenants.yaml"
	tenantCRDName = "offloadtenants.sar-bridge.io"
	// kubectlTenant is named after no namespace and no tenant of the suite's mappings, so
	// the suite's bridges resolve no pod to it.
	kubectlTenant = "e2e-kubectl"
)

// crdFile parses a committed CRD file.
func crdFile(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := cluster.ParseYAML(string(raw))
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s: %d objects, %v", path, len(objs), err)
	}
	return objs[0]
}

// The suite's API server serves OffloadTenants (manifests/base installed the CRD), and
// manifests/base and the chart's crds/ hold the same, generated, CRD.
func TestTenantsCRDInstalled(t *testing.T) {
	want := crdFile(t, filepath.Join(suite.root, "manifests", "crds", tenantCRDFile))
	if want.GetName() != tenantCRDName {
		t.Fatalf("manifests/crds/%s defines %s", tenantCRDFile, want.GetName())
	}
	var base *unstructured.Unstructured
	for _, o := range renderBase(t) {
		if o.GetKind() == "CustomResourceDefinition" && o.GetName() == tenantCRDName {
			base = o
		}
	}
	if base == nil {
		t.Fatalf("manifests/base has no CustomResourceDefinition %s", tenantCRDName)
	}
	// kustomize adds the base's labels; its numbers are Go ints, the file's int64s.
	if !reflect.DeepEqual(jsonRoundTrip(t, base.Object["spec"]), jsonRoundTrip(t, want.Object["spec"])) {
		t.Errorf("manifests/base's %s differs from manifests/crds/%s", tenantCRDName, tenantCRDFile)
	}
	chart := crdFile(t, filepath.Join(chartDir(), "crds", tenantCRDFile))
	if !reflect.DeepEqual(chart.Object, want.Object) {
		t.Errorf("charts/sar-bridge/crds/%s differs from manifests/crds/%s", tenantCRDFile, tenantCRDFile)
	}
	// kubectl's own kustomize builds the base, ../crds included, as a user runs it.
	kubectl := kubectlCmd(t)
	if stdout, stderr, code := kubectl("", "apply", "-k", filepath.Join(suite.root, "manifests", "base"),
		"--server-side", "--force-conflicts", "--dry-run=server"); code != 0 || !strings.Contains(stdout, "customresourcedefinition.apiextensions.k8s.io/"+tenantCRDName+" serverside-applied (server dry run)\n") {
		t.Errorf("kubectl apply -k manifests/base: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	waitEstablished(t, tenantCRDName)
	list, err := suite.cluster.Client.Discovery().ServerResourcesForGroupVersion("sar-bridge.io/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list.APIResources {
		got = append(got, fmt.Sprintf("%s %s namespaced=%v %v", r.Name, r.Kind, r.Namespaced, r.ShortNames))
	}
	if want := []string{"offloadtenants OffloadTenant namespaced=false [otenant]", "offloadtenants/status OffloadTenant namespaced=false []"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sar-bridge.io/v1alpha1 serves %q, want %q", got, want)
	}
}

// jsonRoundTrip is v as JSON decodes it, so that objects from different decoders compare.
func jsonRoundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Helm installs crds/ before the templates and never templates it: `helm template
// --include-crds` shows it, a plain `helm template` does not.
func TestChartTenantCRD(t *testing.T) {
	want := crdFile(t, filepath.Join(suite.root, "manifests", "crds", tenantCRDFile))
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--include-crds"}, true},
		{[]string{"--include-crds", "--set", "crds.create=false"}, true}, // crds.create is the discovery CRDs'
	} {
		var found *unstructured.Unstructured
		for _, o := range renderChart(t, "tcrd", "tcrd", tc.args...) {
			if o.GetKind() == "CustomResourceDefinition" && o.GetName() == tenantCRDName {
				found = o
			}
		}
		if (found != nil) != tc.want {
			t.Errorf("helm template %q: the OffloadTenant CRD rendered %v, want %v", tc.args, found != nil, tc.want)
		}
		if found != nil && !reflect.DeepEqual(found.Object, want.Object) {
			t.Errorf("helm template %q: the OffloadTenant CRD differs from manifests/crds/%s", tc.args, tenantCRDFile)
		}
	}
}

// waitEstablished waits until the CRD name is Established.
func waitEstablished(t *testing.T, name string) {
	t.Helper()
	var last string
	if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool {
		crd, err := suite.cluster.Dynamic.Resource(crdGVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			if c, _ := c.(map[string]any); c["type"] == "Established" && c["status"] == "True" {
				return true
			}
		}
		last = name + " is not Established"
		return false
	}); !ok {
		t.Fatalf("CRD %s: %s", name, last)
	}
}

// kubectlTenantYAML is the one object that onboards a tenant (with a RoleBinding on
// pods.interlink.io for its ServiceAccounts).
const kubectlTenantYAML = `apiVersion: sar-bridge.io/v1alpha1
kind: OffloadTenant
metadata:
  name: e2e-kubectl
spec:
  group: interlink.io
  hard:
    pods: "10"
    cpu: "4"
`

// ageRE is kubectl's AGE column of a young object, the last of a row.
var ageRE = regexp.MustCompile(`(?m)\b\d+s$`)

// The tables kubectl get prints for kubectlTenant after TestTenantsKubectl's charge,
// its age as <age>: the printer columns of tenants/v1alpha1's types.
const (
	wantTenantTable = `NAME          GROUP          USED   HARD   PENDING   AGE
e2e-kubectl   interlink.io   1      10     1         <age>
`
	// CLUSTERS (status.clustersUsed) is empty without a hub (docs/multicluster.md).
	wantTenantWideTable = `NAME          GROUP          USED   HARD   CPU USED   CPU HARD   PENDING   CLUSTERS   AGE
e2e-kubectl   interlink.io   1      10     500m       4          1                    <age>
`
	// After the status a bridge writes once the charge is released: nothing pending
	// is 0, not an empty cell (status.pendingCount is written even when 0).
	wantTenantIdleTable = `NAME          GROUP          USED   HARD   PENDING   AGE
e2e-kubectl   interlink.io   0      10     0         <age>
`
)

// An admin applies an OffloadTenant with kubectl and reads it back with kubectl get and
// describe: GROUP, USED, HARD, PENDING and AGE, and the ledger in the status; a ledger
// with nothing pending shows PENDING 0.
func TestTenantsKubectl(t *testing.T) {
	waitEstablished(t, tenantCRDName)
	kubectl := kubectlCmd(t)
	t.Cleanup(func() {
		_, _, _ = kubectl("", "delete", "offloadtenant", kubectlTenant, "--ignore-not-found", "--wait=false")
	})

	var stdout, stderr string
	var code int
	if _, ok := poll(30*time.Second, 250*time.Millisecond, func() bool {
		stdout, stderr, code = kubectl(kubectlTenantYAML, "apply", "-f", "-")
		return code == 0
	}); !ok || stdout != "offloadtenant.sar-bridge.io/e2e-kubectl created\n" || stderr != "" {
		t.Fatalf("kubectl apply: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// What a bridge charged: one pod pending (decided, not seen yet), used its amounts.
	status := fmt.Sprintf(`{"status":{"used":{"pods":"1","cpu":"500m"},"pendingCount":1,"pending":[`+
		`{"namespace":"e2e-kubectl","name":"job-1","uid":"00000000-0000-0000-0000-000000000001","node":"vk-1","amounts":{"pods":"1","cpu":"500m"},"time":%q}]}}`,
		time.Now().UTC().Format(time.RFC3339))
	if stdout, stderr, code = kubectl("", "patch", "offloadtenant", kubectlTenant, "--subresource=status", "--type=merge", "-p", status); code != 0 {
		t.Fatalf("kubectl patch --subresource=status: exit %d, %s%s", code, stdout, stderr)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"get", []string{"get", "offloadtenants", kubectlTenant}, wantTenantTable},
		{"get by short name", []string{"get", "otenant", kubectlTenant}, wantTenantTable},
		{"get wide", []string{"get", "offloadtenants", kubectlTenant, "-o", "wide"}, wantTenantWideTable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := kubectl("", tc.args...)
			got := ageRE.ReplaceAllString(stdout, "<age>")
			if code != 0 || stderr != "" || got != tc.want {
				t.Errorf("kubectl %s: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", strings.Join(tc.args, " "), code, stderr, got, tc.want)
			}
		})
	}

	// The category lists every tenant (other tests' too): the row of this one.
	t.Run("get by category", func(t *testing.T) {
		stdout, stderr, code := kubectl("", "get", "sar-bridge")
		header, row := tableRow(ageRE.ReplaceAllString(stdout, "<age>"), kubectlTenant)
		wantHeader, wantRow := tableRow(wantTenantTable, kubectlTenant)
		if code != 0 || stderr != "" || !slices.Equal(header, wantHeader) || !slices.Equal(row, wantRow) {
			t.Errorf("kubectl get sar-bridge: exit %d, stderr %q, stdout:\n%s\nwant the row %q under %q", code, stderr, stdout, wantRow, wantHeader)
		}
	})

	t.Run("describe", func(t *testing.T) {
		stdout, stderr, code := kubectl("", "describe", "offloadtenant", kubectlTenant)
		if code != 0 || stderr != "" {
			t.Fatalf("kubectl describe: exit %d, stderr %q", code, stderr)
		}
		got := describeRE.ReplaceAllString(stdout, "${1}<${2}${3}>")
		// kubectl's describer for custom resources prints the fields in order of their
		// names; a bridge's reconciler may add Conditions and Observed Generation to the
		// status, so the status is checked from the charges on.
		for _, want := range []string{wantDescribeHead, wantDescribeCharges, wantDescribeTail} {
			if !strings.Contains(got, want) {
				t.Errorf("kubectl describe lacks\n%s\nin:\n%s", want, got)
			}
		}
		if !strings.HasPrefix(got, wantDescribeHead) || !strings.HasSuffix(got, wantDescribeTail) {
			t.Errorf("kubectl describe:\n%s\nwant it to start with\n%s\nand end with\n%s", got, wantDescribeHead, wantDescribeTail)
		}
	})

	// The status as a bridge writes it (tenants/v1alpha1's types) once the charge is
	// released: every capped resource at 0 and nothing pending.
	t.Run("nothing pending shows 0", func(t *testing.T) {
		idle, err := json.Marshal([]any{map[string]any{"op": "replace", "path": "/status", "value": v1alpha1.OffloadTenantStatus{
			Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0"), corev1.ResourceCPU: resource.MustParse("0")},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if stdout, stderr, code := kubectl("", "patch", "offloadtenant", kubectlTenant, "--subresource=status", "--type=json", "-p", string(idle)); code != 0 {
			t.Fatalf("kubectl patch --subresource=status: exit %d, %s%s", code, stdout, stderr)
		}
		stdout, stderr, code := kubectl("", "get", "offloadtenants", kubectlTenant)
		if got := ageRE.ReplaceAllString(stdout, "<age>"); code != 0 || stderr != "" || got != wantTenantIdleTable {
			t.Errorf("kubectl get offloadtenants: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, got, wantTenantIdleTable)
		}
	})
}

// tableRow is the header's and name's row's columns in a kubectl table (a row of a
// category's listing names its resource: offloadtenant.sar-bridge.io/name).
func tableRow(table, name string) (header, row []string) {
	lines := strings.Split(table, "\n")
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == name || strings.HasSuffix(f[0], "/"+name)) {
			return strings.Fields(lines[0]), append([]string{name}, f[1:]...)
		}
	}
	return strings.Fields(lines[0]), nil
}

// describeRE finds the values that change from run to run in kubectl describe.
var describeRE = regexp.MustCompile(`(?m)^((?:  (Creation Timestamp|Resource Version|UID)|    (Time)): +)\S+$`)

// kubectl describe of kubectlTenant after TestTenantsKubectl's charge, in three parts.
const (
	wantDescribeHead = `Name:         e2e-kubectl
Namespace:    
Labels:       <none>
Annotations:  <none>
API Version:  sar-bridge.io/v1alpha1
Kind:         OffloadTenant
Metadata:
  Creation Timestamp:  <Creation Timestamp>
  Generation:          1
  Resource Version:    <Resource Version>
  UID:                 <UID>
Spec:
  Group:  interlink.io
  Hard:
    Cpu:   4
    Pods:  10
Status:
`
	wantDescribeCharges = `
  Pending:
    Amounts:
      Cpu:        500m
      Pods:       1
    Name:         job-1
    Namespace:    e2e-kubectl
    Node:         vk-1
    Time:         <Time>
    UID:          00000000-0000-0000-0000-000000000001
  Pending Count:  1
`
	wantDescribeTail = `
  Used:
    Cpu:   500m
    Pods:  1
Events:    <none>
`
)

// reservedGroupMessage is the CRD's refusal of sar-bridge.io and the groups under it.
const reservedGroupMessage = "must not be sar-bridge.io or a group under it: OffloadTenants live in sar-bridge.io, and a tenant's grants on its own group must never reach them"

// The CRD refuses an API group that is not a DNS subdomain, with the API server's own
// message, and sar-bridge.io or a group under it, before any bridge sees it; a group
// that only ends in the same letters is a group like any other.
func TestTenantsInvalidGroup(t *testing.T) {
	waitEstablished(t, tenantCRDName)
	kubectl := kubectlCmd(t)
	const pattern = `'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`
	for _, tc := range []struct {
		name, group string
		want        string
	}{
		{"upper case", `"Interlink.IO"`, `spec.group: Invalid value: "Interlink.IO": spec.group in body should match ` + pattern},
		{"a URL", `"https://interlink.io"`, `spec.group: Invalid value: "https://interlink.io": spec.group in body should match ` + pattern},
		{"empty", `""`, `spec.group: Invalid value: "": spec.group in body should be at least 1 chars long`},
		// The API server says too that it skipped the CEL rule below for a missing group.
		{"missing", `null`, "\n* spec.group: Required value\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"},
		// A tenant's "*" on its group would reach the OffloadTenants themselves.
		{"the tenants' own group", `"sar-bridge.io"`, `spec.group: Invalid value: "string": ` + reservedGroupMessage},
		{"a group under it", `"quota.sar-bridge.io"`, `spec.group: Invalid value: "string": ` + reservedGroupMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := fmt.Sprintf("apiVersion: sar-bridge.io/v1alpha1\nkind: OffloadTenant\nmetadata: {name: e2e-bad-group}\nspec: {group: %s, hard: {pods: \"1\"}}\n", tc.group)
			stdout, stderr, code := kubectl(obj, "apply", "-f", "-")
			if code == 0 {
				_, _, _ = kubectl("", "delete", "offloadtenant", "e2e-bad-group", "--wait=false")
			}
			want := `The OffloadTenant "e2e-bad-group" is invalid: ` + tc.want + "\n"
			if code != 1 || stdout != "" || stderr != want {
				t.Errorf("kubectl apply of group %s: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", tc.group, code, stdout, stderr, want)
			}
		})
	}
	t.Run("a group that only ends alike", func(t *testing.T) {
		obj := "apiVersion: sar-bridge.io/v1alpha1\nkind: OffloadTenant\nmetadata: {name: e2e-alike-group}\nspec: {group: xsar-bridge.io}\n"
		stdout, stderr, code := kubectl(obj, "apply", "-f", "-", "--dry-run=server")
		if want := "offloadtenant.sar-bridge.io/e2e-alike-group created (server dry run)\n"; code != 0 || stdout != want || stderr != "" {
			t.Errorf("kubectl apply of group xsar-bridge.io: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
		}
	})
}

// A tenant's `*` on its offload group (here cluster-wide, the broadest a tenant admin
// could be given) reaches no OffloadTenant: they live in sar-bridge.io, a group of their
// own. Nor does everything in the tenant's namespace (cluster-admin bound by a
// RoleBinding): OffloadTenants are cluster-scoped, which only a ClusterRoleBinding grants.
func TestTenantsStarGrantCannotReachTenants(t *testing.T) {
	ctx := context.Background()
	objs, err := suite.cluster.ApplyYAML(ctx, `
apiVersion: v1
kind: ServiceAccount
metadata: {name: star, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-interlink-star}
rules:
  - apiGroups: ["interlink.io"]
    resources: ["*"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-interlink-star}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-interlink-star}
subjects:
  - {kind: ServiceAccount, name: star, namespace: team-a}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ns-admin, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e-ns-admin, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {kind: ServiceAccount, name: ns-admin, namespace: team-a}
`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), objs) })
	star, nsAdmin := sa("team-a", "star"), sa("team-a", "ns-admin")
	// The grants are in effect: pods.interlink.io anywhere, everything in team-a.
	for user, attrs := range map[string]authorizationv1.ResourceAttributes{
		star:    {Namespace: "project-b", Verb: "create", Group: "interlink.io", Resource: "pods"},
		nsAdmin: {Namespace: "team-a", Verb: "delete", Group: "", Resource: "secrets"},
	} {
		if err := suite.cluster.WaitForAccess(ctx, user, cluster.ServiceAccountGroups("team-a"), attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	kubectl := kubectlCmd(t)
	// Cluster-scoped: asked without a namespace (-A), as the API server asks.
	tenantVerbs := [][]string{
		{"get", "offloadtenants.sar-bridge.io", "-A"},
		{"list", "offloadtenants.sar-bridge.io", "-A"},
		{"create", "offloadtenants.sar-bridge.io", "-A"},
		{"update", "offloadtenants.sar-bridge.io/team-a", "-A"},
		{"patch", "offloadtenants.sar-bridge.io/team-a", "--subresource=status", "-A"},
		{"delete", "offloadtenants.sar-bridge.io/team-a", "-A"},
		{"*", "offloadtenants.sar-bridge.io", "-A"},
	}
	type check struct {
		as   string
		args []string
		want string
	}
	checks := []check{
		{star, []string{"create", "pods.interlink.io", "-n", "team-a"}, "yes"},
		{star, []string{"delete", "pods.interlink.io", "-n", "project-b"}, "yes"},
		{nsAdmin, []string{"*", "*", "-n", "team-a"}, "yes"},
	}
	for _, args := range tenantVerbs {
		checks = append(checks, check{star, args, "no"}, check{nsAdmin, args, "no"})
	}
	for _, tc := range checks {
		t.Run(tc.as+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := kubectl("", append([]string{"auth", "can-i", "--as", tc.as}, tc.args...)...)
			wantCode := map[string]int{"yes": 0, "no": 1}[tc.want]
			if strings.TrimSpace(stdout) != tc.want || code != wantCode || stderr != "" {
				t.Errorf("kubectl auth can-i %s as %s: exit %d, %q (stderr %q), want %q and no warning", strings.Join(tc.args, " "), tc.as, code, stdout, stderr, tc.want)
			}
		})
	}
}

// A bridge without --openshift.mappings, on a cluster that serves OffloadTenants, takes
// its tenants from the objects: it does not warn at start that every pod will be denied
// as unmapped (issue 40).
func TestTenantsNoFalseUnmappedWarning(t *testing.T) {
	b, err := startBridge("no-mappings", "--policies.data="+suite.dataFile, "--log.level=debug")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if err := b.WaitReady(time.Minute); err != nil {
		t.Fatalf("not ready: %v\n%s", err, b.Log())
	}
	if log := b.Log(); strings.Contains(log, "denied as unmapped") {
		t.Errorf("the bridge warns that every pod will be denied, while tenants are OffloadTenant objects:\n%s", log)
	}
}
