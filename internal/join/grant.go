package join

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/metrics"
	"github.com/muster-io/muster/internal/nodepassword"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/registry"
	"github.com/muster-io/muster/internal/rejoin"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// DefaultCertificateValidity is how long a granted machine certificate is
// valid; agents renew at two thirds of it.
const DefaultCertificateValidity = 365 * 24 * time.Hour

// Refusal is a grant the server will not make, with the reason recorded on
// the registration (approval path) or answered to the agent (in-request
// path). It is final for that registration: retrying the same request gets
// the same answer.
type Refusal struct {
	// Reason is a short CamelCase reason, recorded in status.reason.
	Reason string
	// Message says what happened and what the operator or agent can do.
	Message string
	// Code is the HTTP status an agent is answered with.
	Code int
}

func (r *Refusal) Error() string { return r.Message }

// apiError is the answer an agent gets for a refusal in its request.
func (r *Refusal) apiError(name string) error {
	gr := api.Resource("clusterregistrations")
	switch r.Code {
	case http.StatusConflict:
		return apierrors.NewConflict(gr, name, r)
	case http.StatusTooManyRequests:
		return apierrors.NewTooManyRequests(r.Message, 10)
	default:
		return apierrors.NewForbidden(gr, name, r)
	}
}

func refuse(code int, reason, format string, args ...interface{}) *Refusal {
	return &Refusal{Reason: reason, Message: fmt.Sprintf(format, args...), Code: code}
}

// Granter is the one grant path. Every route to a certificate — a join
// token that needs no approval (in the request), an operator's approval
// (the controller), a machine renewing its certificate — calls Grant, and
// Grant decides everything at grant time from the registration and the
// objects as they are then: the token (still there, active, uses left), its
// cluster (still there, not being deleted), the node password (the same
// NodePassword the request matched, or none yet), the Machine (free for this
// token, or this agent's own), and the agent's clientID (not another
// machine's). Nothing is written until every check has passed.
type Granter struct {
	objects *registry.Objects
	// ca signs the certificates granted: the CA in force, which a CA
	// rotation replaces while the server runs.
	ca       *pki.Current
	validity time.Duration

	// uses counts grants per join token not yet written to its status: a
	// fleet joining with one token would otherwise serialize on
	// conflicting writes to that one object. Tokens with maxUses are
	// counted synchronously instead (Objects.UseToken).
	usesMu sync.Mutex
	uses   map[string]int

	// events records grants and refusals (events.go); nil records nothing.
	events record.EventRecorder

	// denied remembers the operator denials counted in the last minutes (events.go).
	deniedMu sync.Mutex
	denied   map[types.UID]time.Time

	// machines is this server's Machine informer, indexed by clientID: the
	// clientID check reads the index instead of listing every Machine per
	// grant, once the informer has synced. Nil reads the objects.
	machines cache.SharedIndexInformer

	// rejoins is the datastore's restore record and its claims; nil: no
	// machine rejoins by itself.
	rejoins Rejoins
}

// Rejoins is what the rejoin after a restore reads and writes
// (internal/rejoin's Store).
type Rejoins interface {
	Record(ctx context.Context) (*rejoin.Record, error)
	Claim(ctx context.Context, uid, name string) (bool, error)
}

// machinesByClientID indexes Machines by the clientID of the agent that registered them.
const machinesByClientID = "spec.clientID"

// indexByClientID adds the clientID index to a Machine informer not yet
// started, once (informers are shared).
func indexByClientID(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[machinesByClientID]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{machinesByClientID: func(obj interface{}) ([]string, error) {
		if m, ok := obj.(*api.Machine); ok && m.Spec.ClientID != "" {
			return []string{m.Spec.ClientID}, nil
		}
		return nil, nil
	}})
}

