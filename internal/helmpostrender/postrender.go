// Package helmpostrender adds sar-bridge as a sidecar of interLink's API server to the
// output of interLink's Helm chart (a Helm post-renderer reads the rendered manifests on
// stdin and writes the ones to install on stdout).
//
// interLink's chart runs the Virtual Kubelet, the interLink API server (container
// "interlink") and optionally the plugin in one Deployment "<nodeName>-node", with unix
// sockets in an emptyDir at /var/run/. The post-renderer adds the bridge container on
// that volume, points interLink at the bridge with the SIDECARURL environment variable
// (interLink's own override of its config's SidecarURL), hands the bridge the plugin
// address interLink used until then, and adds a NetworkPolicy that admits to the pod only
// what must reach it (so a plugin on TCP cannot be called around the bridge) and the
// ClusterRole the bridge needs, bound to the pod's ServiceAccount, with the Role of the
// quota reconciler's leader election in the Lease's namespace. Every other document is
// written out byte for byte.
//
// It adds nothing that must exist once per cluster (the OffloadTenant CRD, the admission
// policy sar-bridge-ledger-marks that keeps the quota ledger's pod marks to it): Helm
// lets one release own an object, and every interLink release — one per virtual node —
// would render the same one. A site that runs only sidecars applies them once
// (`sar-bridge ledger-marks | kubectl apply -f -`).
package helmpostrender

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/charts/sar-bridge/rbac"
)

// Options says what to add.
type Options struct {
	// Deployment names the interLink Deployment; empty: the only Deployment with a
	// container named "interlink".
	Deployment string
	// Image of the bridge container.
	Image string
	// Socket is where the bridge listens for interLink; it must be under the /var/run/
	// volume the containers share.
	Socket string
	// PluginURL is where allowed requests go; empty: the address interLink's config (or
	// its SIDECARURL/SIDECARPORT environment) names.
	PluginURL string
	// Args are more bridge flags (mappings, policy data, ...), appended.
	Args []string
	// RBAC adds a ClusterRole and ClusterRoleBinding for the pod's ServiceAccount, and a
	// Role and RoleBinding for its leader election in the Lease's namespace.
	RBAC bool
	// NetworkPolicy adds a NetworkPolicy that admits to interLink's pod only the Virtual
	// Kubelet's port and the ports Services of the rendering target.
	NetworkPolicy bool
	// AllowUnprotectedPlugin renders a plugin on TCP in the pod (http://localhost:PORT)
	// without the NetworkPolicy, which is refused otherwise.
	AllowUnprotectedPlugin bool
	// OPAConfigMap names a ConfigMap (in the pod's namespace) whose key config.yaml is
	// OPA's configuration file: mounted and passed as --config-file, with an emptyDir
	// at OPAPersistenceDir for the bundles it persists. Empty: none.
	OPAConfigMap string
}

// OPA's configuration in the sidecar (Options.OPAConfigMap).
const (
	opaConfigVolume      = "sar-bridge-opa-config"
	opaConfigDir         = "/etc/sar-bridge/opa"
	opaPersistenceVolume = "sar-bridge-opa"
	// OPAPersistenceDir is where the sidecar may write: the configuration's
	// persistence_directory.
	OPAPersistenceDir = "/var/lib/sar-bridge/opa"
)

const (
	interlinkContainer = "interlink"
	bridgeContainer    = "sar-bridge"
	socketsVolume      = "sockets"
	socketsDir         = "/var/run/"
	bridgeTmpVolume    = "sar-bridge-tmp"
	vkContainer        = "vk"
	internalPort       = 18081
	webPort            = 18080
	configPath         = "/etc/interlink/InterLinkConfig.yaml"
	// defaultKubeletPort is the Virtual Kubelet's port when KUBELET_PORT is not set
	// (interLink's cmd/virtual-kubelet); interLink's chart sets 10250.
	defaultKubeletPort = 5820
	generatedSource    = "# Source: sar-bridge helm-postrender\n"
	// leaseNamespaceFlag names the namespace of the quota reconciler's Lease; every
	// bridge, standalone or sidecar, elects its one reconciler there.
	leaseNamespaceFlag = "--quota.lease-namespace"
	// DefaultLeaseNamespace is --quota.lease-namespace's default: manifests/base's and
	// the standalone chart's namespace.
	DefaultLeaseNamespace = "sar-bridge"
)

// webListen keeps the Data API on loopback: only the relay is used in the sidecar.
var webListen = fmt.Sprintf("127.0.0.1:%d", webPort)

