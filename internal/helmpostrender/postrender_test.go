package helmpostrender

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/charts/sar-bridge/rbac"
)

// chartOutput is shaped like `helm template` of interLink's chart (written here, not
// copied): the "<nodeName>-node" Deployment with the plugin, interLink and VK containers
// (the VK's kubelet port set as the chart sets it), interLink's config ConfigMap, and an
// unrelated ServiceAccount.
func chartOutput(sidecar, socketsMount, interlinkEnv string) string {
	mount := ""
	volume := ""
	if socketsMount != "" {
		mount = "\n          - name: sockets\n            mountPath: " + socketsMount
		volume = "\n      - name: sockets\n        emptyDir: {}"
	}
	return `---
# Source: interlink/templates/service-account.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: vk-hpc
  namespace: interlink
---
# Source: interlink/templates/virtual-kubelet-config.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: "vk-hpc-interlink-config"
  namespace: interlink
data:
  InterLinkConfig.yaml: |
    InterlinkAddress: "unix:///var/run/interlink.sock"
` + sidecar + `    VerboseLogging: true
---
# Source: interlink/templates/virtual-kubelet.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vk-hpc-node
  namespace: interlink
  labels:
    app: vk-hpc
spec:
  replicas: 1
  selector:
    matchLabels:
      app: vk-hpc
  template:
    metadata:
      labels:
        app: vk-hpc
    spec:
      automountServiceAccountToken: true
      serviceAccountName: vk-hpc
      containers:
      - name: plugin
        image: "example/plugin:1"
        volumeMounts:
          - name: plugin-config
            mountPath: /etc/interlink/plugin.yaml
            subPath: plugin.yaml` + mount + `
      - name: interlink
        image: "example/interlink:0.6.2"
        env:
          - name: INTERLINKCONFIGPATH
            value: "/etc/interlink/InterLinkConfig.yaml"` + interlinkEnv + `
        volumeMounts:
          - name: il-config
            mountPath: /etc/interlink/InterLinkConfig.yaml
            subPath: InterLinkConfig.yaml` + mount + `
      - name: vk
        image: example/vk:0.6.2
        env:
        - name: KUBELET_PORT
          value: "10250"
      volumes:
      - name: il-config
        configMap:
          name: vk-hpc-interlink-config
      - name: plugin-config
        configMap:
          name: vk-hpc-plugin-config` + volume + `
`
}

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		in                              string
		opts                            Options
		wantPlugin, wantVolume, wantErr string
		wantSocketsAdded                bool
	}{
		{name: "plugin on a socket in /var/run/",
			in:         chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", ""),
			wantPlugin: "unix:///var/run/plugin.sock", wantVolume: "sockets"},
		{name: "plugin on localhost, no shared volume yet",
			in:         chartOutput(`    SidecarURL: "http://localhost"`+"\n"+`    SidecarPort: "4000"`+"\n", "", ""),
			wantPlugin: "http://localhost:4000", wantVolume: "sockets", wantSocketsAdded: true},
		{name: "SIDECARURL and SIDECARPORT override the config",
			in: chartOutput(`    SidecarURL: "http://localhost"`+"\n"+`    SidecarPort: "4000"`+"\n", "/var/run",
				"\n          - name: SIDECARURL\n            value: http://plugin.hpc\n          - name: SIDECARPORT\n            value: \"5000\""),
			wantPlugin: "http://plugin.hpc:5000", wantVolume: "sockets"},
		{name: "explicit plugin URL",
			in:         chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", ""),
			opts:       Options{PluginURL: "http://127.0.0.1:4000", Deployment: "vk-hpc-node"},
			wantPlugin: "http://127.0.0.1:4000", wantVolume: "sockets"},
		{name: "https plugin", in: chartOutput(`    SidecarURL: "https://plugin"`+"\n"+`    SidecarPort: "4000"`+"\n", "", ""),
			wantErr: `SidecarURL "https://plugin" is neither http:// nor unix://`},
		{name: "no SidecarURL", in: chartOutput("", "", ""),
			wantErr: "cannot find interLink's SidecarURL"},
		{name: "http without a port", in: chartOutput(`    SidecarURL: "http://localhost"`+"\n", "", ""),
			wantErr: "SidecarURL http://localhost has no SidecarPort"},
		{name: "wrong Deployment named", in: chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", ""),
			opts: Options{Deployment: "other-node"}, wantErr: "no Deployment other-node in the input"},
		{name: "no interLink container", in: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {template: {spec: {containers: [{name: web}]}}}\n",
			wantErr: `no Deployment with a container named "interlink"`},
		{name: "socket outside the shared directory", in: chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", ""),
			opts: Options{Socket: "/tmp/sb.sock"}, wantErr: "must be a file directly in /var/run/"},
		{name: "two interLink Deployments",
			in:      chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", "") + "---\n" + strings.Replace(strings.SplitN(chartOutput("", "/var/run/", ""), "# Source: interlink/templates/virtual-kubelet.yaml\n", 2)[1], "vk-hpc-node", "vk-two-node", 1),
			wantErr: "more than one interLink Deployment (vk-hpc-node, vk-two-node)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.Image == "" {
				tc.opts.Image = "ghcr.io/sar-bridge/sar-bridge:v0.1.0"
			}
			tc.opts.RBAC, tc.opts.NetworkPolicy = true, true
			out, err := Render([]byte(tc.in), tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			inDocs, _ := split([]byte(tc.in))
			outDocs, err := split(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(outDocs) != len(inDocs)+5 {
				t.Fatalf("%d documents out, %d in (+1 NetworkPolicy, +4 RBAC expected)", len(outDocs), len(inDocs))
			}
			// Everything but the Deployment is written out byte for byte.
			for i := range inDocs {
				if inDocs[i].kind() != "Deployment" && string(inDocs[i].raw) != string(outDocs[i].raw) {
					t.Errorf("document %d changed:\n%s\n---\n%s", i, inDocs[i].raw, outDocs[i].raw)
				}
			}
			if !strings.HasPrefix(string(outDocs[2].raw), "# Source: interlink/templates/virtual-kubelet.yaml\n") {
				t.Errorf("the Deployment lost its Source comment:\n%s", outDocs[2].raw)
			}
			spec := podSpec(outDocs[2].obj)
			inSpec := podSpec(inDocs[2].obj)
			if got := len(containers(spec)); got != 4 {
				t.Fatalf("%d containers, want plugin, interlink, vk, sar-bridge", got)
			}
			// The plugin and the VK container are untouched.
			for _, name := range []string{"plugin", "vk"} {
				if !reflect.DeepEqual(findContainer(spec, name), findContainer(inSpec, name)) {
					t.Errorf("container %s changed", name)
				}
			}
			il := findContainer(spec, "interlink")
			if v, _ := env(il, "SIDECARURL"); v != "unix:///var/run/sar-bridge.sock" {
				t.Errorf("interlink SIDECARURL %q", v)
			}
			if got := mountAt(il, "/var/run/"); got != tc.wantVolume {
				t.Errorf("interlink mounts %q at /var/run/, want %q", got, tc.wantVolume)
			}
			b := findContainer(spec, "sar-bridge")
			var args []string
			for _, a := range list(b["args"]) {
				args = append(args, a.(string))
			}
			wantArgs := []string{"--interlink.listen=unix:///var/run/sar-bridge.sock", "--interlink.plugin-url=" + tc.wantPlugin,
				"--web.listen=127.0.0.1:18080", "--web.internal.listen=:18081", "--log.format=json", "--web.shutdown-delay=5s"}
			if !reflect.DeepEqual(args, wantArgs) {
				t.Errorf("bridge args %q, want %q", args, wantArgs)
			}
			if got := mountAt(b, "/var/run/"); got != tc.wantVolume {
				t.Errorf("bridge mounts %q at /var/run/", got)
			}
			if b["image"] != "ghcr.io/sar-bridge/sar-bridge:v0.1.0" {
				t.Errorf("image %v", b["image"])
			}
			wantVolumes := len(list(inSpec["volumes"])) + 1
			if tc.wantSocketsAdded {
				wantVolumes++
			}
			if got := len(list(spec["volumes"])); got != wantVolumes {
				t.Errorf("%d volumes, want %d", got, wantVolumes)
			}
			if np := outDocs[len(inDocs)]; string(np.raw) != wantPolicy("10250/TCP") {
				t.Errorf("NetworkPolicy:\n%s\nwant:\n%s", np.raw, wantPolicy("10250/TCP"))
			}
			role, binding := outDocs[len(outDocs)-4], outDocs[len(outDocs)-3]
			if role.kind() != "ClusterRole" || role.name() != "sar-bridge-interlink-vk-hpc-node" || !reflect.DeepEqual(role.obj["rules"], roundTrip(t, clusterRoleRules(t))) {
				t.Errorf("ClusterRole:\n%s", role.raw)
			}
			wantSubjects := []any{map[string]any{"kind": "ServiceAccount", "name": "vk-hpc", "namespace": "interlink"}}
			if binding.kind() != "ClusterRoleBinding" || !reflect.DeepEqual(binding.obj["subjects"], wantSubjects) {
				t.Errorf("ClusterRoleBinding:\n%s", binding.raw)
			}
			leaseRole, leaseBinding := outDocs[len(outDocs)-2], outDocs[len(outDocs)-1]
			if string(leaseRole.raw) != wantLeaseRole || string(leaseBinding.raw) != wantLeaseBinding {
				t.Errorf("leader election:\n%s---\n%s\nwant:\n%s---\n%s", leaseRole.raw, leaseBinding.raw, wantLeaseRole, wantLeaseBinding)
			}
			// A second pass refuses: interLink already calls the bridge.
			if _, err := Render(out, tc.opts); err == nil || !strings.Contains(err.Error(), `already has a container named "sar-bridge"`) {
				t.Errorf("rendering twice: %v", err)
			}
		})
	}
}

