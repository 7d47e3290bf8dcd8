package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

const (
	// A registration's reason and message are the server's words to the
	// agent and the operator; bounded like a Kubernetes condition's.
	maxRegistrationReasonLen  = 128
	maxRegistrationMessageLen = 4096
	// maxPasswordHashLen bounds the server-set password hash fields.
	maxPasswordHashLen = 512
)

// ValidateClusterRegistration checks a registration request: what the
// agent asked for, and the server-set password fields.
func ValidateClusterRegistration(r *api.ClusterRegistration) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateIdentifier(r.Spec.ClientID, spec.Child("clientID"))
	errs = append(errs, validateIdentifier(r.Spec.ClientRandom, spec.Child("clientRandom"))...)
	errs = append(errs, validateDNSSubdomain(r.Spec.NodeName, spec.Child("nodeName"), true)...)
	errs = append(errs, validateLabels(r.Spec.Labels, spec.Child("labels"))...)
	errs = append(errs, validateRoles(r.Spec.Roles, spec.Child("roles"))...)
	errs = append(errs, validateAddresses(r.Spec.Addresses, spec.Child("addresses"))...)
	errs = append(errs, validateMaxLen(r.Spec.AgentVersion, maxVersionLen, spec.Child("agentVersion"))...)
	errs = append(errs, validateMaxLen(r.Spec.NodePasswordHash, maxPasswordHashLen, spec.Child("nodePasswordHash"))...)
	errs = append(errs, validateMaxLen(r.Spec.VerifiedNodePassword, 64, spec.Child("verifiedNodePassword"))...)
	errs = append(errs, validateMaxLen(r.Spec.MachineUID, 64, spec.Child("machineUID"))...)
	// The CSR's self-signature is checked by the create itself
	// (internal/join), once: validation runs twice per create.
	if len(r.Spec.CSR) > pki.MaxCSRBytes {
		errs = append(errs, field.TooLong(spec.Child("csr"), "", pki.MaxCSRBytes))
	} else if csr, err := pki.DecodeCSR(r.Spec.CSR); err != nil {
		errs = append(errs, field.Invalid(spec.Child("csr"), "<csr>", err.Error()))
	} else if err := pki.CheckPublicKey(csr.PublicKey); err != nil {
		errs = append(errs, field.Invalid(spec.Child("csr"), "<csr>", err.Error()))
	}
	return errs
}

// ValidateClusterRegistrationUpdate: a registration's spec is what the
// agent asked for, and never changes.
func ValidateClusterRegistrationUpdate(r, old *api.ClusterRegistration) field.ErrorList {
	return validateImmutable(r.Spec, old.Spec, field.NewPath("spec"))
}

// ValidateClusterRegistrationStatusUpdate bounds the server's reason and
// message.
func ValidateClusterRegistrationStatusUpdate(r, _ *api.ClusterRegistration) field.ErrorList {
	status := field.NewPath("status")
	errs := validateMaxLen(r.Status.Reason, maxRegistrationReasonLen, status.Child("reason"))
	return append(errs, validateMaxLen(r.Status.Message, maxRegistrationMessageLen, status.Child("message"))...)
}
