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
	CA *pki.CA
	// Validity is how long a granted certificate is valid.
	Validity time.Duration
	// TokenJoinRate and TokenJoinBurst limit the registrations made with
	// one join token; zero takes the defaults.
	TokenJoinRate  float64
	TokenJoinBurst int
}

// Join is the join of one server.
type Join struct {
	cfg     Config
	objects *registry.Objects
	grants  *Granter

	limits *ratelimit.Keyed
}

// New returns the join; Storage binds it to the registry.
func New(cfg Config) *Join {
	if cfg.TokenJoinRate == 0 {
		cfg.TokenJoinRate = DefaultTokenJoinRate
	}
	if cfg.TokenJoinBurst == 0 {
		cfg.TokenJoinBurst = DefaultTokenJoinBurst
	}
	if cfg.Validity == 0 {
		cfg.Validity = DefaultCertificateValidity
	}
	return &Join{cfg: cfg, limits: ratelimit.NewKeyed(maxLimiters)}
}

// Storage is the clusterregistrations resource, built on the registry's
// store of that kind; it binds the join to the server's objects.
func (j *Join) Storage(main *registry.REST, objects *registry.Objects) rest.Storage {
	j.objects = objects
	j.grants = NewGranter(objects, j.cfg.CA, j.cfg.Validity)
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