// wantLeaseRole and wantLeaseBinding are the leader election's Role and RoleBinding for
// chartOutput's pod, in the Lease's default namespace, as the post-renderer writes them.
const (
	wantLeaseRole = `# Source: sar-bridge helm-postrender
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  labels:
    app.kubernetes.io/name: sar-bridge
    app.kubernetes.io/part-of: interlink
  name: sar-bridge-interlink-vk-hpc-node
  namespace: sar-bridge
rules:
- apiGroups:
  - coordination.k8s.io
  resources:
  - leases
  verbs:
  - get
  - create
  - update
`
	wantLeaseBinding = `# Source: sar-bridge helm-postrender
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  labels:
    app.kubernetes.io/name: sar-bridge
    app.kubernetes.io/part-of: interlink
  name: sar-bridge-interlink-vk-hpc-node
  namespace: sar-bridge
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: sar-bridge-interlink-vk-hpc-node
subjects:
- kind: ServiceAccount
  name: vk-hpc
  namespace: interlink
`
)

// The Lease's namespace is the one the bridge's args name (the last, in either form
// the flag parser takes), else the flag's default; an empty one is refused.
func TestRenderLeaseNamespace(t *testing.T) {
	in := chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", "")
	for _, tc := range []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{name: "default", want: "sar-bridge"},
		{name: "named with =", args: []string{"--quota.lease-namespace=interlink"}, want: "interlink"},
		{name: "named as two args", args: []string{"--quota.lease-namespace", "hpc"}, want: "hpc"},
		{name: "the last wins", args: []string{"--quota.lease-namespace=a", "--log.level=debug", "--quota.lease-namespace=b"}, want: "b"},
		{name: "another flag's value is not it", args: []string{"--openshift.mappings=quota.lease-namespace=x"}, want: "sar-bridge"},
		{name: "empty", args: []string{"--quota.lease-namespace="},
			wantErr: "the bridge args name an empty --quota.lease-namespace: the Role of its leader election needs a namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Render([]byte(in), Options{Image: "img", RBAC: true, NetworkPolicy: true, Args: tc.args})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			docs, err := split(out)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				if k := d.kind(); k == "Role" || k == "RoleBinding" {
					meta, _ := d.obj["metadata"].(map[string]any)
					got = append(got, fmt.Sprintf("%s %v/%s", k, meta["namespace"], d.name()))
				}
			}
			want := []string{"Role " + tc.want + "/sar-bridge-interlink-vk-hpc-node", "RoleBinding " + tc.want + "/sar-bridge-interlink-vk-hpc-node"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("leader election objects %q, want %q", got, want)
			}
		})
	}
}