// leaseNamespace is the namespace the bridge's args name for the Lease (the last
// --quota.lease-namespace, as the flag parser keeps it), else the flag's default.
func leaseNamespace(args []string) string {
	ns := DefaultLeaseNamespace
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, leaseNamespaceFlag+"="); ok {
			ns = v
		} else if a == leaseNamespaceFlag && i+1 < len(args) {
			ns = args[i+1]
		}
	}
	return ns
}

type document struct {
	raw []byte
	obj map[string]any // nil for a document without an object
}

func (d document) kind() string {
	k, _ := d.obj["kind"].(string)
	return k
}

func (d document) name() string {
	m, _ := d.obj["metadata"].(map[string]any)
	n, _ := m["name"].(string)
	return n
}

// split cuts a YAML stream at "---" lines, keeping each document's bytes.
func split(in []byte) ([]document, error) {
	var docs []document
	var cur bytes.Buffer
	flush := func() error {
		raw := append([]byte(nil), cur.Bytes()...)
		cur.Reset()
		if len(bytes.TrimSpace(raw)) == 0 {
			return nil
		}
		var obj map[string]any
		if err := yaml.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("document %d: %w", len(docs)+1, err)
		}
		docs = append(docs, document{raw: raw, obj: obj})
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(in))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimRight(line, " \t") == "---" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return docs, nil
}

