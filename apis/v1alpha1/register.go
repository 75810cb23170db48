package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API's group and version.
var GroupVersion = schema.GroupVersion{Group: "sar-bridge.io", Version: "v1alpha1"}

// Resource is the OffloadTenant resource.
var Resource = GroupVersion.WithResource("offloadtenants")

var (
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &OffloadTenant{}, &OffloadTenantList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
