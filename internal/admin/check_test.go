package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

// fakeDecider answers from a table keyed by pod name and records the inputs.
type fakeDecider struct {
	answers map[string]authorizer.Decision
	errs    map[string]error
	inputs  []map[string]any
	door    authorizer.FrontDoor // the front door check must ask as; "": the Data API
}

func (f *fakeDecider) Decide(_ context.Context, r authorizer.Request) (authorizer.Decision, error) {
	if r.Charge != authorizer.ChargeNothing {
		return authorizer.Decision{}, errors.New("check asked for a decision that may charge")
	}
	if want := cmp.Or(f.door, authorizer.FrontDoorDataAPI); r.FrontDoor != want {
		return authorizer.Decision{}, fmt.Errorf("check asked as front door %q, want %q", r.FrontDoor, want)
	}
	var in map[string]any
	if err := json.Unmarshal(r.Input, &in); err != nil {
		return authorizer.Decision{}, err
	}
	f.inputs = append(f.inputs, in)
	name := in["pod"].(map[string]any)["metadata"].(map[string]any)["name"].(string)
	return f.answers[name], f.errs[name]
}

func testPod(name string) Pod {
	return Pod{Source: "job/" + name, Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}}
}

func decision(allowed bool, reason string, review map[string]any) authorizer.Decision {
	return authorizer.Decision{ID: "id-" + reason, Defined: true, Result: ast.MustInterfaceToValue(map[string]any{
		"allowed": allowed, "reason": reason, "review": review,
		"modifications": map[string]any{"pod_annotations": map[string]any{}, "resource_limits": map[string]any{}},
	})}
}

var podReview = map[string]any{"namespace": "ns", "verb": "create", "group": "g", "resource": "pods", "name": ""}
var nodeReview = map[string]any{"namespace": "ns", "verb": "use", "group": "g", "resource": "nodes", "name": "vk-1"}

func TestCheck(t *testing.T) {
	d := &fakeDecider{
		answers: map[string]authorizer.Decision{
			"ok":        decision(true, "RBAC: yes", map[string]any{"allowed": true, "reason": "RBAC: yes", "attributes": []any{podReview, nodeReview}}),
			"no-node":   decision(false, "no node", map[string]any{"allowed": false, "denied": true, "reason": "no node", "attributes": []any{podReview, nodeReview}}),
			"unmapped":  decision(false, "unmapped", map[string]any{"allowed": false, "reason": "unmapped", "attributes": nil}),
			"undefined": {ID: "u"},
		},
		errs: map[string]error{"broken": errors.New("boom")},
	}
	cases := []struct {
		name  string
		pods  []string
		code  int
		text  string
		error string
	}{
		{name: "allowed", pods: []string{"ok"}, code: 0, text: `job/ok (pod ns/ok): allowed
  reason: RBAC: yes
  review: create pods.g in namespace "ns": allowed
  review: use nodes.g "vk-1" in namespace "ns": allowed
  review reason: RBAC: yes
  modifications: {"pod_annotations":{},"resource_limits":{}}
`},
		{name: "denied by the second review", pods: []string{"ok", "no-node"}, code: 1, text: `job/ok (pod ns/ok): allowed
  reason: RBAC: yes
  review: create pods.g in namespace "ns": allowed
  review: use nodes.g "vk-1" in namespace "ns": allowed
  review reason: RBAC: yes
  modifications: {"pod_annotations":{},"resource_limits":{}}
job/no-node (pod ns/no-node): denied
  reason: no node
  review: create pods.g in namespace "ns": allowed
  review: use nodes.g "vk-1" in namespace "ns": denied
  review reason: no node
  modifications: {"pod_annotations":{},"resource_limits":{}}
`},
		{name: "no review sent", pods: []string{"unmapped"}, code: 1, text: `job/unmapped (pod ns/unmapped): denied
  reason: unmapped
  review: none sent: unmapped
  modifications: {"pod_annotations":{},"resource_limits":{}}
`},
		{name: "an error wins over a denial", pods: []string{"no-node", "broken"}, code: 2, text: `job/no-node (pod ns/no-node): denied
  reason: no node
  review: create pods.g in namespace "ns": allowed
  review: use nodes.g "vk-1" in namespace "ns": denied
  review reason: no node
  modifications: {"pod_annotations":{},"resource_limits":{}}
`, error: "error: job/broken (pod ns/broken): boom\n"},
		{name: "an undefined document is no allow", pods: []string{"undefined"}, code: 2,
			error: "error: job/undefined (pod ns/undefined): data.interlink.authz.decision: the policy document is undefined (got <nil>)\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var pods []Pod
			for _, n := range tc.pods {
				pods = append(pods, testPod(n))
			}
			outcomes := Check(context.Background(), d, pods, CheckOptions{})
			var stdout, stderr bytes.Buffer
			if err := PrintText(&stdout, outcomes); err != nil {
				t.Fatal(err)
			}
			PrintErrors(&stderr, outcomes)
			if got := ExitCode(outcomes); got != tc.code {
				t.Errorf("exit code %d, want %d", got, tc.code)
			}
			if stdout.String() != tc.text {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), tc.text)
			}
			if stderr.String() != tc.error {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.error)
			}
		})
	}
}

