package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sar-bridge/sar-bridge/internal/admission"
	"github.com/sar-bridge/sar-bridge/internal/interlink"
)

// admissionConfig configures the admission webhooks (--admission.*), served on the
// public listener when it has TLS.
type admissionConfig struct {
	identity          string
	nodeSelector      string
	taintKey          string
	decisionPath      string
	timeout           time.Duration
	insecureAnyCaller bool
	vkUsers, vkGroups []string

	// Parsed by validate.
	targets admission.Targets
}

func (c *admissionConfig) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.identity, "admission.identity", string(admission.IdentityRequester), "Whose rights the admission webhooks review: requester (the API server's userInfo, uid and extra included; the scheduler and kube-system's controllers act for the pod's service account) or serviceaccount (always the pod's service account, as the Data API). Workloads (Jobs, Deployments, ...) are decided the same way, as the pod their template makes.")
	fs.StringVar(&c.nodeSelector, "admission.node-selector", admission.DefaultNodeSelector, "Label selector of the virtual nodes: pods bound, pinned (spec.nodeName) or selected (nodeSelector, required node affinity) onto them, and workloads whose pod template is, are decided by the admission webhooks.")
	fs.StringVar(&c.taintKey, "admission.taint-key", admission.DefaultTaintKey, "Key of the virtual nodes' taint: pods (and workloads' pod templates) that tolerate it (or every taint) are decided by the admission webhooks.")
	fs.StringVar(&c.decisionPath, "admission.decision-path", interlink.DefaultDecisionPath, "Policy document the admission webhooks decide with (as in /v1/data/<path>).")
	fs.DurationVar(&c.timeout, "admission.timeout", 8*time.Second, "Deadline of one admission decision; keep it below the webhooks' timeoutSeconds. Past it the webhook call fails and failurePolicy decides.")
	fs.StringArrayVar(&c.vkUsers, "admission.vk-users", nil, "Usernames of interLink's Virtual Kubelet (repeatable, one exact name each, no wildcards; interLink's chart runs it as system:serviceaccount:<namespace>:<nodeName>). "+
		"A pod UPDATE that adds or changes slurm-job.vk.io/pre-exec or interlink.eu/wstunnel-client-commands (shell on the HPC side, which the VK writes for its mesh networking) is allowed for them without a decision; anyone else's is decided as a create of the pod so changed, so only subjects data.interlink.restricted_annotations opens the key to (and who may offload the pod) may make it. "+
		"This trusts them to write shell into every pod the webhooks judge; the relay then believes what is written under --interlink.vk-field-managers. Empty: the Virtual Kubelet's own patches are refused unless the policy opens the keys to it (and it may offload the pod).")
	fs.StringArrayVar(&c.vkGroups, "admission.vk-groups", nil, "Groups whose members are trusted as --admission.vk-users are (repeatable, exact names). Every member may write shell into every pod the webhooks judge: name a group that holds the Virtual Kubelet alone. "+
		"system:authenticated, system:unauthenticated and system:serviceaccounts are refused.")
	fs.BoolVar(&c.insecureAnyCaller, "admission.insecure-allow-any-caller", false, "Serve /admission/* to callers that do not authenticate (the API server sends no credentials unless its AdmissionConfiguration gives it a kubeconfig for the webhook). An AdmissionReview names any user, so anyone who reaches the port learns RBAC answers for any user.")
}

// validate checks the flags.
func (c *admissionConfig) validate() error {
	if _, err := admission.ParseIdentity(c.identity); err != nil {
		return fmt.Errorf("--admission.identity: %w", err)
	}
	var err error
	if c.targets, err = admission.NewTargets(c.nodeSelector, c.taintKey); err != nil {
		return fmt.Errorf("--admission.node-selector/--admission.taint-key: %w", err)
	}
	p := strings.Trim(c.decisionPath, "/")
	switch {
	case p == "" || strings.Contains(p, "//"):
		return fmt.Errorf("--admission.decision-path %q is not a document path", c.decisionPath)
	case c.timeout <= 0:
		return errors.New("--admission.timeout must be positive")
	}
	return c.vk().Validate()
}

// vk are the Virtual Kubelet's identities the flags name.
func (c *admissionConfig) vk() admission.VKIdentities {
	return admission.VKIdentities{Users: c.vkUsers, Groups: c.vkGroups}
}

// admissionHandler returns the webhooks for the public listener, wrapped with caller
// authentication unless --admission.insecure-allow-any-caller; nil when the public
// listener has no TLS (the API server calls webhooks over HTTPS only).
func admissionHandler(o serveOptions, decider admission.Decider, view nodeView, client kubernetes.Interface, tlsOn bool,
	authenticate func(http.Handler) http.Handler, reg prometheus.Registerer, logger log.Logger) (http.Handler, error) {
	c := o.admission
	if !tlsOn {
		level.Info(logger).Log("msg", "admission webhooks not served: the public listener has no TLS (--tls.server.cert-file)")
		return nil, nil
	}
	h, err := admission.New(decider, &admissionCluster{view: view, client: client}, admission.Options{
		DecisionPath: strings.Split(strings.Trim(c.decisionPath, "/"), "/"),
		Identity:     admission.Identity(c.identity),
		Targets:      c.targets,
		MaxBodyBytes: admission.DefaultMaxBodyBytes,
		Timeout:      c.timeout,
		VK:           c.vk(),
		Logger:       logger,
		Registerer:   reg,
	})
	if err != nil {
		return nil, err
	}
	level.Info(logger).Log("msg", "admission webhooks", "paths", admission.ValidatePath+","+admission.MutatePath, "identity", c.identity,
		"node_selector", c.nodeSelector, "taint_key", c.taintKey, "any_caller", c.insecureAnyCaller || authenticate == nil,
		"vk_users", strings.Join(c.vkUsers, ","), "vk_groups", strings.Join(c.vkGroups, ","))
	if authenticate == nil || c.insecureAnyCaller {
		return h, nil
	}
	return authenticate(h), nil
}

// nodeView is the informer cache of nodes (kube.ClusterView).
type nodeView interface {
	Node(name string) (*corev1.Node, bool)
}

// admissionCluster reads nodes from the informer cache, asking the API for a node it
// does not hold yet (just registered), and bound pods from the API.
type admissionCluster struct {
	view   nodeView
	client kubernetes.Interface
}

func (c *admissionCluster) Node(ctx context.Context, name string) (*corev1.Node, error) {
	if n, ok := c.view.Node(name); ok {
		return n, nil
	}
	n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return n, err
}

func (c *admissionCluster) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := c.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return p, err
}
