package registration

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/identity"
	"github.com/muster-io/muster/internal/pki"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Store is what a grant reads and writes: the server's own objects, in
// process (internal/registry's Objects).
type Store interface {
	// Token reads a join token, from the watch cache unless fresh.
	Token(ctx context.Context, name string, fresh bool) (*api.ClusterRegistrationToken, error)
	// Machine reads a Machine, from the watch cache unless fresh.
	Machine(ctx context.Context, name string, fresh bool) (*api.Machine, error)
	// RegisterMachine creates the Machine of an agent that has just
	// registered: it starts Registering.
	RegisterMachine(ctx context.Context, m *api.Machine) (*api.Machine, error)
	// MarkRegistering moves a Machine that waited for its agent (Pending or
	// Provisioning) to Registering.
	MarkRegistering(ctx context.Context, name string) (*api.Machine, error)
	// EnsureCluster and EnsurePlan create the object unless one of its name exists.
	EnsureCluster(ctx context.Context, c *api.Cluster) error
	EnsurePlan(ctx context.Context, p *api.MachinePlan) error
	// CountTokenUses adds n registrations to a join token's status.
	CountTokenUses(ctx context.Context, name string, n int) error
	// BindPassword records that a node password belongs to the Machine of
	// its node name.
	BindPassword(ctx context.Context, node string) error
}

// Granter grants registrations: it finds or creates the agent's Cluster,
// Machine and MachinePlan, and signs the agent's CSR into a client
// certificate with the identity the server chooses, bound to the Machine's
// UID. Every server grants the registrations made through it that need no
// approval, as they are made; the controller leader grants the ones an
// operator approved. Every step is idempotent: a retry, a crash or a second
// request of the same agent finds what the first made, never a second Machine.
type Granter struct {
	store    Store
	ca       *pki.CA
	validity time.Duration

	// uses counts grants per join token not yet written to its status: a
	// fleet joining with one token would otherwise serialize on
	// conflicting writes to that one object.
	usesMu sync.Mutex
	uses   map[string]int
}

// NewGranter returns a Granter signing with ca for validity.
func NewGranter(store Store, ca *pki.CA, validity time.Duration) *Granter {
	return &Granter{store: store, ca: ca, validity: validity, uses: map[string]int{}}
}

// AutoApproved reports whether reg may be granted without an operator: a
// machine renewing its own certificate, or a join token that does not ask
// for manual approval.
func (g *Granter) AutoApproved(ctx context.Context, reg *api.ClusterRegistration) (bool, error) {
	if reg.Spec.TokenID == "" {
		return true, nil
	}
	tok, err := g.token(ctx, reg.Spec.TokenID)
	if apierrors.IsNotFound(err) {
		// Deleted since it authenticated the request: the request waits,
		// and the controller denies it saying why.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !tok.Spec.ManualApproval, nil
}

// token reads a join token; one created a moment ago may not be in this
// server's cache yet, so a miss is read again from the datastore.
func (g *Granter) token(ctx context.Context, name string) (*api.ClusterRegistrationToken, error) {
	tok, err := g.store.Token(ctx, name, false)
	if apierrors.IsNotFound(err) {
		tok, err = g.store.Token(ctx, name, true)
	}
	return tok, err
}

// Grant returns the cluster, machine and certificate of reg, creating
// what does not exist yet; csr is reg's, as pki.ParseCSR returned it. The
// node password was verified when the request was made, so an existing
// Machine of this node name is this node's.
func (g *Granter) Grant(ctx context.Context, reg *api.ClusterRegistration, csr *x509.CertificateRequest) (cluster, machine string, cert []byte, err error) {
	m, err := g.ensureMachine(ctx, reg)
	if err != nil {
		return "", "", nil, err
	}
	// An empty plan: applying it is how the agent shows it is bootstrapped.
	// Operators replace it with real work.
	if err := g.store.EnsurePlan(ctx, &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: m.Name}}); err != nil {
		return "", "", nil, err
	}
	cn, groups := identity.MachineSubject(m.Name, string(m.UID))
	cert, err = g.ca.SignCSR(csr, cn, groups, g.validity)
	if err != nil {
		return "", "", nil, apierrors.NewBadRequest(fmt.Sprintf("the certificate request was refused: %v", err))
	}
	g.countUse(reg.Spec.TokenID)
	return m.Spec.Cluster, m.Name, cert, nil
}

