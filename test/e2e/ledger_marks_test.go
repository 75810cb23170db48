package e2e

// The quota ledger's marks on a pod (the label sar-bridge.io/charged and the annotation
// sar-bridge.io/charged-amounts) as the real kubectl meets the admission policy
// sar-bridge-ledger-marks on the real kube-apiserver, where manifests/base installed it:
// a tenant who may create, change and even update the status of pods can neither create
// a pod with a mark (it would skip its quota) nor add, change or remove one (removing
// frees quota while the pod runs); the bridge's ServiceAccount and a cluster admin can;
// pods without marks are left alone. And the policy is the same in manifests/base,
// manifests/ledger-marks, the chart and `sar-bridge ledger-marks`.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/internal/tenants"
	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const (
	ledgerMarksName = "sar-bridge-ledger-marks"
	// marksNS is the namespace of this file's pods: none is bound to a node, so no
	// bridge's reconciler follows them.
	marksNS = "ledger-marks"
	// The policy's refusals, word for word.
	marksCreateMessage = "the label sar-bridge.io/charged and the annotation sar-bridge.io/charged-amounts are set only by sar-bridge's quota ledger (whoever may update offloadtenants/status in sar-bridge.io): they record that it charged the pod to its tenant, so a pod created with them would skip its tenant's offload quota"
	marksUpdateMessage = "the label sar-bridge.io/charged and the annotation sar-bridge.io/charged-amounts are added, changed and removed only by sar-bridge's quota ledger (whoever may update offloadtenants/status in sar-bridge.io): they record that it charged the pod to its tenant, so adding them would skip its tenant's offload quota, and changing or removing them would free quota while the pod runs"
	// marksAmounts is an amounts annotation as the reconciler writes it.
	marksAmounts = "cpu=1,pods=1"
)

// isLedgerMarks says whether o is the ledger-marks policy or its binding.
func isLedgerMarks(o *unstructured.Unstructured) bool {
	kind := o.GetKind()
	return (kind == "ValidatingAdmissionPolicy" || kind == "ValidatingAdmissionPolicyBinding") &&
		o.GetLabels()["app.kubernetes.io/component"] == "quota-ledger"
}

// ledgerMarksOutput is `sar-bridge ledger-marks`, which must succeed quietly.
func ledgerMarksOutput(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	out, stderr, code := runCmd(t, "", suite.binary, "ledger-marks")
	if code != 0 || stderr != "" {
		t.Fatalf("sar-bridge ledger-marks: exit %d, stderr %q", code, stderr)
	}
	return parseObjects(t, out)
}

// manifests/ledger-marks is exactly what `sar-bridge ledger-marks` prints, and
// manifests/base carries it (with base's labels added, nothing else).
func TestLedgerMarksManifestsMatchCommand(t *testing.T) {
	want := ledgerMarksOutput(t)
	if got := inventory(want); !slices.Equal(got, []string{
		"ValidatingAdmissionPolicy " + ledgerMarksName,
		"ValidatingAdmissionPolicyBinding " + ledgerMarksName,
	}) {
		t.Fatalf("sar-bridge ledger-marks prints %q", got)
	}
	dir, err := cluster.Render(filepath.Join(suite.root, "manifests", "ledger-marks"))
	if err != nil {
		t.Fatal(err)
	}
	sameObjects(t, "manifests/ledger-marks against sar-bridge ledger-marks", dir, want)
	inBase := cluster.Filter(renderBase(t), isLedgerMarks)
	for _, o := range inBase {
		labels := o.GetLabels()
		delete(labels, "app.kubernetes.io/part-of") // base's own label
		o.SetLabels(labels)
	}
	sameObjects(t, "manifests/base's ledger-marks policy", inBase, want)
}