// machinesOfClient names the Machines registered by the agent with clientID.
func (g *Granter) machinesOfClient(ctx context.Context, clientID string) ([]string, error) {
	var names []string
	if g.machines != nil && g.machines.HasSynced() {
		objs, err := g.machines.GetIndexer().ByIndex(machinesByClientID, clientID)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			names = append(names, o.(*api.Machine).Name)
		}
		return names, nil
	}
	ms, err := g.objects.MachinesOfClient(ctx, clientID)
	for _, m := range ms {
		names = append(names, m.Name)
	}
	return names, err
}

// GranterConfig is what a Granter is made of.
type GranterConfig struct {
	// Objects are read and written by a grant.
	Objects *registry.Objects
	// CA signs for Validity: the CA in force (a rotation may replace it).
	CA       *pki.Current
	Validity time.Duration
	// Machines, if set, is the server's Machine informer, not started
	// yet: the Granter indexes it by clientID.
	Machines cache.SharedIndexInformer
	// Events records grants and refusals; nil records nothing.
	Events record.EventRecorder
	// Rejoins, if set, lets a machine whose Machine a restore lost join
	// again with its certificate and node password.
	Rejoins Rejoins
}

// NewGranter returns a Granter, whole.
func NewGranter(cfg GranterConfig) (*Granter, error) {
	if cfg.Machines != nil {
		if err := indexByClientID(cfg.Machines); err != nil {
			return nil, fmt.Errorf("indexing the Machine cache by clientID (the informer must not have started): %w", err)
		}
	}
	g := &Granter{objects: cfg.Objects, ca: cfg.CA, validity: cfg.Validity, uses: map[string]int{}, machines: cfg.Machines, events: cfg.Events, rejoins: cfg.Rejoins}
	return g, nil
}

// grant is what a Grant decided and made.
type grant struct {
	cluster, machine string
	uid              types.UID
	certificate      []byte
	// rejoined says the Machine was made again for a machine a restore lost.
	rejoined bool
}

