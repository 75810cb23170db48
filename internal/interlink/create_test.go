package interlink

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

func TestParseObject(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{name: "object", in: `{"a": 1, "b": {"c": [1, 2]}}`},
		{name: "empty", in: `{}`},
		{name: "duplicate key", in: `{"a": 1, "a": 2}`, wantErr: `duplicate key "a"`},
		{name: "array", in: `[1]`, wantErr: "not a JSON object"},
		{name: "string", in: `"x"`, wantErr: "not a JSON object"},
		{name: "empty input", in: ``, wantErr: "not a JSON object"},
		{name: "trailing data", in: `{"a": 1} {}`, wantErr: "data after the JSON object"},
		{name: "truncated", in: `{"a": 1`, wantErr: "unterminated object"},
		{name: "bad value", in: `{"a": tru}`, wantErr: `value of "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseObject([]byte(tt.in))
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
			}
		})
	}
}

// Values are written back byte for byte: whitespace, escapes and <, >, & in a Secret
// are not re-encoded.
func TestObjectRoundTripKeepsValueBytes(t *testing.T) {
	in := `{"z": {"data":  {"k": "PHNlY3JldD4="}, "s": "a<b>&c\u00e9"}, "a": [1,  2.50, 1e3]}`
	obj, err := parseObject([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out, err := obj.marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"z":{"data":  {"k": "PHNlY3JldD4="}, "s": "a<b>&c\u00e9"},"a":[1,  2.50, 1e3]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

func TestParseCreate(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
	}{
		{name: "interLink body", in: `{"pod": {"metadata": {"name": "p"}}, "container": [], "jobConfig": {}}`},
		{name: "no pod", in: `{"container": []}`, wantErr: `"pod" is required`},
		{name: "null pod", in: `{"pod": null}`, wantErr: `"pod" is required`},
		{name: "pod is an array", in: `{"pod": []}`, wantErr: `"pod" is required`},
		{name: "case-folded pod beside pod", in: `{"pod": {}, "Pod": {}}`, wantErr: `key "Pod" is ambiguous`},
		{name: "case-folded pod alone", in: `{"POD": {}}`, wantErr: `key "POD" is ambiguous`},
		{name: "duplicate pod", in: `{"pod": {}, "pod": {}}`, wantErr: `duplicate key "pod"`},
		{name: "not JSON", in: `pod=1`, wantErr: "body: not a JSON object"},
		{name: "trailing data", in: `{"pod": {}}x`, wantErr: "data after the JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseCreate([]byte(tt.in))
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
			}
		})
	}
}

func TestDecisionInputIsThePodAlone(t *testing.T) {
	body, err := parseCreate([]byte(`{"pod": {"metadata": {"namespace": "a"}}, "user": {"username": "admin"}, "container": []}`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := body.decisionInput()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"operation":"create","pod":{"metadata":{"namespace":"a"}}}`; string(in) != want {
		t.Fatalf("input %s, want %s", in, want)
	}
}

const createBodyFixture = `{"pod": {"metadata": {"name": "p", "namespace": "team-a", "annotations": {"keep": "me", "b": "user-chosen"}},
  "spec": {"containers": [
    {"name": "main", "image": "busybox"},
    {"name": "capped", "image": "busybox", "resources": {"limits": {"cpu": "500m"}}},
    {"name": "empty", "image": "busybox", "resources": {"limits": {}, "requests": {"cpu": "100m"}}}],
   "initContainers": [{"name": "init", "image": "busybox", "resources": null}]}},
 "container": [{"name": "main", "secrets": [{"data": {"token": "czNjcjN0PiY="}}]}],
 "jobConfig": {"x": "<&>"}, "jobScript": "#!/bin/sh\necho <hi>"}`

func TestApplyModifications(t *testing.T) {
	limits := map[string]string{"cpu": "1", "memory": "1Gi"}
	tests := []struct {
		name string
		mods authorizer.Modifications
		// want is the forwarded pod; nil means the body goes out unchanged.
		want map[string]any
	}{
		{name: "none", mods: authorizer.Modifications{}},
		{name: "annotations already set", mods: authorizer.Modifications{PodAnnotations: map[string]string{"keep": "me"}}},
		{name: "limits for an unknown container", mods: authorizer.Modifications{ResourceLimits: limitsOf(map[string]map[string]string{"ghost": limits})}},
		{name: "limits for a container with limits", mods: authorizer.Modifications{ResourceLimits: limitsOf(map[string]map[string]string{"capped": limits})}},
		{name: "annotations merged, the policy wins", mods: authorizer.Modifications{PodAnnotations: map[string]string{"b": "p-7", "new": "x"}},
			want: map[string]any{"annotations": map[string]any{"keep": "me", "b": "p-7", "new": "x"}}},
		{name: "limits where none are set", mods: authorizer.Modifications{ResourceLimits: limitsOf(map[string]map[string]string{"main": limits, "capped": limits, "empty": limits, "init": limits})},
			want: map[string]any{"limits": map[string]any{
				"main": map[string]any{"cpu": "1", "memory": "1Gi"}, "capped": map[string]any{"cpu": "500m"},
				"empty": map[string]any{"cpu": "1", "memory": "1Gi"}, "init": map[string]any{"cpu": "1", "memory": "1Gi"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := parseCreate([]byte(createBodyFixture))
			if err != nil {
				t.Fatal(err)
			}
			out, err := body.apply(tt.mods)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if string(out) != createBodyFixture {
					t.Fatalf("body changed:\n%s", out)
				}
				return
			}
			checkForwarded(t, out, tt.want)
		})
	}
}

// checkForwarded checks the modified pod and that every other member of the body kept
// its exact bytes.
func checkForwarded(t *testing.T, out []byte, want map[string]any) {
	t.Helper()
	doc, err := parseObject(out)
	if err != nil {
		t.Fatalf("forwarded body: %v\n%s", err, out)
	}
	orig, _ := parseObject([]byte(createBodyFixture))
	for _, key := range []string{"container", "jobConfig", "jobScript"} {
		if string(doc.get(key)) != string(orig.get(key)) {
			t.Errorf("%s changed: %s, was %s", key, doc.get(key), orig.get(key))
		}
	}
	var pod struct {
		Metadata struct {
			Annotations map[string]any `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Containers     []map[string]any `json:"containers"`
			InitContainers []map[string]any `json:"initContainers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(doc.get("pod"), &pod); err != nil {
		t.Fatal(err)
	}
	if a, ok := want["annotations"]; ok {
		if got, _ := json.Marshal(pod.Metadata.Annotations); string(got) != mustJSON(a) {
			t.Errorf("annotations %s, want %s", got, mustJSON(a))
		}
	}
	if l, ok := want["limits"]; ok {
		got := map[string]any{}
		for _, c := range append(pod.Spec.Containers, pod.Spec.InitContainers...) {
			res, _ := c["resources"].(map[string]any)
			got[c["name"].(string)] = res["limits"]
		}
		if string(mustJSON(got)) != mustJSON(l) {
			t.Errorf("limits %s, want %s", mustJSON(got), mustJSON(l))
		}
		// requests next to empty limits survive.
		if req := mustJSON(pod.Spec.Containers[2]["resources"].(map[string]any)["requests"]); req != `{"cpu":"100m"}` {
			t.Errorf("requests of container empty: %s", req)
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// The uid goes into the pod-level securityContext, created when absent; every other
// byte of the body, the securityContext's other members included, is forwarded as sent.
func TestApplyRunAsUser(t *testing.T) {
	uid := func(n int64) *int64 { return &n }
	const rest = `, "container": [{"name": "main", "secrets": [{"data": {"token": "czNjcjN0PiY="}}]}], "jobScript": "echo <hi> & bye"}`
	const restOut = `,"container":[{"name": "main", "secrets": [{"data": {"token": "czNjcjN0PiY="}}]}],"jobScript":"echo <hi> & bye"}`
	tests := []struct {
		name string
		pod  string
		mods authorizer.Modifications
		// want is the exact forwarded body; "" means the body goes out unchanged.
		want    string
		wantErr string
	}{
		{name: "no run_as_user", pod: `{"spec": {"containers": []}}`},
		{name: "securityContext created",
			pod: `{"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main"}], "nodeName": "vk"}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			want: `{"pod":{"metadata":{"name": "p"},"spec":{"containers":[{"name": "main"}],"nodeName":"vk","securityContext":{"runAsUser":20001}}}` + restOut},
		{name: "securityContext null",
			pod: `{"spec": {"securityContext": null, "containers": []}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			want: `{"pod":{"spec":{"securityContext":{"runAsUser":20001},"containers":[]}}` + restOut},
		{name: "other securityContext fields kept",
			pod:  `{"spec": {"securityContext": {"fsGroup": 7,  "runAsGroup": 20000, "seccompProfile": {"type": "RuntimeDefault"}}, "containers": []}}`,
			mods: authorizer.Modifications{RunAsUser: uid(20001)},
			want: `{"pod":{"spec":{"securityContext":{"fsGroup":7,"runAsGroup":20000,"seccompProfile":{"type": "RuntimeDefault"},"runAsUser":20001},"containers":[]}}` + restOut},
		{name: "runAsUser null counts as none",
			pod: `{"spec": {"securityContext": {"runAsUser": null, "runAsNonRoot": true}}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			want: `{"pod":{"spec":{"securityContext":{"runAsUser":20001,"runAsNonRoot":true}}}` + restOut},
		{name: "no spec",
			pod: `{"metadata": {"name": "p"}}`, mods: authorizer.Modifications{RunAsUser: uid(0)},
			want: `{"pod":{"metadata":{"name": "p"},"spec":{"securityContext":{"runAsUser":0}}}` + restOut},
		{name: "container-level runAsUser is not the pod's",
			pod: `{"spec": {"containers": [{"name": "main", "securityContext": {"runAsUser": 5}}]}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			want: `{"pod":{"spec":{"containers":[{"name": "main", "securityContext": {"runAsUser": 5}}],"securityContext":{"runAsUser":20001}}}` + restOut},
		{name: "with annotations and limits",
			pod: `{"metadata": {"annotations": {"a": "b"}}, "spec": {"containers": [{"name": "main"}]}}`,
			mods: authorizer.Modifications{PodAnnotations: map[string]string{"slurm-job.vk.io/flags": "--account=proj-a"},
				ResourceLimits: limitsOf(map[string]map[string]string{"main": {"cpu": "1"}}), RunAsUser: uid(20001)},
			want: `{"pod":{"metadata":{"annotations":{"a":"b","slurm-job.vk.io/flags":"--account=proj-a"}},"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"1"}}}],"securityContext":{"runAsUser":20001}}}` + restOut},
		{name: "same runAsUser already set: unchanged",
			pod: `{"spec": {"securityContext": {"runAsUser": 20001}}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)}},
		{name: "another runAsUser is never overwritten",
			pod: `{"spec": {"securityContext": {"runAsUser": 0}}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			wantErr: "pod.spec.securityContext.runAsUser is 0: the policy's 20001 would overwrite it"},
		{name: "a runAsUser that is no integer is not overwritten",
			pod: `{"spec": {"securityContext": {"runAsUser": "20001"}}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			wantErr: `pod.spec.securityContext.runAsUser is "20001": the policy's 20001 would overwrite it`},
		{name: "securityContext not an object",
			pod: `{"spec": {"securityContext": []}}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			wantErr: "pod.spec.securityContext: not a JSON object"},
		{name: "spec not an object",
			pod: `{"spec": "x"}`, mods: authorizer.Modifications{RunAsUser: uid(20001)},
			wantErr: "pod.spec: not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"pod": ` + tt.pod + rest
			body, err := parseCreate([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			out, err := body.apply(tt.mods)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("want error %q, got %v (%s)", tt.wantErr, err, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				want = in
			}
			if string(out) != want {
				t.Fatalf("forwarded\n  %s\nwant\n  %s", out, want)
			}
		})
	}
}

// limitsOf is limits per container as a front door receives them.
func limitsOf(m map[string]map[string]string) map[string]corev1.ResourceList {
	out := make(map[string]corev1.ResourceList, len(m))
	for name, limits := range m {
		list := corev1.ResourceList{}
		for r, q := range limits {
			list[corev1.ResourceName(r)] = resource.MustParse(q)
		}
		out[name] = list
	}
	return out
}
