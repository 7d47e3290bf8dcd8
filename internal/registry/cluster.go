package registry

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
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
	Validate: func(c *api.Cluster) field.ErrorList {
		spec := field.NewPath("spec")
		errs := validateMaxLen(c.Spec.DisplayName, 256, spec.Child("displayName"))
		if c.Spec.ClientID != "" {
			errs = append(errs, validateIdentifier(c.Spec.ClientID, spec.Child("clientID"))...)
		}
		return errs
	},
	ValidateUpdate: func(c, old *api.Cluster) field.ErrorList {
		if old.Spec.ClientID == "" {
			return nil
		}
		return validateImmutable(c.Spec.ClientID, old.Spec.ClientID, field.NewPath("spec", "clientID"))
	},
	// The server alone writes a Cluster's status; the bounds keep a bug or
	// an administrator's edit from storing what no one can read.
	ValidateStatus: func(c, old *api.Cluster) field.ErrorList {
		status := field.NewPath("status")
		errs := validateMaxLen(c.Status.Reason, maxReasonBytes, status.Child("reason"))
		errs = append(errs, validateMaxLen(c.Status.Message, maxMessageBytes, status.Child("message"))...)
		// Deleting is final: a cluster that was not deleted would stay
		// there for good, refusing every join.
		if c.Status.Phase == api.ClusterPhaseDeleting && old.Status.Phase != api.ClusterPhaseDeleting && c.DeletionTimestamp == nil && old.DeletionTimestamp == nil {
			errs = append(errs, field.Forbidden(status.Child("phase"), "a cluster is Deleting only once it was deleted, and never leaves it: delete it with 'kubectl delete cluster "+c.Name+"' instead"))
		}
		return append(errs, validateConditions(c.Status.Conditions, old.Status.Conditions, status.Child("conditions"))...)
	},
	Columns: []metav1.TableColumnDefinition{
		{Name: "Phase", Type: "string", Description: "Lifecycle state of the cluster."},
		{Name: "Machines", Type: "integer", Description: "Machines in the cluster."},
		{Name: "Ready", Type: "integer", Description: "Machines that are Running."},
	},
	Cells: func(c *api.Cluster) []interface{} {
		return []interface{}{string(c.Status.Phase), c.Status.Machines, c.Status.ReadyMachines}
	},
}
