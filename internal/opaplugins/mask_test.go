package opaplugins

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sar-bridge/sar-bridge/internal/decisionlog"
)

// Secrets of the realistic interLink pods below: none of them may appear anywhere in
// an emitted event.
const (
	wgPrivateKey     = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="
	wgPeerPrivateKey = "cGVlci1wcml2YXRlLWtleS1vZi10aGUtbWVzaC14eXo="
	wstunnelPassword = "Rk9PQmFyYmF6cXV4MTIzNDU2"
	ratholeClientKey = "cmF0aG9sZS1jbGllbnQta2V5LXRscy1tb2Rl"
)

// meshPreExec is slurm-job.vk.io/pre-exec as interLink's VK leaves it with full-mesh
// networking: the user's own pre-exec, then the generated script, a heredoc holding
// the WireGuard configuration and the wstunnel password.
var meshPreExec = `module load apptainer
cat <<'EOFMESH' > $TMPDIR/mesh.sh
#!/bin/bash
set -e
WG_IFACE="wg1a2b3c"
cat <<'EOFWG' > $WG_IFACE.conf
[Interface]
PrivateKey = ` + wgPrivateKey + `

[Peer]
PublicKey = bG9va3MtbGlrZS1hLXB1YmxpYy1rZXktYnV0LWlzLW5vdA==
AllowedIPs = 10.7.0.1/32, 10.0.0.0/8
Endpoint = 127.0.0.1:51821
PersistentKeepalive = 25
EOFWG
cat <<'EOFPEER' > peer.conf
[Interface]
PrivateKey = ` + wgPeerPrivateKey + `
EOFPEER
RUST_LOG=debug ./wstunnel client -L 'udp://127.0.0.1:51821:127.0.0.1:51820?timeout_sec=0' \
    --http-upgrade-path-prefix ` + wstunnelPassword + ` \
    wss://vk-node.example.org:443 > "$TMPDIR/wstunnel.log" 2>&1 &
http_code=$(curl -s -k -o /dev/null -w "%{http_code}" "https://vk-node.example.org:443/` + wstunnelPassword + `")
EOFMESH
chmod +x $TMPDIR/mesh.sh
`

var wireguardSnippet = "[Interface]\nAddress = 10.7.0.2/32\nPrivateKey = " + wgPrivateKey +
	"\nDNS = 10.96.0.10\nMTU = 1280\n\n[Peer]\nPublicKey = bG9va3MtbGlrZS1hLXB1YmxpYy1rZXktYnV0LWlzLW5vdA==\nAllowedIPs = 10.7.0.1/32\nEndpoint = 127.0.0.1:51821\n"

var wstunnelCommands = "curl -L https://github.com/erebe/wstunnel/releases/download/v10.1.8/wstunnel -o wstunnel && chmod +x wstunnel\n" +
	"./wstunnel client --http-upgrade-path-prefix " + wstunnelPassword + " -R tcp://[::]:8080:localhost:8080 wss://vk-node.example.org:443\n"

// meshPod is a pod as the relay sees it from interLink's VK with full-mesh networking.
func meshPod() map[string]any {
	return map[string]any{
		"metadata": map[string]any{
			"name": "mesh-job-7d9f", "namespace": "team-a",
			"annotations": map[string]any{
				"slurm-job.vk.io/pre-exec":              meshPreExec,
				"interlink.eu/wireguard-client-snippet": wireguardSnippet,
				"interlink.eu/wstunnel-client-commands": wstunnelCommands,
				"slurm-job.vk.io/flags":                 "--time=1:00:00",
				"interlink.eu/pod-ip":                   "10.244.1.17",
			},
		},
		"spec": map[string]any{
			"nodeName": "vk-hpc",
			"containers": []any{map[string]any{
				"name": "main", "image": "ghcr.io/example/app:1.0",
				"command": []any{"/app/server"},
				"args":    []any{"--password=hunter2", "--token", "abc", "--listen=:8080"},
				"env": []any{
					map[string]any{"name": "DB_PASSWORD", "value": "pg-s3cr3t-value"},
					map[string]any{"name": "LOG_LEVEL", "value": "debug-level-value"},
					map[string]any{"name": "REF", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "s", "key": "k"}}},
				},
			}},
			"initContainers": []any{map[string]any{
				"name": "init", "image": "busybox",
				"env": []any{map[string]any{"name": "SEED", "value": "init-seed-value"}},
			}},
		},
	}
}