// The chart renders the same policy under its release's name (its binding names it), and
// none with ledgerMarksPolicy.enabled=false. (TestChartMatchesKustomize compares the
// rendering of release sar-bridge with manifests/base.)
func TestChartLedgerMarks(t *testing.T) {
	want := ledgerMarksOutput(t)
	wantPolicy := findIn[admissionregistrationv1.ValidatingAdmissionPolicy](t, want, "ValidatingAdmissionPolicy", ledgerMarksName)
	for _, tc := range []struct {
		release, name string
		args          []string
	}{
		{"sar-bridge", ledgerMarksName, nil},
		{"other", "other-sar-bridge-ledger-marks", nil},
		{"off", "", []string{"--set", "ledgerMarksPolicy.enabled=false"}},
	} {
		t.Run(tc.release, func(t *testing.T) {
			objs := cluster.Filter(renderChart(t, tc.release, "marks-chart", tc.args...), isLedgerMarks)
			if tc.name == "" {
				if len(objs) != 0 {
					t.Fatalf("ledgerMarksPolicy.enabled=false renders %q", inventory(objs))
				}
				return
			}
			p := findIn[admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy", tc.name)
			b := findIn[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs, "ValidatingAdmissionPolicyBinding", tc.name)
			if len(objs) != 2 || !reflect.DeepEqual(p.Spec, wantPolicy.Spec) {
				t.Errorf("the chart's policy %s differs from sar-bridge ledger-marks':\n%s\nwant:\n%s", tc.name, asJSON(t, p.Spec), asJSON(t, wantPolicy.Spec))
			}
			wantBinding := admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: tc.name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			}
			if !reflect.DeepEqual(b.Spec, wantBinding) {
				t.Errorf("the chart's binding %s: %s, want %s", tc.name, asJSON(t, b.Spec), asJSON(t, wantBinding))
			}
		})
	}
}

// kubectlWith runs the pinned kubectl with kubeconfig and a private discovery cache.
func kubectlWith(t *testing.T, kubeconfig string) func(stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	kubectl, cache := kubectlPath(t), filepath.Join(t.TempDir(), "cache")
	return func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		return runCmd(t, stdin, kubectl, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cache}, args...)...)
	}
}

// marksPod is a pod of marksNS, never bound to a node, with labels and annotations, as
// JSON (which kubectl reads as YAML, without YAML's surprises in values).
func marksPod(t *testing.T, name string, labels, annotations map[string]string) string {
	t.Helper()
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": marksNS, "labels": labels, "annotations": annotations},
		"spec": map[string]any{
			"serviceAccountName":           "tenant",
			"automountServiceAccountToken": false,
			"containers":                   []any{map[string]any{"name": "c", "image": "registry.example/none:1"}},
		},
	}
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// marksRefused is kubectl's stderr when the policy refuses a request on pod name:
// "create" from `kubectl create -f -`, anything else from label, annotate or patch.
func marksRefused(op, name string) string {
	prefix, msg := "Error from server (Forbidden): ", marksUpdateMessage
	if op == "create" {
		prefix, msg = prefix+`error when creating "STDIN": `, marksCreateMessage
	}
	return fmt.Sprintf("%spods %q is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s\n", prefix, name, ledgerMarksName, ledgerMarksName, msg)
}

