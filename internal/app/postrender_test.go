package app

import (
	"bytes"
	"strings"
	"testing"
)

const postRenderInput = `apiVersion: v1
kind: ConfigMap
metadata: {name: il-config, namespace: il}
data:
  InterLinkConfig.yaml: |
    SidecarURL: "http://localhost"
    SidecarPort: "4000"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: vk-node, namespace: il}
spec:
  template:
    metadata: {labels: {app: vk}}
    spec:
      containers:
      - name: interlink
        image: il
        volumeMounts:
        - {name: il-config, mountPath: /etc/interlink/InterLinkConfig.yaml, subPath: InterLinkConfig.yaml}
      - name: vk
        image: vk
        env: [{name: KUBELET_PORT, value: "10250"}]
      volumes:
      - {name: il-config, configMap: {name: il-config}}
`

func TestHelmPostRenderCommand(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		in         string
		code       int
		stdout     []string
		stderr     string
		stdoutNone bool
		// stdoutLacks must not be in stdout.
		stdoutLacks []string
	}{
		{name: "defaults", in: postRenderInput, stdout: []string{
			"image: ghcr.io/sar-bridge/sar-bridge:" + strings.TrimSpace(files.Release),
			"--interlink.plugin-url=http://localhost:4000", "value: unix:///var/run/sar-bridge.sock", "kind: ClusterRoleBinding",
			"kind: NetworkPolicy", "name: sar-bridge-vk-node", "  - ports:\n    - port: 10250\n      protocol: TCP\n  podSelector:\n    matchLabels:\n      app: vk\n"},
			// Cluster-wide, one per cluster: every interLink release would claim it.
			stdoutLacks: []string{"kind: ValidatingAdmissionPolicy"}},
		{name: "no NetworkPolicy for a plugin on a socket", in: postRenderInput, args: []string{"--plugin-url=unix:///var/run/p.sock", "--network-policy=false"},
			stdout: []string{"--interlink.plugin-url=unix:///var/run/p.sock"}, stdoutLacks: []string{"kind: NetworkPolicy"}},
		{name: "no NetworkPolicy for a plugin on TCP in the pod", in: postRenderInput, args: []string{"--network-policy=false"}, code: 1,
			stderr: "the plugin listens on TCP in the pod (http://localhost:4000) and the NetworkPolicy is off", stdoutNone: true},
		{name: "no NetworkPolicy for a plugin on TCP in the pod, insisted on", in: postRenderInput, args: []string{"--network-policy=false", "--insecure-allow-unprotected-plugin"},
			stdout: []string{"--interlink.plugin-url=http://localhost:4000"}, stdoutLacks: []string{"kind: NetworkPolicy"}},
		{name: "help", args: []string{"--help"}, stderr: "--network-policy", stdoutNone: true},
		{name: "help names the leader election's Role", args: []string{"--help"}, stderr: "and a Role for the quota reconciler's leader election", stdoutNone: true},
		{name: "flags", in: postRenderInput, args: []string{"--image=r/sb:t", "--plugin-url=unix:///var/run/p.sock", "--rbac=false", "--bridge-arg=--openshift.mappings=a=b.io"},
			stdout: []string{"image: r/sb:t", "--interlink.plugin-url=unix:///var/run/p.sock", "--openshift.mappings=a=b.io"}},
		{name: "unknown flag", in: postRenderInput, args: []string{"--nope"}, code: 2, stderr: "unknown flag: --nope", stdoutNone: true},
		{name: "stray argument", in: postRenderInput, args: []string{"extra"}, code: 2, stderr: `unexpected arguments ["extra"]`, stdoutNone: true},
		{name: "nothing to change", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", code: 1,
			stderr: `sar-bridge helm-postrender: no Deployment with a container named "interlink"`, stdoutNone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := HelmPostRender(tc.args, strings.NewReader(tc.in), &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %s)", code, tc.code, stderr.String())
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tc.stdoutLacks {
				if strings.Contains(stdout.String(), w) {
					t.Errorf("stdout has %q:\n%s", w, stdout.String())
				}
			}
			if tc.stderr != "" && !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.stderr)
			}
			if tc.stdoutNone && stdout.Len() != 0 {
				t.Errorf("stdout on failure: %s", stdout.String())
			}
			if tc.code == 0 && stdout.Len() > 0 && strings.Contains(stdout.String(), "kind: ClusterRole\n") == strings.Contains(strings.Join(tc.args, " "), "--rbac=false") {
				t.Errorf("ClusterRole presence does not follow --rbac:\n%s", stdout.String())
			}
		})
	}
}
