package apiserver

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/tunnel"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// AgentAuthorizer holds the rules for callers that are not administrators, like
// Kubernetes' Node authorizer: a bootstrap caller may create a registration
// and read the ones made with its token; a machine may read and watch its
// own Machine and MachinePlan, write their status, read ServerEndpoints and
// send heartbeats.
// It checks live state, so a deleted Machine's certificate stops working at once.
type AgentAuthorizer struct {
	live          LiveObjects
	machines      listers.MachineLister
	registrations listers.ClusterRegistrationLister
	// ready is closed once both caches have synced: until then they are
	// not read.
	ready chan struct{}
	// requests are the machines' requests in flight, ended when their
	// certificate is voided.
	requests *agentRequests
}

// LiveObjects is where the authorizer reads what its caches miss: the
// server's own objects, in process (internal/registry's Objects), read
// fresh from the datastore.
type LiveObjects interface {
	Machine(ctx context.Context, name string, fresh bool) (*api.Machine, error)
	Registration(ctx context.Context, name string, fresh bool) (*api.ClusterRegistration, error)
}

// AgentAuthorizerConfig is what the agent authorizer reads.
type AgentAuthorizerConfig struct {
	// Live is read when a cache misses, or before the caches have synced.
	Live LiveObjects
	// Machines and Registrations are this server's informers, not started
	// yet. The authorizer answers from their caches once both have synced,
	// and ends a machine's requests as soon as Machines sees its Machine
	// deleted or replaced. A miss, or a Machine whose UID does not match
	// the certificate, is checked live, so a just-created object is never
	// refused; a deleted Machine's certificate stops working as soon as the
	// deletion reaches this server's cache (milliseconds; at most the
	// datastore poll interval in HA). Nil informers: everything is read live.
	Machines, Registrations cache.SharedIndexInformer
}

// NewAgentAuthorizer returns the authorizer, whole.
func NewAgentAuthorizer(cfg AgentAuthorizerConfig) (*AgentAuthorizer, error) {
	a := &AgentAuthorizer{live: cfg.Live, ready: make(chan struct{}), requests: newAgentRequests()}
	if cfg.Machines == nil || cfg.Registrations == nil {
		return a, nil
	}
	a.machines = listers.NewMachineLister(cfg.Machines.GetIndexer())
	a.registrations = listers.NewClusterRegistrationLister(cfg.Registrations.GetIndexer())
	if err := a.voidOnMachineChange(cfg.Machines); err != nil {
		return nil, fmt.Errorf("watching Machines for voided certificates: %w", err)
	}
	machines, registrations := cfg.Machines.HasSyncedChecker(), cfg.Registrations.HasSyncedChecker()
	go func() {
		<-machines.Done()
		<-registrations.Done()
		close(a.ready)
	}()
	return a, nil
}

// Ready is closed once the caches are loaded; until then the request gate
// holds machines' requests or answers 503, so that a restarting server
// does not send a fleet's worth of reads to the datastore.
func (a *AgentAuthorizer) Ready() <-chan struct{} { return a.ready }

// cached reports whether the caches may be read.
func (a *AgentAuthorizer) cached() bool {
	select {
	case <-a.ready:
		return true
	default:
		return false
	}
}

func (a *AgentAuthorizer) getMachine(ctx context.Context, name, uid string) (*api.Machine, error) {
	if a.cached() {
		if m, err := a.machines.Get(name); err == nil && string(m.UID) == uid {
			return m, nil
		}
	}
	return a.live.Machine(ctx, name, true)
}

func (a *AgentAuthorizer) getRegistration(ctx context.Context, name string) (*api.ClusterRegistration, error) {
	if a.cached() {
		if r, err := a.registrations.Get(name); err == nil {
			return r, nil
		}
	}
	return a.live.Registration(ctx, name, true)
}

