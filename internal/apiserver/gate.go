package apiserver

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/internal/ratelimit"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/caller"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/metrics"
)

const (
	// credentialHold is how long a request waits for the data that judges
	// its credential while a server starts, before it is answered 503.
	credentialHold = 5 * time.Second
	// unknownTokenRecheck is how long a join token that is not in the
	// cache waits before it is looked up once more and refused. A token
	// created through another server of an HA deployment reaches this
	// server's cache within one datastore poll (100 ms by default on
	// PostgreSQL); waiting lets it in instead of refusing it. Every
	// refusal waits the same, a known id with a wrong secret as an unknown
	// id, so the wait tells nothing, and it slows guessing.
	unknownTokenRecheck = time.Second
	// maxRechecking bounds the refusals waiting at once, so that a flood
	// of bad tokens from many addresses holds bounded memory; past it a
	// bad token is answered 429 at once.
	maxRechecking = 1024
	// AuthFailureLimit failed join-token authentications from one client
	// address within AuthFailureWindow make the server refuse that
	// address's join tokens (429) until the window ends. A fleet behind
	// one NAT address fails only with a wrong token, which it cannot
	// recover from anyway.
	AuthFailureLimit  = 10
	AuthFailureWindow = time.Minute
	// authFailureLogEvery is the most often failed authentications are
	// logged: one line says how many there were since the last.
	authFailureLogEvery = 10 * time.Second
	// maxTrackedClients bounds the memory of failures; past it, windows
	// that ended are forgotten.
	maxTrackedClients = 1 << 16
)

// credentialGate runs ahead of the handler chain and judges join tokens
// itself, for three reasons the chain cannot serve: a request is never
// answered 401 because the server has not loaded its tokens yet (it is
// held, then answered 503 with Retry-After); failures are counted per
// client address and refused with 429 past a limit; and they are logged
// by sample, not one line each. A machine certificate is likewise held
// until the authorizer's caches are loaded. Requests carrying the
// in-process loopback token, or no bearer token, go straight on.
type credentialGate struct {
	tokens   *TokenAuthenticator
	agents   *AgentAuthorizer
	loopback string
	// idTokens is set when the chain also accepts identity providers'
	// ID tokens: a bearer token that is not in a join token's shape is
	// then the chain's to judge (and to refuse with its reason).
	idTokens bool
	failures *failureLimiter
	hold     time.Duration
	recheck  time.Duration
	// rechecking holds a slot per refusal waiting for its second look.
	rechecking chan struct{}
	refuse     func(http.ResponseWriter, *http.Request, error)
	// waiting, if set, is told each time a request starts to wait (for
	// the caches to load, or for a token's second look), so that a test
	// can act while it waits instead of sleeping and hoping it does.
	waiting func()
}

func (g *credentialGate) wait() {
	if g.waiting != nil {
		g.waiting()
	}
}

