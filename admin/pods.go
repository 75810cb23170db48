// Package admin holds the logic of the administrators' commands: `sar-bridge check`
// (the whole decision as a dry run against the live cluster) and `sar-bridge who-can`
// (who may offload where, from RBAC, each subject confirmed by a SubjectAccessReview).
// Like the other front doors it only translates: the decision itself is the
// authorizer's.
package admin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Pod is a pod to decide and the object it was read from ("job/pi").
type Pod struct {
	Source string
	Pod    *corev1.Pod
}

// strictDecoder refuses unknown and duplicate fields, as the API server does by
// default: a field a manifest misspells must not be judged as absent.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// ReadPods reads every document of r (YAML or JSON, "---"-separated, v1 Lists
// included) and returns the pod each one runs. namespace is used for objects that
// name none; an object naming another one is an error, as with kubectl -n.
// explicitNamespace says whether namespace came from the command line.
func ReadPods(r io.Reader, namespace string, explicitNamespace bool) ([]Pod, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var pods []Pod
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if isEmptyDocument(doc) {
			continue
		}
		got, err := podsOf(doc, namespace, explicitNamespace)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		pods = append(pods, got...)
	}
	if len(pods) == 0 {
		return nil, errors.New("no objects found")
	}
	return pods, nil
}

// isEmptyDocument is true for a document of only comments and blank lines.
func isEmptyDocument(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

func podsOf(doc []byte, namespace string, explicitNamespace bool) ([]Pod, error) {
	obj, _, err := strictDecoder.Decode(doc, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if list, ok := obj.(*corev1.List); ok {
		var pods []Pod
		for j, item := range list.Items {
			got, err := podsOf(item.Raw, namespace, explicitNamespace)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", j, err)
			}
			pods = append(pods, got...)
		}
		return pods, nil
	}
	p, err := PodOf(obj)
	if err != nil {
		return nil, err
	}
	switch ns := p.Pod.Namespace; {
	case ns == "":
		p.Pod.Namespace = namespace
	case explicitNamespace && ns != namespace:
		return nil, fmt.Errorf("%s: the namespace from the object (%q) does not match --namespace %q", p.Source, ns, namespace)
	}
	return []Pod{p}, nil
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
