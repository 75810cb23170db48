package workload

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const template = `
  template:
    metadata:
      labels: {app: x}
      annotations: {slurm-job.vk.io/flags: "-p short"}
    spec:
      serviceAccountName: runner
      nodeSelector: {virtual-node.interlink/type: virtual-kubelet}
      containers: [{name: main, image: busybox}]`

// samples hold one object per workload resource, and a pod.
var samples = map[schema.GroupResource]string{
	{Group: "batch", Resource: "jobs"}: "apiVersion: batch/v1\nkind: Job\nmetadata: {name: pi, namespace: ns}\nspec:" + template,
	{Group: "batch", Resource: "cronjobs"}: "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: pi, namespace: ns}\nspec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:" +
		strings.ReplaceAll(template, "\n", "\n    "),
	{Group: "apps", Resource: "deployments"}:  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: pi, namespace: ns}\nspec:" + template,
	{Group: "apps", Resource: "statefulsets"}: "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: pi, namespace: ns}\nspec:" + template,
	{Group: "apps", Resource: "daemonsets"}:   "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: pi, namespace: ns}\nspec:" + template,
	{Group: "apps", Resource: "replicasets"}:  "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: pi, namespace: ns}\nspec:" + template,
}

func TestPodOfEveryWorkload(t *testing.T) {
	if len(samples) != len(resources) {
		t.Fatalf("%d samples for %d workload resources", len(samples), len(resources))
	}
	want := corev1.PodSpec{
		ServiceAccountName: "runner",
		NodeSelector:       map[string]string{"virtual-node.interlink/type": "virtual-kubelet"},
		Containers:         []corev1.Container{{Name: "main", Image: "busybox"}},
	}
	for gr, doc := range samples {
		t.Run(gr.String(), func(t *testing.T) {
			if !IsWorkload(gr) {
				t.Errorf("IsWorkload(%s) = false", gr)
			}
			obj, err := Decode([]byte(doc), nil)
			if err != nil {
				t.Fatal(err)
			}
			p, err := PodOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			kind := strings.TrimSuffix(gr.Resource, "s")
			if p.Source != kind+"/pi" {
				t.Errorf("source %q, want %q", p.Source, kind+"/pi")
			}
			meta := metav1.ObjectMeta{Name: "pi", Namespace: "ns", Labels: map[string]string{"app": "x"},
				Annotations: map[string]string{"slurm-job.vk.io/flags": "-p short"}}
			if !reflect.DeepEqual(p.Pod.ObjectMeta, meta) || p.Pod.APIVersion != "v1" || p.Pod.Kind != "Pod" {
				t.Errorf("pod %+v %+v, want v1 Pod %+v", p.Pod.TypeMeta, p.Pod.ObjectMeta, meta)
			}
			if !reflect.DeepEqual(p.Pod.Spec, want) {
				t.Errorf("spec %+v, want %+v", p.Pod.Spec, want)
			}
		})
	}
}

func TestPodOfPod(t *testing.T) {
	obj, err := Decode([]byte(`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}`), &schema.GroupVersionKind{Version: "v1", Kind: "Pod"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := PodOf(obj)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != "pod/p" || p.Pod.Name != "p" || p.Pod.Spec.Containers[0].Image != "i" {
		t.Errorf("got %s %+v", p.Source, p.Pod)
	}
	if p.Pod == obj {
		t.Error("the pod is the decoded object, not a copy")
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk != (schema.GroupVersionKind{Version: "v1", Kind: "Pod"}) {
		t.Errorf("decoded with the default kind, the object says it is %v", gvk)
	}
}

func TestNotWorkloads(t *testing.T) {
	for _, gr := range []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "deployments/scale"},
		{Group: "batch", Resource: "jobs/status"}, {Group: "extensions", Resource: "deployments"}, {Resource: "replicationcontrollers"}} {
		if IsWorkload(gr) {
			t.Errorf("IsWorkload(%s) = true", gr)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		defaults  *schema.GroupVersionKind
		want      string
	}{
		{"unknown field", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {template: {spec: {containers: [], nodeSelecter: {a: b}}}}\n", nil,
			`decoding: strict decoding error: unknown field "spec.template.spec.nodeSelecter"`},
		{"duplicate field", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","name":"e"}}`, nil,
			`decoding: strict decoding error: duplicate field "metadata.name"`},
		{"no kind", `{"metadata":{"name":"d"}}`, nil, "decoding: Object 'Kind' is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.doc), tc.defaults)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
	obj, err := Decode([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PodOf(obj); err == nil || err.Error() != "ConfigMap v1 has no pod template: want a Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet" {
		t.Errorf("PodOf(ConfigMap): %v", err)
	}
}
