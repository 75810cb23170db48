package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceAccountToken mints a token for namespace/name with the TokenRequest API.
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	secs := int64(ttl / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	res, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return res.Status.Token, nil
}

// ServiceAccountConfig returns a rest.Config that authenticates as namespace/name with a
// fresh token (valid for ttl).
func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string, ttl time.Duration) (*rest.Config, error) {
	tok, err := c.ServiceAccountToken(ctx, namespace, name, ttl)
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{
		Host:            c.Admin.Host,
		BearerToken:     tok,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.Admin.CAData},
	}
	return cfg, nil
}

// WriteServiceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount namespace/name with a TokenRequest token valid for ttl.
func (c *Cluster) WriteServiceAccountKubeconfig(ctx context.Context, path, namespace, name string, ttl time.Duration) (*rest.Config, error) {
	cfg, err := c.ServiceAccountConfig(ctx, namespace, name, ttl)
	if err != nil {
		return nil, err
	}
	user := namespace + "-" + name
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: user, Namespace: namespace}
	kc.CurrentContext = user
	return cfg, writeKubeconfig(path, kc)
}

// WriteAdminKubeconfig writes a kubeconfig for the envtest admin (system:masters,
// client certificate).
func (c *Cluster) WriteAdminKubeconfig(path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: c.Admin.Host, CertificateAuthorityData: c.Admin.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.Admin.CertData, ClientKeyData: c.Admin.KeyData}
	kc.Contexts["admin"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "admin"
	return writeKubeconfig(path, kc)
}

func writeKubeconfig(path string, kc *clientcmdapi.Config) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// WhoAmI returns the user name the API server sees for cfg (SelfSubjectReview).
func WhoAmI(ctx context.Context, cfg *rest.Config) (string, []string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	res, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	return res.Status.UserInfo.Username, res.Status.UserInfo.Groups, nil
}
