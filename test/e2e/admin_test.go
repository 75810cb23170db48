package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// cliResult is what one run of the binary as a command printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the sar-bridge binary with args and stdin, as an admin would.
func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(suite.binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "KUBECONFIG=") // only the --kubeconfig given counts
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running sar-bridge %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

func (r cliResult) check(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d (stderr %q)", r.code, code, r.stderr)
	}
	if r.stdout != stdout {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, stdout)
	}
	if r.stderr != stderr {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, stderr)
	}
}

// adminKubeconfig is a kubeconfig of the envtest admin (system:masters): the bridge's
// own may not read RBAC objects.
func adminKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := suite.cluster.WriteAdminKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// adminArgs are an admin command with the shared bridge's decision flags (those of
// baseArgs but its log level), then extra.
func adminArgs(command, kubeconfig string, extra ...string) []string {
	args := append([]string{command, "--kubeconfig=" + kubeconfig}, baseMappings...)
	args = append(args, "--policies.data="+suite.dataFile)
	if suite.policyDir != "" {
		args = append(args, "--policies="+suite.policyDir)
	}
	return append(args, extra...)
}

// jobYAML is a Job in team-a whose one container requests and is limited to cpu.
func jobYAML(name, sa, cpu string) string {
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: team-a
spec:
  template:
    spec:
      serviceAccountName: %s
      restartPolicy: Never
      containers:
        - name: main
          image: busybox:1.36
          resources:
            requests: {cpu: "%s"}
            limits: {cpu: "%s"}
`, name, sa, cpu, cpu)
}

// jobPod is the pod jobYAML runs, built independently of the command's conversion.
func jobPod(name, sa, cpu string) *corev1.Pod {
	p := newPod("team-a", sa, name, onlyContainers(container("main", cpu, "")))
	p.UID = ""
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	return p
}

// expectedCheckText is what `check` prints for a pod the server answered r for: one
// line per review sent, of which only the last can refuse.
func expectedCheckText(t *testing.T, source, pod string, r map[string]any) string {
	t.Helper()
	word := map[bool]string{true: "allowed", false: "denied"}[r["allowed"].(bool)]
	reason := r["reason"].(string)
	if reason == "" {
		reason = "-"
	}
	review := r["review"].(map[string]any)
	attrs := review["attributes"].([]any)
	var reviews string
	for i, a := range attrs {
		a := a.(map[string]any)
		answer := "allowed"
		switch {
		case i < len(attrs)-1:
		case review["denied"].(bool):
			answer = "denied"
		case !review["allowed"].(bool):
			answer = "no rule allows it"
		}
		resource := a["resource"].(string) + "." + a["group"].(string)
		if a["name"] != "" {
			resource += fmt.Sprintf(" %q", a["name"])
		}
		reviews += fmt.Sprintf("  review: %s %s in namespace %q: %s\n", a["verb"], resource, a["namespace"], answer)
	}
	if s := review["reason"].(string); s != "" {
		reviews += "  review reason: " + s + "\n"
	}
	mods, err := json.Marshal(r["modifications"])
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s (pod %s): %s\n  reason: %s\n%s  modifications: %s\n", source, pod, word, reason, reviews, mods)
}

// checkItem is one pod of `check -o json`.
type checkItem struct {
	Source     string         `json:"source"`
	Namespace  string         `json:"namespace"`
	Name       string         `json:"name"`
	Result     map[string]any `json:"result"`
	DecisionID string         `json:"decision_id"`
}

// checkItems reads the n pods of `check -o json`'s stdout.
func checkItems(t *testing.T, stdout string, n int) []checkItem {
	t.Helper()
	var out struct {
		Items []checkItem `json:"items"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("check's stdout is not JSON: %v\n%s", err, stdout)
	}
	if len(out.Items) != n {
		t.Fatalf("check decided %d pods, want %d:\n%s", len(out.Items), n, stdout)
	}
	return out.Items
}

