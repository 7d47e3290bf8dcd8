package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AccessRole is what an AccessBinding lets its subjects do on its scope.
type AccessRole string

// The roles a binding grants, each on the binding's clusters only.
const (
	// AccessViewer reads the scope's objects, as muster:viewers reads all:
	// never a plan's secrets, never a machine's shell, ports or log.
	AccessViewer AccessRole = "Viewer"
	// AccessOperator also writes plans, plan sets, pools and machines,
	// mints join tokens for the scope's clusters, approves their
	// registrations, and reaches their machines (exec, port-forward, log),
	// as muster:operators does everywhere.
	AccessOperator AccessRole = "Operator"
	// AccessAdmin is an operator who also creates and deletes the scope's
	// Clusters and Machines, and grants others access to the scope with
	// AccessBindings of their own (never beyond the scope, never more).
	AccessAdmin AccessRole = "Admin"
)

// AccessSubjectKind says whether a subject names a user or a group.
type AccessSubjectKind string

// Subject kinds.
const (
	// AccessUser matches the authenticated user name: a client
	// certificate's CN, a console token's user, an OIDC username claim.
	AccessUser AccessSubjectKind = "User"
	// AccessGroup matches one of the user's groups: a certificate's O, a
	// console token's groups, an OIDC groups claim.
	AccessGroup AccessSubjectKind = "Group"
)

// ScopedClusterField is the field a scoped user's list or watch must select
// its clusters with (kubectl get machines --field-selector
// spec.cluster=NAME): Machines, MachinePools, MachinePlanSets, join tokens
// and registrations have it. Clusters are selected by metadata.name,
// MachinePlans by metadata.name (a plan is named after its Machine), Events
// by involvedObject.kind and involvedObject.name.
const ScopedClusterField = "spec.cluster"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AccessBinding gives users and groups a role on some clusters: the
// Machines, MachinePlans, MachinePlanSets, MachinePools,
// ClusterRegistrations, join tokens, Events and history of those clusters,
// and their machines' tunnels and Kubernetes API. It is Rancher's cluster
// role binding: a team sees and runs its own clusters and nothing else.
// A binding takes effect at once, on open watches too: a watch whose
// authority a change withdraws ends. Whoever writes a binding must hold
// what it grants (Admin on all of its scope, or system:masters).
type AccessBinding struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is who gets which role on which clusters.
	// +optional
	Spec AccessBindingSpec `json:"spec,omitempty"`
	// Status is unused; kept so that every kind has the same shape.
	// +optional
	Status AccessBindingStatus `json:"status,omitempty"`
}

// AccessBindingSpec is a binding's grant.
type AccessBindingSpec struct {
	// Subjects are the users and groups the binding grants to.
	// +listType=atomic
	Subjects []AccessSubject `json:"subjects"`
	// Role is Viewer, Operator or Admin.
	Role AccessRole `json:"role"`
	// Scope is which clusters the role reaches.
	Scope AccessScope `json:"scope"`
}

// AccessSubject is one user or group.
type AccessSubject struct {
	// Kind is User or Group.
	Kind AccessSubjectKind `json:"kind"`
	// Name is the user name or group name, exactly as authenticated.
	Name string `json:"name"`
}

// AccessScope is a set of clusters: exactly one of its fields is set.
type AccessScope struct {
	// AllClusters reaches every cluster, present and future, and what
	// belongs to none (join tokens bound to no cluster, registrations made
	// with them): the role as its built-in group holds it.
	// +optional
	AllClusters bool `json:"allClusters,omitempty"`
	// Clusters names the clusters, whether or not they exist yet.
	// +optional
	// +listType=set
	Clusters []string `json:"clusters,omitempty"`
	// ClusterSelector selects clusters by their labels, as they are at the
	// time of each request.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
}

// AccessBindingStatus is empty.
type AccessBindingStatus struct{}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// AccessBindingList is a list of AccessBindings.
type AccessBindingList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the bindings.
	Items []AccessBinding `json:"items"`
}
