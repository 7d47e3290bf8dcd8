package registry

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// Cluster is the storage description of clusters.
var Cluster = Kind[*api.Cluster]{
	Resource:   "clusters",
	Singular:   "cluster",
	ShortNames: []string{"mcl"},
	New:        func() *api.Cluster { return &api.Cluster{} },
	NewList:    func() runtime.Object { return &api.ClusterList{} },
	Fields:     api.ClusterFields,
	Lifecycle:  fsm.Cluster,
	Prepare: func(c, old *api.Cluster) {
		// From the start, so that no Cluster is removed before the server
		// has deleted its Machines and revoked its join tokens
		// (internal/lifecycle); a delete only starts that.
		if old == nil && !slices.Contains(c.Finalizers, api.ClusterLifecycleFinalizer) {
			c.Finalizers = append(c.Finalizers, api.ClusterLifecycleFinalizer)
		}
	},
	Validate:       validation.ValidateCluster,
	ValidateUpdate: validation.ValidateClusterUpdate,
	ValidateStatus: validation.ValidateClusterStatusUpdate,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Phase", Type: "string", Description: "Lifecycle state of the cluster."},
		{Name: "Machines", Type: "integer", Description: "Machines in the cluster."},
		{Name: "Ready", Type: "integer", Description: "Machines that are Running."},
	},
	Cells: func(c *api.Cluster) []interface{} {
		return []interface{}{string(c.Status.Phase), c.Status.Machines, c.Status.ReadyMachines}
	},
}