// Authorize implements the decision for muster callers; anything else is NoOpinion.
func (a *AgentAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attrs.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "", nil
	}
	for _, g := range u.GetGroups() {
		if g == caller.InactiveBootstrappersGroup {
			why := "join token is not active"
			if r := u.GetExtra()[caller.ReasonExtra]; len(r) > 0 {
				why = r[0]
			}
			return authorizer.DecisionDeny, why + ": create a new one with 'muster-server token create'", nil
		}
	}
	if tokenID, ok := caller.TokenID(u); ok && caller.IsBootstrapper(u) {
		return a.bootstrap(ctx, attrs, tokenID)
	}
	if name, uid, ok := caller.Machine(u); ok {
		return a.machine(ctx, attrs, name, uid)
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func isMuster(attrs authorizer.Attributes, resources ...string) bool {
	if !attrs.IsResourceRequest() || attrs.GetAPIGroup() != api.GroupName {
		return false
	}
	for _, r := range resources {
		if attrs.GetResource() == r {
			return true
		}
	}
	return false
}

func (a *AgentAuthorizer) bootstrap(ctx context.Context, attrs authorizer.Attributes, tokenID string) (authorizer.Decision, string, error) {
	const only = "a join token may only create a ClusterRegistration and read the ones made with it"
	if !isMuster(attrs, "clusterregistrations") || attrs.GetSubresource() != "" {
		return authorizer.DecisionDeny, only, nil
	}
	switch attrs.GetVerb() {
	case "create":
		return authorizer.DecisionAllow, "", nil
	case "get":
		if attrs.GetName() == "" {
			return authorizer.DecisionDeny, only, nil
		}
		reg, err := a.getRegistration(ctx, attrs.GetName())
		if apierrors.IsNotFound(err) {
			// Let the request through to answer 404: a name reveals nothing.
			return authorizer.DecisionAllow, "", nil
		}
		if err != nil {
			return authorizer.DecisionNoOpinion, "", err
		}
		if reg.Spec.TokenID == tokenID {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionDeny, only, nil
}

func (a *AgentAuthorizer) machine(ctx context.Context, attrs authorizer.Attributes, name, uid string) (authorizer.Decision, string, error) {
	m, err := a.getMachine(ctx, name, uid)
	if apierrors.IsNotFound(err) && attrs.GetVerb() == "create" && isMuster(attrs, "clusterregistrations") && attrs.GetSubresource() == "" {
		// A machine no Machine of its name is left for may ask to rejoin:
		// after a restore that lost its Machine, it does so by itself. The
		// join's grant decides (internal/rejoin): a Machine deleted by an
		// operator is refused there, and nothing is stored.
		return authorizer.DecisionAllow, "", nil
	}
	if apierrors.IsNotFound(err) || (err == nil && string(m.UID) != uid) {
		return authorizer.DecisionDeny, fmt.Sprintf("machine %s no longer exists: its certificate is void; register again with a new join token", name), nil
	}
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	own := "a machine may read only its own Machine and MachinePlan, write their status, read ServerEndpoints, renew its certificate, send heartbeats and hold its tunnel"
	switch {
	case !attrs.IsResourceRequest():
		if attrs.GetVerb() == "get" && attrs.GetPath() == api.HeartbeatPath {
			return authorizer.DecisionAllow, "", nil
		}
		if attrs.GetVerb() == "post" && attrs.GetPath() == tunnel.Path {
			// Its own tunnel only (the hub keys it by the certificate's
			// machine), and not once its Machine is on its way out.
			if m.DeletionTimestamp != nil || m.Status.Phase == api.MachinePhaseDeleting || m.Status.Phase == api.MachinePhaseDeleted {
				return authorizer.DecisionDeny, fmt.Sprintf("machine %s is being deleted: its agent may no longer open a tunnel", name), nil
			}
			return authorizer.DecisionAllow, "", nil
		}
	case isMuster(attrs, "clusterregistrations") && attrs.GetSubresource() == "":
		// Certificate renewal: a machine asks for a new certificate for
		// itself (the registry checks the node name) and reads the answer.
		if attrs.GetVerb() == "create" {
			return authorizer.DecisionAllow, "", nil
		}
		if attrs.GetVerb() == "get" && attrs.GetName() != "" {
			reg, err := a.getRegistration(ctx, attrs.GetName())
			if apierrors.IsNotFound(err) {
				return authorizer.DecisionAllow, "", nil
			}
			if err == nil && reg.Spec.NodeName == name {
				return authorizer.DecisionAllow, "", nil
			}
		}
	case isMuster(attrs, "serverendpoints"):
		if isRead(attrs.GetVerb()) {
			return authorizer.DecisionAllow, "", nil
		}
	case isMuster(attrs, "machines", "machineplans"):
		if attrs.GetName() != name {
			return authorizer.DecisionDeny, own, nil
		}
		if isRead(attrs.GetVerb()) && attrs.GetSubresource() == "" {
			return authorizer.DecisionAllow, "", nil
		}
		// Its own plan whole, secrets included: it runs it.
		if attrs.GetVerb() == "get" && attrs.GetSubresource() == api.SecretsSubresource && attrs.GetResource() == "machineplans" {
			return authorizer.DecisionAllow, "", nil
		}
		if (attrs.GetVerb() == "update" || attrs.GetVerb() == "patch" || attrs.GetVerb() == "get") && attrs.GetSubresource() == "status" {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionDeny, own, nil
}

func isRead(verb string) bool { return verb == "get" || verb == "list" || verb == "watch" }
