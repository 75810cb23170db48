package e2e

// One assembly (issue 40): the server and `sar-bridge check` build their decision core
// from the same flags, so they decide every pod alike, whatever the flags bring in:
// tenants from the flags, a mappings file and OffloadTenants; site rules reading the
// cluster with k8s.get and with the opa-kubernetes-api-client functions; a signed OPA
// bundle; a tenant with a quota (which check reads and never charges). who-can names
// the tenants and groups the server does.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const asmFixtures = `
apiVersion: v1
kind: Node
metadata:
  name: asm-vk
  labels: {virtual-node.interlink/type: virtual-kubelet}
---
apiVersion: sar-bridge.io/v1alpha1
kind: OffloadTenant
metadata: {name: asm-object}
spec: {group: interlink.io}
---
apiVersion: sar-bridge.io/v1alpha1
kind: OffloadTenant
metadata: {name: asm-quota}
spec: {group: interlink.io, hard: {pods: "1"}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: offload-freeze, namespace: asm-object}
data: {frozen: "frozen by the site"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: offload-denylist, namespace: asm-file}
data: {banned: "on the site's denylist"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: sar-bridge-asm-e2e}
rules:
  - {apiGroups: [""], resources: ["configmaps"], verbs: ["list", "watch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sar-bridge-asm-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sar-bridge-asm-e2e}
subjects:
  - {kind: ServiceAccount, name: sar-bridge, namespace: sar-bridge}
`

// asmSiteRules are a site's rules that read the cluster: one with the k8s.get built-in,
// one with the kubernetes.api.client functions of opa-kubernetes-api-client.
var asmSiteRules = map[string]string{
	"freeze.rego": `package interlink.site.freeze

violations contains msg if {
	cm := k8s.get("configmaps", input.pod.metadata.namespace, "offload-freeze")
	why := cm.data[input.pod.metadata.name]
	msg := sprintf("pod %s: %s", [input.pod.metadata.name, why])
}
`,
	"denylist.rego": `package interlink.site.denylist

import data.kubernetes.api.client

violations contains msg if {
	answer := client.query_name_ns("configmaps", "offload-denylist", input.pod.metadata.namespace)
	answer.status_code == 200
	why := answer.body.data[input.pod.metadata.name]
	msg := sprintf("pod %s: %s", [input.pod.metadata.name, why])
}
`,
}

func TestOneAssembly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := testWorkDir(t)
	for _, ns := range []string{"asm-flags", "asm-file", "asm-object", "asm-quota"} {
		if _, err := suite.cluster.ApplyYAML(ctx, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: runner, namespace: %[1]s}\n", ns)); err != nil {
			t.Fatal(err)
		}
		bindOffloader(t, ns, "runner")
	}
	objs, err := suite.cluster.ApplyYAML(ctx, asmFixtures)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), objs) })
	watch := authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps"}
	if err := suite.cluster.WaitForAccess(ctx, sa("sar-bridge", "sar-bridge"), cluster.ServiceAccountGroups("sar-bridge"), watch, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"asm-flags", "asm-file", "asm-object", "asm-quota"} {
		attrs := authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "interlink.io", Resource: "pods"}
		if err := suite.cluster.WaitForAccess(ctx, sa(ns, "runner"), cluster.ServiceAccountGroups(ns), attrs, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// The flags: a tenant of the flags, one of a mappings file, site rules, the
	// resources they read, and a signed bundle of OPA's plugins.
	mappingsFile := filepath.Join(dir, "mappings.txt")
	policyDir := filepath.Join(dir, "site-policies")
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, map[string]string{mappingsFile: "asm-file=interlink.io\n"})
	for name, src := range asmSiteRules {
		writeFiles(t, map[string]string{filepath.Join(policyDir, name): src})
	}
	opaBundleTools(t)
	reg := startRegistry(t, filepath.Join(dir, "registry"))
	key, err := cluster.GenerateSigningKey(dir, "k1", "RS256")
	if err != nil {
		t.Fatal(err)
	}
	tarball := buildBundle(t, dir, siteBundleSource(t, dir, "asm1", false), "asm1", signedBy(key))
	if _, err := cluster.PushBundle(ctx, reg.Host, "sar-bridge/asm", "v1", tarball); err != nil {
		t.Fatal(err)
	}
	config, err := cluster.OCIBundleConfig{RegistryHost: reg.Host, Repository: "sar-bridge/asm", Tag: "v1", Bundle: "site", Key: key}.JSON()
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "opa-config.json")
	writeFiles(t, map[string]string{configFile: string(config)})
	flags := []string{
		"--openshift.mappings=asm-flags=interlink.io",
		"--openshift.mappings-file=" + mappingsFile,
		"--policies=" + policyDir,
		"--policies.data=" + suite.dataFile,
		"--cluster.resources=configmaps",
		"--config-file=" + configFile,
	}
	b, err := startBridge("one-assembly", append(flags, "--log.level=debug")...)
	stopAtCleanup(t, b)
	if err != nil {
		t.Fatalf("starting sar-bridge: %v", err)
	}

	type podCase struct {
		pod     *corev1.Pod
		allowed bool
		reason  string // part of the reason, so the case is the one meant
	}
	pod := func(ns, sa, name string, opts ...podOpt) *corev1.Pod {
		p := newPod(ns, sa, name, opts...)
		p.UID = "" // a create before the pod is stored: charged by name
		return p
	}
	cases := []podCase{
		{pod("asm-flags", "runner", "ok-flags"), true, `RoleBinding "runner/asm-flags"`},
		{pod("asm-flags", "nobody", "no-rbac"), false, sa("asm-flags", "nobody") + " may not create pods.interlink.io"},
		{pod("asm-flags", "runner", "bundled", withPodLabels(map[string]string{"acme.example/forbidden": "yes"})), false, "forbidden by the site bundle asm1"},
		{pod("asm-file", "runner", "ok-file"), true, `RoleBinding "runner/asm-file"`},
		{pod("asm-file", "runner", "banned"), false, "pod banned: on the site's denylist"},
		{pod("asm-object", "runner", "ok-object"), true, `RoleBinding "runner/asm-object"`},
		{pod("asm-object", "runner", "frozen"), false, "pod frozen: frozen by the site"},
		{pod("asm-quota", "runner", "quota-1"), true, `RoleBinding "runner/asm-quota"`},
		{pod("asm-quota", "runner", "quota-2"), false, overQuota("asm-quota", 2, "pods", 1, 1, 1)},
	}
	// The cluster built-ins read their informers: the server answers once they synced.
	if _, _, ok := pollDecision(t, b, 30*time.Second, func() map[string]any { return input("create", cases[6].pod, onNode("asm-vk")) }, deniedAnswer); !ok {
		t.Fatal("the frozen pod was not denied within 30s")
	}
	var server []map[string]any
	var docs []string
	for _, c := range cases {
		r := decide(t, b, input("create", c.pod, onNode("asm-vk")), want{allowed: c.allowed, reason: []string{c.reason}})
		server = append(server, resultOf(t, r))
		docs = append(docs, mustMarshal(t, c.pod))
	}
	before := tenantLedger(t, "asm-quota")

	got := runCLI(t, strings.Join(docs, "\n---\n"), append([]string{"check", "--kubeconfig=" + adminKubeconfig(t), "--node=asm-vk", "-f", "-", "-o", "json"}, flags...)...)
	if got.code != 1 || got.stderr != "" {
		t.Fatalf("check: exit code %d, stderr %q; want 1 and nothing", got.code, got.stderr)
	}
	for i, item := range checkItems(t, got.stdout, len(cases)) {
		if item.Name != cases[i].pod.Name || !reflect.DeepEqual(item.Result, server[i]) {
			t.Errorf("pod %s: check answered\n%v\nthe server\n%v", cases[i].pod.Name, item.Result, server[i])
		}
	}
	if after := tenantLedger(t, "asm-quota"); after != before {
		t.Errorf("check charged the ledger: before\n%s\nafter\n%s", before, after)
	}

	// who-can names the subjects of an OffloadTenant's tenant, as the server maps it.
	who := runCLI(t, "", append([]string{"who-can", "--kubeconfig=" + adminKubeconfig(t), "-n", "asm-object"}, flags...)...)
	who.check(t, 0, `NAMESPACE   SUBJECT-KIND    SUBJECT            GROUP         VIA
asm-object  Group           system:masters     interlink.io  ClusterRoleBinding/cluster-admin (ClusterRole/cluster-admin)
asm-object  ServiceAccount  asm-object/runner  interlink.io  RoleBinding/runner (ClusterRole/interlink-offloader)
`, "")
}

// tenantLedger is an OffloadTenant's ledger (status.used, pending and pendingCount) as
// JSON: what a charge changes; the reconciler's conditions may change beside it.
func tenantLedger(t *testing.T, name string) string {
	t.Helper()
	obj, err := suite.cluster.Dynamic.Resource(tenantGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status, _ := obj.Object["status"].(map[string]any)
	ledger, err := json.Marshal([]any{status["used"], status["pending"], status["pendingCount"]})
	if err != nil {
		t.Fatal(err)
	}
	return string(ledger)
}

// writeFiles writes each path's content.
func writeFiles(t *testing.T, files map[string]string) {
	t.Helper()
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
