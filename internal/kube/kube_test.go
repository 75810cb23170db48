package kube

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var fastBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}

func TestSubjectAccessReviewerRetries(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("etcd leader changed")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("no"))
	tests := []struct {
		name      string
		failures  []error // returned by the first calls, in order
		wantCalls int
		wantErr   error
		wantAllow bool
	}{
		{name: "answer at once", wantCalls: 1, wantAllow: true},
		{name: "transient errors are retried", failures: []error{unavailable, apierrors.NewTooManyRequests("slow down", 1)}, wantCalls: 3, wantAllow: true},
		{name: "a refusal is not retried", failures: []error{forbidden}, wantCalls: 1, wantErr: forbidden},
		{name: "retries run out with the last error", failures: []error{unavailable, unavailable, unavailable, unavailable, unavailable}, wantCalls: 4, wantErr: unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			calls := 0
			client.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= len(tt.failures) {
					return true, nil, tt.failures[calls-1]
				}
				return true, &authorizationv1.SubjectAccessReview{Status: authorizationv1.SubjectAccessReviewStatus{Allowed: true}}, nil
			})
			status, err := NewSubjectAccessReviewer(client, fastBackoff).Review(context.Background(), authorizationv1.SubjectAccessReviewSpec{User: "alice"})
			if calls != tt.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tt.wantCalls)
			}
			if tt.wantErr != nil {
				if err == nil || err.Error() != tt.wantErr.Error() {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || status.Allowed != tt.wantAllow {
				t.Fatalf("Review = %+v, %v", status, err)
			}
		})
	}
}

func TestClusterView(t *testing.T) {
	client := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"interlink.io/tenant": "t"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vk-1"}},
	)
	view := NewClusterView(client, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view.Start(ctx)
	if !view.WaitForSync(ctx) || !view.Synced() {
		t.Fatal("not synced")
	}
	names, err := view.NamespaceNames()
	if err != nil || !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("NamespaceNames = %v, %v", names, err)
	}
	if ns, err := view.Namespace(ctx, "b"); err != nil || ns.Labels["interlink.io/tenant"] != "t" {
		t.Errorf("Namespace(b) = %v, %v", ns, err)
	}
	if _, err := view.Namespace(ctx, "ghost"); !errors.Is(err, ErrNamespaceNotFound) {
		t.Errorf("Namespace(ghost) err = %v, want ErrNamespaceNotFound", err)
	}
	if _, ok := view.Node("vk-1"); !ok {
		t.Error("Node(vk-1) not found")
	}
	if _, ok := view.Node("vk-2"); ok {
		t.Error("Node(vk-2) found")
	}
	// A namespace the informer has not seen yet is read live, so a new tenant's label
	// is never missed.
	client.PrependReactor("get", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "fresh" {
			return true, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh", Labels: map[string]string{"interlink.io/tenant": "new"}}}, nil
		}
		return false, nil, nil
	})
	if ns, err := view.Namespace(ctx, "fresh"); err != nil || ns.Labels["interlink.io/tenant"] != "new" {
		t.Errorf("Namespace(fresh) = %v, %v; want the live read", ns, err)
	}
}
