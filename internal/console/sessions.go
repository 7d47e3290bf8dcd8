package console

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/ratelimit"
)

// CookieName is the console's session cookie: "<id>.<secret>", opaque to
// the browser.
const CookieName = "muster_console"

// Header must accompany every request a session cookie authenticates. A
// page on another site cannot send a custom header to this server without
// a CORS preflight, and the server grants none, so a forged cross-site
// request arrives without it and the cookie is ignored: that is the CSRF
// protection, for the API and for the console's own endpoints.
const Header = "X-Muster-Console"

// CacheFor is how long a server trusts a session it has read before it
// reads it again: a sign-out on another server of an HA set takes effect
// here within that time (on the server that signed out, at once).
const CacheFor = 10 * time.Second

// Limits on what a client address may drive (answered 429 past them):
// sign-ins, and datastore reads for session cookies this server has not
// seen (a browser with a live session needs one per CacheFor per server).
var (
	signInEvery, signInBurst = 2 * time.Second, 10
	signInRate, signInAll    = rate.Limit(20), 40 // every address together
	lookupRate, lookupBurst  = rate.Limit(5), 50
)

const (
	maxCached    = 10000 // sessions this server keeps read, at most
	maxAddresses = 10000 // client addresses with their own buckets
)

// Session is one signed-in browser.
type Session struct {
	User    string
	Groups  []string
	Expires time.Time
}

type cached struct {
	Session
	read time.Time
}

// Sessions keeps browser sessions in the datastore, so every server of an
// HA set knows them and a restart signs nobody out. The datastore holds
// the hash of each cookie's secret, never the cookie: a copy of the
// datastore signs nobody in.
type Sessions struct {
	Store Store
	Now   func() time.Time

	limits *ratelimit.Keyed
	mu     sync.Mutex
	cache  map[string]cached // by cookie value
}

// NewSessions returns sessions kept in store.
func NewSessions(store Store) *Sessions {
	return &Sessions{Store: store, Now: time.Now, limits: ratelimit.NewKeyed(maxAddresses), cache: map[string]cached{}}
}

// parseCookie splits "<id>.<secret>".
func parseCookie(v string) (id, secret string, ok bool) {
	id, secret, ok = strings.Cut(v, ".")
	return id, secret, ok && isHex(id, 16) && isHex(secret, 64)
}

// Create starts a session and returns its cookie value.
func (s *Sessions) Create(ctx context.Context, sess Session) (string, error) {
	id, secret := randomHex(8), randomHex(32)
	rec := Record{SecretHash: jointoken.HashSecret(secret), User: sess.User, Groups: sess.Groups, Expires: sess.Expires}
	if err := s.Store.Put(ctx, id, rec); err != nil {
		return "", err
	}
	cookie := id + "." + secret
	s.remember(cookie, sess)
	return cookie, nil
}

func (s *Sessions) remember(cookie string, sess Session) {
	now := s.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= maxCached {
		for k, v := range s.cache {
			if now.Sub(v.read) >= CacheFor || !now.Before(v.Expires) {
				delete(s.cache, k)
			}
		}
		if len(s.cache) >= maxCached {
			return // read again next time
		}
	}
	s.cache[cookie] = cached{Session: sess, read: now}
}

// Get returns the live session a cookie names: from this server's memory
// if read in the last CacheFor, else from the datastore.
func (s *Sessions) Get(ctx context.Context, cookie string) (Session, bool, error) {
	if sess, ok := s.cached(cookie); ok {
		return sess, true, nil
	}
	return s.read(ctx, cookie)
}

// cached is a session this server read in the last CacheFor.
func (s *Sessions) cached(cookie string) (Session, bool) {
	now := s.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, hit := s.cache[cookie]
	if hit && (now.Sub(c.read) >= CacheFor || !now.Before(c.Expires)) {
		delete(s.cache, cookie)
		return Session{}, false
	}
	return c.Session, hit
}

// read checks a cookie against the datastore and remembers a live session.
func (s *Sessions) read(ctx context.Context, cookie string) (Session, bool, error) {
	id, secret, ok := parseCookie(cookie)
	if !ok {
		return Session{}, false, nil
	}
	rec, found, err := s.Store.Get(ctx, id)
	if err != nil {
		return Session{}, false, err
	}
	if !found || !jointoken.VerifySecret(rec.SecretHash, secret) || !s.Now().Before(rec.Expires) {
		return Session{}, false, nil
	}
	sess := Session{User: rec.User, Groups: rec.Groups, Expires: rec.Expires}
	s.remember(cookie, sess)
	return sess, true, nil
}

// Delete ends a session, on every server (the others within CacheFor).
func (s *Sessions) Delete(ctx context.Context, cookie string) error {
	s.mu.Lock()
	delete(s.cache, cookie)
	s.mu.Unlock()
	id, secret, ok := parseCookie(cookie)
	if !ok {
		return nil
	}
	// Only the holder of the cookie ends its session.
	rec, found, err := s.Store.Get(ctx, id)
	if err != nil || !found || !jointoken.VerifySecret(rec.SecretHash, secret) {
		return err
	}
	return s.Store.Delete(ctx, id)
}

// allowed spends one of the client address's tokens for kind; zero means
// go on, otherwise how long the client should wait.
func (s *Sessions) allowed(r *http.Request, kind string, every rate.Limit, burst int) time.Duration {
	return s.limits.Take(kind+":"+ratelimit.Address(r), every, burst)
}

// allowSignIn bounds sign-in attempts per client address and in all, so
// that guessing tokens costs the guesser time and the datastore little.
func (s *Sessions) allowSignIn(r *http.Request) time.Duration {
	if d := s.allowed(r, "sign-in", rate.Every(signInEvery), signInBurst); d > 0 {
		return d
	}
	return s.limits.Take("sign-in", signInRate, signInAll)
}

// HasHeader reports whether a request carries the console's CSRF header.
func HasHeader(r *http.Request) bool { return r.Header.Get(Header) == "1" }

// AuthenticateRequest implements authenticator.Request: a live session's
// cookie, on a request that carries the console header, is its user. Any
// other request is "not mine" (the next authenticator, or a 401).
func (s *Sessions) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" || !HasHeader(r) {
		return nil, false, nil
	}
	if _, _, ok := parseCookie(c.Value); !ok {
		return nil, false, nil
	}
	sess, ok := s.cached(c.Value)
	if !ok {
		// A cookie this server has not read costs a datastore read:
		// bounded per address, so made-up cookies cannot drive the
		// datastore.
		if s.allowed(r, "lookup", lookupRate, lookupBurst) > 0 {
			return nil, false, nil
		}
		var err error
		if sess, ok, err = s.read(r.Context(), c.Value); err != nil || !ok {
			return nil, false, err
		}
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: sess.User, Groups: append([]string(nil), sess.Groups...)}}, true, nil
}
