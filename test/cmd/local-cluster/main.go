// Command local-cluster runs the test control plane (etcd and kube-apiserver) for
// trying sar-bridge by hand: it applies manifests/base (RBAC, ServiceAccount,
// ConfigMap; not the Deployment and Service) and manifests/examples, writes a
// kubeconfig for the bridge's ServiceAccount (sar-bridge/sar-bridge, TokenRequest
// token) and an admin kubeconfig into --dir, prints them, and runs until SIGINT or
// SIGTERM, then stops everything. With --bridge it also runs that sar-bridge binary
// against the cluster (arguments after -- are passed to it).
//
//	cd test && go run ./cmd/local-cluster --dir /tmp/sar-bridge-local [--bridge ../bin/sar-bridge [-- --log.level=debug]]
//
// Files written to --dir: admin.kubeconfig, sar-bridge.kubeconfig, policy-data.yaml
// (the data of manifests/base's ConfigMap), memcached-hmac.key (a fresh key for
// --memcached.hmac-key-file; with --bridge and memcached installed, the bridge shares
// reviews through a local memcached signed with it), env (shell assignments), and
// ready (created last, removed on exit; scripts can wait for it).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "local-cluster: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "directory for the kubeconfigs and the control plane's files (required)")
	root := flag.String("root", "", "repository root (default: found from the working directory, or $SAR_BRIDGE_ROOT)")
	binDir := flag.String("bin-dir", "", "directory with kube-apiserver and etcd (default: $SAR_BRIDGE_CONTROLPLANE_BIN, else what hack/controlplane.sh prints)")
	tokenTTL := flag.Duration("token-ttl", 24*time.Hour, "lifetime of the sar-bridge ServiceAccount token")
	bridge := flag.String("bridge", "", "sar-bridge binary to run against the cluster (default: none, only the control plane)")
	listen := flag.String("bridge.listen", "127.0.0.1:8080", "with --bridge: its --web.listen")
	internalListen := flag.String("bridge.internal-listen", "127.0.0.1:8081", "with --bridge: its --web.internal.listen")
	withMemcached := flag.Bool("memcached", true, "with --bridge: also run memcached (when installed) and share reviews through it, signed with a key generated into --dir")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: local-cluster --dir DIR [--bridge BINARY] [flags] [-- sar-bridge flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *dir == "" {
		flag.Usage()
		return errors.New("--dir is required")
	}
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(absDir, 0o755); err != nil {
		return err
	}
	readyFile := filepath.Join(absDir, "ready")
	_ = os.Remove(readyFile)
	if *root != "" {
		if err := os.Setenv(cluster.EnvRoot, *root); err != nil {
			return err
		}
	}
	repo, err := cluster.RepoRoot()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	bins := *binDir
	if bins == "" {
		if bins, err = cluster.ControlPlaneBinDir(ctx, repo, os.Stderr); err != nil {
			return err
		}
	}
	workDir := filepath.Join(absDir, "controlplane")
	_ = os.RemoveAll(workDir)
	fmt.Fprintf(os.Stderr, "local-cluster: starting etcd and kube-apiserver from %s\n", bins)
	c, err := cluster.Start(cluster.Options{BinDir: bins, WorkDir: workDir})
	if err != nil {
		return err
	}
	defer func() {
		_ = os.Remove(readyFile)
		fmt.Fprintln(os.Stderr, "local-cluster: stopping the control plane")
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "local-cluster: stop: %v\n", err)
		}
		_ = os.RemoveAll(workDir)
	}()

	base, err := c.ApplyDir(ctx, filepath.Join(repo, "manifests", "base"), cluster.SkipKinds("Deployment", "Service"))
	if err != nil {
		return err
	}
	examples, err := c.ApplyDir(ctx, filepath.Join(repo, "manifests", "examples"), nil)
	if err != nil {
		return err
	}

	adminPath := filepath.Join(absDir, "admin.kubeconfig")
	if err := c.WriteAdminKubeconfig(adminPath); err != nil {
		return err
	}
	bridgePath := filepath.Join(absDir, "sar-bridge.kubeconfig")
	if _, err := c.WriteServiceAccountKubeconfig(ctx, bridgePath, "sar-bridge", "sar-bridge", *tokenTTL); err != nil {
		return err
	}
	dataPath := filepath.Join(absDir, "policy-data.yaml")
	if err := writePolicyData(base, dataPath); err != nil {
		return err
	}
	keyPath := filepath.Join(absDir, "memcached-hmac.key")
	if err := writeHMACKey(keyPath); err != nil {
		return err
	}
	envPath := filepath.Join(absDir, "env")
	env := fmt.Sprintf("ADMIN_KUBECONFIG=%s\nSAR_BRIDGE_KUBECONFIG=%s\nSAR_BRIDGE_POLICY_DATA=%s\nKUBE_APISERVER=%s\nSAR_BRIDGE_MEMCACHED_HMAC_KEY_FILE=%s\n",
		shellQuote(adminPath), shellQuote(bridgePath), shellQuote(dataPath), shellQuote(c.Host()), shellQuote(keyPath))
	if err := os.WriteFile(envPath, []byte(env), 0o644); err != nil {
		return err
	}

	fmt.Printf("kube-apiserver:        %s\n", c.Host())
	fmt.Printf("admin kubeconfig:      %s\n", adminPath)
	fmt.Printf("sar-bridge kubeconfig: %s (ServiceAccount sar-bridge/sar-bridge)\n", bridgePath)
	fmt.Printf("policy data:           %s\n", dataPath)
	fmt.Printf("applied:               %s\n", describe(append(base, examples...)))
	bridgeArgs := []string{
		"--kubeconfig=" + bridgePath,
		"--openshift.mappings=team-a=interlink.io",
		"--policies.data=" + dataPath,
		"--web.listen=" + *listen,
		"--web.internal.listen=" + *internalListen,
	}
	if *bridge != "" && *withMemcached {
		// Shared reviews are signed: the bridge refuses memcached without a key.
		if mc, err := cluster.StartMemcached(filepath.Join(absDir, "memcached.log")); err != nil {
			fmt.Fprintf(os.Stderr, "local-cluster: no memcached (%v); the bridge caches in process only\n", err)
		} else {
			defer mc.Stop()
			fmt.Printf("memcached:             %s (values signed with %s)\n", mc.Addr, keyPath)
			bridgeArgs = append(bridgeArgs, "--memcached="+mc.Addr, "--memcached.hmac-key-file="+keyPath)
		}
	}
	bridgeArgs = append(bridgeArgs, flag.Args()...)
	addr := *listen
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	if *bridge == "" {
		fmt.Printf("run the bridge:\n  bin/sar-bridge %s\n", strings.Join(bridgeArgs, " "))
	}
	fmt.Printf("try:\n")
	for _, ex := range []struct{ what, op, sa string }{
		{"allowed (runner is bound in team-a)", "create", "runner"},
		{"denied (no RoleBinding for other)", "create", "other"},
	} {
		fmt.Printf("  # %s\n  curl -s http://%s%s -d '%s'\n", ex.what, addr, cluster.DecisionPath, examplePod(ex.op, ex.sa))
	}
	fmt.Printf("  # RBAC is plain kubectl:\n  kubectl --kubeconfig=%s -n team-a create rolebinding other --clusterrole=interlink-offloader --serviceaccount=team-a:other\n", adminPath)

	var bridgeDone chan error
	if *bridge != "" {
		cmd := exec.Command(*bridge, bridgeArgs...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		fmt.Printf("starting: %s %s\n", *bridge, strings.Join(bridgeArgs, " "))
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting %s: %w", *bridge, err)
		}
		bridgeDone = make(chan error, 1)
		go func() { bridgeDone <- cmd.Wait() }()
		defer func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-bridgeDone:
				case <-time.After(20 * time.Second):
					_ = cmd.Process.Kill()
					<-bridgeDone
				}
			}
		}()
	}
	fmt.Printf("running until SIGINT or SIGTERM\n")

	if err := os.WriteFile(readyFile, []byte(env), 0o644); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-bridgeDone:
		bridgeDone <- err // for the deferred stop
		return fmt.Errorf("sar-bridge exited: %v", err)
	}
}

// writeHMACKey writes a fresh memcached HMAC key, readable by its owner only.
func writeHMACKey(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	data := "# sar-bridge memcached HMAC keys, one per line: the first signs, all verify\n" + hex.EncodeToString(key) + "\n"
	return os.WriteFile(path, []byte(data), 0o600)
}

func examplePod(op, sa string) string {
	return fmt.Sprintf(`{"input":{"operation":%q,"pod":{"metadata":{"name":"job-1","namespace":"team-a"},"spec":{"serviceAccountName":%q,"containers":[{"name":"main","image":"busybox"}]}}}}`, op, sa)
}

// writePolicyData writes the data.yaml of the base's policy ConfigMap.
func writePolicyData(objs []*unstructured.Unstructured, path string) error {
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		if v, ok := data["data.yaml"]; ok {
			return os.WriteFile(path, []byte(v), 0o644)
		}
	}
	return errors.New("manifests/base has no ConfigMap with a data.yaml key")
}

func describe(objs []*unstructured.Unstructured) string {
	var names []string
	for _, o := range objs {
		n := o.GetKind() + " " + o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			n = o.GetKind() + " " + ns + "/" + o.GetName()
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