// marksFixtures makes marksNS with the ServiceAccount tenant, who may do anything to
// pods there, their status included (more than a tenant usually gets), and returns a
// kubeconfig with its token.
func marksFixtures(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	objs, err := suite.cluster.ApplyYAML(ctx, `
apiVersion: v1
kind: Namespace
metadata: {name: ledger-marks}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant, namespace: ledger-marks}
---
`+podEditor(marksNS, []rule{{resources: []string{"pods", "pods/status"}, verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
		saSubject(marksNS, "tenant")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Never bound, so deleted at once; the namespace stays Terminating (no
		// controller-manager), as other tests' do.
		_ = suite.cluster.Client.CoreV1().Pods(marksNS).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = suite.cluster.Delete(context.Background(), objs)
	})
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: marksNS, Verb: "create", Resource: "pods"},
		{Namespace: marksNS, Verb: "patch", Resource: "pods", Subresource: "status"},
	} {
		if err := suite.cluster.WaitForAccess(ctx, sa(marksNS, "tenant"), cluster.ServiceAccountGroups(marksNS), attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "tenant.kubeconfig")
	if _, err := suite.cluster.WriteServiceAccountKubeconfig(ctx, kubeconfig, marksNS, "tenant", time.Hour); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// marksOf is pod name's label and annotation ("<none>" when absent).
func marksOf(t *testing.T, name string) (label, amounts string) {
	t.Helper()
	pod, err := suite.cluster.Client.CoreV1().Pods(marksNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	label, amounts = "<none>", "<none>"
	if v, ok := pod.Labels[tenants.ChargedLabel]; ok {
		label = v
	}
	if v, ok := pod.Annotations[tenants.ChargedAmountsAnnotation]; ok {
		amounts = v
	}
	return label, amounts
}

// wantMarks fails unless pod name has exactly label and amounts ("<none>": absent).
func wantMarks(t *testing.T, name, label, amounts string) {
	t.Helper()
	if l, a := marksOf(t, name); l != label || a != amounts {
		t.Errorf("pod %s: label %s, annotation %s; want %s and %s", name, l, a, label, amounts)
	}
}

// ran is a kubectl call's outcome.
type ran struct {
	stdout, stderr string
	code           int
}

func result(stdout, stderr string, code int) ran { return ran{stdout, stderr, code} }

// succeeds fails unless a kubectl call exited 0 with nothing on stderr.
func succeeds(t *testing.T, what string, r ran) {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Errorf("%s: exit %d, stdout %q, stderr %q; want success", what, r.code, r.stdout, r.stderr)
	}
}

// refusedWith fails unless a kubectl call exited 1 with exactly want on stderr.
func refusedWith(t *testing.T, what string, stdout, stderr string, code int, want string) {
	t.Helper()
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and stderr:\n%s", what, code, stdout, stderr, want)
	}
}

func TestLedgerMarksAdmission(t *testing.T) {
	tenantKubectl := kubectlWith(t, marksFixtures(t))
	admin := kubectlCmd(t)
	// The bridge's ServiceAccount, with exactly manifests/base's RBAC: it may patch pods
	// and update offloadtenants/status.
	bridge := kubectlWith(t, suite.kubeconfig)
	charged := map[string]string{tenants.ChargedLabel: marksNS}
	amounts := map[string]string{tenants.ChargedAmountsAnnotation: marksAmounts}

	t.Run("a tenant's create with a mark is refused", func(t *testing.T) {
		for i, tc := range []struct {
			name                string
			labels, annotations map[string]string
		}{
			{"the label", charged, nil},
			{"the annotation", nil, amounts},
			{"both", charged, amounts},
			{"the label, empty", map[string]string{tenants.ChargedLabel: ""}, nil},
		} {
			name := fmt.Sprintf("marked-%d", i)
			var stdout, stderr string
			var code int
			// The policy is enforced once the API server's informers have it (at once,
			// unless this runs first): poll, deleting a pod that got through.
			poll(30*time.Second, 250*time.Millisecond, func() bool {
				stdout, stderr, code = tenantKubectl(marksPod(t, name, tc.labels, tc.annotations), "create", "-f", "-")
				if code == 0 {
					_, _, _ = admin("", "delete", "pod", "-n", marksNS, name, "--wait=false")
				}
				return code != 0
			})
			refusedWith(t, tc.name, stdout, stderr, code, marksRefused("create", name))
		}
	})

	t.Run("a pod without the marks is unaffected", func(t *testing.T) {
		succeeds(t, "create", result(tenantKubectl(marksPod(t, "plain", map[string]string{"app": "job"}, nil), "create", "-f", "-")))
		succeeds(t, "label", result(tenantKubectl("", "label", "pod", "plain", "-n", marksNS, "team=a", "app-")))
		succeeds(t, "annotate", result(tenantKubectl("", "annotate", "pod", "plain", "-n", marksNS, "note=x")))
		succeeds(t, "status", result(tenantKubectl("", "patch", "pod", "plain", "-n", marksNS, "--subresource=status", "--type=merge", "-p", `{"status":{"message":"x"}}`)))
		wantMarks(t, "plain", "<none>", "<none>")
	})

	t.Run("a tenant may not add a mark", func(t *testing.T) {
		for _, tc := range []struct {
			what string
			args []string
		}{
			{"label", []string{"label", "pod", "plain", tenants.ChargedLabel + "=" + marksNS}},
			{"annotate", []string{"annotate", "pod", "plain", tenants.ChargedAmountsAnnotation + "=" + marksAmounts}},
			{"patch", []string{"patch", "pod", "plain", "--type=merge", "-p", `{"metadata":{"labels":{"sar-bridge.io/charged":"ledger-marks"}}}`}},
			{"patch the status", []string{"patch", "pod", "plain", "--subresource=status", "--type=merge", "-p", `{"metadata":{"labels":{"sar-bridge.io/charged":"ledger-marks"}}}`}},
		} {
			stdout, stderr, code := tenantKubectl("", append(tc.args, "-n", marksNS)...)
			refusedWith(t, tc.what, stdout, stderr, code, marksRefused("update", "plain"))
		}
		wantMarks(t, "plain", "<none>", "<none>")
	})

	t.Run("a cluster admin may create a marked pod", func(t *testing.T) {
		succeeds(t, "create", result(admin(marksPod(t, "charged", charged, amounts), "create", "-f", "-")))
		wantMarks(t, "charged", marksNS, marksAmounts)
	})

	t.Run("a tenant may not change or remove a mark", func(t *testing.T) {
		for _, tc := range []struct {
			what string
			args []string
		}{
			{"remove the label", []string{"label", "pod", "charged", tenants.ChargedLabel + "-"}},
			{"change the label", []string{"label", "pod", "charged", tenants.ChargedLabel + "=team-a", "--overwrite"}},
			{"remove the annotation", []string{"annotate", "pod", "charged", tenants.ChargedAmountsAnnotation + "-"}},
			{"shrink the annotation", []string{"annotate", "pod", "charged", tenants.ChargedAmountsAnnotation + "=pods=1", "--overwrite"}},
			{"remove the label through the status", []string{"patch", "pod", "charged", "--subresource=status", "--type=json", "-p", `[{"op":"remove","path":"/metadata/labels/sar-bridge.io~1charged"}]`}},
		} {
			stdout, stderr, code := tenantKubectl("", append(tc.args, "-n", marksNS)...)
			refusedWith(t, tc.what, stdout, stderr, code, marksRefused("update", "charged"))
		}
		wantMarks(t, "charged", marksNS, marksAmounts)
		// Everything else about a marked pod stays the tenant's.
		succeeds(t, "label", result(tenantKubectl("", "label", "pod", "charged", "-n", marksNS, "team=a")))
		wantMarks(t, "charged", marksNS, marksAmounts)
	})

	t.Run("the bridge's ServiceAccount may mark and unmark", func(t *testing.T) {
		// As the reconciler marks a pod: one merge patch of both.
		mark := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q}}}`, tenants.ChargedLabel, marksNS, tenants.ChargedAmountsAnnotation, marksAmounts)
		succeeds(t, "mark", result(bridge("", "patch", "pod", "plain", "-n", marksNS, "--type=merge", "-p", mark)))
		wantMarks(t, "plain", marksNS, marksAmounts)
		succeeds(t, "unmark", result(bridge("", "patch", "pod", "plain", "-n", marksNS, "--type=json", "-p",
			`[{"op":"remove","path":"/metadata/labels/sar-bridge.io~1charged"},{"op":"remove","path":"/metadata/annotations/sar-bridge.io~1charged-amounts"}]`)))
		wantMarks(t, "plain", "<none>", "<none>")
	})

	t.Run("a cluster admin may change and remove the marks", func(t *testing.T) {
		succeeds(t, "change", result(admin("", "annotate", "pod", "charged", "-n", marksNS, tenants.ChargedAmountsAnnotation+"=pods=1", "--overwrite")))
		succeeds(t, "remove", result(admin("", "label", "pod", "charged", "-n", marksNS, tenants.ChargedLabel+"-")))
		wantMarks(t, "charged", "<none>", "pods=1")
	})

	t.Run("a tenant may delete a marked pod", func(t *testing.T) {
		succeeds(t, "create", result(admin(marksPod(t, "to-delete", charged, amounts), "create", "-f", "-")))
		succeeds(t, "delete", result(tenantKubectl("", "delete", "pod", "to-delete", "-n", marksNS, "--wait=false")))
	})
}