// maskCase is one decision and what its event must (not) hold.
type maskCase struct {
	name    string
	input   map[string]any
	result  map[string]any
	secrets []string       // no byte string of these may appear in the event
	want    map[string]any // JSON pointer (RFC 6901) → the value the event holds there
	absent  []string       // JSON pointers the event must not hold
	masked  []string       // paths the event's "masked" must list
}

func maskCases() []maskCase {
	withPod := func(mutate func(pod map[string]any)) map[string]any {
		pod := meshPod()
		mutate(pod)
		return map[string]any{"operation": "create", "pod": pod}
	}
	annotations := func(pod map[string]any) map[string]any {
		return pod["metadata"].(map[string]any)["annotations"].(map[string]any)
	}
	container := func(pod map[string]any) map[string]any {
		return pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	}
	const ann = "/input/pod/metadata/annotations/"
	const c0 = "/input/pod/spec/containers/0/"
	return []maskCase{{
		name:  "interLink full-mesh pod",
		input: withPod(func(map[string]any) {}),
		secrets: []string{wgPrivateKey, wgPeerPrivateKey, wstunnelPassword, "PrivateKey", "hunter2", "abc",
			"pg-s3cr3t-value", "debug-level-value", "init-seed-value"},
		want: map[string]any{
			"/input/pod/metadata/name":                     "mesh-job-7d9f",
			ann + "slurm-job.vk.io~1flags":                 "--time=1:00:00",
			ann + "interlink.eu~1pod-ip":                   "10.244.1.17",
			ann + "slurm-job.vk.io~1pre-exec":              "**masked**",
			ann + "interlink.eu~1wireguard-client-snippet": "**masked**",
			ann + "interlink.eu~1wstunnel-client-commands": "**masked**",
			c0 + "command":                                 []any{"/app/server"},
			c0 + "args":                                    []any{"--password=**masked**", "--token", "**masked**", "--listen=:8080"},
			c0 + "env/0/name":                              "DB_PASSWORD",
			c0 + "env/2/valueFrom/secretKeyRef/name":       "s",
			"/input/pod/spec/initContainers/0/env/0/name":  "SEED",
			"/input/pod/spec/containers/0/image":           "ghcr.io/example/app:1.0",
			"/input/operation":                             "create",
			"/result/allowed":                              true,
		},
		absent: []string{c0 + "env/0/value", c0 + "env/1/value", "/input/pod/spec/initContainers/0/env/0/value"},
		masked: []string{"/input/pod/metadata/annotations", c0 + "args/0", c0 + "args/2"},
	}, {
		name: "rathole and kubectl's copy",
		input: withPod(func(pod map[string]any) {
			a := annotations(pod)
			delete(a, "slurm-job.vk.io/pre-exec")
			delete(a, "interlink.eu/wireguard-client-snippet")
			delete(a, "interlink.eu/wstunnel-client-commands")
			a["interlink.eu/rathole-client-commands"] = "./rathole --client config.toml # [client.transport.tls] key = \"" + ratholeClientKey + "\""
			a["kubectl.kubernetes.io/last-applied-configuration"] = `{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"env":[{"name":"X","value":"applied-env-value"}]}]}}`
		}),
		secrets: []string{ratholeClientKey, "applied-env-value"},
		want: map[string]any{
			ann + "interlink.eu~1rathole-client-commands":             "**masked**",
			ann + "kubectl.kubernetes.io~1last-applied-configuration": "**masked**",
			ann + "slurm-job.vk.io~1flags":                            "--time=1:00:00",
		},
	}, {
		name: "annotations that look like credentials",
		input: withPod(func(pod map[string]any) {
			a := annotations(pod)
			a["example.org/db-url"] = "postgres://app:pg-url-pass@db.example.org/app"
			a["example.org/api-token"] = "t0k-value-by-key"
			a["example.org/deploy-key"] = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
			a["example.org/config"] = "apiKey: ak-live-998877"
			a["example.org/login"] = "user=alice Password=pw-in-value"
			a["example.org/owner"] = "alice"
		}),
		secrets: []string{"pg-url-pass", "t0k-value-by-key", "b3BlbnNzaC1rZXktdjEAAAAA", "ak-live-998877", "pw-in-value"},
		want: map[string]any{
			ann + "example.org~1db-url":     "**masked**",
			ann + "example.org~1api-token":  "**masked**",
			ann + "example.org~1deploy-key": "**masked**",
			ann + "example.org~1config":     "**masked**",
			ann + "example.org~1login":      "**masked**",
			ann + "example.org~1owner":      "alice",
			ann + "slurm-job.vk.io~1flags":  "--time=1:00:00",
		},
	}, {
		name: "command lines",
		input: withPod(func(pod map[string]any) {
			c := container(pod)
			c["command"] = []any{"/app/server", "--api-key"}
			c["args"] = []any{"key-after-command-flag", "PASSWORD=env-style-pass", "--db-password=dbpw-1",
				"--verbose", "-Dapi.key=jvm-prop-key", "--upstream=https://svc:url-user-pass@up.example.org/",
				"--Secret", "camel-secret-value", "--time=5"}
			pod["spec"].(map[string]any)["ephemeralContainers"] = []any{map[string]any{
				"name": "debug", "command": []any{"sh", "-c", "mysql --password shell-pass -h db && echo done"},
				"env": []any{map[string]any{"name": "E", "value": "ephemeral-env-value"}},
			}}
		}),
		secrets: []string{"key-after-command-flag", "env-style-pass", "dbpw-1", "jvm-prop-key", "url-user-pass",
			"camel-secret-value", "shell-pass", "ephemeral-env-value"},
		want: map[string]any{
			c0 + "command": []any{"/app/server", "--api-key"},
			c0 + "args": []any{"**masked**", "PASSWORD=**masked**", "--db-password=**masked**", "--verbose",
				"-Dapi.key=**masked**", "**masked**", "--Secret", "**masked**", "--time=5"},
			"/input/pod/spec/ephemeralContainers/0/command":    []any{"sh", "-c", "**masked**"},
			"/input/pod/spec/ephemeralContainers/0/env/0/name": "E",
		},
		absent: []string{"/input/pod/spec/ephemeralContainers/0/env/0/value"},
		masked: []string{c0 + "args/0", "/input/pod/spec/ephemeralContainers/0/command/2"},
	}, {
		name: "probes, hooks, namespace annotations, input.hpc and the result",
		input: withPod(func(pod map[string]any) {
			c := container(pod)
			c["livenessProbe"] = map[string]any{"exec": map[string]any{"command": []any{"/bin/check", "--token=probe-token-value", "--quick"}}}
			c["readinessProbe"] = map[string]any{"httpGet": map[string]any{"path": "/ready", "port": 8080, "httpHeaders": []any{
				map[string]any{"name": "Authorization", "value": "Bearer header-bearer-value"},
				map[string]any{"name": "X-Trace", "value": "on"},
			}}}
			c["lifecycle"] = map[string]any{"preStop": map[string]any{"exec": map[string]any{"command": []any{"cli", "logout", "--api_key", "hook-key-value"}}}}
		}),
		result: map[string]any{"allowed": false, "reason": "refused",
			"modifications": map[string]any{"pod_annotations": map[string]any{"example.org/api-token": "result-token-value", "example.org/billing": "proj-42"}}},
		secrets: []string{"probe-token-value", "header-bearer-value", "hook-key-value", "ns-token-value", "quoted-pass", "result-token-value",
			"sbatch-pass", "sbatch-error-token", "runtime-key-value"},
		want: map[string]any{
			c0 + "livenessProbe/exec/command":                              []any{"/bin/check", "--token=**masked**", "--quick"},
			c0 + "readinessProbe/httpGet/httpHeaders/0":                    map[string]any{"name": "Authorization", "value": "**masked**"},
			c0 + "readinessProbe/httpGet/httpHeaders/1":                    map[string]any{"name": "X-Trace", "value": "on"},
			c0 + "lifecycle/preStop/exec/command":                          []any{"cli", "logout", "--api_key", "**masked**"},
			"/input/namespace/annotations/example.org~1vault-token":        "**masked**",
			"/input/namespace/annotations/example.org~1team":               "hpc",
			"/input/hpc/words/0/what":                                      "livenessProbe of container \"main\"",
			"/input/hpc/words/0/error":                                     "**masked**",
			"/input/hpc/words/1/error":                                     "\"/opt/$X\" contains \"$\"",
			"/input/hpc/sbatch/options":                                    map[string]any{"time": "1:00:00", "comment": "**masked**"},
			"/input/hpc/sbatch/order":                                      []any{"time", "comment"},
			"/input/hpc/sbatch/error":                                      "**masked**",
			"/input/hpc/runtime/slurm-job.vk.io~1singularity-options":      map[string]any{"options": []any{"--env"}, "error": "**masked**"},
			"/input/hpc/runtime/slurm-job.vk.io~1singularity-mounts":       map[string]any{"options": []any{}, "error": nil},
			"/result/reason":                                               "refused",
			"/result/modifications/pod_annotations/example.org~1api-token": "**masked**",
			"/result/modifications/pod_annotations/example.org~1billing":   "proj-42",
		},
	}, {
		name: "nothing to mask",
		input: map[string]any{"operation": "create", "pod": map[string]any{
			"metadata": map[string]any{"name": "plain", "annotations": map[string]any{"slurm-job.vk.io/flags": "--time=1:00:00 --account=proj"}},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "args": []any{"--verbose", "--time=5"}}}},
		}},
		want: map[string]any{
			ann + "slurm-job.vk.io~1flags": "--time=1:00:00 --account=proj",
			c0 + "args":                    []any{"--verbose", "--time=5"},
			"/masked":                      nil,
			"/erased":                      nil,
		},
	}}
}