// ensureMachine returns the Machine of the registering node, creating it
// in Registering.
func (g *Granter) ensureMachine(ctx context.Context, reg *api.ClusterRegistration) (*api.Machine, error) {
	// The cache answers for the machines that exist; a new node's Machine
	// is created, and a create racing another shows up as AlreadyExists.
	m, err := g.store.Machine(ctx, reg.Spec.NodeName, false)
	if apierrors.IsNotFound(err) {
		cluster, cerr := g.ensureCluster(ctx, reg)
		if cerr != nil {
			return nil, cerr
		}
		m, err = g.store.RegisterMachine(ctx, &api.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: reg.Spec.NodeName, Labels: reg.Spec.Labels},
			Spec:       api.MachineSpec{Cluster: cluster, NodeName: reg.Spec.NodeName, Roles: reg.Spec.Roles, ClientID: reg.Spec.ClientID},
			// What the agent would report when it checks in.
			Status: api.MachineStatus{AgentVersion: reg.Spec.AgentVersion, Addresses: reg.Spec.Addresses},
		})
		if apierrors.IsAlreadyExists(err) {
			m, err = g.store.Machine(ctx, reg.Spec.NodeName, true)
		}
	}
	if err != nil {
		return nil, err
	}
	if m.DeletionTimestamp != nil {
		return nil, apierrors.NewConflict(api.Resource("machines"), m.Name,
			fmt.Errorf("machine %s is being deleted; register again once it is gone", m.Name))
	}
	if m.Status.Phase == api.MachinePhasePending || m.Status.Phase == api.MachinePhaseProvisioning {
		// Created by an operator or a driver, waiting for its agent.
		return g.store.MarkRegistering(ctx, m.Name)
	}
	return m, nil
}

// ensureCluster finds the token's cluster, or the agent's own cluster named
// from a hash of its clientID (created on first use).
func (g *Granter) ensureCluster(ctx context.Context, reg *api.ClusterRegistration) (string, error) {
	if reg.Spec.TokenID != "" {
		if tok, err := g.token(ctx, reg.Spec.TokenID); err == nil && tok.Spec.Cluster != "" {
			return tok.Spec.Cluster, nil
		}
	}
	sum := sha256.Sum256([]byte(reg.Spec.ClientID))
	name := "c-" + hex.EncodeToString(sum[:])[:12]
	cl := &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.ClusterSpec{ClientID: reg.Spec.ClientID}}
	return name, g.store.EnsureCluster(ctx, cl)
}

func (g *Granter) countUse(tokenID string) {
	if tokenID == "" {
		return
	}
	g.usesMu.Lock()
	g.uses[tokenID]++
	g.usesMu.Unlock()
}

// usesFlushInterval is how stale a token's registration count may be.
const usesFlushInterval = time.Second

// Run writes the counted token uses every second until ctx ends, then
// once more.
func (g *Granter) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, g.flushUses, usesFlushInterval)
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.flushUses(fctx)
}

// flushUses adds the grants counted since the last flush to each token's
// status, one write per token however many agents joined with it.
func (g *Granter) flushUses(ctx context.Context) {
	g.usesMu.Lock()
	pending := g.uses
	g.uses = map[string]int{}
	g.usesMu.Unlock()
	for id, n := range pending {
		if err := g.store.CountTokenUses(ctx, id, n); err != nil && !apierrors.IsNotFound(err) {
			klog.ErrorS(err, "Recording a join token's use", "token", id)
		}
	}
}