// Grant re-checks reg at grant time and, unless dryRun, makes what it
// needs (NodePassword, Cluster, Machine, MachinePlan) and signs csr, the
// request's CSR (its self-signature checked). plaintext is the node
// password while the agent's request is being served, "" later (it is
// never stored). A *Refusal says why not; any other error is transient and
// the caller retries.
func (g *Granter) Grant(ctx context.Context, reg *api.ClusterRegistration, csr *x509.CertificateRequest, plaintext string, dryRun bool) (*grant, error) {
	// In the agent's request the caches answer: the creates that follow
	// are the atomic arbiters, and a create that finds an object the
	// cache had not seen re-checks it. A later grant reads the datastore.
	fresh := plaintext == ""
	tok, err := g.checkToken(ctx, reg)
	retried := false
	if refusal := (*Refusal)(nil); errors.As(err, &refusal) && refusal.Reason == "TokenUsedUp" && g.lostGrant(ctx, reg, tok, plaintext) {
		klog.InfoS("Granting again a registration whose answer was lost", "node", reg.Spec.NodeName, "token", tok.Name)
		err, retried = nil, true
	}
	if err != nil {
		return nil, err
	}
	password, m, rejoined, err := g.checkNode(ctx, reg, tok, plaintext, fresh)
	if refusal := (*Refusal)(nil); errors.As(err, &refusal) && !fresh {
		// A refusal is judged on stored objects: the caches may lag a
		// concurrent grant of the same agent that has just made the
		// node's password, Machine and plan (which the staged-plan check
		// reads from the datastore).
		password, m, rejoined, err = g.checkNode(ctx, reg, tok, plaintext, true)
	}
	if err != nil {
		return nil, err
	}
	cluster := ""
	switch {
	case m != nil:
		cluster = m.Spec.Cluster
	case rejoined != "":
		cluster = rejoined
	case tok != nil && tok.Spec.Cluster != "":
		cluster = tok.Spec.Cluster
	default:
		cluster = ownCluster(reg.Spec.ClientID)
	}
	if dryRun {
		return &grant{cluster: cluster, machine: reg.Spec.NodeName}, nil
	}

	if rejoined != "" {
		// Once per certificate: a second rejoin would undo the deletion
		// of the Machine the first one made.
		ok, err := g.rejoins.Claim(ctx, reg.Spec.MachineUID, reg.Spec.NodeName)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, refuse(http.StatusForbidden, "MachineGone",
				"machine %s no longer exists: its certificate rejoined once after the datastore's restore, and its Machine has been deleted since; register again with a new join token", reg.Spec.NodeName)
		}
	}
	if tok != nil && tok.Spec.MaxUses > 0 && !retried {
		ok, err := g.objects.UseToken(ctx, tok.Name, tok.Spec.MaxUses)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, usedUp(tok)
		}
	}
	if password == nil {
		if password, err = g.claimPassword(ctx, reg, plaintext); err != nil {
			return nil, err
		}
	} else if password.Status.Machine == "" {
		if err := g.objects.BindPassword(ctx, reg.Spec.NodeName); err != nil {
			return nil, err
		}
	}
	if m == nil {
		if m, err = g.registerMachine(ctx, reg, tok, password, cluster); err != nil {
			return nil, err
		}
	}
	// Created by an operator or a driver, waiting for its agent: whether
	// this grant's cache saw it, or the create above found it (a pool's
	// Machine made a moment before its agent joined). Left waiting, its
	// agent would hold a certificate while the lifecycle never moves it
	// past Provisioning.
	if m.Status.Phase == api.MachinePhasePending || m.Status.Phase == api.MachinePhaseProvisioning {
		if m, err = g.objects.MarkRegistering(ctx, m.Name); err != nil {
			return nil, err
		}
	}
	// An empty plan: applying it is how the agent shows it is
	// bootstrapped. Operators replace it with real work. A renewal made it
	// long ago, and must not make it again for a Machine being deleted.
	if reg.Spec.MachineUID == "" || rejoined != "" {
		if err := g.objects.EnsurePlan(ctx, &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: m.Name}}); err != nil {
			return nil, err
		}
	}
	cn, groups := caller.MachineSubject(m.Name, string(m.UID), m.Spec.Cluster)
	cert, err := g.ca.Load().SignCSR(csr, cn, groups, g.validity)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "InvalidCSR", "the certificate request was refused: %v", err)
	}
	if tok != nil && tok.Spec.MaxUses == 0 {
		g.countUse(tok.Name)
	}
	if tok != nil {
		metrics.TokenUsed()
	}
	return &grant{cluster: m.Spec.Cluster, machine: m.Name, uid: m.UID, certificate: cert, rejoined: rejoined != ""}, nil
}

// checkToken re-reads the registration's join token: it must still exist,
// be active, have uses left, and its cluster must still exist and not be
// going away. A registration made without a token (a renewal, or an
// administrator's) has none to check.
func (g *Granter) checkToken(ctx context.Context, reg *api.ClusterRegistration) (*api.ClusterRegistrationToken, error) {
	if reg.Spec.TokenID == "" {
		return nil, nil
	}
	tok, err := g.token(ctx, reg.Spec.TokenID)
	if apierrors.IsNotFound(err) {
		return nil, refuse(http.StatusForbidden, "TokenNotFound",
			"join token %s no longer exists: create a new one with 'muster-server token create'", reg.Spec.TokenID)
	}
	if err != nil {
		return nil, err
	}
	if why := jointoken.Inactive(tok, time.Now()); why != "" {
		return nil, refuse(http.StatusForbidden, "TokenInactive", "%s: create a new one with 'muster-server token create'", why)
	}
	if tok.Spec.Cluster != "" {
		cl, err := g.objects.Cluster(ctx, tok.Spec.Cluster, false)
		if apierrors.IsNotFound(err) {
			cl, err = g.objects.Cluster(ctx, tok.Spec.Cluster, true)
		}
		if apierrors.IsNotFound(err) {
			return nil, refuse(http.StatusForbidden, "ClusterNotFound",
				"join token %s is bound to cluster %s, which does not exist: create the cluster (kubectl apply) or use another token", tok.Name, tok.Spec.Cluster)
		}
		if err != nil {
			return nil, err
		}
		if cl.DeletionTimestamp != nil || cl.Status.Phase == api.ClusterPhaseDeleting {
			return nil, refuse(http.StatusForbidden, "ClusterDeleting",
				"join token %s is bound to cluster %s, which is being deleted: use a token of another cluster", tok.Name, tok.Spec.Cluster)
		}
	}
	if tok.Spec.MaxUses > 0 && tok.Status.Registrations >= tok.Spec.MaxUses {
		// The token comes back with the refusal: a spent token may still
		// admit the retry of its own lost grant (lostGrant).
		return tok, usedUp(tok)
	}
	return tok, nil
}

