package tenants

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestPodAmounts(t *testing.T) {
	q := resource.MustParse
	container := func(req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		spec corev1.PodSpec
		want corev1.ResourceList
	}{
		{"limits over requests (issue 33: 100m requested, 32 allocated)",
			corev1.PodSpec{Containers: []corev1.Container{container(corev1.ResourceList{"cpu": q("100m")}, corev1.ResourceList{"cpu": q("32")})}},
			corev1.ResourceList{"cpu": q("32"), "pods": q("1")}},
		{"requests where no limit",
			corev1.PodSpec{Containers: []corev1.Container{container(corev1.ResourceList{"cpu": q("1"), "memory": q("1Gi")}, corev1.ResourceList{"memory": q("2Gi")})}},
			corev1.ResourceList{"cpu": q("1"), "memory": q("2Gi"), "pods": q("1")}},
		{"containers summed, init peak when larger",
			corev1.PodSpec{
				Containers:     []corev1.Container{container(nil, corev1.ResourceList{"cpu": q("1")}), container(nil, corev1.ResourceList{"cpu": q("2")})},
				InitContainers: []corev1.Container{container(nil, corev1.ResourceList{"cpu": q("4"), "nvidia.com/gpu": q("1")})},
			},
			corev1.ResourceList{"cpu": q("4"), "nvidia.com/gpu": q("1"), "pods": q("1")}},
		{"sidecars run beside the containers",
			corev1.PodSpec{
				Containers:     []corev1.Container{container(nil, corev1.ResourceList{"cpu": q("1")})},
				InitContainers: []corev1.Container{{RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": q("500m")}}}},
			},
			corev1.ResourceList{"cpu": q("1500m"), "pods": q("1")}},
		{"overhead", corev1.PodSpec{Containers: []corev1.Container{{}}, Overhead: corev1.ResourceList{"memory": q("64Mi")}},
			corev1.ResourceList{"memory": q("64Mi"), "pods": q("1")}},
		{"nothing set", corev1.PodSpec{Containers: []corev1.Container{{}}}, corev1.ResourceList{"pods": q("1")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PodAmounts(&tc.spec)
			if len(got) != len(tc.want) {
				t.Fatalf("amounts %v, want %v", got, tc.want)
			}
			for name, want := range tc.want {
				if g, ok := got[name]; !ok || g.Cmp(want) != 0 {
					t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
				}
			}
		})
	}
}
