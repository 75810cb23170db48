package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// PodReader reads pods from the API server itself, not from an informer: who wrote a
// pod's annotations (its managedFields) must be read as stored now, and the Virtual
// Kubelet patches a pod just before it sends it on, sooner than a watch may deliver it.
type PodReader struct {
	client  kubernetes.Interface
	backoff wait.Backoff
}

// NewPodReader returns a PodReader that GETs pods with client, retrying transient
// failures with backoff.
func NewPodReader(client kubernetes.Interface, backoff wait.Backoff) *PodReader {
	return &PodReader{client: client, backoff: backoff}
}

// Pod returns the pod namespace/name, or nil with no error when there is none.
func (r *PodReader) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod, err := withRetries(ctx, r.backoff, func(ctx context.Context) (*corev1.Pod, error) {
		return r.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	return pod, nil
}
