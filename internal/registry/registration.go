package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/fsm"
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

// ClusterRegistration is the storage description of registration requests.
var ClusterRegistration = Kind[*api.ClusterRegistration]{
	Resource:   "clusterregistrations",
	Singular:   "clusterregistration",
	ShortNames: []string{"creg"},
	New:        func() *api.ClusterRegistration { return &api.ClusterRegistration{} },
	NewList:    func() runtime.Object { return &api.ClusterRegistrationList{} },
	Fields:     api.ClusterRegistrationFields,
	Lifecycle:  fsm.Registration,
	Validate: func(r *api.ClusterRegistration) field.ErrorList {
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
	},
	ValidateUpdate: func(r, old *api.ClusterRegistration) field.ErrorList {
		return validateImmutable(r.Spec, old.Spec, field.NewPath("spec"))
	},
	ValidateStatus: func(r, _ *api.ClusterRegistration) field.ErrorList {
		status := field.NewPath("status")
		errs := validateMaxLen(r.Status.Reason, maxRegistrationReasonLen, status.Child("reason"))
		return append(errs, validateMaxLen(r.Status.Message, maxRegistrationMessageLen, status.Child("message"))...)
	},
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
