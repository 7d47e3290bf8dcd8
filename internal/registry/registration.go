package registry

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/muster-io/muster/internal/fsm"
	"github.com/muster-io/muster/internal/identity"
	"github.com/muster-io/muster/internal/nodepassword"
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
		if len(r.Spec.CSR) > maxCSRBytes {
			errs = append(errs, field.TooLong(spec.Child("csr"), "", maxCSRBytes))
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

// registrationREST is the clusterregistrations resource: the generic store
// plus the checks a create must pass before anything is stored. They read
// and write other objects (NodePasswords) and the caller's identity, which a
// strategy cannot.
type registrationREST struct {
	*REST
	nodePasswords *genericregistry.Store
}

// Create checks who is registering and with which node password, then
// stores the request without the password.
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
		return nil, apierrors.NewInvalid(api.SchemeGroupVersion.WithKind("ClusterRegistration").GroupKind(), reg.Name,
			field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), reg.Name,
				fmt.Sprintf("must be %q, derived from spec.clientID and spec.clientRandom", want))})
	}
	password := reg.Spec.NodePassword
	reg.Spec.NodePassword = ""
	if err := nodepassword.Validate(password); err != nil {
		return nil, apierrors.NewInvalid(api.SchemeGroupVersion.WithKind("ClusterRegistration").GroupKind(), reg.Name,
			field.ErrorList{field.Invalid(field.NewPath("spec", "nodePassword"), "<redacted>", err.Error())})
	}
	if errs := validateDNSSubdomain(reg.Spec.NodeName, field.NewPath("spec", "nodeName"), true); len(errs) > 0 {
		return nil, apierrors.NewInvalid(api.SchemeGroupVersion.WithKind("ClusterRegistration").GroupKind(), reg.Name, errs)
	}
	if err := r.checkNodePassword(ctx, reg.Spec.NodeName, password); err != nil {
		return nil, err
	}
	return r.REST.Create(ctx, reg, createValidation, options)
}

// checkNodePassword stores the password's hash on the first registration of
// a node name and verifies it on every later one.
func (r *registrationREST) checkNodePassword(ctx context.Context, nodeName, password string) error {
	for attempt := 0; attempt < 2; attempt++ {
		existing, err := r.nodePasswords.Get(ctx, nodeName, &metav1.GetOptions{})
		if err == nil {
			np := existing.(*api.NodePassword)
			ok, verr := nodepassword.Verify(np.Spec.Hash, password)
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
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		hash, err := nodepassword.Hash(password)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		np := &api.NodePassword{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: api.NodePasswordSpec{Hash: hash}}
		_, err = r.nodePasswords.Create(ctx, np, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// Another registration of this node name stored its hash first:
		// verify against that one.
	}
	return apierrors.NewConflict(api.Resource("nodepasswords"), nodeName, fmt.Errorf("concurrent registrations of node %q; retry", nodeName))
}