func TestInput(t *testing.T) {
	cases := []struct {
		name string
		opts CheckOptions
		want string
	}{
		{"defaults", CheckOptions{}, `{"pod":{"metadata":{"name":"p","namespace":"ns"},"spec":{"containers":null},"status":{}}}`},
		{"everything", CheckOptions{Operation: "delete", Node: "vk-1", User: &User{Username: "alice", Groups: []string{"g"}}},
			`{"operation":"delete","pod":{"metadata":{"name":"p","namespace":"ns"},"spec":{"containers":null},"status":{}},"node":{"name":"vk-1"},"user":{"username":"alice","groups":["g"]}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Input(testPod("p"), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Every modification kind is shown as the policy answered it, run_as_user included.
func TestCheckShowsRunAsUser(t *testing.T) {
	d := &fakeDecider{answers: map[string]authorizer.Decision{"hpc": {ID: "h", Defined: true, Result: ast.MustInterfaceToValue(map[string]any{
		"allowed": true, "reason": "RBAC: yes", "review": map[string]any{"allowed": true, "reason": "RBAC: yes", "attributes": []any{podReview}},
		"modifications": map[string]any{"pod_annotations": map[string]any{"slurm-job.vk.io/flags": "--account=proj-a"}, "resource_limits": map[string]any{}, "run_as_user": 20001},
	})}}}
	var out bytes.Buffer
	if err := PrintText(&out, Check(context.Background(), d, []Pod{testPod("hpc")}, CheckOptions{})); err != nil {
		t.Fatal(err)
	}
	want := `job/hpc (pod ns/hpc): allowed
  reason: RBAC: yes
  review: create pods.g in namespace "ns": allowed
  review reason: RBAC: yes
  modifications: {"pod_annotations":{"slurm-job.vk.io/flags":"--account=proj-a"},"resource_limits":{},"run_as_user":20001}
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestPrintJSON(t *testing.T) {
	outcomes := []Outcome{
		{Source: "pod/a", Namespace: "ns", Name: "a", DecisionID: "1", Result: map[string]any{"allowed": true}},
		{Source: "pod/b", Namespace: "ns", Name: "b", Err: errors.New("skipped")},
	}
	var out bytes.Buffer
	if err := PrintJSON(&out, outcomes); err != nil {
		t.Fatal(err)
	}
	want := `{
  "items": [
    {
      "source": "pod/a",
      "namespace": "ns",
      "name": "a",
      "result": {
        "allowed": true
      },
      "decision_id": "1"
    }
  ]
}
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestCheckFrontDoor: check decides as the Data API unless told which front door.
func TestCheckFrontDoor(t *testing.T) {
	for _, door := range []authorizer.FrontDoor{"", authorizer.FrontDoorRelay, authorizer.FrontDoorAdmission} {
		d := &fakeDecider{answers: map[string]authorizer.Decision{"ok": decision(true, "yes", nil)}, door: door}
		out := Check(context.Background(), d, []Pod{testPod("ok")}, CheckOptions{FrontDoor: door})
		if len(out) != 1 || out[0].Err != nil || !out[0].Allowed() {
			t.Errorf("front door %q: %+v", door, out)
		}
	}
}

// TestCheckTextWouldDeny: violations in warn or audit are printed after the
// modifications, what denies only in the reason.
func TestCheckTextWouldDeny(t *testing.T) {
	result := map[string]any{"allowed": true, "reason": "RBAC: yes", "modifications": map[string]any{"pod_annotations": map[string]any{}, "resource_limits": map[string]any{}},
		"review": map[string]any{"allowed": true, "reason": "RBAC: yes", "attributes": []any{podReview}},
		"violations": []any{
			map[string]any{"rule": "caps", "message": "over the cap", "action": "warn"},
			map[string]any{"rule": "images", "message": "unlisted", "action": "audit"},
		}}
	d := &fakeDecider{answers: map[string]authorizer.Decision{"ok": {ID: "d", Defined: true, Result: ast.MustInterfaceToValue(result)}}}
	var out bytes.Buffer
	if err := PrintText(&out, Check(context.Background(), d, []Pod{testPod("ok")}, CheckOptions{})); err != nil {
		t.Fatal(err)
	}
	want := `job/ok (pod ns/ok): allowed
  reason: RBAC: yes
  review: create pods.g in namespace "ns": allowed
  review reason: RBAC: yes
  modifications: {"pod_annotations":{},"resource_limits":{}}
  would deny (warn): caps: over the cap
  would deny (audit): images: unlisted
`
	if out.String() != want {
		t.Errorf("check printed\n%s\nwant\n%s", out.String(), want)
	}
}
