package admission

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
)

func TestBuildPatch(t *testing.T) {
	billing := map[string]string{"interlink.io/billing-project": "proj-7"}
	limits := map[string]map[string]string{"main": {"cpu": "1", "memory": "1Gi"}, "init": {"cpu": "1"}}
	for _, tc := range []struct {
		name      string
		pod       string
		mods      authorizer.Modifications
		wantPatch string // "" = no patch
		wantPod   string
	}{
		{
			name: "nothing to change", pod: `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"main"}]}}`,
		},
		{
			name: "annotations created when absent",
			pod:  `{"metadata":{"name":"p"},"spec":{"containers":[]}}`, mods: authorizer.Modifications{PodAnnotations: billing},
			wantPatch: `[{"op":"add","path":"/metadata/annotations","value":{"interlink.io/billing-project":"proj-7"}}]`,
			wantPod:   `{"metadata":{"name":"p","annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{"containers":[]}}`,
		},
		{
			name: "annotations null", pod: `{"metadata":{"annotations":null},"spec":{}}`, mods: authorizer.Modifications{PodAnnotations: billing},
			wantPatch: `[{"op":"add","path":"/metadata/annotations","value":{"interlink.io/billing-project":"proj-7"}}]`,
			wantPod:   `{"metadata":{"annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{}}`,
		},
		{
			name: "annotation added beside others, slash escaped", pod: `{"metadata":{"annotations":{"a":"b"}},"spec":{}}`,
			mods:      authorizer.Modifications{PodAnnotations: map[string]string{"interlink.io/billing-project": "proj-7", "x~y": "z"}},
			wantPatch: `[{"op":"add","path":"/metadata/annotations/interlink.io~1billing-project","value":"proj-7"},{"op":"add","path":"/metadata/annotations/x~0y","value":"z"}]`,
			wantPod:   `{"metadata":{"annotations":{"a":"b","interlink.io/billing-project":"proj-7","x~y":"z"}},"spec":{}}`,
		},
		{
			name: "policy value replaces the pod's", pod: `{"metadata":{"annotations":{"interlink.io/billing-project":"mine"}},"spec":{}}`, mods: authorizer.Modifications{PodAnnotations: billing},
			wantPatch: `[{"op":"replace","path":"/metadata/annotations/interlink.io~1billing-project","value":"proj-7"}]`,
			wantPod:   `{"metadata":{"annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{}}`,
		},
		{
			name: "same value: no patch", pod: `{"metadata":{"annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{}}`, mods: authorizer.Modifications{PodAnnotations: billing},
		},
		{
			name: "limits for containers without limits only",
			pod:  `{"metadata":{},"spec":{"initContainers":[{"name":"init"}],"containers":[{"name":"main","resources":{}},{"name":"side","resources":{}},{"name":"capped","resources":{"limits":{"cpu":"2"}}}]}}`,
			mods: authorizer.Modifications{ResourceLimits: limitsOf(map[string]map[string]string{"main": {"cpu": "1", "memory": "1Gi"}, "init": {"cpu": "1"}, "capped": {"cpu": "1"}})},
			wantPatch: `[{"op":"add","path":"/spec/containers/0/resources/limits","value":{"cpu":"1","memory":"1Gi"}},` +
				`{"op":"add","path":"/spec/initContainers/0/resources","value":{"limits":{"cpu":"1"}}}]`,
			wantPod: `{"metadata":{},"spec":{"initContainers":[{"name":"init","resources":{"limits":{"cpu":"1"}}}],"containers":[{"name":"main","resources":{"limits":{"cpu":"1","memory":"1Gi"}}},{"name":"side","resources":{}},{"name":"capped","resources":{"limits":{"cpu":"2"}}}]}}`,
		},
		{
			name: "null or empty limits count as none", pod: `{"metadata":{},"spec":{"containers":[{"name":"main","resources":{"limits":null}},{"name":"init","resources":{"limits":{}}}]}}`,
			mods:      authorizer.Modifications{ResourceLimits: limitsOf(limits)},
			wantPatch: `[{"op":"add","path":"/spec/containers/0/resources/limits","value":{"cpu":"1","memory":"1Gi"}},{"op":"add","path":"/spec/containers/1/resources/limits","value":{"cpu":"1"}}]`,
			wantPod:   `{"metadata":{},"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"1","memory":"1Gi"}}},{"name":"init","resources":{"limits":{"cpu":"1"}}}]}}`,
		},
		{
			name: "securityContext created with runAsUser", pod: `{"metadata":{},"spec":{"containers":[{"name":"main"}]}}`,
			mods:      authorizer.Modifications{RunAsUser: uid(20001)},
			wantPatch: `[{"op":"add","path":"/spec/securityContext","value":{"runAsUser":20001}}]`,
			wantPod:   `{"metadata":{},"spec":{"containers":[{"name":"main"}],"securityContext":{"runAsUser":20001}}}`,
		},
		{
			name: "securityContext null", pod: `{"metadata":{},"spec":{"securityContext":null}}`,
			mods:      authorizer.Modifications{RunAsUser: uid(0)},
			wantPatch: `[{"op":"add","path":"/spec/securityContext","value":{"runAsUser":0}}]`,
			wantPod:   `{"metadata":{},"spec":{"securityContext":{"runAsUser":0}}}`,
		},
		{
			name:      "runAsUser added beside the securityContext's other fields",
			pod:       `{"metadata":{},"spec":{"securityContext":{"fsGroup":7,"runAsGroup":20000,"seccompProfile":{"type":"RuntimeDefault"}}}}`,
			mods:      authorizer.Modifications{RunAsUser: uid(20001)},
			wantPatch: `[{"op":"add","path":"/spec/securityContext/runAsUser","value":20001}]`,
			wantPod:   `{"metadata":{},"spec":{"securityContext":{"fsGroup":7,"runAsGroup":20000,"seccompProfile":{"type":"RuntimeDefault"},"runAsUser":20001}}}`,
		},
		{
			name: "empty securityContext", pod: `{"metadata":{},"spec":{"securityContext":{}}}`,
			mods:      authorizer.Modifications{RunAsUser: uid(20001)},
			wantPatch: `[{"op":"add","path":"/spec/securityContext/runAsUser","value":20001}]`,
			wantPod:   `{"metadata":{},"spec":{"securityContext":{"runAsUser":20001}}}`,
		},
		{
			name: "runAsUser null counts as none", pod: `{"metadata":{},"spec":{"securityContext":{"runAsUser":null,"runAsNonRoot":true}}}`,
			mods:      authorizer.Modifications{RunAsUser: uid(20001)},
			wantPatch: `[{"op":"add","path":"/spec/securityContext/runAsUser","value":20001}]`,
			wantPod:   `{"metadata":{},"spec":{"securityContext":{"runAsUser":20001,"runAsNonRoot":true}}}`,
		},
		{
			name:      "container-level runAsUser is not the pod's",
			pod:       `{"metadata":{},"spec":{"containers":[{"name":"main","securityContext":{"runAsUser":5}}]}}`,
			mods:      authorizer.Modifications{RunAsUser: uid(20001)},
			wantPatch: `[{"op":"add","path":"/spec/securityContext","value":{"runAsUser":20001}}]`,
			wantPod:   `{"metadata":{},"spec":{"containers":[{"name":"main","securityContext":{"runAsUser":5}}],"securityContext":{"runAsUser":20001}}}`,
		},
		{
			name: "same runAsUser already set: no patch", pod: `{"metadata":{},"spec":{"securityContext":{"runAsUser":20001}}}`,
			mods: authorizer.Modifications{RunAsUser: uid(20001)},
		},
		{
			name: "every kind at once",
			pod:  `{"metadata":{"annotations":{"slurm-job.vk.io/flags":"--time=1:00:00"}},"spec":{"containers":[{"name":"main"}]}}`,
			mods: authorizer.Modifications{PodAnnotations: map[string]string{"slurm-job.vk.io/flags": "--time=1:00:00 --account=proj-a"},
				ResourceLimits: limitsOf(map[string]map[string]string{"main": {"cpu": "1"}}), RunAsUser: uid(20001)},
			wantPatch: `[{"op":"replace","path":"/metadata/annotations/slurm-job.vk.io~1flags","value":"--time=1:00:00 --account=proj-a"},` +
				`{"op":"add","path":"/spec/containers/0/resources","value":{"limits":{"cpu":"1"}}},` +
				`{"op":"add","path":"/spec/securityContext","value":{"runAsUser":20001}}]`,
			wantPod: `{"metadata":{"annotations":{"slurm-job.vk.io/flags":"--time=1:00:00 --account=proj-a"}},"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"1"}}}],"securityContext":{"runAsUser":20001}}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch, err := buildPatch([]byte(tc.pod), tc.mods)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantPatch == "" {
				if patch != nil {
					t.Fatalf("patch %s, want none", patch)
				}
				return
			}
			if string(patch) != tc.wantPatch {
				t.Errorf("patch\n  %s\nwant\n  %s", patch, tc.wantPatch)
			}
			// The patch applies as the API server applies it.
			p, err := jsonpatch.DecodePatch(patch)
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Apply([]byte(tc.pod))
			if err != nil {
				t.Fatalf("applying %s: %v", patch, err)
			}
			var got, want any
			_ = json.Unmarshal(out, &got)
			_ = json.Unmarshal([]byte(tc.wantPod), &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("patched pod\n  %s\nwant\n  %s", out, tc.wantPod)
			}
		})
	}
}

func TestBuildPatchBadPod(t *testing.T) {
	if _, err := buildPatch([]byte(`{"spec":{"containers":{}}}`), authorizer.Modifications{ResourceLimits: limitsOf(map[string]map[string]string{"a": {"cpu": "1"}})}); err == nil {
		t.Fatal("want an error for containers that are not a list")
	}
}

// A runAsUser the pod has is never overwritten: the patch is refused, not built.
func TestBuildPatchKeepsTheRunAsUser(t *testing.T) {
	for _, tc := range []struct{ name, pod, wantErr string }{
		{"another uid", `{"spec":{"securityContext":{"runAsUser":0}}}`,
			"spec.securityContext.runAsUser is 0: the policy's 20001 would overwrite it"},
		{"not an integer", `{"spec":{"securityContext":{"runAsUser":"20001"}}}`,
			`spec.securityContext.runAsUser is "20001": the policy's 20001 would overwrite it`},
		{"securityContext not an object", `{"spec":{"securityContext":[]}}`, "reading the pod: json: cannot unmarshal array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch, err := buildPatch([]byte(tc.pod), authorizer.Modifications{RunAsUser: uid(20001)})
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Fatalf("want an error starting %q, got %v (patch %s)", tc.wantErr, err, patch)
			}
		})
	}
}

func uid(n int64) *int64 { return &n }

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
