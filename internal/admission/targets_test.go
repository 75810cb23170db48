package admission

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeCluster holds nodes and pods by name; err fails every lookup.
type fakeCluster struct {
	nodes   map[string]*corev1.Node
	pods    map[string]*corev1.Pod // namespace/name
	err     error
	podGets int
}

func (f *fakeCluster) Node(_ context.Context, name string) (*corev1.Node, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.nodes[name], nil
}

func (f *fakeCluster) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.podGets++
	if f.err != nil {
		return nil, f.err
	}
	return f.pods[ns+"/"+name], nil
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func testCluster() *fakeCluster {
	return &fakeCluster{nodes: map[string]*corev1.Node{
		"vk-1":   node("vk-1", map[string]string{"virtual-node.interlink/type": "virtual-kubelet"}),
		"vk-2":   node("vk-2", map[string]string{"virtual-node.interlink/type": "virtual-kubelet"}),
		"worker": node("worker", map[string]string{"kubernetes.io/os": "linux"}),
	}, pods: map[string]*corev1.Pod{}}
}

func mustTargets(t *testing.T, selector, taint string) Targets {
	t.Helper()
	tg, err := NewTargets(selector, taint)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestNewTargets(t *testing.T) {
	for _, tc := range []struct {
		selector, taint, wantErr string
	}{
		{DefaultNodeSelector, DefaultTaintKey, ""},
		{"type in (virtual-kubelet,vk)", DefaultTaintKey, ""},
		{"interlink,!gpu", DefaultTaintKey, ""},
		{"!gpu", DefaultTaintKey, "needs a requirement a pod can select on"},
		{"type!=worker", DefaultTaintKey, "needs a requirement a pod can select on"},
		{"", DefaultTaintKey, "needs a requirement a pod can select on"},
		{"a=b=c", DefaultTaintKey, "node selector"},
		{DefaultNodeSelector, "", "taint key must not be empty"},
	} {
		t.Run(tc.selector+"/"+tc.taint, func(t *testing.T) {
			_, err := NewTargets(tc.selector, tc.taint)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func required(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

func expr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func names(values ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: values}}}
}

const vkLabel = "virtual-node.interlink/type"

func TestPodTargets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		selector string
		spec     corev1.PodSpec
		want     string // fragment of the reason; "" = not targeted
	}{
		{name: "plain pod", spec: corev1.PodSpec{}},
		{name: "nodeName of a virtual node", spec: corev1.PodSpec{NodeName: "vk-1"}, want: `spec.nodeName "vk-1" is a virtual node`},
		{name: "nodeName of an ordinary node", spec: corev1.PodSpec{NodeName: "worker"}},
		{name: "nodeName of an ordinary node wins over a toleration", spec: corev1.PodSpec{NodeName: "worker", Tolerations: []corev1.Toleration{{Key: DefaultTaintKey, Operator: corev1.TolerationOpExists}}}},
		{name: "nodeName of an unknown node", spec: corev1.PodSpec{NodeName: "vk-later"}, want: `spec.nodeName "vk-later"`},
		{name: "nodeSelector with the virtual label", spec: corev1.PodSpec{NodeSelector: map[string]string{vkLabel: "virtual-kubelet"}}, want: "spec.nodeSelector"},
		{name: "nodeSelector with another value", spec: corev1.PodSpec{NodeSelector: map[string]string{vkLabel: "other"}}},
		{name: "nodeSelector of ordinary nodes", spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}}},
		{name: "custom selector, exists", selector: "interlink", spec: corev1.PodSpec{NodeSelector: map[string]string{"interlink": "anything"}}, want: "spec.nodeSelector"},
		{name: "custom selector, in", selector: "type in (vk,virtual-kubelet)", spec: corev1.PodSpec{Affinity: required(expr("type", corev1.NodeSelectorOpIn, "vk", "virtual-kubelet"))}, want: "required node affinity"},
		{name: "custom selector, in with a value outside", selector: "type in (vk,virtual-kubelet)", spec: corev1.PodSpec{Affinity: required(expr("type", corev1.NodeSelectorOpIn, "vk", "worker"))}},
		{name: "affinity In the virtual value", spec: corev1.PodSpec{Affinity: required(expr(vkLabel, corev1.NodeSelectorOpIn, "virtual-kubelet"))}, want: "required node affinity"},
		{name: "affinity Exists of the label (selector wants a value)", spec: corev1.PodSpec{Affinity: required(expr(vkLabel, corev1.NodeSelectorOpExists))}},
		{name: "affinity with one ordinary term", spec: corev1.PodSpec{Affinity: required(expr(vkLabel, corev1.NodeSelectorOpIn, "virtual-kubelet"), expr("kubernetes.io/os", corev1.NodeSelectorOpIn, "linux"))}},
		{name: "affinity NotIn", spec: corev1.PodSpec{Affinity: required(expr(vkLabel, corev1.NodeSelectorOpNotIn, "virtual-kubelet"))}},
		{name: "affinity term plus nodeSelector", spec: corev1.PodSpec{NodeSelector: map[string]string{vkLabel: "virtual-kubelet"}, Affinity: required(expr("kubernetes.io/os", corev1.NodeSelectorOpIn, "linux"))}, want: "spec.nodeSelector"},
		{name: "affinity by name of virtual nodes", spec: corev1.PodSpec{Affinity: required(names("vk-1", "vk-2"))}, want: "required node affinity"},
		{name: "affinity by name of a mix", spec: corev1.PodSpec{Affinity: required(names("vk-1", "worker"))}},
		{name: "affinity without terms", spec: corev1.PodSpec{Affinity: required()}},
		{name: "toleration of the virtual taint", spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: DefaultTaintKey, Operator: corev1.TolerationOpExists}}}, want: "tolerates the virtual node taint"},
		{name: "keyless Exists toleration", spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}, want: "tolerates every taint"},
		{name: "toleration of another key", spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "hpc.example/gpu", Operator: corev1.TolerationOpEqual, Value: "a100"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := tc.selector
			if sel == "" {
				sel = DefaultNodeSelector
			}
			tg := mustTargets(t, sel, DefaultTaintKey)
			got, err := tg.PodTargets(context.Background(), testCluster(), &corev1.Pod{Spec: tc.spec})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("PodTargets = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPodTargetsLookupError(t *testing.T) {
	tg := mustTargets(t, DefaultNodeSelector, DefaultTaintKey)
	boom := errors.New("boom")
	for _, spec := range []corev1.PodSpec{{NodeName: "vk-1"}, {Affinity: required(names("vk-1"))}} {
		_, err := tg.PodTargets(context.Background(), &fakeCluster{err: boom}, &corev1.Pod{Spec: spec})
		if !errors.Is(err, boom) {
			t.Errorf("%+v: err %v, want it to wrap %v", spec, err, boom)
		}
	}
}

func TestAddsToleration(t *testing.T) {
	gpu := corev1.Toleration{Key: "hpc.example/gpu", Operator: corev1.TolerationOpEqual, Value: "a100", Effect: corev1.TaintEffectNoSchedule}
	secs := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		name     string
		old, new []corev1.Toleration
		want     bool
	}{
		{"none", nil, nil, false},
		{"unchanged", []corev1.Toleration{gpu}, []corev1.Toleration{gpu}, false},
		{"added", nil, []corev1.Toleration{gpu}, true},
		{"added beside", []corev1.Toleration{gpu}, []corev1.Toleration{gpu, {Operator: corev1.TolerationOpExists}}, true},
		{"empty operator is Equal", []corev1.Toleration{gpu}, []corev1.Toleration{{Key: gpu.Key, Value: gpu.Value, Effect: gpu.Effect}}, false},
		{"other value", []corev1.Toleration{gpu}, []corev1.Toleration{gpu, {Key: gpu.Key, Value: "h100", Effect: gpu.Effect}}, true},
		{"a duplicate swapped for a new one", []corev1.Toleration{gpu, gpu}, []corev1.Toleration{gpu, {Key: DefaultTaintKey, Operator: corev1.TolerationOpExists}}, true},
		{"a duplicate added", []corev1.Toleration{gpu}, []corev1.Toleration{gpu, gpu}, false},
		{"reordered", []corev1.Toleration{gpu, {Operator: corev1.TolerationOpExists}}, []corev1.Toleration{{Operator: corev1.TolerationOpExists}, gpu}, false},
		{"only tolerationSeconds changed", []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(10)}},
			[]corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(5)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := addsToleration(&corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.old}}, &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.new}})
			if got != tc.want {
				t.Errorf("addsToleration = %v, want %v", got, tc.want)
			}
		})
	}
}
