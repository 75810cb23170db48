package tenants

import (
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/sar-bridge/sar-bridge/internal/slurmjob"
)

// ResourcePods counts pods in amounts: 1 a pod.
const ResourcePods corev1.ResourceName = "pods"

// mebibyte is the SLURM plugin's unit of memory (--mem is in MiB).
const mebibyte = 1 << 20

// PodAmounts is what a pod holds of its tenant's quota: never less than what interLink's
// SLURM plugin allocates for it. The plugin sizes the job from the containers' limits
// and ignores requests: --cpus-per-task is the largest CPU limit rounded up to whole
// cores, --mem the largest memory limit in MiB (rounded down: a limit under 1 MiB
// becomes --mem=0, the whole node, which the policy refuses); where no container sets
// one it keeps the pod's slurm-job.vk.io/flags annotation's value, else writes 1 core
// and 1 MiB. So each container (init containers too) counts, rounded as the plugin
// rounds CPU and never less than it allocates:
//
//   - cpu: its CPU limit rounded up to whole cores; without one, the flags'
//     --cpus-per-task (-c) when set, else its request rounded up; at least 1 core.
//   - memory: its memory limit rounded up to whole MiB (a 1Ki limit counts 1Mi, never 0);
//     without one, the flags' --mem (sbatch's units: MiB, K/M/G/T) when set and not 0,
//     else its request rounded up; at least 1 MiB.
//   - any other resource (nvidia.com/gpu, ephemeral-storage, ...): its limit where it
//     sets one, else its request.
//
// Containers are then combined as the scheduler combines requests (component-helpers'
// PodRequests: per resource, the larger of the init containers' peak and the
// containers' sum, sidecars included), which is never less than the plugin's largest
// container. Pod-level requests (spec.resources) can only raise that, never lower it
// (the plugin does not read them); overhead is added; "pods" is 1. Flags the plugin and
// sbatch cannot read the same way (slurmjob.ParseFlags fails) are ignored: the HPC
// policy refuses such a pod. What the plugin's configuration adds is not known here: a
// flavor's CPU and memory defaults, which it applies to a container without limits when
// another container sets some.
func PodAmounts(pod *corev1.Pod) corev1.ResourceList {
	spec := &pod.Spec
	job := readJobFlags(pod.Annotations[slurmjob.FlagsAnnotation])
	sized := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     job.charged(spec.Containers),
		InitContainers: job.charged(spec.InitContainers),
	}}
	amounts := resourcehelper.PodRequests(sized, resourcehelper.PodResourcesOptions{SkipPodLevelResources: true, ExcludeOverhead: true})
	if spec.Resources != nil {
		for name, q := range spec.Resources.Requests {
			if cur, ok := amounts[name]; resourcehelper.IsSupportedPodLevelResource(name) && (!ok || q.Cmp(cur) > 0) {
				amounts[name] = q.DeepCopy()
			}
		}
	}
	for name, q := range spec.Overhead {
		if cur, ok := amounts[name]; ok {
			cur.Add(q)
			amounts[name] = cur
		} else {
			amounts[name] = q.DeepCopy()
		}
	}
	amounts[ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	for name, q := range amounts {
		if q.IsZero() {
			delete(amounts, name)
		}
	}
	return amounts
}

// jobFlags is what a flags annotation sets of the job's size: CPUs per task and memory
// in MiB, 0 where it sets nothing usable.
type jobFlags struct {
	cpus, memMiB int64
}

// readJobFlags reads --cpus-per-task and --mem of a flags annotation's value.
func readJobFlags(value string) jobFlags {
	var j jobFlags
	if strings.TrimSpace(value) == "" {
		return j
	}
	opts, err := slurmjob.ParseFlags(value)
	if err != nil {
		return j
	}
	for _, o := range opts {
		switch o.Name {
		case "--cpus-per-task":
			if n, err := strconv.ParseInt(o.Value, 10, 64); err == nil && n > 0 {
				j.cpus = n
			}
		case "--mem":
			j.memMiB = sbatchMiB(o.Value)
		}
	}
	return j
}

