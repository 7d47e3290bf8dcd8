package join

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/fsm"
	"github.com/muster-io/muster/internal/metrics"
	"github.com/muster-io/muster/internal/nodepassword"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/registry"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// registrationREST is the clusterregistrations resource: the registry's
// generic store, with a create that is the front door of the join. It
// checks who is registering and with which node password, records what a
// later grant must re-check, and grants at once what needs no approval —
// through the same Granter the approval controller uses.
type registrationREST struct {
	*registry.REST
	join *Join
}

// Create implements rest.Creater.
func (r *registrationREST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	reg, ok := obj.(*api.ClusterRegistration)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a ClusterRegistration: %T", obj))
	}
	start := time.Now()
	dryRun := slices.Contains(options.DryRun, metav1.DryRunAll)
	// refused counts a request turned away before the grant; a dry run
	// decides nothing and counts nothing.
	refused := func(reason string, err error) (runtime.Object, error) {
		if !dryRun {
			metrics.Registration(metrics.OutcomeRefused, reason)
		}
		return nil, err
	}
	password := reg.Spec.NodePassword
	if err := r.prepare(ctx, reg); err != nil {
		return refused(metrics.ReasonInvalidRequest, err)
	}
	if err := nodepassword.Validate(password); err != nil {
		return refused(metrics.ReasonInvalidRequest, invalid(reg.Name, field.Invalid(field.NewPath("spec", "nodePassword"), "<redacted>", err.Error())))
	}
	// Everything the store will check is checked before anything is
	// written: a grant must never have made a Machine for a request that
	// is then refused.
	errs := apimachineryvalidation.ValidateObjectMetaAccessor(reg, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if errs = append(errs, registry.ClusterRegistration.Validate(reg)...); len(errs) > 0 {
		return refused(metrics.ReasonInvalidRequest, invalid(reg.Name, errs...))
	}
	csr, err := pki.ParseCSR(reg.Spec.CSR)
	if err != nil {
		return refused(metrics.ReasonInvalidRequest, invalid(reg.Name, field.Invalid(field.NewPath("spec", "csr"), "<csr>", err.Error())))
	}
	if err := r.join.checkRate(reg); err != nil {
		return refused(metrics.ReasonRateLimited, err)
	}
	auto, err := r.join.autoApproved(ctx, reg)
	if err != nil {
		return nil, err
	}
	if err := r.recordPassword(ctx, reg, password, !auto); err != nil {
		if apierrors.IsForbidden(err) {
			return refused(metrics.ReasonNodePasswordWrong, err)
		}
		return nil, err
	}
	var granted *grant
	if auto {
		got, err := r.join.grants.Grant(ctx, reg, csr, password, dryRun)
		var refusal *Refusal
		if errors.As(err, &refusal) {
			klog.InfoS("Registration refused", "registration", reg.Name, "node", reg.Spec.NodeName, "token", reg.Spec.TokenID, "reason", refusal.Reason)
			if !dryRun {
				r.join.grants.recordRefusal(reg, refusal)
			}
			return refused(refusal.Reason, refusal.apiError(reg.Name))
		}
		if err != nil {
			return nil, err
		}
		if err := registry.StartAt(fsm.Registration, reg, "AutoApproved", fsm.EventApprove, fsm.EventGrant); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		reg.Status.Transitions[1].Reason = "Granted"
		reg.Status.Reason, reg.Status.Cluster, reg.Status.Machine, reg.Status.Certificate = "Granted", got.cluster, got.machine, got.certificate
		if dryRun {
			reg.Status.Message = "dry run: the registration would be granted; nothing was created or signed"
		} else {
			granted = got
		}
		ctx = registry.AsServer(ctx)
	}
	out, err := r.REST.Create(ctx, reg, createValidation, options)
	if err == nil && granted != nil {
		r.join.grants.recordGrant(reg, granted)
		metrics.Registration(metrics.OutcomeGranted, grantRoute(reg))
		metrics.JoinGranted(start)
	}
	if err == nil && !dryRun && !auto {
		metrics.Registration(metrics.OutcomePending, metrics.ReasonAwaitingApproval)
		klog.InfoS("Registration waits for approval", "registration", reg.Name, "node", reg.Spec.NodeName, "token", reg.Spec.TokenID)
	}
	return out, err
}

