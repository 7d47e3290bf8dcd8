package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
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
	Validate:   validation.ValidateControllerLease,
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
