package e2e

// `sar-bridge helm-postrender` on output shaped like interLink's chart (written here, not
// copied from the chart): the sidecar is added, interLink's plugin address points at the
// bridge, every other document is left byte for byte, the result is accepted by the real
// kube-apiserver, and the sidecar's own arguments with the RBAC the post-renderer adds
// decide creates through the socket. The NetworkPolicy it adds admits to the pod only the
// Virtual Kubelet's port and the ssh bastion's Service target: not the plugin's TCP port,
// interLink's API or the bridge's listeners; the bridge serves no profiles.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

const postRenderNS = "vk-pr"

// interlinkChartOutput: the Virtual Kubelet's ServiceAccount and config, interLink's
// config (plugin on localhost:4000), the "<nodeName>-node" Deployment with the plugin,
// interLink, VK and ssh bastion containers, and the bastion's NodePort Service, as `helm
// template` of interLink's chart prints them (its "# Source:" comments included).
const interlinkChartOutput = `---
# Source: interlink/templates/service-account.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: vk-pr
  namespace: vk-pr
---
# Source: interlink/templates/virtual-kubelet-config.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: "vk-pr-virtual-kubelet-config"
  namespace: vk-pr
data:
  InterLinkConfig.yaml: |
    InterlinkURL: "http://localhost"
    InterlinkPort: "3000"
    ServiceAccount: "vk-pr"
---
# Source: interlink/templates/virtual-kubelet-config.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: "vk-pr-interlink-config"
  namespace: vk-pr
data:
  InterLinkConfig.yaml: |
    InterlinkAddress: "http://localhost"
    InterlinkPort: "3000"
    SidecarURL: "http://localhost"
    SidecarPort: "4000"
    VerboseLogging: true
---
# Source: interlink/templates/virtual-kubelet.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vk-pr-node
  namespace: vk-pr
  labels:
    app: vk-pr
spec:
  replicas: 1
  selector:
    matchLabels:
      app: vk-pr
  template:
    metadata:
      labels:
        app: vk-pr
    spec:
      automountServiceAccountToken: true
      serviceAccountName: vk-pr
      containers:
      - name: plugin
        image: "example.org/slurm-plugin:0.6.2"
        imagePullPolicy: Always
        volumeMounts:
          - name: plugin-config
            mountPath: /etc/interlink/plugin.yaml
            subPath: plugin.yaml
      - name: interlink
        image: "example.org/interlink:0.6.2"
        imagePullPolicy: Always
        env:
          - name: INTERLINKCONFIGPATH
            value: "/etc/interlink/InterLinkConfig.yaml"
        volumeMounts:
          - name: il-config
            mountPath: /etc/interlink/InterLinkConfig.yaml
            subPath: InterLinkConfig.yaml
      - name: vk
        image: example.org/virtual-kubelet:0.6.2
        imagePullPolicy: Always
        env:
        - name: NODENAME
          value: vk-pr
        - name: KUBELET_PORT
          value: "10250"
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        volumeMounts:
        - name: config
          mountPath: /etc/interlink/InterLinkConfig.yaml
          subPath: InterLinkConfig.yaml
      - name: ssh-bastion
        image: "example.org/openssh-server:latest"
        imagePullPolicy: Always
        ports:
        - containerPort: 2222
        - containerPort: 22
      volumes:
      - name: config
        configMap:
          name: vk-pr-virtual-kubelet-config
      - name: il-config
        configMap:
          name: vk-pr-interlink-config
      - name: plugin-config
        configMap:
          name: vk-pr-plugin-config
---
# Source: interlink/templates/virtual-kubelet.yaml
apiVersion: v1
kind: Service
metadata:
  name: ssh-bastion-vk
  namespace: vk-pr
spec:
  type: NodePort
  ports:
  - port: 2222
    nodePort: 31022
  selector:
    app: vk-pr
`

// portRef is a NetworkPolicy's port number.
func portRef(n int32) *intstr.IntOrString {
	p := intstr.FromInt32(n)
	return &p
}