// lostGrant reports whether reg, refused because its token is spent,
// retries the grant that spent it: the server died after granting this
// node but before answering, and the agent asked again with a new key.
// Only that node can: its Machine is still Registering (no agent ever
// checked in with the first certificate) for the same clientID and the
// same token, and reg proves the node password bound to it — the node's
// own secret. Everything is read from the datastore.
func (g *Granter) lostGrant(ctx context.Context, reg *api.ClusterRegistration, tok *api.ClusterRegistrationToken, plaintext string) bool {
	if tok == nil || reg.Spec.MachineUID != "" || plaintext == "" {
		return false
	}
	m, err := g.objects.Machine(ctx, reg.Spec.NodeName, true)
	if err != nil || m.DeletionTimestamp != nil || m.Status.Phase != api.MachinePhaseRegistering {
		return false
	}
	if m.Spec.ClientID != "" && m.Spec.ClientID != reg.Spec.ClientID {
		return false
	}
	if m.Spec.JoinToken != "" && m.Spec.JoinToken != tok.Name {
		return false
	}
	if tok.Spec.Cluster != "" && tok.Spec.Cluster != m.Spec.Cluster {
		return false
	}
	np, err := g.objects.Password(ctx, reg.Spec.NodeName, true)
	if err != nil || np.Status.Machine != m.Name {
		return false
	}
	ok, err := nodepassword.Verify(np.Spec.Hash, plaintext)
	return err == nil && ok
}

func usedUp(tok *api.ClusterRegistrationToken) *Refusal {
	return refuse(http.StatusForbidden, "TokenUsedUp",
		"join token %s has been used for all of its %d registrations: create a new one with 'muster-server token create'", tok.Name, tok.Spec.MaxUses)
}

// checkNode checks the node's password and decides its Machine, from the
// caches or, when fresh, from the datastore.
func (g *Granter) checkNode(ctx context.Context, reg *api.ClusterRegistration, tok *api.ClusterRegistrationToken, plaintext string, fresh bool) (*api.NodePassword, *api.Machine, string, error) {
	password, err := g.checkPassword(ctx, reg, plaintext, fresh)
	if err != nil {
		return nil, nil, "", err
	}
	m, rejoined, err := g.checkMachine(ctx, reg, tok, password, fresh)
	return password, m, rejoined, err
}

// checkPassword compares the request's password, as the create recorded it,
// with the node's NodePassword now. It returns that NodePassword, or nil
// when the node has none and the grant is to claim the name.
func (g *Granter) checkPassword(ctx context.Context, reg *api.ClusterRegistration, plaintext string, fresh bool) (*api.NodePassword, error) {
	np, err := g.objects.Password(ctx, reg.Spec.NodeName, fresh)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fresh && !g.passwordMatches(reg, np, plaintext) {
		// The cache may hold one since replaced: judge the stored one.
		return g.checkPassword(ctx, reg, plaintext, true)
	}
	if !g.passwordMatches(reg, np, plaintext) {
		return nil, refuse(http.StatusForbidden, "NodePasswordChanged",
			"node name %q has been registered with another node password since this request was made: "+
				"the name belongs to another machine now; if this machine replaces it, delete it with 'kubectl delete machine %s' and restart the agent with a new token, "+
				"or run the agent with --with-node-id", reg.Spec.NodeName, reg.Spec.NodeName)
	}
	return np, nil
}

