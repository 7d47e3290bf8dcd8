package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ControllerLease is the storage description of the leases that elect the
// server running each set of controllers.
var ControllerLease = Kind[*api.ControllerLease]{
	Resource:   "controllerleases",
	Singular:   "controllerlease",
	ShortNames: []string{"cl"},
	New:        func() *api.ControllerLease { return &api.ControllerLease{} },
	NewList:    func() runtime.Object { return &api.ControllerLeaseList{} },
	Fields:     api.ControllerLeaseFields,
	Validate: func(l *api.ControllerLease) field.ErrorList {
		return validateNonNegative(l.Spec.LeaseDurationSeconds, field.NewPath("spec", "leaseDurationSeconds"))
	},
	Columns: []metav1.TableColumnDefinition{
		{Name: "Holder", Type: "string", Description: "Server holding the lease."},
		{Name: "Renewed", Type: "string", Description: "When the holder last renewed the lease."},
		{Name: "Transitions", Type: "integer", Description: "How often the lease changed holders."},
	},
	Cells: func(l *api.ControllerLease) []interface{} {
		var renewed *metav1.Time
		if l.Spec.RenewTime != nil {
			renewed = &metav1.Time{Time: l.Spec.RenewTime.Time}
		}
		return []interface{}{l.Spec.HolderIdentity, since(renewed), l.Spec.LeaseTransitions}
	},
}
