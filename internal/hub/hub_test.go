package hub

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sar-bridge/sar-bridge/apis/v1alpha1"
)

func TestClaim(t *testing.T) {
	ctx := context.Background()
	hubClient := kubefake.NewClientset()
	a := Member{Name: "site-a", UID: "uid-a", Server: "https://a:6443"}
	if err := Claim(ctx, hubClient, "sar-bridge", a); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	// Another replica of the same cluster, or a restart: the claim holds.
	if err := Claim(ctx, hubClient, "sar-bridge", a); err != nil {
		t.Fatalf("the same cluster again: %v", err)
	}
	// Another cluster under the same name: refused, naming both.
	err := Claim(ctx, hubClient, "sar-bridge", Member{Name: "site-a", UID: "uid-b", Server: "https://b:6443"})
	if !errors.Is(err, ErrClaimed) {
		t.Fatalf("another cluster: %v, want ErrClaimed", err)
	}
	for _, want := range []string{`"uid-a" (API server https://a:6443)`, `"uid-b" (API server https://b:6443)`, "Lease sar-bridge/sar-bridge-cluster-site-a", "release-cluster site-a"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Another name is free.
	if err := Claim(ctx, hubClient, "sar-bridge", Member{Name: "site-b", UID: "uid-b"}); err != nil {
		t.Fatalf("site-b: %v", err)
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{"a": true, "site-b": true, "": false, "Site": false, "a.b": false, strings.Repeat("a", 64): false} {
		if err := ValidateName(name); (err == nil) != ok {
			t.Errorf("ValidateName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func TestReleaseCluster(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	withB := &v1alpha1.OffloadTenant{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: v1alpha1.OffloadTenantSpec{Group: "g", Hard: corev1.ResourceList{"pods": q("10")}},
		Status: v1alpha1.OffloadTenantStatus{
			Used:         corev1.ResourceList{"pods": q("5")},
			Pending:      []v1alpha1.Charge{{Namespace: "n", Name: "p1", Cluster: "a"}, {Namespace: "n", Name: "p2", Cluster: "b"}},
			PendingCount: 2,
			Slices:       []v1alpha1.Slice{{Holder: "h", Cluster: "b", Amounts: corev1.ResourceList{"pods": q("1")}}},
			Clusters:     []v1alpha1.ClusterUsage{{Name: "a", Used: corev1.ResourceList{"pods": q("2")}}, {Name: "b", Used: corev1.ResourceList{"pods": q("3")}}},
		}}
	withoutB := &v1alpha1.OffloadTenant{ObjectMeta: metav1.ObjectMeta{Name: "team-c"}, Spec: v1alpha1.OffloadTenantSpec{Group: "g"}}
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1alpha1.OffloadTenant{}).WithObjects(withB, withoutB).Build()
	hubClient := kubefake.NewClientset()
	if err := Claim(ctx, hubClient, "sar-bridge", Member{Name: "b", UID: "uid-b"}); err != nil {
		t.Fatal(err)
	}
	got, err := ReleaseCluster(ctx, c, hubClient, "sar-bridge", "b")
	if err != nil {
		t.Fatal(err)
	}
	if used := got[0].Used["pods"]; len(got) != 1 || got[0].Tenant != "team-a" || got[0].Pending != 1 || got[0].Slices != 1 || used.String() != "3" {
		t.Fatalf("released %+v, want team-a's 1 charge, 1 slice, 3 pods", got)
	}
	var after v1alpha1.OffloadTenant
	if err := c.Get(ctx, client.ObjectKey{Name: "team-a"}, &after); err != nil {
		t.Fatal(err)
	}
	if used := after.Status.Used["pods"]; used.String() != "2" || len(after.Status.Pending) != 1 || len(after.Status.Slices) != 0 || after.Status.ClustersUsed != "a=2" {
		t.Errorf("status after %+v, want cluster a's part alone", after.Status)
	}
	// The name is free for another cluster now.
	if err := Claim(ctx, hubClient, "sar-bridge", Member{Name: "b", UID: "uid-new"}); err != nil {
		t.Errorf("claim after release: %v", err)
	}
}