// startMaskLogs starts the plugins with decision logs uploaded to a test service and
// written to the console (the bridge's log, w).
func startMaskLogs(t *testing.T, w *testWriter) (*Plugins, *logReceiver) {
	t.Helper()
	recv := &logReceiver{}
	hs := httptest.NewServer(recv)
	t.Cleanup(hs.Close)
	raw, err := json.Marshal(map[string]any{
		"services": map[string]any{"logs": map[string]any{"url": hs.URL}},
		"decision_logs": map[string]any{"service": "logs", "resource": "/logs", "console": true,
			"reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A fixed ID: a random one is hex that could hold a short secret such as "abc".
	p, err := Start(context.Background(), Options{Config: raw, ID: "mask-test", Target: newReloader(t), Logger: log.NewLogfmtLogger(w), Console: w})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	return p, recv
}

// The default mask, through OPA's decision log plugin as the bridge runs it: no secret
// of an interLink mesh pod (WireGuard keys, the wstunnel password, credential
// arguments, env values, credential-looking annotations) reaches the log service or
// the console, while everything else, annotation keys included, stays.
func TestDefaultMask(t *testing.T) {
	console := &testWriter{}
	p, recv := startMaskLogs(t, console)
	cases := maskCases()
	for i, tc := range cases {
		input, err := ast.InterfaceToValue(tc.input)
		if err != nil {
			t.Fatal(err)
		}
		if tc.name == "probes, hooks, namespace annotations, input.hpc and the result" {
			// What the bridge adds: the namespace from the informer, input.hpc's words.
			extra := ast.MustParseTerm(`{"namespace": {"name": "team-a", "labels": {}, "annotations": {"example.org/vault-token": "ns-token-value", "example.org/team": "hpc"}},
				"hpc": {"inert": false, "words": [
					{"what": "livenessProbe of container \"main\"", "error": "\"--password=\\\"quoted-pass\\\"\" contains \"\\\"\""},
					{"what": "image root", "error": "\"/opt/$X\" contains \"$\""}],
				"sbatch": {"options": {"time": "1:00:00", "comment": "db password=sbatch-pass"}, "order": ["time", "comment"],
					"error": "cannot split \"--comment=token sbatch-error-token\": unterminated quote"},
				"runtime": {"slurm-job.vk.io/singularity-options": {"options": ["--env"], "error": "--env API_KEY=runtime-key-value: not an option"},
					"slurm-job.vk.io/singularity-mounts": {"options": [], "error": null}}}}`).Value.(ast.Object)
			merged, ok := input.(ast.Object).Merge(extra)
			if !ok {
				t.Fatal("merging the bridge's input members")
			}
			input = merged
		}
		result := map[string]any{"allowed": true}
		if tc.result != nil {
			result = tc.result
		}
		rv, err := ast.InterfaceToValue(result)
		if err != nil {
			t.Fatal(err)
		}
		p.DecisionLog().LogDecision(context.Background(), decisionlog.Event{ID: "mask-" + strconv.Itoa(i),
			Path: "interlink/authz/decision", Input: input, Result: rv, Timestamp: time.Now(), RequestedBy: "relay"})
	}
	byID := map[string]map[string]any{}
	for _, e := range recv.wait(t, len(cases)) {
		byID[fmt.Sprint(e["decision_id"])] = e
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "mask-" + strconv.Itoa(i)
			e := byID[id]
			if e == nil {
				t.Fatalf("no event %s", id)
			}
			raw, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			line := consoleLine(t, console, id)
			// The console's event is the uploaded one, input and result included (a logfmt
			// line would say "unsupported value type").
			var printed map[string]any
			if err := json.Unmarshal([]byte(line), &printed); err != nil {
				t.Fatalf("the console line is not one JSON object: %v: %s", err, line)
			}
			for _, member := range []string{"input", "result", "masked", "erased", "labels"} {
				if !reflect.DeepEqual(printed[member], e[member]) {
					t.Errorf("the console's %s = %v, the uploaded event's %v", member, printed[member], e[member])
				}
			}
			if printed["msg"] != "Decision Log" || printed["type"] != "openpolicyagent.org/decision_logs" {
				t.Errorf("the console line is not OPA's decision log line: %s", line)
			}
			for _, s := range tc.secrets {
				if strings.Contains(string(raw), s) {
					t.Errorf("the uploaded event holds %q: %s", s, raw)
				}
				if strings.Contains(line, s) {
					t.Errorf("the console line holds %q: %s", s, line)
				}
			}
			for ptr, want := range tc.want {
				got, ok := pointer(e, ptr)
				if want == nil {
					if ok {
						t.Errorf("%s = %v, want it absent", ptr, got)
					}
					continue
				}
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %#v (%v), want %#v", ptr, got, ok, want)
				}
			}
			for _, ptr := range tc.absent {
				if got, ok := pointer(e, ptr); ok {
					t.Errorf("%s = %v, want it removed", ptr, got)
				}
			}
			listed := fmt.Sprint(e["masked"])
			for _, path := range tc.masked {
				if !strings.Contains(listed+" ", path+" ") && !strings.Contains(listed, path+"]") {
					t.Errorf("masked %s, want it to list %s", listed, path)
				}
			}
		})
	}
}

