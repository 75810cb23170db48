// Command bench-http is hack/bench-http.sh's helper (make bench-http): it writes the
// request bodies of the workloads and the policy data, serves the bare Go floor, checks
// that the bridge and the OPA server give the same answers, and prints the tables. It lives in the test
// module for client-go; it is not a test and asserts nothing about speed.
//
//	bench-http ports N                       print N free loopback ports
//	bench-http prepare --kubeconfig F --out DIR --policy-data F
//	bench-http floor --listen ADDR
//	bench-http wait URL...                   until each answers (any HTTP status)
//	bench-http check --bodies DIR --bridge URL --opa URL --floor URL
//	bench-http report RESULTS
//
// Bodies are templates: every "@I@" is replaced by a number per request (by
// hack/benchhttp/workload.lua under wrk, by check here, the same way).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/sar-bridge/sar-bridge/policies"
)

// Placeholder is replaced by the request's number in every body template.
const Placeholder = "@I@"

// Workloads, in the order they are run and printed.
var workloads = []struct{ name, title string }{
	{"distinct", "distinct specs: every request a new pod name and memory request, one service account (review cache hits)"},
	{"arrayjob", "array job: 1,000 pods that differ only in name, uid and completion index, cycled"},
	{"hpc", "HPC pods: sbatch flags with values, a flavor and a GPU, a bind mount, a uid of the tenant's (its HPC settings in the policy data); distinct specs"},
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench-http ports|prepare|floor|wait|check|report ...")
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "ports":
		err = ports(args)
	case "prepare":
		err = prepare(args)
	case "floor":
		err = floor(args)
	case "wait":
		err = waitFor(args)
	case "check":
		err = check(args)
	case "report":
		err = report(args)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-http %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// ports prints free loopback ports, all held open together so they are distinct.
func ports(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: ports N")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return err
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

// --- prepare ---------------------------------------------------------------------

type prepareConfig struct {
	kubeconfig, out, policyData      string
	namespace, serviceAccount, group string
	tenantLabel, node                string
}

// prepare creates the virtual node the pods are bound to, reads the cluster the way the
// bridge will (namespace, node, the review of the pods' service account) and writes, per
// workload, the body sent to the bridge and the floor (input.operation and input.pod)
// and the body sent to the OPA server: the input the bridge builds (decidePod in
// authorizer/authorizer.go), constructed here independently so that check can tell when
// the two drift apart.
func prepare(args []string) error {
	var c prepareConfig
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "admin kubeconfig")
	fs.StringVar(&c.out, "out", "", "directory for the body templates and policy-data.json")
	fs.StringVar(&c.policyData, "policy-data", "", "the cluster's policy data (YAML or JSON), to which policy-data.json adds the tenant's HPC settings")
	fs.StringVar(&c.namespace, "namespace", "team-a", "the pods' namespace")
	fs.StringVar(&c.serviceAccount, "service-account", "runner", "the pods' service account")
	fs.StringVar(&c.group, "group", "interlink.io", "the API group the namespace's tenant maps to (the bridge's --openshift.mappings)")
	fs.StringVar(&c.tenantLabel, "tenant-label", "interlink.io/tenant", "the bridge's --tenant.label")
	fs.StringVar(&c.node, "node", "interlink-team-a", "virtual node created for the pods' spec.nodeName")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.kubeconfig == "" || c.out == "" || c.policyData == "" {
		return errors.New("--kubeconfig, --out and --policy-data are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ns, err := client.CoreV1().Namespaces().Get(ctx, c.namespace, metav1.GetOptions{})
	if err != nil {
		return err
	}
	tenant := ns.Name
	if t := ns.Labels[c.tenantLabel]; t != "" {
		tenant = t
	}
	node, err := ensureNode(ctx, client, c.node, c.tenantLabel, tenant)
	if err != nil {
		return err
	}

	// The pods' identity is their service account (authorizer.ServiceAccountSubject).
	username := "system:serviceaccount:" + c.namespace + ":" + c.serviceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + c.namespace, "system:authenticated"}
	attrs := authorizationv1.ResourceAttributes{Namespace: c.namespace, Verb: "create", Group: c.group, Resource: "pods"}
	sar, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: username, Groups: groups, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if !sar.Status.Allowed {
		return fmt.Errorf("%s may not create pods.%s in %s: the benchmark needs an allowed review (manifests/examples)", username, c.group, c.namespace)
	}

	enrich := map[string]any{
		"subject":      map[string]any{"username": username, "uid": "", "groups": groups, "extra": map[string]any{}},
		"tenant":       tenant,
		"tenant_label": c.tenantLabel,
		"group":        c.group,
		"namespace":    map[string]any{"name": ns.Name, "labels": orEmpty(ns.Labels), "annotations": orEmpty(ns.Annotations)},
		"node":         nodeInput(node),
		"review": map[string]any{
			"allowed": true, "denied": false, "reason": sar.Status.Reason,
			"attributes": []any{map[string]any{"namespace": attrs.Namespace, "verb": attrs.Verb, "group": attrs.Group, "resource": attrs.Resource, "name": ""}},
		},
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	if err := writePolicyData(c.policyData, filepath.Join(c.out, "policy-data.json"), "system:serviceaccounts:"+c.namespace, tenant); err != nil {
		return err
	}
	for _, w := range workloads {
		p := pod(w.name, c, tenant)
		bridgeInput := map[string]any{"operation": "create", "pod": p}
		opaInput := map[string]any{"operation": "create", "pod": p}
		for k, v := range enrich {
			opaInput[k] = v
		}
		opaInput["resources"] = podResources(w.name)
		opaInput["tolerations"] = podTolerations()
		v, err := podValue(p)
		if err != nil {
			return err
		}
		if opaInput["hpc"], err = ast.JSON(policies.PodHPC(v)); err != nil {
			return err
		}
		if opaInput["images"], err = ast.JSON(policies.PodImages(v)); err != nil {
			return err
		}
		for target, input := range map[string]any{"bridge": bridgeInput, "opa": opaInput} {
			b, err := json.Marshal(map[string]any{"input": input})
			if err != nil {
				return err
			}
			b = bytes.ReplaceAll(b, []byte(`"`+numberPlaceholder+`"`), []byte(Placeholder))
			if err := os.WriteFile(filepath.Join(c.out, w.name+"."+target+".json"), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// writePolicyData writes the cluster's policy data with what the hpc workload's pods need,
// as a site running SLURM jobs would configure it: restricted_annotations grants
// slurm-job.vk.io/flags to group too, and the tenant has HPC settings (partitions,
// flavors, runtime options, a scratch prefix, id ranges) but no defaults (account, uid),
// so that the other workloads' decisions are unchanged.
func writePolicyData(in, out, group, tenant string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var data map[string]any
	if err := yaml.Unmarshal(b, &data); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	interlink, _ := data["interlink"].(map[string]any)
	if interlink == nil {
		interlink = map[string]any{}
		data["interlink"] = interlink
	}
	restricted, _ := interlink["restricted_annotations"].(map[string]any)
	if restricted == nil {
		restricted = map[string]any{}
		interlink["restricted_annotations"] = restricted
	}
	flags, _ := restricted["slurm-job.vk.io/flags"].(map[string]any)
	if flags == nil {
		flags = map[string]any{"users": []any{}}
		restricted["slurm-job.vk.io/flags"] = flags
	}
	groups, _ := flags["groups"].([]any)
	flags["groups"] = append(groups, group)
	if _, ok := interlink["hpc"]; ok {
		return fmt.Errorf("%s already has interlink.hpc: the hpc workload sets its own", in)
	}
	if _, ok := interlink["image_registries"]; ok {
		return fmt.Errorf("%s already has interlink.image_registries: the workloads set their own", in)
	}
	// Images from the tenant's registry, as sites restrict them (the images rule).
	interlink["image_registries"] = map[string]any{tenant: []any{"ghcr.io/example"}}
	interlink["hpc"] = map[string]any{
		"auto_flavors": []any{"gpu"},
		"tenants": map[string]any{tenant: map[string]any{
			"sbatch_options":      []any{"--job-name", "--time"},
			"partitions":          []any{"cpu", "gpu"},
			"flavors":             []any{"default", "gpu"},
			"singularity_options": []any{"--bind", "--nv"},
			"mount_prefixes":      []any{"/scratch/" + tenant},
			"uid_ranges":          []any{[]any{20000, 20999}},
			"gid_ranges":          []any{[]any{20000, 20999}},
		}},
	}
	j, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return os.WriteFile(out, j, 0o644)
}

// ensureNode creates the tenant's virtual node (as interLink's Virtual Kubelet registers
// it: tenant label, its taint, large allocatable) and returns it as the API stores it.
func ensureNode(ctx context.Context, client kubernetes.Interface, name, tenantLabel, tenant string) (*corev1.Node, error) {
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			tenantLabel: tenant, "kubernetes.io/hostname": name, "kubernetes.io/role": "agent", "type": "virtual-kubelet",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "virtual-node.interlink/no-schedule", Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100"), corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse("1k"),
		}},
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// nodeInput is input.node as the bridge builds it from its node informer.
func nodeInput(node *corev1.Node) map[string]any {
	taints := make([]any, 0, len(node.Spec.Taints))
	for _, t := range node.Spec.Taints {
		taints = append(taints, map[string]any{"key": t.Key, "value": t.Value, "effect": string(t.Effect)})
	}
	allocatable := map[string]string{}
	for k, q := range node.Status.Allocatable {
		allocatable[string(k)] = q.String()
	}
	return map[string]any{"name": node.Name, "found": true, "labels": orEmpty(node.Labels), "taints": taints, "allocatable": allocatable}
}

// pod is the workload's pod template: what interLink's Virtual Kubelet forwards for a pod
// bound to it. In "distinct" the number goes into the name, uid, a label and the memory
// request (a field the default policy reads, so no two requests share an input the
// policy can see); in "arrayjob" only into the name, uid and completion index, as for
// the pods of one indexed Job. "hpc" is "distinct" with what SLURM users add: sbatch
// flags with values, a flavor and a GPU limit, a bind mount, a uid and gid.
func pod(workload string, c prepareConfig, tenant string) map[string]any {
	memory := "256Mi"
	prefix := "array-"
	if workload != "arrayjob" {
		memory, prefix = Placeholder, "pod-"
	}
	p := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":      prefix + Placeholder,
			"namespace": c.namespace,
			"uid":       "6c1f0e8a-5b3d-4c2e-9f00-" + Placeholder,
			"labels": map[string]any{
				"app":                                      "bench",
				"batch.kubernetes.io/controller-uid":       "0b9c7f4e-2a61-4f6d-8d2e-3c5a1e7b9f10",
				"batch.kubernetes.io/job-name":             "bench",
				"batch.kubernetes.io/job-completion-index": Placeholder,
			},
			"annotations": map[string]any{"batch.kubernetes.io/job-completion-index": Placeholder},
		},
		"spec": map[string]any{
			"serviceAccountName": c.serviceAccount,
			"nodeName":           c.node,
			"restartPolicy":      "Never",
			"nodeSelector":       map[string]any{c.tenantLabel: tenant},
			"containers": []any{map[string]any{
				"name":    "main",
				"image":   "ghcr.io/example/solver:1.4",
				"command": []any{"/bin/solver", "--input", "/data/in", "--output", "/data/out"},
				"env": []any{
					map[string]any{"name": "OMP_NUM_THREADS", "value": "1"},
					map[string]any{"name": "JOB_COMPLETION_INDEX", "valueFrom": map[string]any{"fieldRef": map[string]any{
						"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
				},
				"resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": memory}},
			}},
			"tolerations": []any{
				map[string]any{"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"},
				map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
				map[string]any{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
			},
		},
	}
	if workload == "hpc" {
		metadata := p["metadata"].(map[string]any)
		annotations := metadata["annotations"].(map[string]any)
		annotations["slurm-job.vk.io/flags"] = "--cpus-per-task=4 --time=01:00:00 --partition=gpu"
		annotations["slurm-job.vk.io/flavor"] = "gpu"
		annotations["slurm-job.vk.io/singularity-mounts"] = "--bind /scratch/" + tenant + "/data:/data"
		spec := p["spec"].(map[string]any)
		spec["securityContext"] = map[string]any{"runAsUser": 20042, "runAsGroup": 20042}
		main := spec["containers"].([]any)[0].(map[string]any)
		main["resources"].(map[string]any)["limits"] = map[string]any{"nvidia.com/gpu": "1"}
	}
	return p
}

// numberPlaceholder stands for Placeholder where the number goes in unquoted.
const numberPlaceholder = "@NUMBER@"

// podResources is input.resources as the bridge builds it for pod's one container
// (policies.PodResources): the amounts as numbers, largest per resource.
func podResources(workload string) map[string]any {
	var memory any = 268435456 // 256Mi
	if workload != "arrayjob" {
		memory = numberPlaceholder // the request's number, in bytes
	}
	amounts := map[string]any{"cpu": 0.5, "memory": memory}
	if workload == "hpc" {
		// A GPU limit: the container sets a limit, so no default limits apply.
		largest := map[string]any{"cpu": 0.5, "memory": memory, "nvidia.com/gpu": 1}
		return map[string]any{
			"containers": []any{map[string]any{"name": "main", "limits": map[string]any{"nvidia.com/gpu": 1}, "requests": amounts}},
			"largest":    largest,
			"unlimited":  []any{},
		}
	}
	return map[string]any{
		"containers": []any{map[string]any{"name": "main", "limits": map[string]any{}, "requests": amounts}},
		"largest":    amounts,
		"unlimited":  []any{"main"},
	}
}

// podTolerations is input.tolerations as the bridge builds it for pod's tolerations
// (policies.PodTolerations): every one Exists with a key.
func podTolerations() map[string]any {
	return map[string]any{
		"equal": map[string]any{},
		"other": map[string]any{
			"virtual-node.interlink/no-schedule": true,
			"node.kubernetes.io/not-ready":       true,
			"node.kubernetes.io/unreachable":     true,
		},
		"keyless_exists": 0,
	}
}

// podValue is the pod template as a policy value, its placeholders numbered, for what
// the bridge derives from it that does not depend on the number: input.hpc (what the
// plugins would make of it, policies.PodHPC) and input.images (policies.PodImages).
func podValue(pod map[string]any) (ast.Value, error) {
	b, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	return ast.ValueFromReader(bytes.NewReader(bytes.ReplaceAll(b, []byte(Placeholder), []byte("1"))))
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// --- floor -----------------------------------------------------------------------

// floor serves the least a decision server must do: decode the JSON body, answer a fixed
// small decision.
func floor(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	answer := []byte(`{"result":{"allowed":true,"reason":"","modifications":{}}}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			var body map[string]any
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	return http.ListenAndServe(*listen, h)
}

// --- wait ------------------------------------------------------------------------

func waitFor(urls []string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, u := range urls {
		for {
			resp, err := http.Get(u)
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode < 500 {
					break
				}
				err = errors.New(resp.Status)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %v", u, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// --- check -----------------------------------------------------------------------

// check sends a sample of each workload's requests to the bridge and, with the input the
// bridge builds, to the OPA server, and fails unless every result is the same.
func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	bodies := fs.String("bodies", "", "directory written by prepare")
	bridge := fs.String("bridge", "", "bridge decision URL")
	opa := fs.String("opa", "", "OPA server decision URL")
	floorURL := fs.String("floor", "", "floor server URL")
	samples := fs.Int("samples", 20, "requests per workload")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for _, w := range workloads {
		tmpl := map[string]string{}
		for _, target := range []string{"bridge", "opa"} {
			b, err := os.ReadFile(filepath.Join(*bodies, w.name+"."+target+".json"))
			if err != nil {
				return err
			}
			tmpl[target] = string(b)
		}
		var first map[string]any
		for k := range *samples {
			// Numbers as workload.lua makes them: array job indices wrap at 1,000; distinct
			// ones are large (bytes of memory) and never reused by a timed run.
			i := 99_000_000 + k
			if w.name == "arrayjob" {
				i = []int{0, 999}[min(k, 1)] // the first and the last index
				if k > 1 {
					i = k * 37 % 1000
				}
			}
			n := strconv.Itoa(i)
			fromBridge, err := post(client, *bridge, strings.ReplaceAll(tmpl["bridge"], Placeholder, n), true)
			if err != nil {
				return fmt.Errorf("%s, request %d: bridge: %w", w.name, i, err)
			}
			fromOPA, err := post(client, *opa, strings.ReplaceAll(tmpl["opa"], Placeholder, n), false)
			if err != nil {
				return fmt.Errorf("%s, request %d: OPA: %w", w.name, i, err)
			}
			if !reflect.DeepEqual(fromBridge, fromOPA) {
				return fmt.Errorf("%s, request %d: the bridge and the OPA server disagree: the input the bridge builds is not the one prepare builds (or the policies differ)\n%s",
					w.name, i, diff(fromBridge, fromOPA))
			}
			if k == 0 {
				first, _ = fromBridge.(map[string]any)
			}
		}
		if _, err := post(client, *floorURL, strings.ReplaceAll(tmpl["bridge"], Placeholder, "1"), false); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		fmt.Printf("check: %s: %d requests, the bridge and OPA agree: allowed=%v reason=%q\n", w.name, *samples, first["allowed"], first["reason"])
		if first["allowed"] != true {
			fmt.Printf("check: WARNING: %s is denied: the benchmark then times refusals, not the usual path\n", w.name)
		}
	}
	return nil
}

// post sends body and returns the answer's result; the bridge's answer must carry a
// decision_id, and nothing else may be in either answer.
func post(client *http.Client, url, body string, bridge bool) (any, error) {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var answer map[string]any
	if err := dec.Decode(&answer); err != nil {
		return nil, fmt.Errorf("answer %s: %w", b, err)
	}
	result, ok := answer["result"]
	if !ok {
		return nil, fmt.Errorf("answer without a result (undefined document?): %s", b)
	}
	if bridge {
		if id, _ := answer["decision_id"].(string); id == "" {
			return nil, fmt.Errorf("answer without a decision_id: %s", b)
		}
		delete(answer, "decision_id")
	}
	if len(answer) != 1 {
		return nil, fmt.Errorf("unexpected fields in the answer: %s", b)
	}
	return result, nil
}

// diff shows the top-level fields of two results that differ, then both in full.
func diff(bridge, opa any) string {
	var sb strings.Builder
	bm, ok1 := bridge.(map[string]any)
	om, ok2 := opa.(map[string]any)
	if ok1 && ok2 {
		keys := map[string]bool{}
		for k := range bm {
			keys[k] = true
		}
		for k := range om {
			keys[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			if !reflect.DeepEqual(bm[k], om[k]) {
				fmt.Fprintf(&sb, "  %s differs:\n    bridge: %s\n    OPA:    %s\n", k, compact(bm[k]), compact(om[k]))
			}
		}
	}
	fmt.Fprintf(&sb, "bridge result: %s\nOPA result:    %s", compact(bridge), compact(opa))
	return sb.String()
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// --- report ----------------------------------------------------------------------

// A result line, written by hack/bench-http.sh per wrk run:
// workload target connections round requests duration_us p50_us p99_us errors cpu_ticks clk_tck
type run struct {
	workload, target        string
	conns                   int
	requests, durationUS    float64
	p50, p99, errors, ticks float64
	clkTck                  float64
}

type figures struct {
	rps32, p50, p99, rps1, cpuUS float64
	errors                       float64
	rounds                       int
}

// report prints, per workload, the medians over the rounds of each target, and the
// bridge's ratios to OPA and to the floor.
func report(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: report RESULTS")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	var runs []run
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 11 {
			return fmt.Errorf("bad result line %q", line)
		}
		var nums [9]float64
		for i, s := range f[2:] {
			if nums[i], err = strconv.ParseFloat(s, 64); err != nil {
				return fmt.Errorf("bad result line %q: %w", line, err)
			}
		}
		runs = append(runs, run{workload: f[0], target: f[1], conns: int(nums[0]), requests: nums[2], durationUS: nums[3],
			p50: nums[4], p99: nums[5], errors: nums[6], ticks: nums[7], clkTck: nums[8]})
	}
	targets := []struct{ name, title string }{
		{"floor", "bare Go net/http floor (decode, fixed answer)"},
		{"opa", "OPA server, same policy, data and input"},
		{"bridge", "sar-bridge (default logging)"},
	}
	for _, w := range workloads {
		if !slices.ContainsFunc(runs, func(r run) bool { return r.workload == w.name }) {
			continue // not run (WORKLOADS)
		}
		fmt.Printf("\n%s\n\n", w.title)
		fmt.Printf("| %-46s | %12s | %9s | %9s | %11s | %12s |\n", "target", "req/s (32 c)", "p50", "p99", "req/s (1 c)", "CPU µs/req")
		fmt.Printf("|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 48), strings.Repeat("-", 14), strings.Repeat("-", 11), strings.Repeat("-", 11), strings.Repeat("-", 13), strings.Repeat("-", 14))
		fig := map[string]figures{}
		for _, t := range targets {
			var rps32, p50, p99, rps1, cpu []float64
			var errs float64
			for _, r := range runs {
				if r.workload != w.name || r.target != t.name {
					continue
				}
				rps := r.requests / (r.durationUS / 1e6)
				errs += r.errors
				if r.conns == 1 {
					rps1 = append(rps1, rps)
					continue
				}
				rps32 = append(rps32, rps)
				p50 = append(p50, r.p50)
				p99 = append(p99, r.p99)
				if r.requests > 0 {
					cpu = append(cpu, r.ticks/r.clkTck*1e6/r.requests)
				}
			}
			f := figures{rps32: median(rps32), p50: median(p50), p99: median(p99), rps1: median(rps1), cpuUS: median(cpu), errors: errs, rounds: len(rps32)}
			fig[t.name] = f
			fmt.Printf("| %-46s | %12s | %9s | %9s | %11s | %12s |\n", t.title, num(f.rps32), ms(f.p50), ms(f.p99), num(f.rps1), num(f.cpuUS))
		}
		fmt.Printf("\nbridge / OPA:   %s (req/s at 32 connections)\n", ratio(fig["bridge"].rps32, fig["opa"].rps32))
		fmt.Printf("bridge / floor: %s\n", ratio(fig["bridge"].rps32, fig["floor"].rps32))
		fmt.Printf("(medians of %d rounds)\n", fig["bridge"].rounds)
		for _, t := range targets {
			if e := fig[t.name].errors; e > 0 {
				fmt.Printf("WARNING: %s: %.0f failed requests (socket errors, timeouts or non-2xx answers)\n", t.name, e)
			}
		}
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// num prints with thousands separators, as the tables do.
func num(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ms(us float64) string { return strconv.FormatFloat(us/1000, 'f', 2, 64) + " ms" }

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}
