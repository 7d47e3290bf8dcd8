package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// MachinePool is the storage description of machine pools.
var MachinePool = Kind[*api.MachinePool]{
	Resource:       "machinepools",
	Singular:       "machinepool",
	ShortNames:     []string{"mpool"},
	New:            func() *api.MachinePool { return &api.MachinePool{} },
	NewList:        func() runtime.Object { return &api.MachinePoolList{} },
	Fields:         api.MachinePoolFields,
	Validate:       validation.ValidateMachinePool,
	ValidateUpdate: validation.ValidateMachinePoolUpdate,
	ValidateStatus: validation.ValidateMachinePoolStatusUpdate,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "Cluster the pool's machines join."},
		{Name: "Desired", Type: "integer", Description: "Machines the pool keeps (spec.replicas)."},
		{Name: "Current", Type: "integer", Description: "Machines the pool has."},
		{Name: "Ready", Type: "integer", Description: "Machines that are Running."},
		{Name: "Up-to-date", Type: "integer", Description: "Machines made from the current template."},
		{Name: "Driver", Type: "string", Description: "Driver that creates the hosts."},
		{Name: "Revision", Type: "string", Description: "Hash of the current template."},
	},
	Cells: func(p *api.MachinePool) []interface{} {
		return []interface{}{p.Spec.Cluster, p.Spec.Replicas, p.Status.Replicas, p.Status.ReadyReplicas, p.Status.UpdatedReplicas, p.Spec.Template.Driver, p.Status.Revision}
	},
}
