package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// ValidateCluster checks a Cluster's spec.
func ValidateCluster(c *api.Cluster) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateMaxLen(c.Spec.DisplayName, 256, spec.Child("displayName"))
	if c.Spec.ClientID != "" {
		errs = append(errs, validateIdentifier(c.Spec.ClientID, spec.Child("clientID"))...)
	}
	return errs
}

// ValidateClusterUpdate refuses a change of a Cluster's clientID once set.
func ValidateClusterUpdate(c, old *api.Cluster) field.ErrorList {
	if old.Spec.ClientID == "" {
		return nil
	}
	return validateImmutable(c.Spec.ClientID, old.Spec.ClientID, field.NewPath("spec", "clientID"))
}

// ValidateClusterStatusUpdate bounds a Cluster's status. The server alone
// writes it; the bounds keep a bug or an administrator's edit from storing
// what no one can read.
func ValidateClusterStatusUpdate(c, old *api.Cluster) field.ErrorList {
	status := field.NewPath("status")
	errs := validateMaxLen(c.Status.Reason, maxReasonBytes, status.Child("reason"))
	errs = append(errs, validateMaxLen(c.Status.Message, maxMessageBytes, status.Child("message"))...)
	// Deleting is final: a cluster that was not deleted would stay
	// there for good, refusing every join.
	if c.Status.Phase == api.ClusterPhaseDeleting && old.Status.Phase != api.ClusterPhaseDeleting && c.DeletionTimestamp == nil && old.DeletionTimestamp == nil {
		errs = append(errs, field.Forbidden(status.Child("phase"), "a cluster is Deleting only once it was deleted, and never leaves it: delete it with 'kubectl delete cluster "+c.Name+"' instead"))
	}
	return append(errs, validateConditions(c.Status.Conditions, old.Status.Conditions, status.Child("conditions"))...)
}
