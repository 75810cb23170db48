package e2e

// Issue 31, item 0: a site's own rule in --policies refuses pods through every front
// door, the fast path of the default policy notwithstanding (TestAdmission decides with
// the same rule through the webhooks).

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// siteRuleMessage is what the site rule of siteRulesDir answers.
const siteRuleMessage = "pods labelled site.example/forbidden=true may not offload"

// siteRulesDir is a --policies directory with one rule added to the default policy's own
// package, the way a site most naturally extends it.
func siteRulesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	rule := `package interlink.authz

violations contains "` + siteRuleMessage + `" if {
	input.operation == "create"
	input.pod.metadata.labels["site.example/forbidden"] == "true"
}
`
	if err := os.WriteFile(filepath.Join(dir, "site.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestInterlinkSiteRule(t *testing.T) {
	applyInterlinkFixtures(t)
	b, plugin, client, base := relayBridge(t, false, false, "--policies="+siteRulesDir(t))
	if log := b.Log(); !strings.Contains(log, "the default policy's fast path is off") || !strings.Contains(log, "data.interlink.authz.violations") {
		t.Errorf("no log line says the fast path is off because of the site rule:\n%s", tail(log, 20))
	}
	body := func(name string, labels map[string]string) []byte {
		pod := vkPod("runner", name)
		for k, v := range labels {
			pod.Labels[k] = v
		}
		return []byte(mustMarshal(t, retrievedPodData{Pod: pod, Containers: []retrievedContainer{{Name: "main"}, {Name: "sidecar"}}}))
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		deny   string // "" = allowed and forwarded
	}{
		{"an ordinary pod", nil, ""},
		{"a pod the site rule refuses", map[string]string{"site.example/forbidden": "true"}, siteRuleMessage},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(plugin.Requests())
			res, got := send(t, client, http.MethodPost, base+"/create", body("site-"+strings.ReplaceAll(c.name, " ", "-"), c.labels))
			forwarded := len(plugin.Requests()) - before
			if c.deny == "" {
				if res.StatusCode != http.StatusOK || forwarded != 1 {
					t.Errorf("HTTP %d %q, %d forwarded; want allowed and forwarded", res.StatusCode, got, forwarded)
				}
				return
			}
			if want := "sar-bridge: denied: " + c.deny; res.StatusCode != http.StatusForbidden || string(got) != want || forwarded != 0 {
				t.Errorf("HTTP %d %q, %d forwarded; want 403 %q", res.StatusCode, got, forwarded, want)
			}
		})
	}
}

// withSiteForbidden labels a pod for the site rule of siteRulesDir.
func withSiteForbidden(p *corev1.Pod) {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["site.example/forbidden"] = "true"
}