// Render reads a rendered chart and returns it with the bridge added.
func Render(in []byte, o Options) ([]byte, error) {
	if o.Image == "" {
		return nil, errors.New("no bridge image")
	}
	if o.Socket == "" {
		o.Socket = "/var/run/sar-bridge.sock"
	}
	if !strings.HasPrefix(o.Socket, socketsDir) || strings.Contains(o.Socket[len(socketsDir):], "/") {
		return nil, fmt.Errorf("socket %s: must be a file directly in %s, the directory interLink's containers share", o.Socket, socketsDir)
	}
	docs, err := split(in)
	if err != nil {
		return nil, err
	}
	target := -1
	for i, d := range docs {
		if d.kind() != "Deployment" || (o.Deployment != "" && d.name() != o.Deployment) {
			continue
		}
		if o.Deployment == "" && findContainer(podSpec(d.obj), interlinkContainer) == nil {
			continue
		}
		if target >= 0 {
			return nil, fmt.Errorf("more than one interLink Deployment (%s, %s): name one with --deployment", docs[target].name(), d.name())
		}
		target = i
	}
	if target < 0 {
		if o.Deployment != "" {
			return nil, fmt.Errorf("no Deployment %s in the input", o.Deployment)
		}
		return nil, errors.New("no Deployment with a container named \"interlink\" in the input (is interlink.enabled off in interLink's values?)")
	}
	dep := docs[target].obj
	spec := podSpec(dep)
	il := findContainer(spec, interlinkContainer)
	if il == nil {
		return nil, fmt.Errorf("Deployment %s has no container named %q", docs[target].name(), interlinkContainer)
	}
	if findContainer(spec, bridgeContainer) != nil {
		return nil, fmt.Errorf("Deployment %s already has a container named %q: rendered twice?", docs[target].name(), bridgeContainer)
	}
	bridgeURL := "unix://" + o.Socket
	if o.PluginURL == "" {
		if o.PluginURL, err = pluginURL(docs, spec, il); err != nil {
			return nil, fmt.Errorf("Deployment %s: %w (pass --plugin-url)", docs[target].name(), err)
		}
	}
	if o.PluginURL == bridgeURL {
		return nil, fmt.Errorf("interLink already calls %s: rendered twice?", bridgeURL)
	}
	if !strings.HasPrefix(o.PluginURL, "http://") && !strings.HasPrefix(o.PluginURL, "unix://") {
		return nil, fmt.Errorf("plugin URL %q: interLink's plugin address is http:// or unix://", o.PluginURL)
	}
	if _, local := localPort(o.PluginURL); local && !o.NetworkPolicy && !o.AllowUnprotectedPlugin {
		return nil, fmt.Errorf("the plugin listens on TCP in the pod (%s) and the NetworkPolicy is off: any pod could call it on the pod's IP, around the bridge. "+
			"Keep the NetworkPolicy, put the plugin on a unix socket, or, if a NetworkPolicy of your own admits only the Virtual Kubelet's port, pass --insecure-allow-unprotected-plugin", o.PluginURL)
	}
	for _, c := range containers(spec) {
		for _, p := range list(c["ports"]) {
			if pm, _ := p.(map[string]any); pm != nil && fmt.Sprint(pm["containerPort"]) == fmt.Sprint(internalPort) {
				return nil, fmt.Errorf("container %v already uses port %d, the bridge's internal port", c["name"], internalPort)
			}
		}
	}

	// The shared /var/run/ volume: interLink's if it mounts one, else a new emptyDir.
	vol := mountAt(il, socketsDir)
	if vol == "" {
		vol = socketsVolume
		if !hasVolume(spec, vol) {
			spec["volumes"] = append(list(spec["volumes"]), map[string]any{"name": vol, "emptyDir": map[string]any{}})
		}
		il["volumeMounts"] = append(list(il["volumeMounts"]), map[string]any{"name": vol, "mountPath": socketsDir})
	}
	if hasVolume(spec, bridgeTmpVolume) {
		return nil, fmt.Errorf("the pod already has a volume %q", bridgeTmpVolume)
	}
	spec["volumes"] = append(list(spec["volumes"]), map[string]any{"name": bridgeTmpVolume, "emptyDir": map[string]any{"sizeLimit": "16Mi"}})
	// interLink reads SIDECARURL after its config file, so the ConfigMap stays as it is.
	setEnv(il, "SIDECARURL", bridgeURL)

	args := []any{
		"--interlink.listen=" + bridgeURL,
		"--interlink.plugin-url=" + o.PluginURL,
		"--web.listen=" + webListen,
		// On the pod's IP for the kubelet's probes; it serves no profiles
		// (--web.enable-pprof is off) and the NetworkPolicy does not admit it.
		fmt.Sprintf("--web.internal.listen=:%d", internalPort),
		"--log.format=json",
		"--web.shutdown-delay=5s",
	}
	mounts := []any{
		map[string]any{"name": vol, "mountPath": socketsDir},
		map[string]any{"name": bridgeTmpVolume, "mountPath": "/tmp"},
	}
	if o.OPAConfigMap != "" {
		for _, v := range []string{opaConfigVolume, opaPersistenceVolume} {
			if hasVolume(spec, v) {
				return nil, fmt.Errorf("the pod already has a volume %q", v)
			}
		}
		spec["volumes"] = append(list(spec["volumes"]),
			map[string]any{"name": opaConfigVolume, "configMap": map[string]any{"name": o.OPAConfigMap}},
			map[string]any{"name": opaPersistenceVolume, "emptyDir": map[string]any{"sizeLimit": "64Mi"}})
		mounts = append(mounts,
			map[string]any{"name": opaConfigVolume, "mountPath": opaConfigDir, "readOnly": true},
			map[string]any{"name": opaPersistenceVolume, "mountPath": OPAPersistenceDir})
		args = append(args, "--config-file="+opaConfigDir+"/config.yaml")
	}
	for _, a := range o.Args {
		args = append(args, a)
	}
	probe := func(path string, period int) map[string]any {
		return map[string]any{"httpGet": map[string]any{"path": path, "port": "sb-internal"}, "periodSeconds": period, "timeoutSeconds": 2}
	}
	spec["containers"] = append(list(spec["containers"]), map[string]any{
		"name":            bridgeContainer,
		"image":           o.Image,
		"imagePullPolicy": "IfNotPresent",
		"args":            args,
		"ports":           []any{map[string]any{"name": "sb-internal", "containerPort": internalPort, "protocol": "TCP"}},
		"readinessProbe":  probe("/ready", 5),
		"livenessProbe":   probe("/live", 10),
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "50m", "memory": "64Mi"},
			// A create carries the pod's ConfigMaps and Secrets (--interlink.max-body-bytes).
			"limits": map[string]any{"memory": "512Mi"},
		},
		"securityContext": map[string]any{
			"runAsNonRoot":             true,
			"runAsUser":                65532,
			"runAsGroup":               65532,
			"allowPrivilegeEscalation": false,
			"readOnlyRootFilesystem":   true,
			"capabilities":             map[string]any{"drop": []any{"ALL"}},
			"seccompProfile":           map[string]any{"type": "RuntimeDefault"},
		},
		"volumeMounts": mounts,
	})
	out, err := yaml.Marshal(dep)
	if err != nil {
		return nil, err
	}
	docs[target].raw = append(leadingComments(docs[target].raw), out...)

	if o.NetworkPolicy {
		np, err := networkPolicy(docs, dep, spec, o.PluginURL)
		if err != nil {
			return nil, fmt.Errorf("NetworkPolicy: %w", err)
		}
		docs = append(docs, np)
	}
	if o.RBAC {
		extra, err := rbacDocs(dep, spec, leaseNamespace(o.Args))
		if err != nil {
			return nil, err
		}
		docs = append(docs, extra...)
	}
	var buf bytes.Buffer
	for _, d := range docs {
		buf.WriteString("---\n")
		buf.Write(d.raw)
	}
	return buf.Bytes(), nil
}

