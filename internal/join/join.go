// Package join is the server side of joining (SPEC §6), in one place: the
// registration create that is its front door (rest.go), the one grant path
// every route to a certificate takes (grant.go), the controller that grants
// what an operator approved (controller.go), and the cleanup of what joins
// leave behind (housekeeping.go). It reads and writes objects through
// internal/registry, which holds storage and nothing of the join's rules.
package join

import (
	"context"
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/ratelimit"
	"github.com/muster-io/muster/internal/registry"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Default limits on what one credential may ask for. A join token is an
// outsider's credential: it may make registrations only at a bounded rate,
// so it cannot flood the datastore with Machines, Clusters and requests
// (maxUses on the token caps the total). A machine renews its certificate
// once in two thirds of its life, so a handful a minute is plenty.
const (
	DefaultTokenJoinRate  = 200 // registrations per second per join token
	DefaultTokenJoinBurst = 1000
	machineRenewRate      = rate.Limit(1.0 / 10) // one renewal every 10 s per machine
	machineRenewBurst     = 5
	// maxLimiters bounds the rate-limiter table (internal/ratelimit).
	maxLimiters = 100000
)

// Config is what the join needs from the server.
type Config struct {
	// CA signs the machines' client certificates.
	CA *pki.Current
	// Validity is how long a granted certificate is valid.
	Validity time.Duration
	// TokenJoinRate and TokenJoinBurst limit the registrations made with
	// one join token; zero takes the defaults.
	TokenJoinRate  float64
	TokenJoinBurst int
	// Objects are the server's objects, in process, that a grant reads and
	// writes.
	Objects *registry.Objects
	// Machines is the server's Machine informer, not started yet: a grant
	// checks an agent's clientID against an index of its cache once it has
	// synced (the datastore before).
	Machines cache.SharedIndexInformer
	// Events records grants and refusals; nil records nothing.
	Events record.EventRecorder
	// Rejoins, if set, lets a machine whose Machine a restore lost join
	// again by itself (internal/rejoin).
	Rejoins Rejoins
}

// Join is the join of one server.
type Join struct {
	cfg     Config
	objects *registry.Objects
	grants  *Granter

	limits *ratelimit.Keyed
}

// New returns the join of the server's objects, whole.
func New(cfg Config) (*Join, error) {
	if cfg.TokenJoinRate == 0 {
		cfg.TokenJoinRate = DefaultTokenJoinRate
	}
	if cfg.TokenJoinBurst == 0 {
		cfg.TokenJoinBurst = DefaultTokenJoinBurst
	}
	if cfg.Validity == 0 {
		cfg.Validity = DefaultCertificateValidity
	}
	grants, err := NewGranter(GranterConfig{Objects: cfg.Objects, CA: cfg.CA, Validity: cfg.Validity, Machines: cfg.Machines, Events: cfg.Events, Rejoins: cfg.Rejoins})
	if err != nil {
		return nil, err
	}
	return &Join{cfg: cfg, objects: cfg.Objects, grants: grants, limits: ratelimit.NewKeyed(maxLimiters)}, nil
}

// Storage is the clusterregistrations resource: the join's front door on
// main, the registry's store of that kind.
func (j *Join) Storage(main *registry.REST) rest.Storage {
	return &registrationREST{REST: main, join: j}
}

// Granter is the one grant path, for the server's controllers.
func (j *Join) Granter() *Granter { return j.grants }

// autoApproved reports whether reg is granted in its own request: a
// machine renewing its certificate, an administrator's request, or a join
// token that does not ask for manual approval. A request whose token is
// gone waits, and the controller denies it saying why.
func (j *Join) autoApproved(ctx context.Context, reg *api.ClusterRegistration) (bool, error) {
	if reg.Spec.TokenID == "" {
		return true, nil
	}
	tok, err := j.grants.token(ctx, reg.Spec.TokenID)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// The request belongs to its token's cluster from the start, so that
	// the team bound to that cluster (an AccessBinding) sees and approves
	// it, and no other team does.
	reg.Spec.Cluster = tok.Spec.Cluster
	return !tok.Spec.ManualApproval, nil
}

// checkRate answers 429 to a credential that registers faster than its limit.
func (j *Join) checkRate(reg *api.ClusterRegistration) error {
	key, r, burst := "", rate.Limit(j.cfg.TokenJoinRate), j.cfg.TokenJoinBurst
	switch {
	case reg.Spec.TokenID != "":
		key = "token:" + reg.Spec.TokenID
	case reg.Spec.MachineUID != "":
		key, r, burst = "machine:"+reg.Spec.MachineUID, machineRenewRate, machineRenewBurst
	default:
		return nil // an administrator
	}
	delay := j.limits.Take(key, r, burst)
	if delay <= 0 {
		return nil
	}
	secs := int(math.Ceil(delay.Seconds()))
	who := "join token " + reg.Spec.TokenID
	if reg.Spec.TokenID == "" {
		who = "machine " + reg.Spec.NodeName
	}
	return apierrors.NewTooManyRequests(fmt.Sprintf("%s is registering faster than its limit allows; retry in %ds", who, secs), secs)
}
