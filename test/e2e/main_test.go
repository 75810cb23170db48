// Package e2e runs sar-bridge against a real kube-apiserver (envtest) and checks its
// decisions over HTTP.
//
//	cd test && go test ./e2e/ -count=1 -timeout 30m -v
//
// Environment: SAR_BRIDGE_E2E=0 skips the suite; SAR_BRIDGE_BINARY uses a prebuilt
// binary (otherwise it is built into test/bin/sar-bridge); SAR_BRIDGE_CONTROLPLANE_BIN
// (or KUBEBUILDER_ASSETS) points at kube-apiserver and etcd (otherwise
// hack/controlplane.sh builds or finds them); SAR_BRIDGE_POLICIES passes a --policies
// directory (default: none, the embedded policy); SAR_BRIDGE_OPA and SAR_BRIDGE_REGISTRY
// point at the opa CLI and the CNCF distribution registry of the OPA bundle tests
// (otherwise hack/opa.sh and hack/registry.sh build them on first use);
// SAR_BRIDGE_E2E_KEEP=1 keeps the work directory with every log.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// suite is the state TestMain sets up once.
var suite struct {
	root       string
	binary     string
	workDir    string
	cluster    *cluster.Cluster
	kubeconfig string // the bridge's identity: ServiceAccount sar-bridge/sar-bridge
	dataFile   string // --policies.data
	policyDir  string // --policies ("" when not passed)
	bridge     *cluster.Bridge
}

// Tenant mappings shared by the bridges of this suite. There is no `*` fallback, so the
// tenants "orphan" and "ghost" are unmapped.
var baseMappings = []string{
	"--openshift.mappings=team-a=interlink.io",
	"--openshift.mappings=tenant-b=tenant-b.interlink.io",
}

// policyData becomes Rego's data.
const policyData = `{
  "interlink": {
    "default_limits": {"cpu": "1", "memory": "1Gi"},
    "limits": {
      "system:serviceaccounts:team-a": {"cpu": "2", "memory": "4Gi"}
    },
    "protected_taints": [
      {"key": "hpc.example/gpu", "value": "a100", "allowed_users": [], "allowed_groups": ["system:serviceaccounts:team-a"]}
    ]
  }
}
`

// fixtures are applied on top of manifests/base and manifests/examples.
const fixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: project-b
  labels:
    interlink.io/tenant: tenant-b
---
apiVersion: v1
kind: Namespace
metadata:
  name: orphan
---
apiVersion: v1
kind: Namespace
metadata:
  name: ghost-ns
  labels:
    interlink.io/tenant: ghost
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: tenant-b-offloader
rules:
  - apiGroups: ["tenant-b.interlink.io"]
    resources: ["pods"]
    verbs: ["create", "delete", "get"]
  - apiGroups: ["tenant-b.interlink.io"]
    resources: ["nodes"]
    verbs: ["use"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: project-b
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenant-b-offloader}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: project-b}
---
# Bound on interlink.io, which is not project-b's group.
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: wrong-group
  namespace: project-b
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: legacy, namespace: project-b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-deleter
  namespace: team-a
