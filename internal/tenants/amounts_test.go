package tenants

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
)

// amountsPod is a pod of containers (and init containers), with a flags annotation
// when flags is not "".
func amountsPod(flags string, containers, inits []corev1.Container) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: containers, InitContainers: inits}}
	if flags != "" {
		p.Annotations = map[string]string{slurmjob.FlagsAnnotation: flags}
	}
	return p
}

func amountsContainer(req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

// PodAmounts charges no less than the SLURM plugin allocates: CPU in whole cores,
// memory in whole MiB, a container without a limit counting the flags' value or its
// request, at least 1 core and 1 MiB.
func TestPodAmounts(t *testing.T) {
	q := resource.MustParse
	one := func(req, lim corev1.ResourceList) []corev1.Container {
		return []corev1.Container{amountsContainer(req, lim)}
	}
	rl := func(pairs ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(pairs); i += 2 {
			l[corev1.ResourceName(pairs[i])] = q(pairs[i+1])
		}
		return l
	}
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		pod  *corev1.Pod
		want corev1.ResourceList
	}{
		// CPU: whole cores, as the plugin's --cpus-per-task.
		{"cpu limit 1m is 1 core (the plugin rounds up)",
			amountsPod("", one(nil, rl("cpu", "1m", "memory", "1Gi")), nil),
			rl("cpu", "1", "memory", "1Gi", "pods", "1")},
		{"cpu limit 1500m is 2 cores",
			amountsPod("", one(nil, rl("cpu", "1500m", "memory", "1Gi")), nil),
			rl("cpu", "2", "memory", "1Gi", "pods", "1")},
		{"cpu limit over request (issue 33: 100m requested, 32 allocated)",
			amountsPod("", one(rl("cpu", "100m"), rl("cpu", "32")), nil),
			rl("cpu", "32", "memory", "1Mi", "pods", "1")},
		{"no limits, request 100m: 1 core",
			amountsPod("", one(rl("cpu", "100m", "memory", "10Mi"), nil), nil),
			rl("cpu", "1", "memory", "10Mi", "pods", "1")},
		{"no limits, request 2500m: 3 cores",
			amountsPod("", one(rl("cpu", "2500m"), nil), nil),
			rl("cpu", "3", "memory", "1Mi", "pods", "1")},
		{"memory-only limit, flags --cpus-per-task=4: 4 cores",
			amountsPod("--cpus-per-task=4", one(rl("cpu", "100m"), rl("memory", "1Gi")), nil),
			rl("cpu", "4", "memory", "1Gi", "pods", "1")},
		{"memory-only limit, flags -c 4: 4 cores",
			amountsPod("--time=10 -c 4", one(nil, rl("memory", "1Gi")), nil),
			rl("cpu", "4", "memory", "1Gi", "pods", "1")},
		{"memory-only limit, flags -c4 --account=x: 4 cores",
			amountsPod("-c4 --account=x", one(nil, rl("memory", "1Gi")), nil),
			rl("cpu", "4", "memory", "1Gi", "pods", "1")},
		{"memory-only limit, no flags: request rounded up",
			amountsPod("", one(rl("cpu", "1200m"), rl("memory", "1Gi")), nil),
			rl("cpu", "2", "memory", "1Gi", "pods", "1")},
		{"cpu limit wins over the flags (the plugin drops theirs)",
			amountsPod("--cpus-per-task=8 --mem=4G", one(nil, rl("cpu", "2", "memory", "1Gi")), nil),
			rl("cpu", "2", "memory", "1Gi", "pods", "1")},
		{"flags --cpus-per-task=0 or not a number: the request, at least 1",
			amountsPod("--cpus-per-task=x", one(nil, rl("memory", "1Gi")), nil),
			rl("cpu", "1", "memory", "1Gi", "pods", "1")},
		{"flags sbatch and the plugin read differently are ignored",
			amountsPod("-c4 --cpus-per-task=8", one(nil, rl("memory", "1Gi")), nil),
			rl("cpu", "1", "memory", "1Gi", "pods", "1")},

		// Memory: whole MiB, never 0.
		{"memory limit 1Mi is 1Mi",
			amountsPod("", one(nil, rl("cpu", "1", "memory", "1Mi")), nil),
			rl("cpu", "1", "memory", "1Mi", "pods", "1")},
		{"memory limit 1500Ki is 2Mi",
			amountsPod("", one(nil, rl("cpu", "1", "memory", "1500Ki")), nil),
			rl("cpu", "1", "memory", "2Mi", "pods", "1")},
		{"memory limit 1Ki is 1Mi, never 0 (the plugin would write --mem=0)",
			amountsPod("", one(nil, rl("cpu", "1", "memory", "1Ki")), nil),
			rl("cpu", "1", "memory", "1Mi", "pods", "1")},
		{"memory limit 1G (decimal) is 954Mi",
			amountsPod("", one(nil, rl("cpu", "1", "memory", "1G")), nil),
			rl("cpu", "1", "memory", "954Mi", "pods", "1")},
		{"memory limit 0 is 1Mi",
			amountsPod("", one(nil, rl("cpu", "1", "memory", "0")), nil),
			rl("cpu", "1", "memory", "1Mi", "pods", "1")},
		{"cpu-only limit, flags --mem=2G: 2Gi",
			amountsPod("--mem=2G", one(rl("memory", "1Mi"), rl("cpu", "3")), nil),
			rl("cpu", "3", "memory", "2Gi", "pods", "1")},
		{"cpu-only limit, flags --mem=100 (MiB): 100Mi",
			amountsPod("--mem=100", one(nil, rl("cpu", "3")), nil),
			rl("cpu", "3", "memory", "100Mi", "pods", "1")},
		{"cpu-only limit, flags --mem=0 (the whole node): the request",
			amountsPod("--mem=0", one(rl("memory", "5Mi"), rl("cpu", "3")), nil),
			rl("cpu", "3", "memory", "5Mi", "pods", "1")},
		{"memory limit wins over the flags' --mem",
			amountsPod("--mem=64G", one(nil, rl("cpu", "1", "memory", "1Gi")), nil),
			rl("cpu", "1", "memory", "1Gi", "pods", "1")},
		{"memory request rounded up",
			amountsPod("", one(rl("memory", "1500Ki"), rl("cpu", "1")), nil),
			rl("cpu", "1", "memory", "2Mi", "pods", "1")},

		// Combining containers: init peak against the containers' sum.
		{"containers summed",
			amountsPod("", []corev1.Container{amountsContainer(nil, rl("cpu", "1", "memory", "1Gi")), amountsContainer(nil, rl("cpu", "1500m", "memory", "1Gi"))}, nil),
			rl("cpu", "3", "memory", "2Gi", "pods", "1")},
		{"init containers' peak when larger",
			amountsPod("",
				[]corev1.Container{amountsContainer(nil, rl("cpu", "1", "memory", "1Gi")), amountsContainer(nil, rl("cpu", "2", "memory", "1Gi"))},
				[]corev1.Container{amountsContainer(nil, rl("cpu", "4", "memory", "1Gi")), amountsContainer(nil, rl("cpu", "1", "memory", "8Gi"))}),
			rl("cpu", "4", "memory", "8Gi", "pods", "1")},
		{"init containers' peak when smaller",
			amountsPod("",
				[]corev1.Container{amountsContainer(nil, rl("cpu", "3", "memory", "1Gi")), amountsContainer(nil, rl("cpu", "2", "memory", "1Gi"))},
				[]corev1.Container{amountsContainer(nil, rl("cpu", "4", "memory", "1Gi"))}),
			rl("cpu", "5", "memory", "2Gi", "pods", "1")},
		{"an init container without limits counts 1 core, 1 MiB",
			amountsPod("", []corev1.Container{amountsContainer(nil, rl("cpu", "500m"))}, []corev1.Container{{}}),
			rl("cpu", "1", "memory", "1Mi", "pods", "1")},
		{"sidecars run beside the containers",
			withSpec(amountsPod("", one(nil, rl("cpu", "1", "memory", "1Gi")), nil), func(s *corev1.PodSpec) {
				s.InitContainers = []corev1.Container{{RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: rl("cpu", "500m", "memory", "1Mi")}}}
			}),
			rl("cpu", "2", "memory", "1025Mi", "pods", "1")},

		// Other resources as before: limit over request, summed, peak of init containers.
		{"GPUs unchanged",
			amountsPod("",
				[]corev1.Container{amountsContainer(nil, rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "2")), amountsContainer(rl("nvidia.com/gpu", "1"), rl("cpu", "1", "memory", "1Gi"))},
				[]corev1.Container{amountsContainer(nil, rl("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "4"))}),
			rl("cpu", "2", "memory", "2Gi", "nvidia.com/gpu", "4", "pods", "1")},
		{"ephemeral-storage: limit over request, not rounded",
			amountsPod("", one(rl("ephemeral-storage", "1k"), rl("cpu", "1", "memory", "1Mi", "ephemeral-storage", "1500")), nil),
			rl("cpu", "1", "memory", "1Mi", "ephemeral-storage", "1500", "pods", "1")},
		{"overhead added",
			withSpec(amountsPod("", one(nil, rl("cpu", "1", "memory", "1Mi")), nil), func(s *corev1.PodSpec) {
				s.Overhead = rl("cpu", "250m", "memory", "64Mi")
			}),
			rl("cpu", "1250m", "memory", "65Mi", "pods", "1")},
		{"pod-level requests raise, never lower",
			withSpec(amountsPod("", []corev1.Container{amountsContainer(rl("cpu", "1m"), rl("cpu", "1m", "memory", "1Gi"))}, nil), func(s *corev1.PodSpec) {
				s.Resources = &corev1.ResourceRequirements{Requests: rl("cpu", "1m", "memory", "2Gi")}
			}),
			rl("cpu", "1", "memory", "2Gi", "pods", "1")},
		{"nothing set: 1 core, 1 MiB (the plugin's --cpus-per-task=1 --mem=1)",
			amountsPod("", []corev1.Container{{}}, nil),
			rl("cpu", "1", "memory", "1Mi", "pods", "1")},
		{"no containers", &corev1.Pod{}, rl("pods", "1")},
		{"huge limits are not rounded down",
			amountsPod("", one(nil, rl("cpu", "9e18", "memory", "9E")), nil),
			rl("cpu", "9000000000000000001", "memory", "9000000000001048576", "pods", "1")},
	}
	cache := NewAmountsCache() // one for every case: an entry of one is never another's
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PodAmounts(tc.pod)
			if !sameList(got, tc.want) {
				t.Errorf("PodAmounts = %v, want %v", EncodeAmounts(got), EncodeAmounts(tc.want))
			}
			for _, pass := range []string{"miss", "hit"} {
				cached, err := cache.Amounts(podValue(t, tc.pod))
				if err != nil || !sameList(cached, tc.want) {
					t.Errorf("AmountsCache (%s) = %v, %v; want %v", pass, EncodeAmounts(cached), err, EncodeAmounts(tc.want))
				}
			}
		})
	}
}

