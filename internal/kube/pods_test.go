package kube

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestPodReader(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	unavailable := apierrors.NewServiceUnavailable("etcd leader changed")
	forbidden := apierrors.NewForbidden(pods, "p1", errors.New("no"))
	tests := []struct {
		name      string
		failures  []error // returned by the first GETs, in order
		wantCalls int
		wantPod   bool
		wantErr   string
	}{
		{name: "found", wantCalls: 1, wantPod: true},
		{name: "not found is no pod and no error", failures: []error{apierrors.NewNotFound(pods, "p1")}, wantCalls: 1},
		{name: "transient errors are retried", failures: []error{unavailable, unavailable}, wantCalls: 3, wantPod: true},
		{name: "a refusal is an error at once", failures: []error{forbidden}, wantCalls: 1, wantErr: `reading pod team-a/p1: pods "p1" is forbidden: no`},
		{name: "retries run out with the last error", failures: []error{unavailable, unavailable, unavailable, unavailable}, wantCalls: 4,
			wantErr: "reading pod team-a/p1: etcd leader changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "team-a", UID: "u1"}})
			calls := 0
			client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= len(tt.failures) {
					return true, nil, tt.failures[calls-1]
				}
				return false, nil, nil // the fake's tracker answers
			})
			pod, err := NewPodReader(client, fastBackoff).Pod(context.Background(), "team-a", "p1")
			if calls != tt.wantCalls {
				t.Errorf("GETs = %d, want %d", calls, tt.wantCalls)
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || (pod != nil) != tt.wantPod || pod != nil && pod.UID != "u1" {
				t.Fatalf("Pod = %v, %v; want a pod: %v", pod, err, tt.wantPod)
			}
		})
	}
}