// passwordMatches reports whether np is the node password reg presented.
func (g *Granter) passwordMatches(reg *api.ClusterRegistration, np *api.NodePassword, plaintext string) bool {
	// The NodePassword the request matched when it was made, or the one a
	// previous attempt of this grant made from the request's own hash.
	if string(np.UID) == reg.Spec.VerifiedNodePassword || (reg.Spec.NodePasswordHash != "" && np.Spec.Hash == reg.Spec.NodePasswordHash) {
		return true
	}
	// Made a moment ago by a concurrent request of the same agent.
	if plaintext != "" {
		if ok, err := nodepassword.Verify(np.Spec.Hash, plaintext); err == nil && ok {
			return true
		}
	}
	return false
}

// claimPassword stores the request's password hash as the node's
// NodePassword, bound to its Machine. Two grants claiming one new name at
// once: the one whose create loses reads the winner's and is refused unless
// it is its own.
func (g *Granter) claimPassword(ctx context.Context, reg *api.ClusterRegistration, plaintext string) (*api.NodePassword, error) {
	if reg.Spec.NodePasswordHash == "" {
		return nil, refuse(http.StatusForbidden, "NoNodePassword", "the registration carries no node password: register again with the agent")
	}
	now := metav1.Now()
	np, err := g.objects.CreatePassword(ctx, &api.NodePassword{
		ObjectMeta: metav1.ObjectMeta{Name: reg.Spec.NodeName},
		Spec:       api.NodePasswordSpec{Hash: reg.Spec.NodePasswordHash},
		Status:     api.NodePasswordStatus{Machine: reg.Spec.NodeName, LastVerified: &now},
	})
	if apierrors.IsAlreadyExists(err) {
		np, err = g.checkPassword(ctx, reg, plaintext, true)
	}
	return np, err
}

// checkMachine decides which Machine the grant binds to: the node's own
// (its NodePassword matched), one an operator or a pool made for this token
// or cluster, or none yet (nil: the grant creates it). rejoined names the
// cluster of a machine rejoining after a restore lost its Machine.
func (g *Granter) checkMachine(ctx context.Context, reg *api.ClusterRegistration, tok *api.ClusterRegistrationToken, password *api.NodePassword, fresh bool) (m *api.Machine, rejoined string, err error) {
	m, err = g.objects.Machine(ctx, reg.Spec.NodeName, fresh)
	if apierrors.IsNotFound(err) {
		if reg.Spec.MachineUID != "" {
			// A certificate whose Machine is gone: deleted, or lost with
			// a restore. Never a Machine for someone else's name: the
			// registration's node name is the certificate's.
			rejoined, err = g.checkRejoin(ctx, reg)
			if err == nil {
				err = g.checkClientID(ctx, reg)
			}
			return nil, rejoined, err
		}
		return nil, "", g.checkNewMachine(ctx, reg)
	}
	if err != nil {
		return nil, "", err
	}
	m, err = g.checkExisting(reg, tok, password, m)
	return m, "", err
}

