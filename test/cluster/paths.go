// Package cluster runs the test control plane (etcd and kube-apiserver through
// controller-runtime's envtest), applies the project's kustomize manifests to it,
// mints ServiceAccount kubeconfigs, and drives the sar-bridge binary as a
// subprocess over HTTP.
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
)

// Environment variables understood by this package.
const (
	// EnvRoot overrides the repository root (the directory holding hack/controlplane.sh).
	EnvRoot = "SAR_BRIDGE_ROOT"
	// EnvControlPlaneBin points at a directory holding kube-apiserver and etcd; when
	// unset, hack/controlplane.sh is run to build (or find) them.
	EnvControlPlaneBin = "SAR_BRIDGE_CONTROLPLANE_BIN"
	// EnvBinary points at a prebuilt sar-bridge binary; when unset it is built from the
	// repository root into test/bin/sar-bridge.
	EnvBinary = "SAR_BRIDGE_BINARY"
)

// RepoRoot returns the repository root: $SAR_BRIDGE_ROOT, or the first parent of the
// working directory that holds hack/controlplane.sh.
func RepoRoot() (string, error) {
	if r := os.Getenv(EnvRoot); r != "" {
		return filepath.Abs(r)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "controlplane.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (no hack/controlplane.sh above the working directory); set " + EnvRoot)
		}
		dir = parent
	}
}

// ControlPlaneBinDir returns a directory holding the kube-apiserver and etcd binaries.
// It honours $SAR_BRIDGE_CONTROLPLANE_BIN, then $KUBEBUILDER_ASSETS, and otherwise runs
// hack/controlplane.sh (which builds the binaries once, under a lock, and prints the
// directory). The script's progress goes to logw.
func ControlPlaneBinDir(ctx context.Context, root string, logw *os.File) (string, error) {
	for _, env := range []string{EnvControlPlaneBin, "KUBEBUILDER_ASSETS"} {
		if dir := os.Getenv(env); dir != "" {
			return dir, checkBinaries(dir)
		}
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "controlplane.sh"))
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	if logw != nil {
		cmd.Stderr = logw
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/controlplane.sh: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", errors.New("hack/controlplane.sh printed no directory")
	}
	return dir, checkBinaries(dir)
}

func checkBinaries(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("control plane binary missing: %w (run hack/controlplane.sh)", err)
		}
		if st.Mode()&0o111 == 0 {
			return fmt.Errorf("control plane binary %s is not executable", p)
		}
	}
	return nil
}

// BuildBridge returns the path of the sar-bridge binary: $SAR_BRIDGE_BINARY if set,
// otherwise it runs `go build -o test/bin/sar-bridge .` in the repository root.
func BuildBridge(ctx context.Context, root string) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("%s: %w", EnvBinary, err)
		}
		return abs, nil
	}
	out := filepath.Join(root, "test", "bin", "sar-bridge")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building sar-bridge (go build -o %s . in %s): %w\n%s", out, root, err, b)
	}
	return out, nil
}