rules:
  - apiGroups: ["interlink.io"]
    resources: ["pods"]
    verbs: ["delete"]
    resourceNames: ["job-1"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: cleaner
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-deleter}
subjects:
  - {kind: ServiceAccount, name: cleaner, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-reader
  namespace: team-a
rules:
  - apiGroups: ["interlink.io"]
    resources: ["pods"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: watcher
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
  - {kind: ServiceAccount, name: watcher, namespace: team-a}
---
# create restricted to a resource name: create reviews carry no name, so never matches.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: named-creator
  namespace: team-a
rules:
  - apiGroups: ["interlink.io"]
    resources: ["pods"]
    verbs: ["create"]
    resourceNames: ["job-1"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: named
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: named-creator}
subjects:
  - {kind: ServiceAccount, name: named, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-creator
  namespace: team-a
rules:
  - apiGroups: ["interlink.io"]
    resources: ["pods"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: vk-1-user
  namespace: team-a
rules:
  - apiGroups: ["interlink.io"]
    resources: ["nodes"]
    verbs: ["use"]
    resourceNames: ["vk-1"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: pinned-pods
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-creator}
subjects:
  - {kind: ServiceAccount, name: pinned, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: pinned-vk-1
  namespace: team-a
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: vk-1-user}
subjects:
  - {kind: ServiceAccount, name: pinned, namespace: team-a}
---
apiVersion: v1
kind: Node
metadata:
  name: vk-1
  labels:
    type: virtual-kubelet
---
apiVersion: v1
kind: Node
metadata:
  name: vk-2
  labels:
    type: virtual-kubelet
---
apiVersion: v1
kind: Node
metadata:
  name: vk-b
  labels:
    type: virtual-kubelet
    interlink.io/tenant: tenant-b
`

// access lists (user, attributes) pairs the fixtures grant, awaited before the tests
// start so the API server's RBAC informer has caught up.
var access = []struct {
	ns, sa string
	attrs  authorizationv1.ResourceAttributes
}{
	{"team-a", "runner", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}},
	{"project-b", "runner", authorizationv1.ResourceAttributes{Namespace: "project-b", Verb: "create", Group: "tenant-b.interlink.io", Resource: "pods"}},
	{"project-b", "legacy", authorizationv1.ResourceAttributes{Namespace: "project-b", Verb: "create", Group: "interlink.io", Resource: "pods"}},
	{"team-a", "cleaner", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "delete", Group: "interlink.io", Resource: "pods", Name: "job-1"}},
	{"team-a", "watcher", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Group: "interlink.io", Resource: "pods"}},
	{"team-a", "named", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods", Name: "job-1"}},
	{"team-a", "pinned", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "interlink.io", Resource: "pods"}},
	{"team-a", "pinned", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "use", Group: "interlink.io", Resource: "nodes", Name: "vk-1"}},
}

func TestMain(m *testing.M) {
	if os.Getenv("SAR_BRIDGE_E2E") == "0" {
		fmt.Println("SAR_BRIDGE_E2E=0: skipping the sar-bridge end-to-end suite")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	start := time.Now()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "e2e setup: "+format+"\n", args...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	var err error
	if suite.root, err = cluster.RepoRoot(); err != nil {
		return fail("%v", err)
	}
	if suite.workDir, err = os.MkdirTemp("", "sar-bridge-e2e-"); err != nil {
		return fail("%v", err)
	}
	defer func() {
		if code != 0 || os.Getenv("SAR_BRIDGE_E2E_KEEP") == "1" {
			fmt.Fprintf(os.Stderr, "e2e: logs kept in %s\n", suite.workDir)
			return
		}
		_ = os.RemoveAll(suite.workDir)
	}()

	// The sar-bridge binary and the control plane binaries.
	type built struct {
		path string
		err  error
	}
	binCh := make(chan built, 1)
	go func() {
		p, err := cluster.BuildBridge(ctx, suite.root)
		binCh <- built{p, err}
	}()
	binDir, err := cluster.ControlPlaneBinDir(ctx, suite.root, os.Stderr)
	if err != nil {
		return fail("control plane binaries: %v", err)
	}
	fmt.Fprintf(os.Stderr, "e2e: control plane binaries in %s (%s)\n", binDir, time.Since(start).Round(time.Millisecond))

	c, err := cluster.Start(cluster.Options{BinDir: binDir, WorkDir: filepath.Join(suite.workDir, "cluster")})
	if err != nil {
		return fail("%v", err)
	}
	suite.cluster = c
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: stopping the control plane: %v\n", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "e2e: control plane up at %s (%s)\n", c.Host(), time.Since(start).Round(time.Millisecond))

	// manifests/base without the workload (the bridge runs as a local process here),
	// manifests/examples, then the suite's own fixtures.
	if _, err := c.ApplyDir(ctx, filepath.Join(suite.root, "manifests", "base"), cluster.SkipKinds("Deployment", "Service")); err != nil {
		return fail("%v", err)
	}
	if _, err := c.ApplyDir(ctx, filepath.Join(suite.root, "manifests", "examples"), nil); err != nil {
		return fail("%v", err)
	}
	if _, err := c.ApplyYAML(ctx, fixtures); err != nil {
		return fail("fixtures: %v", err)
	}
	for _, a := range access {
		user := cluster.ServiceAccountUser(a.ns, a.sa)
		if err := c.WaitForAccess(ctx, user, cluster.ServiceAccountGroups(a.ns), a.attrs, true, 30*time.Second); err != nil {
			return fail("%v", err)
		}
	}

	// The bridge's identity: the base ServiceAccount with exactly the base ClusterRole.
	suite.kubeconfig = filepath.Join(suite.workDir, "sar-bridge.kubeconfig")
	if _, err := c.WriteServiceAccountKubeconfig(ctx, suite.kubeconfig, "sar-bridge", "sar-bridge", 2*time.Hour); err != nil {
		return fail("%v", err)
	}
	suite.dataFile = filepath.Join(suite.workDir, "policy-data.json")
	if err := os.WriteFile(suite.dataFile, []byte(policyData), 0o644); err != nil {
		return fail("%v", err)
	}
	suite.policyDir = policyDir(suite.root)

	b := <-binCh
	if b.err != nil {
		return fail("%v", b.err)
	}
	suite.binary = b.path
	fmt.Fprintf(os.Stderr, "e2e: sar-bridge binary %s; setup took %s\n", suite.binary, time.Since(start).Round(time.Millisecond))

	// The shared bridge, for the cases that need no special flags.
	suite.bridge, err = startBridge("shared", baseArgs()...)
	if err != nil {
		if suite.bridge != nil {
			fmt.Fprintf(os.Stderr, "--- sar-bridge log ---\n%s\n", suite.bridge.Log())
		}
		return fail("%v", err)
	}
	defer suite.bridge.Stop()

	code = m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- shared sar-bridge log (tail) ---\n%s\n", tail(suite.bridge.Log(), 200))
	}
	fmt.Fprintf(os.Stderr, "e2e: total %s\n", time.Since(start).Round(time.Millisecond))
	return code
}

// policyDir is $SAR_BRIDGE_POLICIES: a directory of .rego files passed with --policies.
// By default no --policies flag is given and the binary's embedded policy is used.
func policyDir(string) string {
	return os.Getenv("SAR_BRIDGE_POLICIES")
}

// baseArgs are the flags every bridge of the suite gets, followed by extra.
func baseArgs(extra ...string) []string {
	args := append([]string{}, baseMappings...)
	args = append(args, "--policies.data="+suite.dataFile, "--log.level=debug")
	if suite.policyDir != "" {
		args = append(args, "--policies="+suite.policyDir)
	}
	return append(args, extra...)
}

var bridgeSeq int

func startBridge(name string, args ...string) (*cluster.Bridge, error) {
	bridgeSeq++
	return cluster.StartBridge(cluster.BridgeOptions{
		Binary:     suite.binary,
		Kubeconfig: suite.kubeconfig,
		Args:       args,
		LogPath:    filepath.Join(suite.workDir, fmt.Sprintf("bridge-%02d-%s.log", bridgeSeq, name)),
	})
}

// newBridge starts a bridge for one test with baseArgs(extra...), stops it at the end,
// and prints its log if the test failed.
func newBridge(t *testing.T, extra ...string) *cluster.Bridge {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	b, err := startBridge(name, baseArgs(extra...)...)
	stopAtCleanup(t, b)
	if err != nil {
		t.Fatalf("starting sar-bridge: %v", err)
	}
	return b
}

// stopAtCleanup stops b when the test ends and prints the tail of its log if the test
// failed; b may be nil (it did not start).
func stopAtCleanup(t *testing.T, b *cluster.Bridge) {
	t.Helper()
	if b == nil {
		return
	}
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("--- sar-bridge log %s ---\n%s", b.LogPath, tail(b.Log(), 300))
		}
	})
}

// shared returns the suite's shared bridge and prints the tail of its log if the test
// fails.
func shared(t *testing.T) *cluster.Bridge {
	t.Helper()
	if suite.bridge.Exited() {
		t.Fatalf("the shared sar-bridge has exited; log:\n%s", tail(suite.bridge.Log(), 200))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- shared sar-bridge log (tail) %s ---\n%s", suite.bridge.LogPath, tail(suite.bridge.Log(), 60))
		}
	})
	return suite.bridge
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return fmt.Sprintf("... (%d lines before)\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}
