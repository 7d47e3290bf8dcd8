package registry

import (
	"context"
	"crypto/x509"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/muster-io/muster/internal/fsm"
	"github.com/muster-io/muster/internal/identity"
	"github.com/muster-io/muster/internal/nodepassword"
	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// maxCSRBytes bounds a registration's CSR: an ECDSA or RSA-4096 CSR is well under it.
const maxCSRBytes = 8 << 10

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
		// The CSR's self-signature is checked by the create itself
		// (registrationREST), once: validation runs twice per create.
		if len(r.Spec.CSR) > maxCSRBytes {
			errs = append(errs, field.TooLong(spec.Child("csr"), "", maxCSRBytes))
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

// Granter decides a registration the moment it is made, when nobody has to
// approve it: it finds or creates the agent's Cluster, Machine and
// MachinePlan and signs its CSR (internal/registration). The request is
// then stored Granted, with the certificate in the create's response, so
// an agent joins in one round trip and a grant costs no controller pass.
type Granter interface {
	// AutoApproved reports whether reg may be granted without an operator.
	AutoApproved(ctx context.Context, reg *api.ClusterRegistration) (bool, error)
	// Grant returns the cluster, machine and certificate granted to reg,
	// whose CSR is csr (parsed, its self-signature checked).
	Grant(ctx context.Context, reg *api.ClusterRegistration, csr *x509.CertificateRequest) (cluster, machine string, cert []byte, err error)
}

// registrationREST is the clusterregistrations resource: the generic store
// plus the checks a create must pass before anything is stored. They read
// and write other objects (NodePasswords) and the caller's identity, which a
// strategy cannot.
type registrationREST struct {
	*REST
	objects *Objects
}

// Create checks who is registering and with which node password, grants the
// request at once when its token needs no approval, then stores it without
// the password.
func (r *registrationREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	reg, ok := obj.(*api.ClusterRegistration)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a ClusterRegistration: %T", obj))
	}
	u, _ := request.UserFrom(ctx)
	if tokenID, ok := identity.TokenID(u); ok {
		// The token, not the body, says which token was used.
		reg.Spec.TokenID = tokenID
	}
	if machine, _, ok := identity.Machine(u); ok {
		// A machine renewing its certificate asks only for itself.
		reg.Spec.TokenID = ""
		if reg.Spec.NodeName != machine {
			return nil, apierrors.NewForbidden(api.Resource("clusterregistrations"), reg.Name,
				fmt.Errorf("machine %s may renew only its own certificate, not node %q's", machine, reg.Spec.NodeName))
		}
	}
	if want := api.RegistrationName(reg.Spec.ClientID, reg.Spec.ClientRandom); reg.Name != want {
		return nil, invalidRegistration(reg.Name, field.Invalid(field.NewPath("metadata", "name"), reg.Name,
			fmt.Sprintf("must be %q, derived from spec.clientID and spec.clientRandom", want)))
	}
	password := reg.Spec.NodePassword
	reg.Spec.NodePassword = ""
	if err := nodepassword.Validate(password); err != nil {
		return nil, invalidRegistration(reg.Name, field.Invalid(field.NewPath("spec", "nodePassword"), "<redacted>", err.Error()))
	}
	// Everything a grant relies on is checked before anything is written.
	if errs := ClusterRegistration.Validate(reg); len(errs) > 0 {
		return nil, invalidRegistration(reg.Name, errs...)
	}
	csr, err := pki.ParseCSR(reg.Spec.CSR)
	if err != nil {
		return nil, invalidRegistration(reg.Name, field.Invalid(field.NewPath("spec", "csr"), "<csr>", err.Error()))
	}
	granter := r.objects.granter()
	grantNow := false
	if granter != nil {
		auto, err := granter.AutoApproved(ctx, reg)
		if err != nil {
			return nil, err
		}
		grantNow = auto
	}
	if err := r.checkNodePassword(ctx, reg.Spec.NodeName, password, grantNow); err != nil {
		return nil, err
	}
	if grantNow {
		cluster, machine, cert, err := granter.Grant(ctx, reg, csr)
		if err != nil {
			return nil, err
		}
		if err := startAt(fsm.Registration, reg, "AutoApproved", "approve", "grant"); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		reg.Status.Transitions[1].Reason = "Granted"
		reg.Status.Reason, reg.Status.Cluster, reg.Status.Machine, reg.Status.Certificate = "Granted", cluster, machine, cert
		ctx = asServer(ctx)
	}
	return r.REST.Create(ctx, reg, createValidation, options)
}

func invalidRegistration(name string, errs ...*field.Error) error {
	return apierrors.NewInvalid(api.SchemeGroupVersion.WithKind("ClusterRegistration").GroupKind(), name, errs)
}

// checkNodePassword stores the password's hash on the first registration of
// a node name and verifies it on every later one. A registration granted at
// once binds the password to its Machine in the same write.
func (r *registrationREST) checkNodePassword(ctx context.Context, nodeName, password string, bind bool) error {
	// The common case is a node's first registration: try to store its
	// hash, and read the stored one only when there is one.
	hash, err := nodepassword.Hash(password)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	np := &api.NodePassword{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: api.NodePasswordSpec{Hash: hash}}
	createCtx := ctx
	if bind {
		now := nowFunc()
		np.Status = api.NodePasswordStatus{Machine: nodeName, LastVerified: &now}
		createCtx = asServer(ctx)
	}
	_, err = r.objects.passwords.Create(createCtx, np, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing, err := get[*api.NodePassword](ctx, r.objects.passwords, nodeName, true)
	if err != nil {
		return err
	}
	ok, verr := nodepassword.Verify(existing.Spec.Hash, password)
	if verr != nil {
		return apierrors.NewInternalError(fmt.Errorf("stored hash of node %q: %w", nodeName, verr))
	}
	if !ok {
		return apierrors.NewForbidden(api.Resource("clusterregistrations"), nodeName, fmt.Errorf(
			"node password rejected: node name %q is already registered with another password. "+
				"If this is the same machine, restore its node-password file in the agent's data dir; "+
				"if it replaces the old machine, delete it with 'kubectl delete machine %s' (its NodePassword goes with it); "+
				"if it is another machine with the same hostname, run the agent with --with-node-id", nodeName, nodeName))
	}
	if bind && existing.Status.Machine == "" {
		return r.objects.BindPassword(ctx, nodeName)
	}
	return nil
}