// String is the flags annotation value that sets just these (what PodTransform keeps of
// a pod's flags), "" when they set nothing.
func (j jobFlags) String() string {
	var words []string
	if j.cpus > 0 {
		words = append(words, "--cpus-per-task="+strconv.FormatInt(j.cpus, 10))
	}
	if j.memMiB > 0 {
		words = append(words, "--mem="+strconv.FormatInt(j.memMiB, 10))
	}
	return strings.Join(words, " ")
}

// sbatchMiB is an sbatch --mem value in MiB as sbatch reads it (a decimal number, then
// optionally K, M, G or T, either case, optionally followed by B; MiB without a unit; K
// rounded up), 0 for a value sbatch refuses or 0 (the whole node's memory, which no
// amount can say). A value beyond int64 bytes saturates.
func sbatchMiB(v string) int64 {
	i := 0
	if i < len(v) && (v[i] == '+' || v[i] == '-') {
		i++
	}
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(v[:i], 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	unit := strings.ToUpper(v[i:])
	if len(unit) == 2 && unit[1] == 'B' {
		unit = unit[:1]
	}
	var mul int64
	switch unit {
	case "", "M":
		mul = 1
	case "K":
		return (n + 1023) / 1024
	case "G":
		mul = 1 << 10
	case "T":
		mul = 1 << 20
	default:
		return 0
	}
	if n > math.MaxInt64/mebibyte/mul {
		return math.MaxInt64 / mebibyte
	}
	return n * mul
}

// charged copies the containers' resources (and restart policies, which tell sidecars
// apart) as the requests PodAmounts sums: each as the plugin sizes it (cpu, memory) or
// its limit over its request (the rest).
func (j jobFlags) charged(cs []corev1.Container) []corev1.Container {
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		lim, req := c.Resources.Limits, c.Resources.Requests
		amounts := make(corev1.ResourceList, len(req)+len(lim)+2)
		for name, q := range req {
			amounts[name] = q
		}
		for name, q := range lim {
			amounts[name] = q
		}
		amounts[corev1.ResourceCPU] = j.cpu(lim, req)
		amounts[corev1.ResourceMemory] = j.memory(lim, req)
		out[i] = corev1.Container{RestartPolicy: c.RestartPolicy, Resources: corev1.ResourceRequirements{Requests: amounts}}
	}
	return out
}

// cpu is what a container counts of CPU: whole cores, at least one.
func (j jobFlags) cpu(lim, req corev1.ResourceList) resource.Quantity {
	if q, ok := lim[corev1.ResourceCPU]; ok {
		return roundUp(q, 1, resource.DecimalSI)
	}
	if j.cpus > 0 {
		return *resource.NewQuantity(j.cpus, resource.DecimalSI)
	}
	return roundUp(req[corev1.ResourceCPU], 1, resource.DecimalSI)
}

// memory is what a container counts of memory: whole MiB, at least one.
func (j jobFlags) memory(lim, req corev1.ResourceList) resource.Quantity {
	if q, ok := lim[corev1.ResourceMemory]; ok {
		return roundUp(q, mebibyte, resource.BinarySI)
	}
	if j.memMiB > 0 {
		return *resource.NewQuantity(j.memMiB*mebibyte, resource.BinarySI)
	}
	return roundUp(req[corev1.ResourceMemory], mebibyte, resource.BinarySI)
}

// exactBelow bounds the quantities roundUp rounds in int64: past it a quantity is
// charged as it is plus one unit, which is no less than rounded up.
const exactBelow = 1 << 62

// roundUp is q rounded up to a whole number of units (of its base unit: cores, bytes),
// at least one unit.
func roundUp(q resource.Quantity, unit int64, format resource.Format) resource.Quantity {
	if q.Sign() <= 0 {
		return *resource.NewQuantity(unit, format)
	}
	if q.CmpInt64(exactBelow) >= 0 {
		out := q.DeepCopy()
		out.Add(*resource.NewQuantity(unit, format))
		return out
	}
	n := q.Value() // rounded up to a whole base unit
	return *resource.NewQuantity((n+unit-1)/unit*unit, format)
}
