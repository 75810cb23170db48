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

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sar-bridge/sar-bridge/internal/workload"
)

// Pod is a pod to decide and the object it was read from ("job/pi"); package workload
// makes it, as it does for the admission webhook.
type Pod = workload.Pod

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
	obj, err := workload.Decode(doc, nil)
	if err != nil {
		return nil, err
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
	p, err := workload.PodOf(obj)
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
