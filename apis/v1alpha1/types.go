// Package v1alpha1 is the OffloadTenant API (sar-bridge.io/v1alpha1): a tenant of
// interLink offloading as a cluster object — the API group its RBAC lives in, its
// namespaces and its offload quota, with the quota's ledger in the status.
//
// The CRD (manifests/crds/, the chart's crds/) is generated from these types by
// controller-gen (make generate); do not edit it by hand.
//
// +kubebuilder:object:generate=true
// +groupName=sar-bridge.io
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// OffloadTenant is a tenant of interLink offloading. Its API group is in one of its own
// (sar-bridge.io), never one a tenant's RBAC rules name, so a tenant's "*" grant on its
// group cannot reach it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=otenant,categories=sar-bridge
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.group`
// +kubebuilder:printcolumn:name="Used",type=string,JSONPath=`.status.used.pods`,description="pods charged"
// +kubebuilder:printcolumn:name="Hard",type=string,JSONPath=`.spec.hard.pods`,description="pods the tenant may hold"
// +kubebuilder:printcolumn:name="CPU used",type=string,JSONPath=`.status.used.cpu`,priority=1
// +kubebuilder:printcolumn:name="CPU hard",type=string,JSONPath=`.spec.hard.cpu`,priority=1
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingCount`
// +kubebuilder:printcolumn:name="Clusters",type=string,JSONPath=`.status.clustersUsed`,priority=1,description="pods charged per member cluster (a hub's tenants)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OffloadTenant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   OffloadTenantSpec   `json:"spec"`
	Status OffloadTenantStatus `json:"status,omitempty"`
}

