package admission

import (
	"encoding/json"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/sar-bridge/sar-bridge/authorizer"
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
			pod:  `{"metadata":{"name":"p"},"spec":{"containers":[]}}`, mods: authorizer.Modifications{Annotations: billing},
			wantPatch: `[{"op":"add","path":"/metadata/annotations","value":{"interlink.io/billing-project":"proj-7"}}]`,
			wantPod:   `{"metadata":{"name":"p","annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{"containers":[]}}`,
		},
		{
			name: "annotations null", pod: `{"metadata":{"annotations":null},"spec":{}}`, mods: authorizer.Modifications{Annotations: billing},
			wantPatch: `[{"op":"add","path":"/metadata/annotations","value":{"interlink.io/billing-project":"proj-7"}}]`,
			wantPod:   `{"metadata":{"annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{}}`,
		},
		{
			name: "annotation added beside others, slash escaped", pod: `{"metadata":{"annotations":{"a":"b"}},"spec":{}}`,
			mods:      authorizer.Modifications{Annotations: map[string]string{"interlink.io/billing-project": "proj-7", "x~y": "z"}},
			wantPatch: `[{"op":"add","path":"/metadata/annotations/interlink.io~1billing-project","value":"proj-7"},{"op":"add","path":"/metadata/annotations/x~0y","value":"z"}]`,
			wantPod:   `{"metadata":{"annotations":{"a":"b","interlink.io/billing-project":"proj-7","x~y":"z"}},"spec":{}}`,
		},
		{
			name: "policy value replaces the pod's", pod: `{"metadata":{"annotations":{"interlink.io/billing-project":"mine"}},"spec":{}}`, mods: authorizer.Modifications{Annotations: billing},
			wantPatch: `[{"op":"replace","path":"/metadata/annotations/interlink.io~1billing-project","value":"proj-7"}]`,
			wantPod:   `{"metadata":{"annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{}}`,
		},
		{
			name: "same value: no patch", pod: `{"metadata":{"annotations":{"interlink.io/billing-project":"proj-7"}},"spec":{}}`, mods: authorizer.Modifications{Annotations: billing},
		},
		{
			name: "limits for containers without limits only",
			pod:  `{"metadata":{},"spec":{"initContainers":[{"name":"init"}],"containers":[{"name":"main","resources":{}},{"name":"side","resources":{}},{"name":"capped","resources":{"limits":{"cpu":"2"}}}]}}`,
			mods: authorizer.Modifications{Limits: map[string]map[string]string{"main": {"cpu": "1", "memory": "1Gi"}, "init": {"cpu": "1"}, "capped": {"cpu": "1"}}},
			wantPatch: `[{"op":"add","path":"/spec/containers/0/resources/limits","value":{"cpu":"1","memory":"1Gi"}},` +
				`{"op":"add","path":"/spec/initContainers/0/resources","value":{"limits":{"cpu":"1"}}}]`,
			wantPod: `{"metadata":{},"spec":{"initContainers":[{"name":"init","resources":{"limits":{"cpu":"1"}}}],"containers":[{"name":"main","resources":{"limits":{"cpu":"1","memory":"1Gi"}}},{"name":"side","resources":{}},{"name":"capped","resources":{"limits":{"cpu":"2"}}}]}}`,
		},
		{
			name: "null or empty limits count as none", pod: `{"metadata":{},"spec":{"containers":[{"name":"main","resources":{"limits":null}},{"name":"init","resources":{"limits":{}}}]}}`,
			mods:      authorizer.Modifications{Limits: limits},
			wantPatch: `[{"op":"add","path":"/spec/containers/0/resources/limits","value":{"cpu":"1","memory":"1Gi"}},{"op":"add","path":"/spec/containers/1/resources/limits","value":{"cpu":"1"}}]`,
			wantPod:   `{"metadata":{},"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"1","memory":"1Gi"}}},{"name":"init","resources":{"limits":{"cpu":"1"}}}]}}`,
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
	if _, err := buildPatch([]byte(`{"spec":{"containers":{}}}`), authorizer.Modifications{Limits: map[string]map[string]string{"a": {"cpu": "1"}}}); err == nil {
		t.Fatal("want an error for containers that are not a list")
	}
}
