package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// ClusterRegistration is the storage description of registration requests.
var ClusterRegistration = Kind[*api.ClusterRegistration]{
	Resource:       "clusterregistrations",
	Singular:       "clusterregistration",
	ShortNames:     []string{"creg"},
	New:            func() *api.ClusterRegistration { return &api.ClusterRegistration{} },
	NewList:        func() runtime.Object { return &api.ClusterRegistrationList{} },
	Fields:         api.ClusterRegistrationFields,
	Lifecycle:      fsm.Registration,
	Validate:       validation.ValidateClusterRegistration,
	ValidateUpdate: validation.ValidateClusterRegistrationUpdate,
	ValidateStatus: validation.ValidateClusterRegistrationStatusUpdate,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Phase", Type: "string", Description: "Pending, Approved, Granted, Denied or Expired."},
		{Name: "Node", Type: "string", Description: "Node name the agent asked for."},
		{Name: "Cluster", Type: "string", Description: "Cluster the machine joined."},
		{Name: "Machine", Type: "string", Description: "Machine created for the agent."},
	},
	Cells: func(r *api.ClusterRegistration) []interface{} {
		return []interface{}{string(r.Status.Phase), r.Spec.NodeName, r.Status.Cluster, r.Status.Machine}
	},
}