// pluginURL is the plugin address interLink uses: its container's SIDECARURL and
// SIDECARPORT, else SidecarURL and SidecarPort of the InterLinkConfig.yaml it mounts.
// interLink joins an http URL and the port with ":"; a unix URL ignores the port.
func pluginURL(docs []document, spec, il map[string]any) (string, error) {
	var cfg struct {
		SidecarURL  string `json:"SidecarURL"`
		SidecarPort string `json:"SidecarPort"`
	}
	vol := ""
	for _, m := range list(il["volumeMounts"]) {
		if mm, _ := m.(map[string]any); mm != nil && mm["mountPath"] == configPath {
			vol, _ = mm["name"].(string)
		}
	}
	cm := ""
	for _, v := range list(spec["volumes"]) {
		if vm, _ := v.(map[string]any); vm != nil && vm["name"] == vol {
			c, _ := vm["configMap"].(map[string]any)
			cm, _ = c["name"].(string)
		}
	}
	if cm != "" {
		for _, d := range docs {
			if d.kind() != "ConfigMap" || d.name() != cm {
				continue
			}
			data, _ := d.obj["data"].(map[string]any)
			text, _ := data["InterLinkConfig.yaml"].(string)
			if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
				return "", fmt.Errorf("ConfigMap %s: InterLinkConfig.yaml: %w", cm, err)
			}
		}
	}
	if v, ok := env(il, "SIDECARURL"); ok && v != "" {
		cfg.SidecarURL = v
	}
	if v, ok := env(il, "SIDECARPORT"); ok && v != "" {
		cfg.SidecarPort = v
	}
	switch {
	case cfg.SidecarURL == "":
		return "", errors.New("cannot find interLink's SidecarURL (neither in its InterLinkConfig.yaml ConfigMap nor in SIDECARURL)")
	case strings.HasPrefix(cfg.SidecarURL, "unix://"):
		return cfg.SidecarURL, nil
	case strings.HasPrefix(cfg.SidecarURL, "http://"):
		if cfg.SidecarPort == "" {
			return "", fmt.Errorf("SidecarURL %s has no SidecarPort", cfg.SidecarURL)
		}
		return cfg.SidecarURL + ":" + cfg.SidecarPort, nil
	default:
		return "", fmt.Errorf("SidecarURL %q is neither http:// nor unix://", cfg.SidecarURL)
	}
}

// rbacDocs are the bridge's ClusterRole bound to the pod's ServiceAccount, and its leader
// election's Role in leaseNS bound to the same. The Role goes where the Lease is, not in
// the pod's namespace: the sidecars of every virtual node and the standalone replicas
// elect one reconciler, so they share one Lease. leaseNS must exist when Helm installs
// the rendering (manifests/base creates sar-bridge; docs/install/standalone.md installs the chart there).
func rbacDocs(dep, spec map[string]any, leaseNS string) ([]document, error) {
	meta, _ := dep["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	if ns == "" {
		return nil, fmt.Errorf("Deployment %s has no namespace: cannot bind its ServiceAccount", name)
	}
	if leaseNS == "" {
		return nil, fmt.Errorf("the bridge args name an empty %s: the Role of its leader election needs a namespace", leaseNamespaceFlag)
	}
	// The rules of manifests/base's ClusterRole and Role: one source, charts/sar-bridge/rbac.
	clusterRules, err := rbac.ClusterRoleRules()
	if err != nil {
		return nil, err
	}
	leaseRules, err := rbac.LeaseRoleRules()
	if err != nil {
		return nil, err
	}
	sa, _ := spec["serviceAccountName"].(string)
	if sa == "" {
		sa = "default"
	}
	// Cluster-scoped: the namespace keeps two interLink releases apart.
	objName := fmt.Sprintf("sar-bridge-%s-%s", ns, name)
	labels := map[string]any{"app.kubernetes.io/name": "sar-bridge", "app.kubernetes.io/part-of": "interlink"}
	role := map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": objName, "labels": labels},
		"rules":    clusterRules,
	}
	binding := map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": objName, "labels": labels},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": objName},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": ns}},
	}
	leaseRole := map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
		"metadata": map[string]any{"name": objName, "namespace": leaseNS, "labels": labels},
		"rules":    leaseRules,
	}
	leaseBinding := map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": map[string]any{"name": objName, "namespace": leaseNS, "labels": labels},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": objName},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": ns}},
	}
	var out []document
	for _, o := range []map[string]any{role, binding, leaseRole, leaseBinding} {
		d, err := generated(o)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// generated is a document the post-renderer adds, marked as such.
func generated(obj map[string]any) (document, error) {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return document{}, err
	}
	return document{raw: append([]byte(generatedSource), b...), obj: obj}, nil
}