// OffloadTenantSpec is what an admin declares about a tenant.
type OffloadTenantSpec struct {
	// Group is the API group of the tenant's offload RBAC: a pod decision reviews
	// verbs on pods.<group> (the mapping --openshift.mappings tenant=group makes).
	// Not sar-bridge.io nor a group under it: OffloadTenants live there, so a tenant whose
	// admins may grant "*" on its offload group would reach every tenant's quota and
	// ledger; the project keeps the whole suffix for APIs of its own.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self != 'sar-bridge.io' && !self.endsWith('.sar-bridge.io')",message="must not be sar-bridge.io or a group under it: OffloadTenants live in sar-bridge.io, and a tenant's grants on its own group must never reach them"
	Group string `json:"group"`

	// Namespaces lists the tenant's namespaces by name. When empty, a namespace belongs
	// to the tenant whose name its --tenant.label label (default interlink.io/tenant)
	// holds, else to the tenant named like the namespace.
	// +optional
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`

	// Hard caps what the tenant's pods on virtual nodes may hold at once, per resource
	// name (pods, cpu, memory, nvidia.com/gpu, ...): a pod counts its limits where it sets
	// them, else its requests, as the HPC side allocates them; pods counts 1 a pod.
	// +optional
	Hard corev1.ResourceList `json:"hard,omitempty"`

	// Nodes caps the same per virtual node, by node name.
	// +optional
	Nodes map[string]corev1.ResourceList `json:"nodes,omitempty"`
}

// OffloadTenantStatus is the quota's ledger: what the bridges charged.
type OffloadTenantStatus struct {
	// Used is what the tenant's charged pods hold: the charges pending plus the pods
	// confirmed charged (labelled sar-bridge.io/charged) that have not ended.
	// +optional
	Used corev1.ResourceList `json:"used,omitempty"`

	// NodesUsed is Used per virtual node, for the nodes Spec.Nodes caps.
	// +optional
	NodesUsed map[string]corev1.ResourceList `json:"nodesUsed,omitempty"`

	// Pending are the charges the reconciler has not confirmed yet: a decision charged
	// them, and the pod has not been seen since (or not labelled). A charge is kept
	// here until the pod is seen and labelled, has ended, or is found missing after
	// the pending timeout. Charges made in one write for the same namespace, node,
	// amounts and cluster are stored as one entry that lists the further pods in
	// pods, so that a burst's status stays small (PendingCharges).
	// +optional
	Pending PendingCharges `json:"pending,omitempty"`

	// PendingCount is len(Pending), for kubectl get. Always written, 0 included, so a
	// ledger with nothing pending shows 0 there rather than <none>.
	// +optional
	PendingCount int32 `json:"pendingCount"`

	// Slices are the rooms of the quota that bridges hold to charge creates in memory
	// (the escrow method): each holder charges against its own slice without a write
	// and reports its charges into Pending in batches. Used plus the charges pending
	// plus every slice never exceeds Hard. A slice whose holder stops renewing it
	// returns once Expires has passed, after the reconciler has counted the pods its
	// holder may have admitted.
	// +optional
	// +listType=map
	// +listMapKey=holder
	Slices []Slice `json:"slices,omitempty"`

	// ObservedGeneration is the spec generation the reconciler last recalculated for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Adopted is the last count of the pods already running that no charge covered:
	// the first charge of each spec generation (a quota just set, namespaces just added)
	// counts the tenant's Running pods on virtual nodes that are neither pending here
	// nor marked charged, as a ResourceQuota counts the objects that exist when it is
	// created, and adds them to Pending in the same write. Charges do not wait for the
	// reconciler: the charging bridge counts them itself.
	// +optional
	Adopted *Adoption `json:"adopted,omitempty"`

	// Clusters is the usage per member cluster when the OffloadTenants live in a hub
	// that several clusters' bridges charge (--tenants.kubeconfig, --tenants.cluster-name):
	// each cluster's elected reconciler recounts its own entry only, and Used is the sum
	// of the entries (plus what bridges without a cluster name charged). Empty without
	// a hub.
	// +optional
	// +listType=map
	// +listMapKey=name
	Clusters []ClusterUsage `json:"clusters,omitempty"`

	// ClustersUsed sums Clusters up for kubectl get -o wide: the pods each member
	// cluster holds, "a=3,b=7", sorted by name.
	// +optional
	ClustersUsed string `json:"clustersUsed,omitempty"`

	// Reconcilers records, per cluster, the election whose reconciler last wrote this
	// status. A reconciler elected through another Lease (another
	// --quota.lease-namespace) leaves the tenant alone while that record is recent: two
	// reconcilers recount from pod informers that lag each other, and one that
	// recounts before its informer shows the pods the other just confirmed counts too
	// little.
	// +optional
	Reconcilers []ReconcilerRecord `json:"reconcilers,omitempty"`

	// Conditions: Ready (the spec could be read and the ledger recalculated).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Charge is one pod a decision charged to the tenant.
type Charge struct {
	// UID is the pod's, when the decision knew it.
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// Namespace and Name are the pod's.
	Namespace string `json:"namespace"`
	// +optional
	Name string `json:"name,omitempty"`
	// Node is the virtual node the pod was decided for, when known.
	// +optional
	Node string `json:"node,omitempty"`
	// Amounts is what the pod holds.
	Amounts corev1.ResourceList `json:"amounts"`
	// Time is when it was charged.
	Time metav1.Time `json:"time"`
	// Cluster is the member cluster whose bridge charged it (--tenants.cluster-name);
	// only that cluster's reconciler confirms or releases it. Empty without a hub.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Pods are further pods charged in the same write with the same namespace, node,
	// amounts and cluster, each as NAME/UID (either may be empty): each is a charge
	// of its own. Only in the stored form: a decoded Charge is one pod.
	// +optional
	// +listType=atomic
	Pods []string `json:"pods,omitempty"`
}

// ClusterUsage is one member cluster's part of a hub's tenant.
type ClusterUsage struct {
	// Name is the member cluster's (--tenants.cluster-name).
	Name string `json:"name"`
	// Used is what the cluster's charged pods and pending charges hold.
	// +optional
	Used corev1.ResourceList `json:"used,omitempty"`
	// NodesUsed is Used per virtual node of the cluster, for the nodes Spec.Nodes caps.
	// +optional
	NodesUsed map[string]corev1.ResourceList `json:"nodesUsed,omitempty"`
	// Adopted is the cluster's last count of its running pods no charge covered
	// (status.adopted's role, per cluster).
	// +optional
	Adopted *Adoption `json:"adopted,omitempty"`
}

// Adoption is one count of the pods already running that no charge covered.
type Adoption struct {
	// Generation is the spec generation (metadata.generation) the count was made for.
	Generation int64 `json:"generation"`
	// Time is when the count was written.
	Time metav1.Time `json:"time"`
	// Pods is how many pods were adopted: added to Pending as charges.
	Pods int32 `json:"pods"`
	// Names are the first of them (namespace/name), at most 10.
	// +optional
	// +listType=atomic
	Names []string `json:"names,omitempty"`
}

// ReconcilerRecord is the election whose reconciler last wrote a tenant's status for
// one cluster.
type ReconcilerRecord struct {
	// Cluster is the member cluster (--tenants.cluster-name); empty without a hub.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Election is the Lease the reconciler was elected through: "namespace/name".
	Election string `json:"election"`
	// Holder is the replica that held it.
	Holder string `json:"holder"`
	// Time is when it wrote.
	Time metav1.Time `json:"time"`
}

// Slice is room of the quota that one bridge holds (a lease of quota).
type Slice struct {
	// Holder is the bridge replica's identity.
	Holder string `json:"holder"`
	// Amounts is the room the holder may still charge, per resource of spec.hard.
	Amounts corev1.ResourceList `json:"amounts"`
	// Expires is when the slice returns unless its holder renews it.
	Expires metav1.Time `json:"expires"`
	// Cluster is the member cluster of the holder (--tenants.cluster-name): only that
	// cluster's reconciler, which sees its pods, takes the slice back once it expired.
	// Empty without a hub.
	// +optional
	Cluster string `json:"cluster,omitempty"`
}

// OffloadTenantList is a list of OffloadTenants.
//
// +kubebuilder:object:root=true
type OffloadTenantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OffloadTenant `json:"items"`
}