// checkRejoin decides whether a machine certificate whose Machine does not
// exist may make it again (internal/rejoin): only when the datastore was
// restored from a snapshot taken before the certificate was issued, and
// the restore came after. It returns the cluster to rejoin, the one the
// CA signed into the certificate. The node password is checked like any
// join's: a NodePassword of the name held by another password refuses it.
func (g *Granter) checkRejoin(ctx context.Context, reg *api.ClusterRegistration) (string, error) {
	name := reg.Spec.NodeName
	if g.rejoins == nil {
		return "", machineGone(name)
	}
	u, _ := request.UserFrom(ctx)
	cluster, issued := caller.MachineCertificate(u)
	rec, err := g.rejoins.Record(ctx)
	if err != nil {
		return "", err
	}
	if why := rec.Admits(issued); why != "" {
		if rec != nil {
			klog.InfoS("Rejoin refused", "machine", name, "reason", why)
		}
		return "", machineGone(name)
	}
	if cluster == "" {
		return "", refuse(http.StatusForbidden, "MachineGone",
			"machine %s is not in the datastore, which was restored from a snapshot taken before it joined; its certificate was issued by an older muster-server and does not name its cluster, "+
				"so it cannot rejoin by itself: register again with a join token of its cluster", name)
	}
	if cluster == ownCluster(reg.Spec.ClientID) {
		return cluster, nil // made again with the Machine (registerMachine)
	}
	cl, err := g.objects.Cluster(ctx, cluster, true)
	if apierrors.IsNotFound(err) {
		return "", refuse(http.StatusForbidden, "ClusterNotFound",
			"machine %s is not in the datastore, which was restored from a snapshot taken before it joined, and neither is its cluster %s: "+
				"create cluster %s again (kubectl apply) and restart the agent, which then rejoins by itself", name, cluster, cluster)
	}
	if err != nil {
		return "", err
	}
	if cl.DeletionTimestamp != nil || cl.Status.Phase == api.ClusterPhaseDeleting {
		return "", refuse(http.StatusForbidden, "ClusterDeleting", "machine %s cannot rejoin cluster %s, which is being deleted", name, cluster)
	}
	return cluster, nil
}

// checkExisting decides whether reg may bind to m, an existing Machine of its name.
func (g *Granter) checkExisting(reg *api.ClusterRegistration, tok *api.ClusterRegistrationToken, password *api.NodePassword, m *api.Machine) (*api.Machine, error) {
	name := m.Name
	if m.DeletionTimestamp != nil {
		return nil, refuse(http.StatusConflict, "MachineBeingDeleted", "machine %s is being deleted; register again once it is gone", name)
	}
	if reg.Spec.MachineUID != "" {
		// A renewal renews the Machine whose certificate asked, no other.
		if string(m.UID) != reg.Spec.MachineUID {
			return nil, machineGone(name)
		}
		if m.Spec.ClientID != "" && m.Spec.ClientID != reg.Spec.ClientID {
			return nil, refuse(http.StatusForbidden, "ClientIDMismatch",
				"machine %s registered with another clientID: renew with the agent's own data dir", name)
		}
		return m, nil
	}
	waiting := m.Status.Phase == api.MachinePhasePending || m.Status.Phase == api.MachinePhaseProvisioning
	if !waiting {
		// A machine that has registered is its node's: the NodePassword
		// checked above is bound to it. Without one nothing proves it.
		if password == nil {
			return nil, refuse(http.StatusForbidden, "MachineHasNoPassword",
				"machine %s exists but has no node password to prove who it is: delete it with 'kubectl delete machine %s' to register it again", name, name)
		}
		if tok != nil && tok.Spec.Cluster != "" && tok.Spec.Cluster != m.Spec.Cluster {
			return nil, refuse(http.StatusForbidden, "ClusterMismatch",
				"machine %s belongs to cluster %s, but join token %s joins cluster %s: join with a token of cluster %s, or delete the machine to move it",
				name, m.Spec.Cluster, tok.Name, tok.Spec.Cluster, m.Spec.Cluster)
		}
		return m, nil
	}
	// Made in advance for an agent to come: only a token meant for it.
	if m.Spec.JoinToken != "" && m.Spec.JoinToken != reg.Spec.TokenID {
		return nil, refuse(http.StatusForbidden, "MachineReserved",
			"machine %s is reserved for the agent joining with join token %s: join with that token, or use another node name (--node-name, --with-node-id)", name, m.Spec.JoinToken)
	}
	if m.Spec.JoinToken == "" && (tok == nil || tok.Spec.Cluster != m.Spec.Cluster) {
		return nil, refuse(http.StatusForbidden, "MachineReserved",
			"machine %s was created in cluster %s before its agent joined: join with a token bound to cluster %s ('muster-server token create --cluster %s'), or use another node name",
			name, m.Spec.Cluster, m.Spec.Cluster, m.Spec.Cluster)
	}
	return m, nil
}