// consoleLine is the console's line of the event id.
func consoleLine(t *testing.T, w *testWriter, id string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines, _ := w.since(0)
		for _, l := range lines {
			if strings.Contains(l, `"decision_id":"`+id+`"`) && strings.Contains(l, "Decision Log") {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no console line for %s among:\n%s", id, strings.Join(lines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pointer resolves a JSON pointer (RFC 6901) in a decoded event.
func pointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	for _, part := range strings.Split(ptr[1:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch v := doc.(type) {
		case map[string]any:
			child, ok := v[part]
			if !ok {
				return nil, false
			}
			doc = child
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			doc = v[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// A bundle extends the default mask in package system.log: more annotation keys and
// credential patterns through the partial sets, and drop_annotations for annotations
// gone whole (OPA applies removals before upserts: a plain removal would be undone by
// the masked copy).
func TestMaskExtendedByBundle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		module string
		want   map[string]any // JSON pointer → value; nil: absent
		erased string         // a path the event's "erased" must list
	}{{
		name:   "drop_annotations",
		module: "package system.log\n\ndrop_annotations := true\n",
		want: map[string]any{
			"/input/pod/metadata/annotations":         nil,
			"/input/pod/spec/containers/0/args/0":     "--password=**masked**",
			"/input/pod/spec/containers/0/env/0/name": "DB_PASSWORD",
		},
		erased: "/input/pod/metadata/annotations",
	}, {
		name: "more keys and patterns",
		module: "package system.log\n\nsecret_annotations contains \"interlink.eu/pod-ip\"\n\n" +
			"credential_patterns contains `listen`\n",
		want: map[string]any{
			"/input/pod/metadata/annotations/interlink.eu~1pod-ip":      "**masked**",
			"/input/pod/metadata/annotations/slurm-job.vk.io~1flags":    "--time=1:00:00",
			"/input/pod/metadata/annotations/slurm-job.vk.io~1pre-exec": "**masked**",
			"/input/pod/spec/containers/0/args":                         []any{"--password=**masked**", "--token", "**masked**", "--listen=**masked**"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			key := newSigner(t, "site-key")
			srv := &bundleServer{}
			srv.set(buildBundle(t, key, "r1", []string{"acme", "system/log"}, map[string]string{
				"/acme/site.rego":       "package acme\n\nrevision := data.acme.rev\n",
				"/system/log/site.rego": tc.module,
			}, map[string]any{"acme": map[string]any{"rev": "r1"}}))
			bs := httptest.NewServer(srv)
			defer bs.Close()
			recv := &logReceiver{}
			ls := httptest.NewServer(recv)
			defer ls.Close()
			var cfg map[string]any
			if err := json.Unmarshal(config(t, bs.URL, key, ""), &cfg); err != nil {
				t.Fatal(err)
			}
			cfg["services"].(map[string]any)["logs"] = map[string]any{"url": ls.URL}
			cfg["decision_logs"] = map[string]any{"service": "logs", "resource": "/logs",
				"reporting": map[string]any{"min_delay_seconds": 1, "max_delay_seconds": 1}}
			raw, _ := json.Marshal(cfg)
			r := newReloader(t)
			logs := &testWriter{}
			p := start(t, raw, r, logs)
			if err := p.WaitReady(context.Background(), 30*time.Second); err != nil {
				lines, _ := logs.since(0)
				t.Fatalf("%v\n%s", err, strings.Join(lines, "\n"))
			}
			waitRevision(t, r, "r1")
			input, err := ast.InterfaceToValue(map[string]any{"operation": "create", "pod": meshPod()})
			if err != nil {
				t.Fatal(err)
			}
			p.DecisionLog().LogDecision(context.Background(), decisionlog.Event{ID: "bundle-1", Path: "interlink/authz/decision",
				Input: input, Timestamp: time.Now()})
			e := recv.wait(t, 1)[0]
			raw, _ = json.Marshal(e)
			for _, s := range []string{wgPrivateKey, wgPeerPrivateKey, wstunnelPassword, "hunter2", "pg-s3cr3t-value"} {
				if strings.Contains(string(raw), s) {
					t.Errorf("the event holds %q: %s", s, raw)
				}
			}
			for ptr, want := range tc.want {
				got, ok := pointer(e, ptr)
				if want == nil {
					if ok {
						t.Errorf("%s = %v, want it absent", ptr, got)
					}
				} else if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %#v (%v), want %#v", ptr, got, ok, want)
				}
			}
			if got, _ := pointer(e, "/input/pod/metadata/name"); got != "mesh-job-7d9f" {
				t.Errorf("the pod's name is %v", got)
			}
			if tc.erased != "" && !strings.Contains(fmt.Sprint(e["erased"]), tc.erased) {
				t.Errorf("erased %v, want %s listed", e["erased"], tc.erased)
			}
		})
	}
}
