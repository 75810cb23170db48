package e2e

// The default policy's interLink rules (policies/rules/restricted-annotations, policies/rules/images) through the
// interLink relay of the real binary: restricted SLURM annotations and image registries,
// configured by the policy data.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// An admins' namespace of tenant team-a: its ServiceAccounts (the group
// system:serviceaccounts:interlink-rules-admins) may set the pre-exec annotation.
const rulesAdminNS = "interlink-rules-admins"

const rulesFixtures = `
apiVersion: v1
kind: Namespace
metadata:
  name: interlink-rules-admins
  labels:
    interlink.io/tenant: team-a
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: offload
  namespace: interlink-rules-admins
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: interlink-offloader}
subjects:
  - {kind: ServiceAccount, name: ops, namespace: interlink-rules-admins}
`

// rulesData is the suite's policy data plus the interLink rules' keys.
func rulesData(t *testing.T) string {
	t.Helper()
	var data map[string]map[string]any
	if err := json.Unmarshal([]byte(policyData), &data); err != nil {
		t.Fatal(err)
	}
	data["interlink"]["restricted_annotations"] = map[string]any{
		"slurm-job.vk.io/pre-exec": map[string]any{"users": []string{}, "groups": []string{"system:serviceaccounts:" + rulesAdminNS}},
		"slurm-job.vk.io/flags":    map[string]any{"users": []string{sa0("late")}, "groups": []string{}},
	}
	data["interlink"]["image_registries"] = map[string]any{"team-a": []string{"docker.io/library/", "registry.example.org/team-a"}}
	path := filepath.Join(t.TempDir(), "rules-data.json")
	if err := os.WriteFile(path, []byte(mustMarshal(t, data)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestInterlinkRules(t *testing.T) {
	applyInterlinkFixtures(t)
	ctx := context.Background()
	if _, err := suite.cluster.ApplyYAML(ctx, rulesFixtures); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	attrs := authorizationv1.ResourceAttributes{Namespace: rulesAdminNS, Verb: "create", Group: "interlink.io", Resource: "pods"}
	if err := suite.cluster.WaitForAccess(ctx, cluster.ServiceAccountUser(rulesAdminNS, "ops"), cluster.ServiceAccountGroups(rulesAdminNS), attrs, true, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	_, plugin, client, base := relayBridge(t, false, false, "--policies.data="+rulesData(t))

	// body is a /create of vkPod as ns/sa, with annotations added and edit applied.
	body := func(ns, sa, name string, annotations map[string]string, edit func(*corev1.Pod)) []byte {
		pod := vkPod(sa, name)
		pod.Namespace = ns
		for k, v := range annotations {
			pod.Annotations[k] = v
		}
		if edit != nil {
			edit(&pod)
		}
		return []byte(mustMarshal(t, retrievedPodData{Pod: pod, Containers: []retrievedContainer{{Name: "main"}, {Name: "sidecar"}}}))
	}
	preExec := map[string]string{"slurm-job.vk.io/pre-exec": "module load apptainer"}
	flags := map[string]string{"slurm-job.vk.io/flags": "--time=01:00:00"}
	quay := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "registry.example.org.evil.com/team-a/setup:1"}}
	}
	for _, c := range []struct {
		name string
		body []byte
		deny string // "" = allowed and forwarded
	}{
		{"pre-exec by a listed group", body(rulesAdminNS, "ops", "job-pre-admin", preExec, nil), ""},
		{"pre-exec by someone else", body(interlinkNS, "runner", "job-pre-runner", preExec, nil),
			`annotation "slurm-job.vk.io/pre-exec" is restricted: subject "system:serviceaccount:interlink-e2e:runner" is not among its allowed users [] or groups ["system:serviceaccounts:interlink-rules-admins"] (data.interlink.restricted_annotations)`},
		{"flags by a listed user", body(interlinkNS, "late", "job-flags-late", flags, nil), ""},
		// Subjects listed for flags may set any option; others only the options their
		// tenant's HPC settings list (none here).
		{"flags by someone else", body(rulesAdminNS, "ops", "job-flags-admin", flags, nil),
			`sbatch option --time (annotation "slurm-job.vk.io/flags") is not allowed for tenant "team-a": allowed none (data.interlink.hpc.tenants)`},
		{"image from a lookalike registry", body(interlinkNS, "runner", "job-image", nil, quay),
			`init container "setup" image "registry.example.org.evil.com/team-a/setup:1" (registry.example.org.evil.com/team-a/setup) is not from a registry allowed for tenant "team-a" (subject "system:serviceaccount:interlink-e2e:runner"; allowed: docker.io/library/, registry.example.org/team-a)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(plugin.Requests())
			res, got := send(t, client, http.MethodPost, base+"/create", c.body)
			forwarded := len(plugin.Requests()) - before
			if c.deny == "" {
				if res.StatusCode != http.StatusOK || forwarded != 1 {
					t.Errorf("HTTP %d %q, %d requests forwarded; want the create allowed and forwarded", res.StatusCode, got, forwarded)
				}
				return
			}
			if want := "sar-bridge: denied: " + c.deny; res.StatusCode != http.StatusForbidden || string(got) != want || forwarded != 0 {
				t.Errorf("HTTP %d %q, %d requests forwarded; want 403 %q", res.StatusCode, got, forwarded, want)
			}
		})
	}
}