// port is a port a NetworkPolicy admits.
type port struct {
	number   int
	protocol string
}

// networkPolicy selects interLink's pod and admits to it, from anywhere, only the Virtual
// Kubelet's kubelet port (the API server's logs, exec and metrics calls come from
// addresses a policy cannot portably name) and the ports that Services of the rendering
// in the Deployment's namespace target on the pod (the ssh bastion of interLink's chart).
// Every other port of the pod (a plugin on TCP, interLink's API, the bridge's) answers
// only the pod itself and, as for every policy, its node (the kubelet's probes).
func networkPolicy(docs []document, dep, spec map[string]any, pluginURL string) (document, error) {
	meta, _ := dep["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	tplSpec, _ := dep["spec"].(map[string]any)
	tpl, _ := tplSpec["template"].(map[string]any)
	tplMeta, _ := tpl["metadata"].(map[string]any)
	labels, _ := tplMeta["labels"].(map[string]any)
	if len(labels) == 0 {
		return document{}, fmt.Errorf("Deployment %s: the pod template has no labels to select the pod by", name)
	}
	kubelet, err := kubeletPort(spec)
	if err != nil {
		return document{}, fmt.Errorf("Deployment %s: %w (pass --network-policy=false and admit it with a NetworkPolicy of your own)", name, err)
	}
	ports := []port{kubelet}
	targets, err := serviceTargets(docs, ns, labels, spec)
	if err != nil {
		return document{}, err
	}
	closed := map[int]string{internalPort: "the bridge's internal listener", webPort: "the bridge's Data API"}
	if p, ok := localPort(pluginURL); ok {
		closed[p] = "the plugin (" + pluginURL + ")"
	}
	for _, t := range targets {
		if what, ok := closed[t.port.number]; ok {
			return document{}, fmt.Errorf("Service %s targets port %d of the interLink pod, %s: it must not be reachable from other pods", t.service, t.port.number, what)
		}
		ports = append(ports, t.port)
	}
	slices.SortFunc(ports, func(a, b port) int {
		return cmp.Or(cmp.Compare(a.number, b.number), cmp.Compare(a.protocol, b.protocol))
	})
	var admitted []any
	for _, p := range slices.Compact(ports) {
		admitted = append(admitted, map[string]any{"port": p.number, "protocol": p.protocol})
	}
	npMeta := map[string]any{"name": "sar-bridge-" + name, "labels": map[string]any{"app.kubernetes.io/name": "sar-bridge", "app.kubernetes.io/part-of": "interlink"}}
	if ns != "" {
		npMeta["namespace"] = ns
	}
	return generated(map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": npMeta,
		"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": labels},
			"policyTypes": []any{"Ingress"},
			// No "from": the API server calls the kubelet port from outside the pod network.
			"ingress": []any{map[string]any{"ports": admitted}},
		},
	})
}

// kubeletPort is the port the Virtual Kubelet serves the kubelet API on: its container's
// KUBELET_PORT.
func kubeletPort(spec map[string]any) (port, error) {
	vk := findContainer(spec, vkContainer)
	if vk == nil {
		return port{}, fmt.Errorf("no container named %q: cannot tell the Virtual Kubelet's port", vkContainer)
	}
	v, ok := env(vk, "KUBELET_PORT")
	if !ok {
		return port{defaultKubeletPort, "TCP"}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		return port{}, fmt.Errorf("container %s: KUBELET_PORT %q is not a port number", vkContainer, v)
	}
	return port{n, "TCP"}, nil
}

type serviceTarget struct {
	service string
	port    port
}