// podValue is p as a decision's input holds it.
func podValue(t *testing.T, p *corev1.Pod) ast.Value {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ast.ValueFromReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The pods of an indexed Job (hostname, index variable, command) share one entry of
// AmountsCache; a container's resources or restart policy, an init container, overhead
// or pod-level resources make another.
func TestAmountsCacheKey(t *testing.T) {
	q := resource.MustParse
	base := amountsPod("", []corev1.Container{amountsContainer(corev1.ResourceList{"cpu": q("1")}, corev1.ResourceList{"memory": q("1Gi")})}, nil)
	same := []func(*corev1.PodSpec){
		func(s *corev1.PodSpec) { s.Hostname = "array-7" },
		func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "JOB_COMPLETION_INDEX", Value: "7"}}
			s.Containers[0].Command = []string{"solve", "--part=7"}
		},
		func(s *corev1.PodSpec) { s.Containers[0].Name = "other" },
	}
	different := []func(*corev1.PodSpec){
		func(s *corev1.PodSpec) { s.Containers[0].Resources.Limits["cpu"] = q("3") },
		func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{amountsContainer(corev1.ResourceList{"cpu": q("2")}, nil)}
			s.InitContainers[0].RestartPolicy = ptrTo(corev1.ContainerRestartPolicyAlways)
		},
		func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, amountsContainer(nil, corev1.ResourceList{"cpu": q("2")}))
		},
		func(s *corev1.PodSpec) { s.Overhead = corev1.ResourceList{"cpu": q("1")} },
		func(s *corev1.PodSpec) {
			s.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": q("4Gi")}}
		},
	}
	c := NewAmountsCache()
	want := PodAmounts(base)
	if _, err := c.Amounts(podValue(t, base)); err != nil {
		t.Fatal(err)
	}
	for i, f := range same {
		p := withSpec(base.DeepCopy(), f)
		if got, err := c.Amounts(podValue(t, p)); err != nil || !sameList(got, want) {
			t.Errorf("same %d: %v, %v; want %v", i, EncodeAmounts(got), err, EncodeAmounts(want))
		}
	}
	if n := c.byHash.Len(); n != 1 {
		t.Errorf("%d entries after pods differing only in what PodAmounts does not read, want 1", n)
	}
	for i, f := range different {
		p := withSpec(base.DeepCopy(), f)
		got, err := c.Amounts(podValue(t, p))
		if err != nil || !sameList(got, PodAmounts(p)) || sameList(got, want) {
			t.Errorf("different %d: %v, %v; want %v", i, EncodeAmounts(got), err, EncodeAmounts(PodAmounts(p)))
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func withSpec(p *corev1.Pod, f func(*corev1.PodSpec)) *corev1.Pod { f(&p.Spec); return p }

// sameList compares resource lists by value.
func sameList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range b {
		if g, ok := a[name]; !ok || g.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// Fifty pods of 1m and 1Mi under cpu: 2 no longer fit: each holds a core.
func TestPodAmountsTinyPods(t *testing.T) {
	p := amountsPod("", []corev1.Container{amountsContainer(nil, corev1.ResourceList{"cpu": resource.MustParse("1m"), "memory": resource.MustParse("1Mi")})}, nil)
	total := corev1.ResourceList{}
	for range 50 {
		total = add(total, PodAmounts(p))
	}
	if total.Cpu().String() != "50" || total.Memory().String() != "50Mi" {
		t.Fatalf("50 pods of 1m/1Mi hold %v, want cpu=50,memory=50Mi", EncodeAmounts(total))
	}
}

func TestSbatchMiB(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"100", 100}, {"+100", 100}, {"100M", 100}, {"100mb", 100}, {"100MB", 100},
		{"2G", 2048}, {"2g", 2048}, {"2GB", 2048}, {"1T", 1 << 20},
		{"1K", 1}, {"1025K", 2}, {"1024kB", 1},
		{"0", 0}, {"0G", 0}, {"-5", 0}, {"", 0}, {"G", 0}, {"1.5G", 0}, {"2GiB", 0}, {"2Gi", 0}, {"2X", 0},
		{"99999999999999999999", 0},
		{"9223372036854775807T", math.MaxInt64 / mebibyte},
	} {
		if got := sbatchMiB(tc.in); got != tc.want {
			t.Errorf("sbatchMiB(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// PodTransform keeps what PodAmounts reads: the slimmed pod holds what the pod holds.
func TestPodTransformKeepsAmounts(t *testing.T) {
	q := resource.MustParse
	base := amountsPod("", []corev1.Container{
		amountsContainer(corev1.ResourceList{"cpu": q("1500m")}, corev1.ResourceList{"memory": q("1500Ki"), "nvidia.com/gpu": q("1")}),
		amountsContainer(nil, corev1.ResourceList{"cpu": q("1m")}),
	}, []corev1.Container{amountsContainer(corev1.ResourceList{"memory": q("3Gi")}, nil)})
	base.Annotations = map[string]string{"other": "x"}
	for _, flags := range []string{"", "--account=a -c 6 --mem=3G --time=1", "--mem=2048K", "-c4 --cpus-per-task=8", "--account=b"} {
		p := base.DeepCopy()
		if flags != "" {
			p.Annotations[slurmjob.FlagsAnnotation] = flags
		}
		slim, err := PodTransform(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := PodAmounts(slim.(*corev1.Pod)), PodAmounts(p); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("flags %q: the slimmed pod holds %v, the pod %v", flags, EncodeAmounts(got), EncodeAmounts(want))
		}
	}
	slim, _ := PodTransform(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{slurmjob.FlagsAnnotation: "--account=a --partition=p"}}})
	if a := slim.(*corev1.Pod).Annotations; a != nil {
		t.Errorf("flags that size nothing kept: %v", a)
	}
}

// AmountsCache reads the flags annotation: two pods of one spec and different flags
// hold different amounts.
func TestAmountsCacheFlags(t *testing.T) {
	c := NewAmountsCache()
	podValue := func(annotations string) ast.Value {
		var v any
		doc := `{"metadata": {"name": "p"` + annotations + `}, "spec": {"containers": [{"name": "main", "resources": {"limits": {"memory": "1Gi"}, "requests": {"cpu": "100m"}}}]}}`
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		val, err := ast.InterfaceToValue(v)
		if err != nil {
			t.Fatal(err)
		}
		return val
	}
	for _, tc := range []struct{ annotations, cpu string }{
		{"", "1"},
		{`, "annotations": {"slurm-job.vk.io/flags": "--cpus-per-task=4"}`, "4"},
		{`, "annotations": {"slurm-job.vk.io/flags": "-c 6"}`, "6"},
		{"", "1"},
		{`, "annotations": {"slurm-job.vk.io/flags": "--cpus-per-task=4"}`, "4"},
	} {
		l, err := c.Amounts(podValue(tc.annotations))
		if err != nil {
			t.Fatal(err)
		}
		if l.Cpu().String() != tc.cpu || l.Memory().String() != "1Gi" {
			t.Errorf("annotations %s: %v, want cpu=%s,memory=1Gi", tc.annotations, EncodeAmounts(l), tc.cpu)
		}
	}
}
