// Package kube connects to the Kubernetes API: client set-up, SubjectAccessReviews and an
// informer-backed view of the namespaces and nodes that decisions read.
package kube

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientOptions configures the connection to the Kubernetes API.
type ClientOptions struct {
	Kubeconfig string // empty: in-cluster configuration
	QPS        float32
	Burst      int
	UserAgent  string
}

// NewClient builds a clientset from a kubeconfig file, or from the in-cluster service
// account when no file is given.
func NewClient(opts ClientOptions) (kubernetes.Interface, error) {
	var (
		cfg *rest.Config
		err error
	)
	if opts.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading Kubernetes client configuration (kubeconfig %q): %w", opts.Kubeconfig, err)
	}
	if opts.QPS > 0 {
		cfg.QPS = opts.QPS
	}
	if opts.Burst > 0 {
		cfg.Burst = opts.Burst
	}
	if opts.UserAgent != "" {
		cfg.UserAgent = opts.UserAgent
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	return client, nil
}

// SubjectAccessReviewer asks the Kubernetes API whether a subject may do something.
type SubjectAccessReviewer struct {
	client kubernetes.Interface
}

// NewSubjectAccessReviewer returns a reviewer that sends SubjectAccessReviews with client.
func NewSubjectAccessReviewer(client kubernetes.Interface) *SubjectAccessReviewer {
	return &SubjectAccessReviewer{client: client}
}

// Review sends one SubjectAccessReview and returns the API's verdict.
func (r *SubjectAccessReviewer) Review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: spec}
	got, err := r.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, err
	}
	return got.Status, nil
}

// CheckReachable asks the API server's /readyz, which every authenticated client may
// read, so readiness reflects whether reviews can be answered.
func CheckReachable(ctx context.Context, client kubernetes.Interface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("kubernetes API /readyz: %w (%s)", err, truncate(string(body), 200))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