// wantPolicy is the NetworkPolicy for chartOutput's pod admitting ports ("10250/TCP"), as
// the post-renderer writes it.
func wantPolicy(ports ...string) string {
	var b strings.Builder
	for _, p := range ports {
		n, proto, _ := strings.Cut(p, "/")
		b.WriteString("    - port: " + n + "\n      protocol: " + proto + "\n")
	}
	return `# Source: sar-bridge helm-postrender
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  labels:
    app.kubernetes.io/name: sar-bridge
    app.kubernetes.io/part-of: interlink
  name: sar-bridge-vk-hpc-node
  namespace: interlink
spec:
  ingress:
  - ports:
` + b.String() + `  podSelector:
    matchLabels:
      app: vk-hpc
  policyTypes:
  - Ingress
`
}

// service is a Service document of the rendering.
func service(name, namespace, selector, ports string) string {
	return "---\n# Source: interlink/templates/virtual-kubelet.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: " + name +
		"\n  namespace: " + namespace + "\nspec:\n  type: NodePort\n  selector: " + selector + "\n  ports: " + ports + "\n"
}

// sshBastion adds interLink's chart's ssh bastion container (ports 2222 and 22) to the
// pod, and its NodePort Service.
func sshBastion(in string) string {
	in = strings.Replace(in, "      - name: vk\n", `      - name: ssh-bastion
        image: example/openssh-server
        ports:
        - containerPort: 2222
          name: ssh-tunnel
        - containerPort: 22
      - name: vk
`, 1)
	return in + service("ssh-bastion-vk", "interlink", "{app: vk-hpc}", "[{port: 2222, nodePort: 31022}]")
}

