package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// discoveryKinds are the kinds `sar-bridge discovery` prints.
var discoveryKinds = []string{"CustomResourceDefinition", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// isDiscoveryKind says whether o is one of them; the quota ledger's admission policy
// (ledger_marks_test.go), of the same kinds, is not.
func isDiscoveryKind(o *unstructured.Unstructured) bool {
	return slices.Contains(discoveryKinds, o.GetKind()) && !isLedgerMarks(o)
}

// policyMessage is the refusal the admission policy of group gives (discovery.Message).
func policyMessage(group string) string {
	return fmt.Sprintf("pods.%[1]s and nodes.%[1]s exist only as names for RBAC: sar-bridge asks the API server whether a subject may create pods.%[1]s (and use nodes.%[1]s) before it offloads a pod; no object of them is stored", group)
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// runCmd runs a program with args and stdin, returning stdout, stderr and the exit code.
func runCmd(t *testing.T, stdin string, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("%s %q: %v", name, args, err)
	}
	return o.String(), e.String(), code
}

// discoveryOutput is `sar-bridge discovery` with args, which must succeed quietly.
func discoveryOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, code := runCmd(t, "", suite.binary, append([]string{"discovery"}, args...)...)
	if code != 0 || stderr != "" {
		t.Fatalf("sar-bridge discovery %q: exit %d, stderr %q", args, code, stderr)
	}
	return out
}

func parseObjects(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := cluster.ParseYAML(text)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// sameObjects fails unless a and b hold the same objects in the same order.
func sameObjects(t *testing.T, what string, got, want []*unstructured.Unstructured) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %q, want %q", what, inventory(got), inventory(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i].Object, want[i].Object) {
			g, _ := json.MarshalIndent(got[i].Object, "", "  ")
			w, _ := json.MarshalIndent(want[i].Object, "", "  ")
			t.Errorf("%s: object %d differs:\n%s\nwant:\n%s", what, i, g, w)
		}
	}
}

// manifests/discovery is exactly `sar-bridge discovery --group interlink.io`, and
// manifests/base carries it (with base's labels added, nothing else).
func TestDiscoveryManifestsMatchCommand(t *testing.T) {
	want := parseObjects(t, discoveryOutput(t, "--group", "interlink.io"))
	if got := inventory(want); !slices.Equal(got, []string{
		"CustomResourceDefinition nodes.interlink.io",
		"CustomResourceDefinition pods.interlink.io",
		"ValidatingAdmissionPolicy sar-bridge-discovery.interlink.io",
		"ValidatingAdmissionPolicyBinding sar-bridge-discovery.interlink.io",
	}) {
		t.Fatalf("sar-bridge discovery prints %q", got)
	}
	got, err := cluster.Render(filepath.Join(suite.root, "manifests", "discovery"))
	if err != nil {
		t.Fatal(err)
	}
	sameObjects(t, "manifests/discovery against sar-bridge discovery --group interlink.io", got, want)

	// Base's other CRD, OffloadTenant's, is TestTenantsCRDInstalled's.
	inBase := cluster.Filter(renderBase(t), func(o *unstructured.Unstructured) bool {
		return isDiscoveryKind(o) && o.GetName() != tenantCRDName
	})
	for _, o := range inBase {
		labels := o.GetLabels()
		delete(labels, "app.kubernetes.io/part-of") // base's own label
		o.SetLabels(labels)
	}
	sameObjects(t, "manifests/base's discovery objects", inBase, want)
}

// The chart's discovery objects (CRDs, policies, bindings) are the command's for the same
// groups, labels and annotations aside.
func TestChartDiscoveryMatchesCommand(t *testing.T) {
	chart := cluster.Filter(renderChart(t, "disc", "chart-disc",
		"--set-string", "mappings.team-a=interlink.io,mappings.tenant-b=tenant-b.interlink.io,mappings.x=interlink.io"), isDiscoveryKind)
	cmd := parseObjects(t, discoveryOutput(t, "--openshift.mappings=team-a=interlink.io,tenant-b=tenant-b.interlink.io,x=interlink.io"))
	strip := func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
		for _, o := range objs {
			o.SetLabels(nil)
			o.SetAnnotations(nil)
		}
		slices.SortFunc(objs, func(a, b *unstructured.Unstructured) int {
			return strings.Compare(a.GetKind()+" "+a.GetName(), b.GetKind()+" "+b.GetName())
		})
		return objs
	}
	sameObjects(t, "the chart's discovery objects against sar-bridge discovery", strip(chart), strip(cmd))
	if len(cmd) != 8 {
		t.Errorf("%d objects for two groups, want 8", len(cmd))
	}
}

var discoveryKubectl struct {
	once sync.Once
	path string
	err  error
}