// serverResult asks the suite's shared bridge for the same pod, checks the outcome and
// returns its result.
func serverResult(t *testing.T, pod *corev1.Pod, allowed bool, reason string) map[string]any {
	t.Helper()
	return resultOf(t, decide(t, shared(t), input("create", pod), want{allowed: allowed, reason: []string{reason}}))
}

// resultOf is the result object of a decision answer.
func resultOf(t *testing.T, r *cluster.Response) map[string]any {
	t.Helper()
	var body struct {
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Result
}

func TestCheckMatchesServer(t *testing.T) {
	kubeconfig := adminKubeconfig(t)
	dir := t.TempDir()
	cases := []struct {
		name, sa, cpu string
		code          int
		reason        string // part of the reason, so the case is the one meant
	}{
		{"check-allowed", "runner", "1", 0, ""},
		{"check-rbac-denied", "nobody", "1", 1, `system:serviceaccount:team-a:nobody may not create pods.interlink.io in namespace "team-a"`},
		{"check-policy-denied", "runner", "3", 1, "cpu"},
	}
	var all []string
	var want []map[string]any
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			manifest := jobYAML(tc.name, tc.sa, tc.cpu)
			all = append(all, manifest)
			file := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			server := serverResult(t, jobPod(tc.name, tc.sa, tc.cpu), tc.code == 0, tc.reason)
			want = append(want, server)
			got := runCLI(t, "", adminArgs("check", kubeconfig, "-f", file)...)
			got.check(t, tc.code, expectedCheckText(t, "job/"+tc.name, "team-a/"+tc.name, server), "")
		})
	}
	t.Run("several documents on stdin, -o json", func(t *testing.T) {
		got := runCLI(t, strings.Join(all, "---\n"), adminArgs("check", kubeconfig, "-f", "-", "-o", "json")...)
		if got.code != 1 || got.stderr != "" {
			t.Fatalf("exit code %d, stderr %q; want 1 and nothing", got.code, got.stderr)
		}
		for i, item := range checkItems(t, got.stdout, len(cases)) {
			if item.Source != "job/"+cases[i].name || item.Namespace != "team-a" || item.Name != cases[i].name || item.DecisionID == "" {
				t.Errorf("item %d names %s %s/%s (decision %q)", i, item.Source, item.Namespace, item.Name, item.DecisionID)
			}
			if !reflect.DeepEqual(item.Result, want[i]) {
				t.Errorf("item %d result:\n%v\nserver's:\n%v", i, item.Result, want[i])
			}
		}
	})
}

// TestCheckNodeAccess: with --review.node-access, check sends the node review too, as a
// bridge started with the same flag does, and says which review refused.
func TestCheckNodeAccess(t *testing.T) {
	b := newBridge(t, "--review.node-access")
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte(jobYAML("pinned-job", "pinned", "1")), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := adminKubeconfig(t)
	for _, tc := range []struct {
		node string
		code int
	}{{"vk-1", 0}, {"vk-2", 1}} {
		t.Run(tc.node, func(t *testing.T) {
			server := resultOf(t, decide(t, b, input("create", jobPod("pinned-job", "pinned", "1"), onNode(tc.node)), want{allowed: tc.code == 0}))
			got := runCLI(t, "", adminArgs("check", kubeconfig, "-f", file, "--review.node-access", "--node", tc.node)...)
			got.check(t, tc.code, expectedCheckText(t, "job/pinned-job", "team-a/pinned-job", server), "")
			if n := strings.Count(got.stdout, "  review: "); n != 2 {
				t.Errorf("%d review lines, want the pod's and the node's", n)
			}
		})
	}
}