// yamlDocs splits a stream at "---" lines, keeping each document's text.
func yamlDocs(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---\n") {
		if strings.TrimSpace(d) != "" {
			// The separator took the newline that ends every document but the last.
			if d = strings.TrimPrefix(d, "\n"); !strings.HasSuffix(d, "\n") {
				d += "\n"
			}
			docs = append(docs, d)
		}
	}
	return docs
}

func TestHelmPostRender(t *testing.T) {
	ctx := context.Background()
	cmd := exec.Command(suite.binary, "helm-postrender", "--bridge-arg=--openshift.mappings=team-a=interlink.io")
	cmd.Stdin = strings.NewReader(interlinkChartOutput)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sar-bridge helm-postrender: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}

	in, got := yamlDocs(interlinkChartOutput), yamlDocs(out)
	if len(got) != len(in)+5 {
		t.Fatalf("%d documents in, %d out, want the input's, a NetworkPolicy, a ClusterRole and its binding, a Role and its binding:\n%s", len(in), len(got), out)
	}
	for _, i := range []int{0, 1, 2, 4} { // the ServiceAccount, both ConfigMaps, the Service
		if got[i] != in[i] {
			t.Errorf("document %d changed:\n%s\nwant:\n%s", i, got[i], in[i])
		}
	}
	objs, err := cluster.ParseYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	before, err := cluster.ParseYAML(interlinkChartOutput)
	if err != nil {
		t.Fatal(err)
	}
	d := findIn[appsv1.Deployment](t, objs, "Deployment", "vk-pr-node")
	d0 := findIn[appsv1.Deployment](t, before, "Deployment", "vk-pr-node")
	pod, pod0 := d.Spec.Template.Spec, d0.Spec.Template.Spec

	var names []string
	for _, c := range pod.Containers {
		names = append(names, c.Name)
	}
	if want := []string{"plugin", "interlink", "vk", "ssh-bastion", "sar-bridge"}; !slices.Equal(names, want) {
		t.Fatalf("containers %q, want %q", names, want)
	}
	// Untouched: the plugin, the Virtual Kubelet, the bastion, the Deployment's metadata
	// and the rest of the pod spec.
	for i, name := range []string{"plugin", "vk", "ssh-bastion"} {
		j := []int{0, 2, 3}[i]
		if !reflect.DeepEqual(pod.Containers[j], pod0.Containers[j]) {
			t.Errorf("container %s changed:\n%s\nwas:\n%s", name, asJSON(t, pod.Containers[j]), asJSON(t, pod0.Containers[j]))
		}
	}
	if !reflect.DeepEqual(d.ObjectMeta, d0.ObjectMeta) || pod.ServiceAccountName != "vk-pr" || !reflect.DeepEqual(pod.SecurityContext, pod0.SecurityContext) {
		t.Errorf("Deployment metadata or pod-level fields changed")
	}
	// interLink calls the bridge: SIDECARURL (read after its config file) and /var/run/.
	il := pod.Containers[1]
	wantEnv := append(slices.Clone(pod0.Containers[1].Env), corev1.EnvVar{Name: "SIDECARURL", Value: "unix:///var/run/sar-bridge.sock"})
	if !reflect.DeepEqual(il.Env, wantEnv) {
		t.Errorf("interlink env %+v, want %+v", il.Env, wantEnv)
	}
	wantMounts := append(slices.Clone(pod0.Containers[1].VolumeMounts), corev1.VolumeMount{Name: "sockets", MountPath: "/var/run/"})
	if !reflect.DeepEqual(il.VolumeMounts, wantMounts) {
		t.Errorf("interlink volumeMounts %+v, want %+v", il.VolumeMounts, wantMounts)
	}
	wantVolumes := append(slices.Clone(pod0.Volumes),
		corev1.Volume{Name: "sockets", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	if got := pod.Volumes[:len(wantVolumes)]; !reflect.DeepEqual(got, wantVolumes) || len(pod.Volumes) != len(wantVolumes)+1 || pod.Volumes[len(wantVolumes)].Name != "sar-bridge-tmp" {
		t.Errorf("volumes %s", asJSON(t, pod.Volumes))
	}
	// The bridge: the plugin address interLink had, hardened like manifests/base.
	b := pod.Containers[4]
	release, err := os.ReadFile(filepath.Join(suite.root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ghcr.io/sar-bridge/sar-bridge:" + strings.TrimSpace(string(release)); b.Image != want {
		t.Errorf("image %q, want %q", b.Image, want)
	}
	// The Data API on loopback; the internal listener on the pod's IP for the kubelet's
	// probes, with no profiles (no --web.enable-pprof) and not admitted by the policy.
	wantArgs := []string{
		"--interlink.listen=unix:///var/run/sar-bridge.sock", "--interlink.plugin-url=http://localhost:4000",
		"--web.listen=127.0.0.1:18080", "--web.internal.listen=:18081", "--log.format=json", "--web.shutdown-delay=5s",
		"--openshift.mappings=team-a=interlink.io",
	}
	if !slices.Equal(b.Args, wantArgs) {
		t.Errorf("bridge args %q, want %q", b.Args, wantArgs)
	}
	base := findIn[appsv1.Deployment](t, renderBase(t), "Deployment", "sar-bridge").Spec.Template.Spec.Containers[0].SecurityContext
	sc := b.SecurityContext
	if sc == nil || !reflect.DeepEqual(sc.AllowPrivilegeEscalation, base.AllowPrivilegeEscalation) || !reflect.DeepEqual(sc.ReadOnlyRootFilesystem, base.ReadOnlyRootFilesystem) ||
		!reflect.DeepEqual(sc.Capabilities, base.Capabilities) || !reflect.DeepEqual(sc.SeccompProfile, base.SeccompProfile) ||
		sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("bridge securityContext %s", asJSON(t, sc))
	}
	if b.ReadinessProbe == nil || b.ReadinessProbe.HTTPGet.Path != "/ready" || b.LivenessProbe == nil || b.LivenessProbe.HTTPGet.Path != "/live" {
		t.Errorf("bridge probes %s %s", asJSON(t, b.ReadinessProbe), asJSON(t, b.LivenessProbe))
	}
	// The RBAC: manifests/base's ClusterRole rules, bound to the pod's ServiceAccount.
	cr := findIn[rbacv1.ClusterRole](t, objs, "ClusterRole", "sar-bridge-vk-pr-vk-pr-node")
	if want := findIn[rbacv1.ClusterRole](t, renderBase(t), "ClusterRole", "sar-bridge").Rules; !reflect.DeepEqual(cr.Rules, want) {
		t.Errorf("ClusterRole rules %s, want manifests/base's %s", asJSON(t, cr.Rules), asJSON(t, want))
	}
	crb := findIn[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "sar-bridge-vk-pr-vk-pr-node")
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "vk-pr", Namespace: postRenderNS}}; !reflect.DeepEqual(crb.Subjects, want) || crb.RoleRef.Name != cr.Name {
		t.Errorf("ClusterRoleBinding %+v %+v", crb.RoleRef, crb.Subjects)
	}
	// The leader election: manifests/base's Role, in the Lease's namespace (the
	// default, sar-bridge: the sidecars and the standalone replicas share one Lease).
	lr := findIn[rbacv1.Role](t, objs, "Role", "sar-bridge-vk-pr-vk-pr-node")
	if want := findIn[rbacv1.Role](t, renderBase(t), "Role", "sar-bridge").Rules; lr.Namespace != "sar-bridge" || !reflect.DeepEqual(lr.Rules, want) {
		t.Errorf("Role %s/%s rules %s, want manifests/base's %s in sar-bridge", lr.Namespace, lr.Name, asJSON(t, lr.Rules), asJSON(t, want))
	}
	lrb := findIn[rbacv1.RoleBinding](t, objs, "RoleBinding", "sar-bridge-vk-pr-vk-pr-node")
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "vk-pr", Namespace: postRenderNS}}; lrb.Namespace != "sar-bridge" || !reflect.DeepEqual(lrb.Subjects, want) ||
		lrb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: lr.Name}) {
		t.Errorf("RoleBinding %s/%s %+v %+v", lrb.Namespace, lrb.Name, lrb.RoleRef, lrb.Subjects)
	}

	// The NetworkPolicy: interLink's pod, only the VK's kubelet port (logs and exec from
	// the API server) and the bastion's Service target, from anywhere; not the plugin's
	// port 4000, interLink's 3000, the bridge's 18080 and 18081, nor the bastion's 22.
	np := findIn[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "sar-bridge-vk-pr-node")
	checkPolicy := func(where string, np *networkingv1.NetworkPolicy) {
		t.Helper()
		if np.Namespace != postRenderNS {
			t.Errorf("%s: NetworkPolicy in namespace %q", where, np.Namespace)
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) || sel.Matches(labels.Set{"app": "other"}) || sel.Empty() {
			t.Errorf("%s: podSelector %s does not select exactly the pods of %v (%v)", where, asJSON(t, np.Spec.PodSelector), d.Spec.Template.Labels, err)
		}
		tcp := corev1.ProtocolTCP
		want := networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "vk-pr"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
				{Port: portRef(2222), Protocol: &tcp},
				{Port: portRef(10250), Protocol: &tcp},
			}}},
		}
		if !reflect.DeepEqual(np.Spec, want) {
			t.Errorf("%s: NetworkPolicy spec %s, want %s", where, asJSON(t, np.Spec), asJSON(t, want))
		}
	}
	checkPolicy("rendered", np)

	// The API server accepts the result.
	all := append([]*unstructured.Unstructured{namespaceObj(postRenderNS)}, objs...)
	if err := suite.cluster.Apply(ctx, all); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.cluster.Delete(context.Background(), objs) })
	applied, err := suite.cluster.Client.NetworkingV1().NetworkPolicies(postRenderNS).Get(ctx, "sar-bridge-vk-pr-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkPolicy("applied", applied)

	// Without the policy, a plugin on TCP in the pod is refused: any pod could call it.
	unprotected := exec.Command(suite.binary, "helm-postrender", "--network-policy=false")
	unprotected.Stdin = strings.NewReader(interlinkChartOutput)
	if msg, err := unprotected.CombinedOutput(); err == nil || !strings.Contains(string(msg), "the plugin listens on TCP in the pod (http://localhost:4000) and the NetworkPolicy is off") {
		t.Errorf("--network-policy=false: %v %s", err, msg)
	}

	// A second run refuses instead of stacking a second bridge.
	again := exec.Command(suite.binary, "helm-postrender")
	again.Stdin = strings.NewReader(out)
	if msg, err := again.CombinedOutput(); err == nil || !strings.Contains(string(msg), `already has a container named "sar-bridge"`) {
		t.Errorf("second run: %v %s", err, msg)
	}

	t.Run("the sidecar decides with the RBAC it brings", func(t *testing.T) {
		self := cluster.ServiceAccountUser(postRenderNS, "vk-pr")
		if err := suite.cluster.WaitForAccess(ctx, self, cluster.ServiceAccountGroups(postRenderNS),
			authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		// Its leader election may take the Lease in sar-bridge, and nowhere else.
		for ns, want := range map[string]bool{"sar-bridge": true, postRenderNS: false} {
			if err := suite.cluster.WaitForAccess(ctx, self, cluster.ServiceAccountGroups(postRenderNS),
				authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}, want, 30*time.Second); err != nil {
				t.Error(err)
			}
		}
		dir, err := os.MkdirTemp("", "sb-pr-") // short: socket paths are limited to ~100 bytes
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		kubeconfig := filepath.Join(dir, "kubeconfig")
		if _, err := suite.cluster.WriteServiceAccountKubeconfig(ctx, kubeconfig, postRenderNS, "vk-pr", time.Hour); err != nil {
			t.Fatal(err)
		}
		plugin, err := cluster.StartPlugin("unix", filepath.Join(dir, "plugin.sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = plugin.Close() })
		// The container's args, with the pod's paths moved into dir.
		listen := "unix://" + filepath.Join(dir, "sar-bridge.sock")
		var args []string
		for _, a := range b.Args {
			switch {
			case strings.HasPrefix(a, "--web.listen="), strings.HasPrefix(a, "--web.internal.listen="):
			case strings.HasPrefix(a, "--interlink.listen="):
				args = append(args, "--interlink.listen="+listen)
			case strings.HasPrefix(a, "--interlink.plugin-url="):
				args = append(args, "--interlink.plugin-url="+plugin.URL)
			case strings.HasPrefix(a, "--web.shutdown-delay="):
				args = append(args, "--web.shutdown-delay=0s")
			default:
				args = append(args, a)
			}
		}
		br, err := cluster.StartBridge(cluster.BridgeOptions{Binary: suite.binary, Kubeconfig: kubeconfig, Args: args,
			LogPath: filepath.Join(suite.workDir, "bridge-postrender.log")})
		if br != nil {
			t.Cleanup(func() {
				br.Stop()
				if t.Failed() {
					t.Logf("--- sar-bridge log ---\n%s", tail(br.Log(), 100))
				}
			})
		}
		if err != nil {
			t.Fatalf("the sidecar's args %q: %v", args, err)
		}
		// The internal listener answers probes and metrics, and serves no profiles.
		for path, want := range map[string]int{"/live": 200, "/metrics": 200, "/debug/pprof/": 404, "/debug/pprof/heap": 404, "/debug/pprof/cmdline": 404} {
			if code, _, err := br.Get(br.InternalURL + path); err != nil || code != want {
				t.Errorf("GET %s on the internal listener: %d %v, want %d", path, code, err, want)
			}
		}
		client, url := cluster.InterlinkClient(listen)
		for _, tc := range []struct {
			sa       string
			status   int
			body     string
			forwards int
		}{
			{"runner", http.StatusOK, cluster.PluginCreateAnswer, 1},
			{"intruder", http.StatusForbidden, `sar-bridge: denied: system:serviceaccount:team-a:intruder may not create pods.interlink.io in namespace "team-a"`, 0},
		} {
			t.Run(tc.sa, func(t *testing.T) {
				before := len(plugin.Requests())
				pod := newPod("team-a", tc.sa, "pr-"+tc.sa)
				pod.Spec.NodeName = "vk-1"
				body, err := json.Marshal(map[string]any{"pod": pod, "container": []any{map[string]any{"name": "main"}}, "jobConfig": map[string]any{}})
				if err != nil {
					t.Fatal(err)
				}
				res, err := client.Post(url+"/create", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.status || string(got) != tc.body {
					t.Errorf("POST /create as %s: HTTP %d %q, want %d %q", tc.sa, res.StatusCode, got, tc.status, tc.body)
				}
				if n := len(plugin.Requests()) - before; n != tc.forwards {
					t.Errorf("the plugin got %d creates, want %d", n, tc.forwards)
				}
			})
		}
	})
}

// By hand, with interLink's real chart (never committed): render it with the
// post-renderer and point SAR_BRIDGE_INTERLINK_RENDERED at the output, e.g.
//
//	helm template vk ./interlink -n interlink -f values.yaml --post-renderer bin/sar-bridge \
//	  --post-renderer-args helm-postrender > /tmp/il-after.yaml
//	SAR_BRIDGE_INTERLINK_RENDERED=/tmp/il-after.yaml make chart-test
//
// The rendering is server-side applied to the suite's kube-apiserver.
func TestHelmPostRenderRealChart(t *testing.T) {
	path := os.Getenv("SAR_BRIDGE_INTERLINK_RENDERED")
	if path == "" {
		t.Skip("SAR_BRIDGE_INTERLINK_RENDERED is not set (a by-hand check)")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := cluster.ParseYAML(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	var bridge *corev1.Container
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		d := findIn[appsv1.Deployment](t, objs, "Deployment", o.GetName())
		for i, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "sar-bridge" {
				bridge = &d.Spec.Template.Spec.Containers[i]
			}
		}
		ns := o.GetNamespace()
		if err := suite.cluster.Apply(context.Background(), []*unstructured.Unstructured{namespaceObj(ns)}); err != nil {
			t.Fatal(err)
		}
	}
	if bridge == nil {
		t.Fatal("no Deployment with a sar-bridge container: not post-rendered?")
	}
	if err := suite.cluster.Apply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	t.Logf("applied %d objects; the bridge runs %q", len(objs), bridge.Args)
}