// serviceTargets are the pod ports that Services in namespace ns, whose selector the pod's
// labels match, send traffic to.
func serviceTargets(docs []document, ns string, labels, spec map[string]any) ([]serviceTarget, error) {
	var out []serviceTarget
	for _, d := range docs {
		meta, _ := d.obj["metadata"].(map[string]any)
		if svcNS, _ := meta["namespace"].(string); d.kind() != "Service" || svcNS != ns {
			continue
		}
		svc, _ := d.obj["spec"].(map[string]any)
		sel, _ := svc["selector"].(map[string]any)
		if len(sel) == 0 || !selects(sel, labels) {
			continue
		}
		for _, p := range list(svc["ports"]) {
			pm, _ := p.(map[string]any)
			proto, _ := pm["protocol"].(string)
			if proto == "" {
				proto = "TCP"
			}
			target := pm["targetPort"]
			if target == nil {
				target = pm["port"]
			}
			n, err := resolvePort(spec, target)
			if err != nil {
				return nil, fmt.Errorf("Service %s: %w", d.name(), err)
			}
			out = append(out, serviceTarget{service: d.name(), port: port{n, proto}})
		}
	}
	return out, nil
}

func selects(selector, labels map[string]any) bool {
	for k, v := range selector {
		if fmt.Sprint(labels[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// resolvePort is a Service's targetPort on the pod: a number, or a container port's name.
func resolvePort(spec map[string]any, target any) (int, error) {
	if name, ok := target.(string); ok {
		if n, err := strconv.Atoi(name); err == nil {
			return n, nil
		}
		for _, c := range containers(spec) {
			for _, p := range list(c["ports"]) {
				if pm, _ := p.(map[string]any); pm != nil && pm["name"] == name {
					return strconv.Atoi(fmt.Sprint(pm["containerPort"]))
				}
			}
		}
		return 0, fmt.Errorf("targetPort %q names no container port of the pod", name)
	}
	n, err := strconv.Atoi(fmt.Sprint(target))
	if err != nil {
		return 0, fmt.Errorf("targetPort %v: %w", target, err)
	}
	return n, nil
}

// localPort is the port of an http:// plugin URL that names this pod (loopback): a plugin
// reached there may listen on every interface of the pod, as the SLURM plugin does.
func localPort(pluginURL string) (int, bool) {
	u, err := url.Parse(pluginURL)
	if err != nil || u.Scheme != "http" {
		return 0, false
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "" && host != "localhost" && (ip == nil || !ip.IsLoopback() && !ip.IsUnspecified()) {
		return 0, false
	}
	n, err := strconv.Atoi(u.Port())
	if err != nil {
		return 80, true
	}
	return n, true
}

func leadingComments(raw []byte) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(raw, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			break
		}
		out = append(out, l...)
	}
	return out
}

func podSpec(dep map[string]any) map[string]any {
	s, _ := dep["spec"].(map[string]any)
	tpl, _ := s["template"].(map[string]any)
	ps, _ := tpl["spec"].(map[string]any)
	if ps == nil {
		return map[string]any{}
	}
	return ps
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func containers(spec map[string]any) []map[string]any {
	var out []map[string]any
	for _, c := range list(spec["containers"]) {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func findContainer(spec map[string]any, name string) map[string]any {
	for _, c := range containers(spec) {
		if c["name"] == name {
			return c
		}
	}
	return nil
}

func hasVolume(spec map[string]any, name string) bool {
	for _, v := range list(spec["volumes"]) {
		if m, _ := v.(map[string]any); m != nil && m["name"] == name {
			return true
		}
	}
	return false
}

// mountAt returns the volume c mounts at dir ("/var/run" and "/var/run/" alike).
func mountAt(c map[string]any, dir string) string {
	for _, m := range list(c["volumeMounts"]) {
		mm, _ := m.(map[string]any)
		if p, _ := mm["mountPath"].(string); mm != nil && strings.TrimSuffix(p, "/") == strings.TrimSuffix(dir, "/") {
			n, _ := mm["name"].(string)
			return n
		}
	}
	return ""
}

func env(c map[string]any, name string) (string, bool) {
	for _, e := range list(c["env"]) {
		if m, _ := e.(map[string]any); m != nil && m["name"] == name {
			v, _ := m["value"].(string)
			return v, true
		}
	}
	return "", false
}

// setEnv sets name to value, replacing an entry of that name (including a valueFrom).
func setEnv(c map[string]any, name, value string) {
	envs := list(c["env"])
	for i, e := range envs {
		if m, _ := e.(map[string]any); m != nil && m["name"] == name {
			envs[i] = map[string]any{"name": name, "value": value}
			return
		}
	}
	c["env"] = append(envs, map[string]any{"name": name, "value": value})
}
