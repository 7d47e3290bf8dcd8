package console

import (
	"net/http"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// CookieName is the console's session cookie: an opaque random id.
const CookieName = "muster_console"

// Header must accompany every request a session cookie authenticates. A
// page on another site cannot send a custom header to this server without
// a CORS preflight, and the server grants none, so a forged cross-site
// request arrives without it and the cookie is ignored: that is the CSRF
// protection, for the API and for the console's own endpoints.
const Header = "X-Muster-Console"

// Session is one signed-in browser.
type Session struct {
	User    string
	Groups  []string
	Expires time.Time
}

// Sessions maps session ids to identities, in this server's memory: a
// restart signs everyone out, and in HA a browser stays on the server it
// signed in to (a datastore-backed store is the next step).
type Sessions struct {
	mu   sync.Mutex
	byID map[string]Session
	now  func() time.Time
}

// NewSessions returns an empty store.
func NewSessions() *Sessions {
	return &Sessions{byID: map[string]Session{}, now: time.Now}
}

// Create starts a session and returns its id.
func (s *Sessions) Create(sess Session) string {
	id := randomHex(32)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Drop expired sessions as new ones come, so the map stays bounded by
	// the live ones.
	now := s.now()
	for k, v := range s.byID {
		if !now.Before(v.Expires) {
			delete(s.byID, k)
		}
	}
	s.byID[id] = sess
	return id
}

// Get returns a live session.
func (s *Sessions) Get(id string) (Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.byID[id]
	if !ok {
		return Session{}, false
	}
	if !s.now().Before(sess.Expires) {
		delete(s.byID, id)
		return Session{}, false
	}
	return sess, true
}

// Delete ends a session.
func (s *Sessions) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
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
	sess, ok := s.Get(c.Value)
	if !ok {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: sess.User, Groups: append([]string(nil), sess.Groups...)}}, true, nil
}
