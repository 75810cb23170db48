package app

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/sar-bridge/sar-bridge/internal/helmpostrender"
)

// HelmPostRender is `sar-bridge helm-postrender`: a Helm post-renderer that adds the
// bridge as a sidecar of interLink's API server to interLink's chart output (stdin to
// stdout). It returns the exit code.
func HelmPostRender(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sar-bridge helm-postrender", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o helmpostrender.Options
	fs.StringVar(&o.Deployment, "deployment", "", "interLink's Deployment (\"<nodeName>-node\"). Empty: the only Deployment with a container named \"interlink\".")
	fs.StringVar(&o.Image, "image", "ghcr.io/sar-bridge/sar-bridge:"+strings.TrimSpace(files.Release), "The bridge's image.")
	fs.StringVar(&o.Socket, "socket", "/var/run/sar-bridge.sock", "The bridge's socket for interLink, in the /var/run/ volume the pod's containers share.")
	fs.StringVar(&o.PluginURL, "plugin-url", "", "The real plugin (http://host:port or unix:///path). Empty: the SidecarURL/SidecarPort interLink is configured with.")
	fs.StringArrayVar(&o.Args, "bridge-arg", nil, "A flag for the bridge container, e.g. --bridge-arg=--openshift.mappings=team-a=interlink.io (repeatable).")
	fs.StringVar(&o.OPAConfigMap, "opa-config-configmap", "", "A ConfigMap in the release's namespace whose key config.yaml is OPA's configuration file (bundles, decision logs, status): mounted in the bridge and passed as --config-file; set its persistence_directory to "+helmpostrender.OPAPersistenceDir+" (an emptyDir). Empty: none.")
	fs.BoolVar(&o.RBAC, "rbac", true, "Add the bridge's ClusterRole, bound to the pod's ServiceAccount, and a Role for the quota reconciler's leader election (get, create, update on leases), bound to the same, in the namespace --bridge-arg=--quota.lease-namespace names (default "+helmpostrender.DefaultLeaseNamespace+"), which must exist.")
	fs.BoolVar(&o.NetworkPolicy, "network-policy", true, "Add a NetworkPolicy \"sar-bridge-<deployment>\" that admits to interLink's pod only the Virtual Kubelet's port (KUBELET_PORT) and the ports Services of the chart target on it: "+
		"a plugin on TCP, interLink's API and the bridge's ports answer only the pod itself (and its node, for probes). It takes effect only where the CNI enforces NetworkPolicy. "+
		"Off, a plugin listening on TCP can be called by any pod on the pod's IP, around the bridge.")
	fs.BoolVar(&o.AllowUnprotectedPlugin, "insecure-allow-unprotected-plugin", false, "With --network-policy=false, render a plugin on TCP in the pod (http://localhost:PORT) anyway, e.g. where a NetworkPolicy of your own admits only the Virtual Kubelet's port.")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: helm install ... --post-renderer sar-bridge --post-renderer-args helm-postrender [--post-renderer-args FLAG ...]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sar-bridge helm-postrender: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sar-bridge helm-postrender: unexpected arguments %q\n", fs.Args())
		return 2
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge helm-postrender: reading stdin: %v\n", err)
		return 1
	}
	out, err := helmpostrender.Render(in, o)
	if err != nil {
		fmt.Fprintf(stderr, "sar-bridge helm-postrender: %v\n", err)
		return 1
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "sar-bridge helm-postrender: %v\n", err)
		return 1
	}
	return 0
}
