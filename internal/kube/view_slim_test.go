package kube

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// realisticNode is a node as a kubelet reports it: labels, a taint, capacity and
// allocatable, conditions, addresses, node info and the images it holds.
func realisticNode(name string) *corev1.Node {
	rl := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("0f3c1c2e-5d1e-4a53-9d0b-" + fmt.Sprintf("%012d", len(name))), ResourceVersion: "123456",
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"node.kubernetes.io/instance-type": "m5.16xlarge", "topology.kubernetes.io/zone": "eu-west-1a",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid":                        `{"ebs.csi.aws.com":"i-0123456789abcdef0"}`,
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: corev1.NodeSpec{
			PodCIDR: "10.0.1.0/24", PodCIDRs: []string{"10.0.1.0/24"}, ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0",
			Taints: []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{
			Capacity: rl, Allocatable: rl,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.1.17"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: "ec2d3c4b5a6978", SystemUUID: "ec2d3c4b-5a69-78", BootID: "1b2c3d4e-5f60-7182",
				KernelVersion: "6.1.0-18-amd64", OSImage: "Debian GNU/Linux 12", ContainerRuntimeVersion: "containerd://1.7.13",
				KubeletVersion: "v1.34.4", OperatingSystem: "linux", Architecture: "amd64",
			},
		},
	}
	for _, c := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: c, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientResources", Message: "kubelet has sufficient resources available",
			LastHeartbeatTime: metav1.NewTime(time.Unix(1_700_000_000, 0)), LastTransitionTime: metav1.NewTime(time.Unix(1_700_000_000, 0)),
		})
	}
	// The kubelet reports up to 50 images by default (--node-status-max-images).
	for i := range 50 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names: []string{
				fmt.Sprintf("registry.example.org/team/app-%d@sha256:%064d", i, i),
				fmt.Sprintf("registry.example.org/team/app-%d:v1.2.%d", i, i),
			},
			SizeBytes: 123456789,
		})
	}
	return n
}

func TestSlimObject(t *testing.T) {
	node := realisticNode("worker-1")
	ns := &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			Name: "team-a", UID: "u-ns", ResourceVersion: "7",
			Labels: map[string]string{"interlink.io/tenant": "a"}, Annotations: map[string]string{"billing": "p-1"},
			Finalizers: []string{"x"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	for _, tc := range []struct {
		name string
		in   any
		want any
	}{
		{"node: what decisions read", node, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion, Labels: node.Labels},
			Spec:       corev1.NodeSpec{Taints: node.Spec.Taints},
			Status:     corev1.NodeStatus{Allocatable: node.Status.Allocatable},
		}},
		{"namespace: labels and annotations", ns, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: "u-ns", ResourceVersion: "7", Labels: ns.Labels, Annotations: ns.Annotations},
		}},
		{"anything else: managed fields dropped", pod, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}},
		{"a tombstone passes", cache.DeletedFinalStateUnknown{Key: "n"}, cache.DeletedFinalStateUnknown{Key: "n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := slimObject(tc.in)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("slimObject = %#v, %v\nwant %#v", got, err, tc.want)
			}
		})
	}
}

// realisticNamespace is a namespace as the API server returns it, with a tenant label.
func realisticNamespace(name string) *corev1.Namespace {
	return &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID("7d1e0c2a-44b1-4f0e-9a51-" + fmt.Sprintf("%012d", len(name))), ResourceVersion: "98765",
			Labels:        map[string]string{"kubernetes.io/metadata.name": name, "interlink.io/tenant": "team-" + name},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
		Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
}

// BenchmarkMemoryPerObject measures the heap an informer store takes per node and per
// namespace decoded from JSON as a watch delivers them, whole (managed fields dropped,
// as before) and as slimObject keeps them:
//
//	go test ./kube/ -run '^$' -bench MemoryPerObject -benchtime 1x
func BenchmarkMemoryPerObject(b *testing.B) {
	const n = 2000
	for _, kind := range []struct {
		name   string
		object func(name string) any
		decode func(data []byte) (any, error)
	}{
		{"nodes", func(name string) any { return realisticNode(name) }, decodeInto[corev1.Node]},
		{"namespaces", func(name string) any { return realisticNamespace(name) }, decodeInto[corev1.Namespace]},
	} {
		wire := make([][]byte, n)
		for i := range n {
			data, err := json.Marshal(kind.object(fmt.Sprintf("obj-%d", i)))
			if err != nil {
				b.Fatal(err)
			}
			wire[i] = data
		}
		for _, tc := range []struct {
			name      string
			transform cache.TransformFunc
		}{{"whole", dropManagedFields}, {"slim", slimObject}} {
			b.Run(kind.name+"/"+tc.name, func(b *testing.B) {
				var perObject float64
				for b.Loop() {
					store := cache.NewStore(cache.MetaNamespaceKeyFunc)
					before := heapAlloc()
					for _, data := range wire {
						obj, err := kind.decode(data)
						if err != nil {
							b.Fatal(err)
						}
						if obj, err = tc.transform(obj); err != nil {
							b.Fatal(err)
						}
						if err := store.Add(obj); err != nil {
							b.Fatal(err)
						}
					}
					perObject = float64(heapAlloc()-before) / n
					runtime.KeepAlive(store)
				}
				b.ReportMetric(perObject, "bytes/object")
			})
		}
	}
}

func decodeInto[T any](data []byte) (any, error) {
	obj := new(T)
	return obj, json.Unmarshal(data, obj)
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
