package tenants

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// ResourcePods counts pods in amounts: 1 a pod.
const ResourcePods corev1.ResourceName = "pods"

// PodAmounts is what a pod holds of its tenant's quota: what the HPC side allocates.
// interLink's SLURM plugin sizes a job from the containers' limits (--cpus-per-task,
// --mem: the largest limit), so a container counts its limit where it sets one, else
// its request; containers are then summed as the scheduler sums requests (component-
// helpers' PodRequests: per resource, the larger of the init containers' peak and the
// containers' sum, sidecars included, plus overhead). "pods" is 1.
func PodAmounts(spec *corev1.PodSpec) corev1.ResourceList {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     limitsOverRequests(spec.Containers),
		InitContainers: limitsOverRequests(spec.InitContainers),
		Overhead:       spec.Overhead,
		Resources:      spec.Resources,
	}}
	amounts := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	amounts[ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	for name, q := range amounts {
		if q.IsZero() {
			delete(amounts, name)
		}
	}
	return amounts
}

// limitsOverRequests copies the containers' resources (and restart policies, which tell
// sidecars apart), each limit replacing the request of its resource.
func limitsOverRequests(cs []corev1.Container) []corev1.Container {
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		amounts := make(corev1.ResourceList, len(c.Resources.Requests)+len(c.Resources.Limits))
		for name, q := range c.Resources.Requests {
			amounts[name] = q
		}
		for name, q := range c.Resources.Limits {
			amounts[name] = q
		}
		out[i] = corev1.Container{RestartPolicy: c.RestartPolicy, Resources: corev1.ResourceRequirements{Requests: amounts}}
	}
	return out
}