// TestRenderNetworkPolicy: the policy selects interLink's pod and admits only the
// Virtual Kubelet's port and the ports Services target on the pod; never the plugin's
// port in the pod, nor the bridge's; a plugin on TCP in the pod is not rendered without
// the policy unless insisted on.
func TestRenderNetworkPolicy(t *testing.T) {
	socketPlugin := chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", "")
	tcpPlugin := chartOutput(`    SidecarURL: "http://localhost"`+"\n"+`    SidecarPort: "3000"`+"\n", "", "")
	for _, tc := range []struct {
		name     string
		in       string
		opts     Options
		want     string // the NetworkPolicy document; "" for none
		wantErrs []string
	}{
		{name: "plugin on a socket", in: socketPlugin, opts: Options{NetworkPolicy: true}, want: wantPolicy("10250/TCP")},
		{name: "plugin on TCP in the pod", in: tcpPlugin, opts: Options{NetworkPolicy: true}, want: wantPolicy("10250/TCP")},
		{name: "the ssh bastion's Service target, not its undeclared-by-Service port 22", in: sshBastion(tcpPlugin), opts: Options{NetworkPolicy: true},
			want: wantPolicy("2222/TCP", "10250/TCP")},
		{name: "named and numeric targets, defaults, duplicates; other namespaces and pods ignored",
			in: sshBastion(tcpPlugin) +
				service("by-name", "interlink", "{app: vk-hpc}", "[{port: 22, targetPort: ssh-tunnel}, {port: 53, targetPort: 5353, protocol: UDP}, {port: 8443}]") +
				service("other-namespace", "elsewhere", "{app: vk-hpc}", "[{port: 3000}]") +
				service("other-pods", "interlink", "{app: vk-hpc, tier: web}", "[{port: 3000}]") +
				service("no-selector", "interlink", "{}", "[{port: 3000}]"),
			opts: Options{NetworkPolicy: true}, want: wantPolicy("2222/TCP", "5353/UDP", "8443/TCP", "10250/TCP")},
		{name: "the VK's own default port", in: strings.Replace(socketPlugin, "        env:\n        - name: KUBELET_PORT\n          value: \"10250\"\n", "", 1),
			opts: Options{NetworkPolicy: true}, want: wantPolicy("5820/TCP")},
		{name: "a Service to the plugin in the pod", in: tcpPlugin + service("plugin", "interlink", "{app: vk-hpc}", "[{port: 80, targetPort: 3000}]"),
			opts:     Options{NetworkPolicy: true},
			wantErrs: []string{"Service plugin targets port 3000 of the interLink pod, the plugin (http://localhost:3000)"}},
		{name: "a Service to the bridge's internal port", in: socketPlugin + service("probe", "interlink", "{app: vk-hpc}", "[{port: 80, targetPort: sb-internal}]"),
			opts: Options{NetworkPolicy: true}, wantErrs: []string{"Service probe targets port 18081 of the interLink pod, the bridge's internal listener"}},
		{name: "a Service to the bridge's Data API", in: socketPlugin + service("api", "interlink", "{app: vk-hpc}", "[{port: 18080}]"),
			opts: Options{NetworkPolicy: true}, wantErrs: []string{"Service api targets port 18080 of the interLink pod, the bridge's Data API"}},
		{name: "an unknown named target", in: socketPlugin + service("x", "interlink", "{app: vk-hpc}", "[{port: 80, targetPort: web}]"),
			opts: Options{NetworkPolicy: true}, wantErrs: []string{`Service x: targetPort "web" names no container port of the pod`}},
		{name: "no VK container", in: strings.Replace(socketPlugin, "- name: vk\n", "- name: kubelet\n", 1), opts: Options{NetworkPolicy: true},
			wantErrs: []string{`no container named "vk": cannot tell the Virtual Kubelet's port`, "--network-policy=false"}},
		{name: "a KUBELET_PORT that is no port", in: strings.Replace(socketPlugin, `value: "10250"`, `value: "kubelet"`, 1), opts: Options{NetworkPolicy: true},
			wantErrs: []string{`KUBELET_PORT "kubelet" is not a port number`}},
		{name: "a pod template without labels", in: strings.Replace(socketPlugin, "    metadata:\n      labels:\n        app: vk-hpc\n", "", 1), opts: Options{NetworkPolicy: true},
			wantErrs: []string{"the pod template has no labels to select the pod by"}},
		{name: "off, plugin on a socket", in: socketPlugin},
		{name: "off, plugin on another host", in: tcpPlugin, opts: Options{PluginURL: "http://slurm-plugin.hpc.example:3000"}},
		{name: "off, plugin on TCP in the pod", in: tcpPlugin,
			wantErrs: []string{"the plugin listens on TCP in the pod (http://localhost:3000) and the NetworkPolicy is off", "--insecure-allow-unprotected-plugin"}},
		{name: "off, plugin on the pod's loopback address", in: tcpPlugin, opts: Options{PluginURL: "http://127.0.0.1:3000/api"},
			wantErrs: []string{"the plugin listens on TCP in the pod (http://127.0.0.1:3000/api)"}},
		{name: "off, plugin on TCP in the pod, insisted on", in: tcpPlugin, opts: Options{AllowUnprotectedPlugin: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Image = "ghcr.io/sar-bridge/sar-bridge:v0.1.0"
			out, err := Render([]byte(tc.in), tc.opts)
			if len(tc.wantErrs) > 0 {
				for _, w := range tc.wantErrs {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("err %v, want %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			inDocs, _ := split([]byte(tc.in))
			outDocs, err := split(out)
			if err != nil {
				t.Fatal(err)
			}
			var policies []document
			for _, d := range outDocs {
				if d.kind() == "NetworkPolicy" {
					policies = append(policies, d)
				}
			}
			switch {
			case tc.want == "" && len(policies) != 0:
				t.Errorf("a NetworkPolicy with the policy off:\n%s", policies[0].raw)
			case tc.want != "" && (len(policies) != 1 || string(policies[0].raw) != tc.want):
				t.Errorf("NetworkPolicies %d:\n%s\nwant:\n%s", len(policies), out, tc.want)
			}
			// Only the Deployment changes; the policy is added after the input.
			if want := len(inDocs) + len(policies); len(outDocs) != want {
				t.Fatalf("%d documents out, want %d", len(outDocs), want)
			}
			for i := range inDocs {
				if inDocs[i].kind() != "Deployment" && string(inDocs[i].raw) != string(outDocs[i].raw) {
					t.Errorf("document %d changed:\n%s\n---\n%s", i, inDocs[i].raw, outDocs[i].raw)
				}
			}
		})
	}
}

// clusterRoleRules are the rules the ClusterRole must carry: manifests/base's.
func clusterRoleRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	r, err := rbac.ClusterRoleRules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := yaml.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// --opa-config-configmap: the sidecar reads OPA's configuration from the ConfigMap and
// persists bundles in an emptyDir of its own.
func TestRenderOPAConfig(t *testing.T) {
	in := chartOutput(`    SidecarURL: "unix:///var/run/plugin.sock"`+"\n", "/var/run/", "")
	out, err := Render([]byte(in), Options{Image: "img", NetworkPolicy: true, OPAConfigMap: "site-opa", Args: []string{"--log.level=debug"}})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := split(out)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	for _, d := range docs {
		if d.kind() == "Deployment" {
			spec = d.obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		}
	}
	var bridge map[string]any
	for _, c := range containers(spec) {
		if c["name"] == bridgeContainer {
			bridge = c
		}
	}
	if bridge == nil {
		t.Fatal("no bridge container")
	}
	args := fmt.Sprint(bridge["args"])
	if !strings.Contains(args, "--config-file=/etc/sar-bridge/opa/config.yaml --log.level=debug") {
		t.Errorf("args %s: want --config-file before the user's args", args)
	}
	wantVolumes := map[string]string{
		opaConfigVolume:      `map[configMap:map[name:site-opa] name:sar-bridge-opa-config]`,
		opaPersistenceVolume: `map[emptyDir:map[sizeLimit:64Mi] name:sar-bridge-opa]`,
	}
	for _, v := range list(spec["volumes"]) {
		vm := v.(map[string]any)
		if want, ok := wantVolumes[fmt.Sprint(vm["name"])]; ok {
			if got := fmt.Sprint(vm); got != want {
				t.Errorf("volume %s, want %s", got, want)
			}
			delete(wantVolumes, fmt.Sprint(vm["name"]))
		}
	}
	if len(wantVolumes) > 0 {
		t.Errorf("volumes missing: %v", wantVolumes)
	}
	mounts := fmt.Sprint(bridge["volumeMounts"])
	for _, want := range []string{"map[mountPath:/etc/sar-bridge/opa name:sar-bridge-opa-config readOnly:true]", "map[mountPath:/var/lib/sar-bridge/opa name:sar-bridge-opa]"} {
		if !strings.Contains(mounts, want) {
			t.Errorf("mounts %s, want %s", mounts, want)
		}
	}
}