// kubectlCmd is the pinned kubectl ($SAR_BRIDGE_KUBECTL, else hack/helm.sh's) as the
// suite's admin, with its own discovery cache so a stale one cannot hide a new group.
func kubectlCmd(t *testing.T) func(stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	kubectl := kubectlPath(t)
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin.kubeconfig")
	if err := suite.cluster.WriteAdminKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	return func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		return runCmd(t, stdin, kubectl, append([]string{"--kubeconfig", admin, "--cache-dir", filepath.Join(dir, "cache")}, args...)...)
	}
}

// waitDiscovered waits until both CRDs of group are Established and the API server's
// discovery serves them with their kinds.
func waitDiscovered(t *testing.T, group string) {
	t.Helper()
	ctx := context.Background()
	var last string
	if _, ok := poll(30*time.Second, 100*time.Millisecond, func() bool {
		for _, plural := range []string{"pods", "nodes"} {
			crd, err := suite.cluster.Dynamic.Resource(crdGVR).Get(ctx, plural+"."+group, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			established := false
			for _, c := range conds {
				c, _ := c.(map[string]any)
				established = established || (c["type"] == "Established" && c["status"] == "True")
			}
			if !established {
				last = plural + "." + group + " is not Established"
				return false
			}
		}
		list, err := suite.cluster.Client.Discovery().ServerResourcesForGroupVersion(group + "/v1")
		if err != nil {
			last = err.Error()
			return false
		}
		kinds := map[string]string{}
		for _, r := range list.APIResources {
			kinds[r.Name] = r.Kind
		}
		if kinds["pods"] != "OffloadPod" || kinds["nodes"] != "OffloadNode" {
			last = fmt.Sprintf("discovery of %s/v1: %v", group, kinds)
			return false
		}
		return true
	}); !ok {
		t.Fatalf("%s is not served: %s", group, last)
	}
}

// canI polls `kubectl auth can-i` (RBAC and discovery may lag) until it answers want
// ("yes" exit 0, "no" exit 1) with nothing on stderr, and fails with the last answer.
func canI(t *testing.T, kubectl func(string, ...string) (string, string, int), want string, args ...string) {
	t.Helper()
	wantCode := map[string]int{"yes": 0, "no": 1}[want]
	var stdout, stderr string
	var code int
	if _, ok := poll(20*time.Second, 200*time.Millisecond, func() bool {
		stdout, stderr, code = kubectl("", append([]string{"auth", "can-i"}, args...)...)
		return stdout == want+"\n" && stderr == "" && code == wantCode
	}); !ok {
		t.Errorf("kubectl auth can-i %s: exit %d, stdout %q, stderr %q; want exit %d, %q and nothing on stderr",
			strings.Join(args, " "), code, stdout, stderr, wantCode, want+"\n")
	}
}

// refused polls (a new admission policy takes a moment to be enforced) until creating
// an object of kind in group is refused with the policy's message; an object that got
// through meanwhile is deleted.
func refused(t *testing.T, kubectl func(string, ...string) (string, string, int), group, plural, kind string) {
	t.Helper()
	obj := fmt.Sprintf("apiVersion: %s/v1\nkind: %s\nmetadata: {name: must-not-exist, namespace: team-a}\n", group, kind)
	want := fmt.Sprintf("Error from server (Forbidden): error when creating \"STDIN\": %s.%s \"must-not-exist\" is forbidden: ValidatingAdmissionPolicy 'sar-bridge-discovery.%s' with binding 'sar-bridge-discovery.%s' denied request: %s\n",
		plural, group, group, group, policyMessage(group))
	var stdout, stderr string
	var code int
	if _, ok := poll(30*time.Second, 250*time.Millisecond, func() bool {
		stdout, stderr, code = kubectl(obj, "create", "-f", "-")
		if code == 0 {
			_, _, _ = kubectl("", "delete", "-n", "team-a", plural+"."+group, "must-not-exist", "--wait=false")
		}
		return code == 1 && stdout == "" && stderr == want
	}); !ok {
		t.Errorf("creating a %s.%s: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and stderr:\n%s", plural, group, code, stdout, stderr, want)
	}
}

// With the discovery objects applied, kubectl auth can-i knows pods.<group> and answers
// what the bridge decides; no object of them can be created; core pods are untouched.
func TestDiscoveryKubectl(t *testing.T) {
	ctx := context.Background()
	kubectl := kubectlCmd(t)
	b := shared(t)

	// manifests/base (applied by TestMain) carries interlink.io's objects. Applying them
	// again keeps the test independent of what ran before it.
	if _, err := suite.cluster.ApplyDir(ctx, filepath.Join(suite.root, "manifests", "discovery"), nil); err != nil {
		t.Fatal(err)
	}
	waitDiscovered(t, "interlink.io")

	// A tenant's own group, applied the way docs/admin-tools.md says, by the real kubectl. Objects
	// left by another test are removed first, so kubectl's answer is exact.
	tenantB := parseObjects(t, discoveryOutput(t, "--group", "tenant-b.interlink.io"))
	if err := suite.cluster.Delete(ctx, tenantB); err != nil {
		t.Fatal(err)
	}
	if _, ok := poll(60*time.Second, 200*time.Millisecond, func() bool {
		_, err := suite.cluster.Dynamic.Resource(crdGVR).Get(ctx, "pods.tenant-b.interlink.io", metav1.GetOptions{})
		_, err2 := suite.cluster.Dynamic.Resource(crdGVR).Get(ctx, "nodes.tenant-b.interlink.io", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(err2)
	}); !ok {
		t.Fatal("the tenant-b.interlink.io CRDs were not deleted")
	}
	stdout, stderr, code := kubectl(discoveryOutput(t, "--group", "tenant-b.interlink.io"), "apply", "-f", "-")
	if want := `customresourcedefinition.apiextensions.k8s.io/pods.tenant-b.interlink.io created
customresourcedefinition.apiextensions.k8s.io/nodes.tenant-b.interlink.io created
validatingadmissionpolicy.admissionregistration.k8s.io/sar-bridge-discovery.tenant-b.interlink.io created
validatingadmissionpolicybinding.admissionregistration.k8s.io/sar-bridge-discovery.tenant-b.interlink.io created
`; code != 0 || stdout != want || stderr != "" {
		t.Fatalf("sar-bridge discovery --group tenant-b.interlink.io | kubectl apply -f -: exit %d, stdout:\n%s\nstderr %q\nwant:\n%s", code, stdout, stderr, want)
	}
	waitDiscovered(t, "tenant-b.interlink.io")

	for _, tc := range []struct {
		name       string
		ns, sa     string
		resource   string
		want       string
		bridgePod  map[string]any
		bridgeWant want
	}{
		{"team-a runner is bound", "team-a", "runner", "pods.interlink.io", "yes",
			input("create", newPod("team-a", "runner", "disc-1")), allow(`RoleBinding "offload/team-a" of ClusterRole "interlink-offloader" to ServiceAccount "runner/team-a"`)},
		{"team-a intruder is not bound", "team-a", "intruder", "pods.interlink.io", "no",
			input("create", newPod("team-a", "intruder", "disc-2")), deny(mayNot(sa("team-a", "intruder"), "create", "pods.interlink.io", "team-a")...)},
		{"project-b runner is bound on tenant-b's group", "project-b", "runner", "pods.tenant-b.interlink.io", "yes",
			input("create", newPod("project-b", "runner", "disc-3")), allow(`RoleBinding "offload/project-b" of ClusterRole "tenant-b-offloader" to ServiceAccount "runner/project-b"`)},
		{"project-b legacy is bound on interlink.io only", "project-b", "legacy", "pods.tenant-b.interlink.io", "no",
			input("create", newPod("project-b", "legacy", "disc-4")), deny(mayNot(sa("project-b", "legacy"), "create", "pods.tenant-b.interlink.io", "project-b")...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canI(t, kubectl, tc.want, "create", tc.resource, "-n", tc.ns, "--as", sa(tc.ns, tc.sa))
			decide(t, b, tc.bridgePod, tc.bridgeWant)
		})
	}

	t.Run("no object is stored", func(t *testing.T) {
		for _, tc := range []struct{ group, plural, kind string }{
			{"interlink.io", "pods", "OffloadPod"},
			{"interlink.io", "nodes", "OffloadNode"},
			{"tenant-b.interlink.io", "pods", "OffloadPod"},
		} {
			refused(t, kubectl, tc.group, tc.plural, tc.kind)
		}
	})

	t.Run("kubectl get pods lists core pods", func(t *testing.T) {
		pod := parseObjects(t, `
apiVersion: v1
kind: Pod
metadata: {name: discovery-core, namespace: team-a}
spec:
  serviceAccountName: runner
  automountServiceAccountToken: false
  containers: [{name: c, image: registry.example/none:1}]
`)
		if err := suite.cluster.Apply(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), pod) })
		for _, tc := range []struct {
			args           []string
			stdout, stderr string
		}{
			{[]string{"get", "pods", "-n", "team-a", "-o", "name"}, "pod/discovery-core\n", ""},
			{[]string{"get", "pods.interlink.io", "-n", "team-a"}, "", "No resources found in team-a namespace.\n"},
		} {
			stdout, stderr, code := kubectl("", tc.args...)
			if code != 0 || stdout != tc.stdout || stderr != tc.stderr {
				t.Errorf("kubectl %s: exit %d, stdout %q, stderr %q; want 0, %q, %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.stdout, tc.stderr)
			}
		}
	})
}