// checkNewMachine checks that a Machine may be created for reg: a renewal
// never creates one, a MachinePlan staged for a machine of that name is not
// handed to whoever joins first, and an agent's clientID is its own.
func (g *Granter) checkNewMachine(ctx context.Context, reg *api.ClusterRegistration) error {
	name := reg.Spec.NodeName
	if reg.Spec.MachineUID != "" {
		return machineGone(name)
	}
	// Read from the datastore: a plan staged a moment ago must not slip
	// past a cache that has not seen it (nothing else arbitrates here).
	if _, err := g.objects.Plan(ctx, name, true); err == nil {
		return refuse(http.StatusForbidden, "PlanWithoutMachine",
			"a MachinePlan %s exists without a Machine: to stage work for a machine, create its Machine in a cluster too "+
				"(then join with a token of that cluster), or delete the plan with 'kubectl delete machineplan %s'", name, name)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	return g.checkClientID(ctx, reg)
}

// checkClientID refuses a new Machine for an agent whose clientID another
// Machine holds.
func (g *Granter) checkClientID(ctx context.Context, reg *api.ClusterRegistration) error {
	name := reg.Spec.NodeName
	others, err := g.machinesOfClient(ctx, reg.Spec.ClientID)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o != name {
			return refuse(http.StatusForbidden, "ClientIDInUse",
				"clientID %s already belongs to machine %s: every agent needs its own data dir (never copy one between machines); "+
					"to rename a machine, delete it with 'kubectl delete machine %s' first", reg.Spec.ClientID, o, o)
		}
	}
	return nil
}

func machineGone(name string) *Refusal {
	return refuse(http.StatusForbidden, "MachineGone",
		"machine %s no longer exists: its certificate is void; register again with a new join token", name)
}

// registerMachine creates the Machine of a node joining for the first time,
// in cluster (made first when it is the agent's own).
func (g *Granter) registerMachine(ctx context.Context, reg *api.ClusterRegistration, tok *api.ClusterRegistrationToken, password *api.NodePassword, cluster string) (*api.Machine, error) {
	if cluster == ownCluster(reg.Spec.ClientID) {
		if err := g.objects.EnsureCluster(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}, Spec: api.ClusterSpec{ClientID: reg.Spec.ClientID}}); err != nil {
			return nil, err
		}
	}
	m, err := g.objects.RegisterMachine(ctx, &api.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: reg.Spec.NodeName, Labels: reg.Spec.Labels},
		Spec:       api.MachineSpec{Cluster: cluster, NodeName: reg.Spec.NodeName, Roles: reg.Spec.Roles, ClientID: reg.Spec.ClientID},
		// What the agent would report when it checks in.
		Status: api.MachineStatus{AgentVersion: reg.Spec.AgentVersion, Addresses: reg.Spec.Addresses},
	})
	if apierrors.IsAlreadyExists(err) {
		// Made a moment ago, after this grant's cache had looked: by
		// another grant of this node, or staged by an operator. Judged
		// like any existing Machine.
		if m, err = g.objects.Machine(ctx, reg.Spec.NodeName, true); err != nil {
			return nil, err
		}
		return g.checkExisting(reg, tok, password, m)
	}
	return m, err
}

// ownCluster names the cluster of an agent that joined with a token bound
// to no cluster, from a hash of its clientID.
func ownCluster(clientID string) string {
	sum := sha256.Sum256([]byte(clientID))
	return "c-" + hex.EncodeToString(sum[:])[:12]
}

// token reads a join token; one created a moment ago may not be in this
// server's cache yet, so a miss is read again from the datastore.
func (g *Granter) token(ctx context.Context, name string) (*api.ClusterRegistrationToken, error) {
	tok, err := g.objects.Token(ctx, name, false)
	if apierrors.IsNotFound(err) {
		tok, err = g.objects.Token(ctx, name, true)
	}
	return tok, err
}

func (g *Granter) countUse(tokenID string) {
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
		if err := g.objects.CountTokenUses(ctx, id, n); err != nil && !apierrors.IsNotFound(err) {
			klog.ErrorS(err, "Recording a join token's use", "token", id)
		}
	}
}
