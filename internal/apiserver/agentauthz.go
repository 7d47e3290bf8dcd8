package apiserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/tunnel"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// AgentAuthorizer holds the rules for callers that are not administrators, like
// Kubernetes' Node authorizer: a bootstrap caller may create a registration
// and read the ones made with its token; a machine may read and watch its
// own Machine and MachinePlan, write their status, read ServerEndpoints and
// send heartbeats.
// It checks live state, so a deleted Machine's certificate stops working at once.
type AgentAuthorizer struct {
	client atomic.Pointer[versioned.Interface]
	cache  atomic.Pointer[authzCache]
	ready  chan struct{}
	once   sync.Once
	// requests are the machines' requests in flight, ended when their
	// certificate is voided.
	requests *agentRequests
}

// NewAgentAuthorizer returns an authorizer that answers only once SetListers has run.
func NewAgentAuthorizer() *AgentAuthorizer {
	return &AgentAuthorizer{ready: make(chan struct{}), requests: newAgentRequests()}
}

// authzCache is what the authorizer reads before asking the datastore: an
// agent's every request (heartbeats, its watch, status writes) needs its
// Machine, and a joining agent's every poll needs its registration.
type authzCache struct {
	machines      listers.MachineLister
	registrations listers.ClusterRegistrationLister
}

// SetClient gives the authorizer its (privileged, in-process) client.
func (a *AgentAuthorizer) SetClient(c versioned.Interface) { a.client.Store(&c) }

// SetListers lets the authorizer answer from informer caches. A miss, or a
// Machine whose UID does not match the certificate, is checked live, so a
// just-created object is never refused; a deleted Machine's certificate
// stops working as soon as the deletion reaches this server's cache
// (milliseconds; at most the datastore poll interval in HA).
func (a *AgentAuthorizer) SetListers(machines listers.MachineLister, registrations listers.ClusterRegistrationLister) {
	a.cache.Store(&authzCache{machines: machines, registrations: registrations})
	a.once.Do(func() { close(a.ready) })
}

// Ready is closed once the caches are loaded; until then the request gate
// holds machines' requests or answers 503, so that a restarting server
// does not send a fleet's worth of reads to the datastore.
func (a *AgentAuthorizer) Ready() <-chan struct{} { return a.ready }

func (a *AgentAuthorizer) getMachine(ctx context.Context, c versioned.Interface, name, uid string) (*api.Machine, error) {
	if cache := a.cache.Load(); cache != nil {
		if m, err := cache.machines.Get(name); err == nil && string(m.UID) == uid {
			return m, nil
		}
	}
	return c.MusterV1alpha1().Machines().Get(ctx, name, metav1.GetOptions{})
}

func (a *AgentAuthorizer) getRegistration(ctx context.Context, c versioned.Interface, name string) (*api.ClusterRegistration, error) {
	if cache := a.cache.Load(); cache != nil {
		if r, err := cache.registrations.Get(name); err == nil {
			return r, nil
		}
	}
	return c.MusterV1alpha1().ClusterRegistrations().Get(ctx, name, metav1.GetOptions{})
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
		c := a.client.Load()
		if c == nil || attrs.GetName() == "" {
			return authorizer.DecisionDeny, only, nil
		}
		reg, err := a.getRegistration(ctx, *c, attrs.GetName())
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
	c := a.client.Load()
	if c == nil {
		return authorizer.DecisionNoOpinion, "", fmt.Errorf("authorizer not ready")
	}
	m, err := a.getMachine(ctx, *c, name, uid)
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
			reg, err := a.getRegistration(ctx, *c, attrs.GetName())
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
