package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// The servers' own kinds: written by muster-server alone, checked so that
// a bug or an administrator's edit cannot store what the servers misread.

// ValidateControllerLease checks a controller lease's duration.
func ValidateControllerLease(l *api.ControllerLease) field.ErrorList {
	return validateNonNegative(l.Spec.LeaseDurationSeconds, field.NewPath("spec", "leaseDurationSeconds"))
}

// ValidateServerEndpoint checks a server's advertised address.
func ValidateServerEndpoint(e *api.ServerEndpoint) field.ErrorList {
	return validateHostPort(e.Spec.Address, field.NewPath("spec", "address"))
}

// ValidateServerEndpointStatusUpdate checks a server endpoint's lease.
func ValidateServerEndpointStatusUpdate(e, _ *api.ServerEndpoint) field.ErrorList {
	return validateNonNegative(e.Status.LeaseDurationSeconds, field.NewPath("status", "leaseDurationSeconds"))
}
