package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// EnvHelm and EnvKubectl point at helm and kubectl; when unset, hack/helm.sh builds both
// once into the cache (from the Go module proxy, at pinned versions) and prints helm's
// path, kubectl being beside it.
const (
	EnvHelm    = "SAR_BRIDGE_HELM"
	EnvKubectl = "SAR_BRIDGE_KUBECTL"
)

// KubectlBinary returns $SAR_BRIDGE_KUBECTL, or the kubectl hack/helm.sh builds beside
// helm (the machine's own kubectl is not used: its version is unknown).
func KubectlBinary(ctx context.Context, root string) (string, error) {
	if p := os.Getenv(EnvKubectl); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", EnvKubectl, err)
		}
		return filepath.Abs(p)
	}
	helm, err := HelmBinary(ctx, root)
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(helm), "kubectl")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kubectl beside helm (run hack/helm.sh): %w", err)
	}
	return p, nil
}

// HelmBinary returns the path of helm: $SAR_BRIDGE_HELM or what hack/helm.sh prints.
func HelmBinary(ctx context.Context, root string) (string, error) {
	if p := os.Getenv(EnvHelm); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", EnvHelm, err)
		}
		return filepath.Abs(p)
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "helm.sh"))
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/helm.sh: %w\n%s", err, errb.String())
	}
	p := strings.TrimSpace(out.String())
	if p == "" {
		return "", errors.New("hack/helm.sh printed no path")
	}
	return p, nil
}

// Helm runs helm with args and an empty, private home (no repositories, no plugins, no
// kubeconfig), so only the chart on disk and the flags decide the output.
type Helm struct {
	Binary string
	Home   string
}

// Run returns helm's stdout, or an error holding its stderr.
func (h *Helm) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, h.Binary, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.Home, "data"),
		// template and lint must never reach a cluster: lookup then returns nothing.
		"KUBECONFIG="+filepath.Join(h.Home, "no-kubeconfig"),
	)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// Template renders chart as release in namespace with the values files and --set-string
// pairs given in extra, and parses the objects.
func (h *Helm) Template(ctx context.Context, chart, release, namespace string, extra ...string) ([]*unstructured.Unstructured, error) {
	args := append([]string{"template", release, chart, "--namespace", namespace}, extra...)
	out, err := h.Run(ctx, args...)
	if err != nil {
		return nil, err
	}
	return ParseYAML(out)
}
