// Package workload turns the objects that run pods into the pod a decision judges: a Pod
// as it is; a Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet as a pod
// named like the workload, in its namespace, with its template's labels, annotations and
// spec (so its service account). `sar-bridge check` reads manifests with it and the
// workloads admission webhook judges workloads with it, so a manifest checked and the
// same object admitted are judged alike.
package workload

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
)

// Pod is a pod to decide and the object it was read from ("job/pi").
type Pod struct {
	Source string
	Pod    *corev1.Pod
}

// strictDecoder refuses unknown and duplicate fields, as the API server's strict field
// validation does: a field misspelt, or one this build does not know, must not be judged
// as absent. It neither defaults nor converts.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// Decode reads one object, YAML or JSON, strictly. defaults gives the apiVersion and kind
// of data that names none (nil: data must name them); the object returned carries the
// kind it was decoded as either way.
func Decode(data []byte, defaults *schema.GroupVersionKind) (runtime.Object, error) {
	obj, gvk, err := strictDecoder.Decode(data, defaults, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	return obj, nil
}

// resources are the API resources of the workloads PodOf reads (Pods aside).
var resources = map[schema.GroupResource]bool{
	{Group: "batch", Resource: "jobs"}:        true,
	{Group: "batch", Resource: "cronjobs"}:    true,
	{Group: "apps", Resource: "deployments"}:  true,
	{Group: "apps", Resource: "statefulsets"}: true,
	{Group: "apps", Resource: "daemonsets"}:   true,
	{Group: "apps", Resource: "replicasets"}:  true,
}

// IsWorkload reports whether an API resource is a workload with a pod template.
func IsWorkload(gr schema.GroupResource) bool {
	return resources[gr]
}

// PodOf returns the pod a Pod or a workload with a pod template runs: the template's
// labels, annotations and spec, named and placed like the workload.
func PodOf(obj runtime.Object) (Pod, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return Pod{Source: source("pod", o.Name), Pod: o.DeepCopy()}, nil
	case *batchv1.Job:
		return fromTemplate("job", o.ObjectMeta, o.Spec.Template), nil
	case *batchv1.CronJob:
		return fromTemplate("cronjob", o.ObjectMeta, o.Spec.JobTemplate.Spec.Template), nil
	case *appsv1.Deployment:
		return fromTemplate("deployment", o.ObjectMeta, o.Spec.Template), nil
	case *appsv1.StatefulSet:
		return fromTemplate("statefulset", o.ObjectMeta, o.Spec.Template), nil
	case *appsv1.DaemonSet:
		return fromTemplate("daemonset", o.ObjectMeta, o.Spec.Template), nil
	case *appsv1.ReplicaSet:
		return fromTemplate("replicaset", o.ObjectMeta, o.Spec.Template), nil
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	return Pod{}, fmt.Errorf("%s %s has no pod template: want a Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet", gvk.Kind, gvk.GroupVersion())
}

func fromTemplate(kind string, meta metav1.ObjectMeta, t corev1.PodTemplateSpec) Pod {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: meta.Name, Namespace: meta.Namespace,
			Labels: t.Labels, Annotations: t.Annotations,
		},
		Spec: *t.Spec.DeepCopy(),
	}
	return Pod{Source: source(kind, meta.Name), Pod: pod}
}

func source(kind, name string) string {
	return kind + "/" + strings.TrimSpace(name)
}
