package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// MachinePlanSet is the storage description of plan sets.
var MachinePlanSet = Kind[*api.MachinePlanSet]{
	Resource: "machineplansets",
	Singular: "machineplanset",
	// "mps": not one of Kubernetes' own short names (those are two to
	// four letters such as "po", "svc", "pdb", "sts", none "mps").
	ShortNames:     []string{"mps"},
	New:            func() *api.MachinePlanSet { return &api.MachinePlanSet{} },
	NewList:        func() runtime.Object { return &api.MachinePlanSetList{} },
	Fields:         api.MachinePlanSetFields,
	Validate:       validation.ValidateMachinePlanSet,
	ValidateStatus: validation.ValidateMachinePlanSetStatusUpdate,
	Columns: []metav1.TableColumnDefinition{
		{Name: "Revision", Type: "string", Description: "Hash of the current template."},
		{Name: "Matched", Type: "integer", Description: "Machines the selector selects."},
		{Name: "Updated", Type: "integer", Description: "Machines with the current revision's plan."},
		{Name: "Ready", Type: "integer", Description: "Machines that applied the current revision."},
		{Name: "Failed", Type: "integer", Description: "Machines whose plan failed."},
		{Name: "Status", Type: "string", Description: "Complete, Conflict, Paused or Progressing."},
		{Name: "Partition", Type: "string", Description: "The partition being rolled out (spec.strategy.partitions)."},
	},
	Cells: func(s *api.MachinePlanSet) []interface{} {
		return []interface{}{s.Status.Revision, s.Status.Matched, s.Status.Updated, s.Status.Ready, s.Status.Failed, planSetSummary(s), s.Status.CurrentPartition}
	},
}

// planSetSummary is the one word the table shows: what most needs the
// operator's eye first.
func planSetSummary(s *api.MachinePlanSet) string {
	for _, t := range []string{api.PlanSetConflict, api.PlanSetPaused, api.PlanSetComplete, api.PlanSetProgressing} {
		for _, c := range s.Status.Conditions {
			if c.Type == t && c.Status == metav1.ConditionTrue {
				return t
			}
		}
	}
	return ""
}