// grantRoute names how a registration granted in its request was made,
// for the registrations metric.
func grantRoute(reg *api.ClusterRegistration) string {
	switch {
	case reg.Spec.MachineUID != "":
		return metrics.ReasonCertificateRenewed
	case reg.Spec.TokenID != "":
		return metrics.ReasonJoinToken
	}
	return metrics.ReasonAdministrator
}

// prepare sets what the server owns in a new registration, whatever the
// client sent: the token or machine that made it (from the credential),
// no status (finding: a client's status must never reach an operator's
// screen), and none of the metadata the server manages.
func (r *registrationREST) prepare(ctx context.Context, reg *api.ClusterRegistration) error {
	reg.Spec.NodePassword = ""
	reg.Spec.TokenID, reg.Spec.MachineUID, reg.Spec.Cluster = "", "", ""
	reg.Spec.NodePasswordHash, reg.Spec.VerifiedNodePassword = "", ""
	reg.Status = api.ClusterRegistrationStatus{}
	reg.Finalizers, reg.OwnerReferences = nil, nil
	// Nothing reads a registration's labels or annotations, and an
	// outsider's bytes have no place on the server's record of a grant.
	var errs field.ErrorList
	if len(reg.Labels) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "labels"), "a registration takes no labels: the machine's labels go in spec.labels"))
	}
	if len(reg.Annotations) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "annotations"), "a registration takes no annotations"))
	}
	if len(errs) > 0 {
		return invalid(reg.Name, errs...)
	}
	u, _ := request.UserFrom(ctx)
	if tokenID, ok := caller.TokenID(u); ok {
		reg.Spec.TokenID = tokenID
	}
	if machine, uid, ok := caller.Machine(u); ok {
		// A machine renewing its certificate asks only for itself.
		if reg.Spec.NodeName != machine {
			return apierrors.NewForbidden(api.Resource("clusterregistrations"), reg.Name,
				fmt.Errorf("machine %s may renew only its own certificate, not node %q's", machine, reg.Spec.NodeName))
		}
		reg.Spec.MachineUID = uid
	}
	if want := api.RegistrationName(reg.Spec.ClientID, reg.Spec.ClientRandom); reg.Name != want {
		return invalid(reg.Name, field.Invalid(field.NewPath("metadata", "name"), reg.Name,
			fmt.Sprintf("must be %q, derived from spec.clientID and spec.clientRandom", want)))
	}
	return nil
}

// recordPassword checks the password against the node's NodePassword when
// it has one (a wrong one is refused at once, before anything is stored),
// and records on the request what its grant will compare: the UID of the
// NodePassword it matched, and a salted hash of the password. Nothing is
// stored for the node name here: a request that waits for approval claims
// no name (the grant does).
//
// A request granted at once reads the cache: its grant re-checks against
// the NodePassword it creates or finds. One that waits reads the
// datastore, so that the UID it records is the current one.
func (r *registrationREST) recordPassword(ctx context.Context, reg *api.ClusterRegistration, password string, fresh bool) error {
	hash, err := nodepassword.Hash(password)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	reg.Spec.NodePasswordHash = hash
	np, err := r.join.objects.Password(ctx, reg.Spec.NodeName, fresh)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ok, verr := nodepassword.Verify(np.Spec.Hash, password)
	if verr != nil {
		return apierrors.NewInternalError(fmt.Errorf("stored hash of node %q: %w", reg.Spec.NodeName, verr))
	}
	if !ok && !fresh {
		// The cache may still hold the password of a Machine deleted a
		// moment ago: refuse only on the stored one.
		return r.recordPassword(ctx, reg, password, true)
	}
	if !ok {
		return apierrors.NewForbidden(api.Resource("clusterregistrations"), reg.Spec.NodeName, fmt.Errorf(
			"node password rejected: node name %q is already registered with another password. "+
				"If this is the same machine, restore its node-password file in the agent's data dir; "+
				"if it replaces the old machine, delete it with 'kubectl delete machine %s' (its NodePassword goes with it); "+
				"if it is another machine with the same hostname, run the agent with --with-node-id", reg.Spec.NodeName, reg.Spec.NodeName))
	}
	reg.Spec.VerifiedNodePassword = string(np.UID)
	return nil
}

func invalid(name string, errs ...*field.Error) error {
	return apierrors.NewInvalid(api.SchemeGroupVersion.WithKind("ClusterRegistration").GroupKind(), name, errs)
}