func TestCheckImpersonation(t *testing.T) {
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte(jobYAML("as-alice", "runner", "1")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("an admin may impersonate", func(t *testing.T) {
		got := runCLI(t, "", adminArgs("check", adminKubeconfig(t), "-f", file, "--as", "alice", "--as-group", "hpc")...)
		first, _, _ := strings.Cut(got.stdout, "\n")
		if got.code != 1 || got.stderr != "" || first != "job/as-alice (pod team-a/as-alice): denied" ||
			!strings.Contains(got.stdout, "\n  reason: alice may not create pods.interlink.io in namespace \"team-a\"") {
			t.Errorf("exit code %d, stdout:\n%s\nstderr: %q", got.code, got.stdout, got.stderr)
		}
	})
	t.Run("the bridge's service account may not", func(t *testing.T) {
		got := runCLI(t, "", adminArgs("check", suite.kubeconfig, "-f", file, "--as", "alice")...)
		got.check(t, 2, "", `error: job/as-alice (pod team-a/as-alice): caller "system:serviceaccount:sar-bridge:sar-bridge" may not impersonate user "alice"`+"\n")
	})
}

// unreachableKubeconfig points at a port nothing listens on.
const unreachableKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: team-a}}]
current-context: c
`

func TestCheckErrors(t *testing.T) {
	kubeconfig := adminKubeconfig(t)
	configMap := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: team-a}\n"
	got := runCLI(t, configMap, adminArgs("check", kubeconfig, "-f", "-")...)
	got.check(t, 2, "", "error: reading -: document 1: ConfigMap v1 has no pod template: want a Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet\n")

	got = runCLI(t, "", adminArgs("check", kubeconfig)...)
	got.check(t, 2, "", "error: -f/--filename is required\nSee 'sar-bridge check --help' for usage.\n")

	got = runCLI(t, jobYAML("x", "runner", "1"), adminArgs("check", kubeconfig, "-f", "-", "-n", "orphan")...)
	got.check(t, 2, "", "error: reading -: document 1: job/x: the namespace from the object (\"team-a\") does not match --namespace \"orphan\"\n")

	// An API that cannot be reached is an error, never an allow.
	unreachable := filepath.Join(t.TempDir(), "unreachable.kubeconfig")
	if err := os.WriteFile(unreachable, []byte(unreachableKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	got = runCLI(t, jobYAML("x", "runner", "1"), adminArgs("check", unreachable, "-f", "-")...)
	if got.code != 2 || got.stdout != "" || !strings.HasPrefix(got.stderr, "error: kubernetes API /readyz: ") || strings.Count(got.stderr, "\n") != 1 {
		t.Errorf("unreachable API: exit code %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}
	got = runCLI(t, "", adminArgs("who-can", unreachable)...)
	if got.code != 1 || got.stdout != "" || !strings.HasPrefix(got.stderr, "error: kubernetes API /readyz: ") || strings.Count(got.stderr, "\n") != 1 {
		t.Errorf("who-can, unreachable API: exit code %d, stdout %q, stderr %q", got.code, got.stdout, got.stderr)
	}

	got = runCLI(t, "", "check", "--help")
	if got.code != 0 || got.stderr != "" || !strings.HasPrefix(got.stdout, "Decide pods as the server would") || !strings.Contains(got.stdout, "--openshift.mappings") {
		t.Errorf("check --help: exit code %d, stderr %q, stdout:\n%s", got.code, got.stderr, got.stdout)
	}
}

// whoCanTable is every subject of the suite's world that may create pods in the group
// of its namespace: the runners of team-a and project-b, team-a's pinned (a Role of its
// own), and system:masters through cluster-admin. Not listed: project-b's legacy
// (bound on interlink.io, not tenant-b's group), team-a's named (create limited to a
// resource name), cleaner and watcher (other verbs), and nobody in the unmapped
// orphan and ghost-ns.
const whoCanTable = `NAMESPACE  SUBJECT-KIND    SUBJECT           GROUP                  VIA
project-b  Group           system:masters    tenant-b.interlink.io  ClusterRoleBinding/cluster-admin (ClusterRole/cluster-admin)
project-b  ServiceAccount  project-b/runner  tenant-b.interlink.io  RoleBinding/offload (ClusterRole/tenant-b-offloader)
team-a     Group           system:masters    interlink.io           ClusterRoleBinding/cluster-admin (ClusterRole/cluster-admin)
team-a     ServiceAccount  team-a/pinned     interlink.io           RoleBinding/pinned-pods (Role/pod-creator)
team-a     ServiceAccount  team-a/runner     interlink.io           RoleBinding/offload (ClusterRole/interlink-offloader)
`

// teamATable is whoCanTable's team-a part.
const teamATable = `NAMESPACE  SUBJECT-KIND    SUBJECT         GROUP         VIA
team-a     Group           system:masters  interlink.io  ClusterRoleBinding/cluster-admin (ClusterRole/cluster-admin)
team-a     ServiceAccount  team-a/pinned   interlink.io  RoleBinding/pinned-pods (Role/pod-creator)
team-a     ServiceAccount  team-a/runner   interlink.io  RoleBinding/offload (ClusterRole/interlink-offloader)
`

func TestWhoCan(t *testing.T) {
	kubeconfig := adminKubeconfig(t)
	t.Run("every mapped namespace", func(t *testing.T) {
		runCLI(t, "", adminArgs("who-can", kubeconfig)...).check(t, 0, whoCanTable, "")
	})
	t.Run("one namespace", func(t *testing.T) {
		runCLI(t, "", adminArgs("who-can", kubeconfig, "-n", "team-a")...).check(t, 0, teamATable, "")
	})
	t.Run("json", func(t *testing.T) {
		got := runCLI(t, "", adminArgs("who-can", kubeconfig, "-n", "project-b", "-o", "json")...)
		got.check(t, 0, `{
  "items": [
    {
      "namespace": "project-b",
      "kind": "Group",
      "subject": "system:masters",
      "group": "tenant-b.interlink.io",
      "via": [
        "ClusterRoleBinding/cluster-admin (ClusterRole/cluster-admin)"
      ]
    },
    {
      "namespace": "project-b",
      "kind": "ServiceAccount",
      "subject": "project-b/runner",
      "group": "tenant-b.interlink.io",
      "via": [
        "RoleBinding/offload (ClusterRole/tenant-b-offloader)"
      ]
    }
  ]
}
`, "")
	})
	t.Run("node access", func(t *testing.T) {
		// interlink-offloader grants "use" of every node; pinned may use vk-1 only.
		runCLI(t, "", adminArgs("who-can", kubeconfig, "-n", "team-a", "--review.node-access", "--node", "vk-1")...).check(t, 0, teamATable, "")
		runCLI(t, "", adminArgs("who-can", kubeconfig, "-n", "team-a", "--review.node-access", "--node", "vk-2")...).check(t, 0,
			`NAMESPACE  SUBJECT-KIND    SUBJECT         GROUP         VIA
team-a     Group           system:masters  interlink.io  ClusterRoleBinding/cluster-admin (ClusterRole/cluster-admin)
team-a     ServiceAccount  team-a/runner   interlink.io  RoleBinding/offload (ClusterRole/interlink-offloader)
`, "")
	})
	t.Run("usage errors", func(t *testing.T) {
		runCLI(t, "", adminArgs("who-can", kubeconfig, "--node", "vk-1")...).
			check(t, 2, "", "error: --node needs --review.node-access: without it RBAC does not restrict nodes\nSee 'sar-bridge who-can --help' for usage.\n")
		runCLI(t, "", adminArgs("who-can", kubeconfig, "-o", "yaml")...).
			check(t, 2, "", "error: --output \"yaml\": want json or nothing\nSee 'sar-bridge who-can --help' for usage.\n")
	})
	t.Run("an unmapped namespace", func(t *testing.T) {
		runCLI(t, "", adminArgs("who-can", kubeconfig, "-n", "orphan")...).
			check(t, 1, "", "error: nobody may offload from namespace \"orphan\": tenant \"orphan\" (namespace \"orphan\") has no API group mapping: add an OffloadTenant, --openshift.mappings orphan=<group> or a \"*\" fallback\n")
	})
}