func (g *credentialGate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token, ok := bearerToken(r); ok && (g.loopback == "" || subtle.ConstantTimeCompare([]byte(token), []byte(g.loopback)) != 1) && !g.notJoinToken(token) {
			client := ratelimit.Address(r)
			if wait := g.failures.blocked(client); wait > 0 {
				metrics.TokenFailed(metrics.TokenBlocked)
				secs := int(wait/time.Second) + 1
				g.refuse(w, r, apierrors.NewTooManyRequests(fmt.Sprintf(
					"too many failed join-token authentications from %s: retry in %ds with a valid token; create one with 'muster-server token create'", client, secs), secs))
				return
			}
			if !g.await(r.Context(), g.tokens.Loaded()) {
				g.refuse(w, r, starting("join tokens"))
				return
			}
			known, busy := g.authenticates(r.Context(), token)
			if busy {
				metrics.TokenFailed(metrics.TokenBusy)
				g.refuse(w, r, apierrors.NewTooManyRequests("too many failed join-token authentications at once: retry in a second with a valid token", 1))
				return
			}
			if !known {
				metrics.TokenFailed(metrics.TokenUnknown)
				g.failures.record(client, tokenID(token))
				g.refuse(w, r, apierrors.NewUnauthorized("Unauthorized: this join token is not known to the server (wrong, mistyped or deleted); check it, or create one with 'muster-server token create'"))
				return
			}
		} else if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && caller.ClaimsMachine(r.TLS.PeerCertificates[0].Subject.CommonName) {
			if !g.await(r.Context(), g.agents.Ready()) {
				g.refuse(w, r, starting("machines"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// notJoinToken says whether token is for the chain's other bearer
// authenticators: with ID tokens accepted, any token not shaped as a join
// token is.
func (g *credentialGate) notJoinToken(token string) bool {
	if !g.idTokens {
		return false
	}
	_, err := jointoken.Parse(token)
	return err != nil
}

// authenticates reports whether token is a join token this server knows,
// looking twice, recheck apart, before it says no; busy when too many
// refusals are waiting already.
func (g *credentialGate) authenticates(ctx context.Context, token string) (known, busy bool) {
	if _, ok, err := g.tokens.AuthenticateToken(ctx, token); ok || err != nil {
		return true, false // an error is the chain's to answer
	}
	select {
	case g.rechecking <- struct{}{}:
		defer func() { <-g.rechecking }()
	default:
		return false, true
	}
	t := time.NewTimer(g.recheck)
	defer t.Stop()
	g.wait()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false, false
	}
	_, ok, err := g.tokens.AuthenticateToken(ctx, token)
	return ok || err != nil, false
}

func (g *credentialGate) await(ctx context.Context, ready <-chan struct{}) bool {
	select {
	case <-ready:
		return true
	default:
	}
	t := time.NewTimer(g.hold)
	defer t.Stop()
	g.wait()
	select {
	case <-ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func starting(what string) error {
	err := apierrors.NewServiceUnavailable(fmt.Sprintf("muster-server is starting and has not loaded its %s yet: retry in a second (agents do)", what))
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return err
}

// bearerToken is the request's bearer token, as the apiserver's bearer
// authenticator reads it.
func bearerToken(r *http.Request) (string, bool) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// failureLimiter counts failed authentications per client address in
// fixed windows, and samples their logging.
type failureLimiter struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex
	clients map[string]*failureWindow
	// logging: failures since the last line, from how many addresses.
	lastLog    time.Time
	unlogged   int
	unloggedBy map[string]struct{}
}

type failureWindow struct {
	start    time.Time
	failures int
}

func newFailureLimiter(limit int, window time.Duration) *failureLimiter {
	return &failureLimiter{limit: limit, window: window, now: time.Now, clients: map[string]*failureWindow{}, unloggedBy: map[string]struct{}{}}
}

// blocked says how long client's join tokens are still refused.
func (l *failureLimiter) blocked(client string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.clients[client]
	if w == nil || w.failures < l.limit {
		return 0
	}
	return max(0, w.start.Add(l.window).Sub(l.now()))
}

// tokenID is the public half of a bearer token, for the log: the id names
// the token an operator gave out; the secret is never logged.
func tokenID(bearer string) string {
	tok, err := jointoken.Parse(bearer)
	if err != nil {
		return "<not a join token>"
	}
	return tok.ID
}

func (l *failureLimiter) record(client, tokenID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w := l.clients[client]
	if w == nil || now.Sub(w.start) >= l.window {
		if len(l.clients) >= maxTrackedClients {
			for c, old := range l.clients {
				if now.Sub(old.start) >= l.window {
					delete(l.clients, c)
				}
			}
		}
		w = &failureWindow{start: now}
		l.clients[client] = w
	}
	w.failures++
	l.unlogged++
	if len(l.unloggedBy) < 1000 {
		l.unloggedBy[client] = struct{}{}
	}
	if now.Sub(l.lastLog) < authFailureLogEvery {
		return
	}
	klog.InfoS("Refused join tokens that are not known (sampled: one line per interval)",
		"failures", l.unlogged, "clients", len(l.unloggedBy), "interval", authFailureLogEvery, "lastClient", client, "lastTokenID", tokenID,
		"limitPerClient", fmt.Sprintf("%d per %s", l.limit, l.window))
	l.lastLog, l.unlogged = now, 0
	clear(l.unloggedBy)
}
