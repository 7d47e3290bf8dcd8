package console

import (
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
)

//go:embed assets
var assets embed.FS

// Paths under which the console is served.
const (
	Prefix      = "/console/"
	SessionPath = "/console/session"
	// TokensPath mints console tokens; only administrators reach it (the
	// API's authorizer denies it to everyone else).
	TokensPath = "/console/tokens"
)

// PrivatePaths are the console's paths that need a user: the API's
// authenticator and authorizer refuse them to anonymous callers before
// this handler is reached (everything else under Prefix is the sign-in
// page, its assets and the sign-in itself). A console path that acts for
// a user belongs here.
var PrivatePaths = []string{TokensPath}

// CSP allows nothing but this server's own files: no inline script or
// style, no other origin, no framing.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Console serves the console's pages and its session endpoints.
type Console struct {
	Tokens   Store
	Sessions *Sessions
	Now      func() time.Time
	// Scope, if set, says which clusters a user with cluster-scoped
	// access (AccessBindings) may see; scoped is false for a user the
	// built-in roles judge. The console's pages then select those
	// clusters in every list, as the API requires of such a user.
	Scope func(user string, groups []string) (clusters []string, scoped bool)
	// OIDC, if set, offers "Sign in with <provider>" beside console tokens.
	OIDC *OIDC
}

// respond is the session's answer, with the user's scope.
func (c *Console) respond(w http.ResponseWriter, s Session) {
	out := sessionResponse{User: s.User, Groups: s.Groups, Expires: s.Expires}
	if c.Scope != nil {
		out.Clusters, out.Scoped = c.Scope(s.User, s.Groups)
	}
	writeJSON(w, out)
}

// New returns a console keeping tokens and sessions in their stores.
func New(tokens, sessions Store) *Console {
	return &Console{Tokens: tokens, Sessions: NewSessions(sessions), Now: time.Now}
}

// OnDatastore is the console of a server whose datastore client is c:
// every server of an HA set on that datastore shares its tokens and
// sessions.
func OnDatastore(c *clientv3.Client) *Console {
	return New(EtcdStore{Client: c, Prefix: TokenKeyPrefix}, EtcdStore{Client: c, Prefix: SessionKeyPrefix})
}

func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
}

func fail(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w)
	switch r.URL.Path {
	case SessionPath:
		c.session(w, r)
		return
	case TokensPath:
		c.mint(w, r)
		return
	case OIDCProviderPath, OIDCStartPath, OIDCCallbackPath:
		if r.Method != http.MethodGet {
			fail(w, http.StatusMethodNotAllowed, "the sign-in with an identity provider is a browser's GET")
			return
		}
		map[string]func(http.ResponseWriter, *http.Request){
			OIDCProviderPath: c.oidcProvider, OIDCStartPath: c.oidcStart, OIDCCallbackPath: c.oidcCallback,
		}[r.URL.Path](w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		fail(w, http.StatusMethodNotAllowed, "the console's pages are read with GET")
		return
	}
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/console")
	name = strings.TrimPrefix(name, "/")
	if name == "" {
		name = "index.html"
	}
	b, err := fs.ReadFile(assets, "assets/"+name)
	if err != nil {
		fail(w, http.StatusNotFound, "no such console page: the console starts at /console/")
		return
	}
	switch path.Ext(name) {
	case ".html":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	if path.Ext(name) != ".html" {
		// Assets change only with the binary; the HTML stays no-store.
		w.Header().Set("Cache-Control", "no-cache")
	}
	_, _ = w.Write(b)
}

type sessionRequest struct {
	Token string `json:"token"`
}

type sessionResponse struct {
	User    string    `json:"user"`
	Groups  []string  `json:"groups"`
	Expires time.Time `json:"expires"`
	// Scoped users see only Clusters (in every list, by spec.cluster).
	Scoped   bool     `json:"scoped,omitempty"`
	Clusters []string `json:"clusters,omitempty"`
}

func (c *Console) cookie(value string, expires time.Time) *http.Cookie {
	ck := &http.Cookie{Name: CookieName, Value: value, Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}
	if expires.IsZero() {
		ck.MaxAge = -1
	} else {
		ck.Expires = expires
	}
	return ck
}

// session signs in (POST, the token in a JSON body, never in the URL),
// tells who is signed in (GET) and signs out (DELETE). Each needs the
// console header, so no other site can sign a browser in or out.
func (c *Console) session(w http.ResponseWriter, r *http.Request) {
	if !HasHeader(r) {
		fail(w, http.StatusForbidden, "console requests must carry the header "+Header+": 1 (the console's pages send it; other sites cannot)")
		return
	}
	switch r.Method {
	case http.MethodPost:
		if wait := c.Sessions.allowSignIn(r); wait > 0 {
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			klog.InfoS("Console sign-in refused: too many attempts", "remote", r.RemoteAddr)
			fail(w, http.StatusTooManyRequests, fmt.Sprintf("too many sign-in attempts from this address; retry in %ds", secs))
			return
		}
		var req sessionRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
			fail(w, http.StatusBadRequest, `the sign-in body is JSON {"token": "mct_..."}: `+err.Error())
			return
		}
		rec, err := Check(r.Context(), c.Tokens, req.Token, c.Now())
		if err != nil {
			code := http.StatusUnauthorized
			if strings.Contains(err.Error(), "datastore") {
				code = http.StatusServiceUnavailable
			}
			klog.InfoS("Console sign-in refused", "remote", r.RemoteAddr, "reason", err.Error())
			fail(w, code, err.Error())
			return
		}
		id, err := c.Sessions.Create(r.Context(), Session{User: rec.User, Groups: rec.Groups, Expires: rec.Expires})
		if err != nil {
			klog.ErrorS(err, "Console sign-in: storing the session failed", "user", rec.User)
			fail(w, http.StatusServiceUnavailable, "the session could not be stored in the datastore; retry in a few seconds")
			return
		}
		http.SetCookie(w, c.cookie(id, rec.Expires))
		klog.InfoS("Console sign-in", "user", rec.User, "groups", rec.Groups, "expires", rec.Expires)
		c.respond(w, Session{User: rec.User, Groups: rec.Groups, Expires: rec.Expires})
	case http.MethodGet:
		sess, ok := Session{}, false
		var err error
		if ck, cerr := r.Cookie(CookieName); cerr == nil {
			sess, ok, err = c.Sessions.Get(r.Context(), ck.Value)
		}
		if err != nil {
			fail(w, http.StatusServiceUnavailable, "reading the session from the datastore failed; retry in a few seconds")
			return
		}
		if !ok {
			fail(w, http.StatusUnauthorized, "not signed in, or the session has expired: sign in with a console token")
			return
		}
		c.respond(w, sess)
	case http.MethodDelete:
		if ck, err := r.Cookie(CookieName); err == nil {
			if err := c.Sessions.Delete(r.Context(), ck.Value); err != nil {
				fail(w, http.StatusServiceUnavailable, "ending the session in the datastore failed; sign out again in a few seconds")
				return
			}
		}
		http.SetCookie(w, c.cookie("", time.Time{}))
		w.WriteHeader(http.StatusNoContent)
	default:
		fail(w, http.StatusMethodNotAllowed, "the session is read (GET), started (POST) or ended (DELETE)")
	}
}

type mintRequest struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	TTL    string   `json:"ttl"`
}

// MintResponse is what TokensPath answers: the token, shown once.
type MintResponse struct {
	Token   string    `json:"token"`
	User    string    `json:"user"`
	Groups  []string  `json:"groups"`
	Expires time.Time `json:"expires"`
}

// mint creates a console token. The API's authorizer lets only
// administrators reach this path; the check here is a second lock.
func (c *Console) mint(w http.ResponseWriter, r *http.Request) {
	u, ok := request.UserFrom(r.Context())
	if !ok || !slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		fail(w, http.StatusForbidden, "only administrators (group system:masters) mint console tokens: run 'muster-server console-token' with the admin kubeconfig")
		return
	}
	if r.Method != http.MethodPost {
		fail(w, http.StatusMethodNotAllowed, "console tokens are minted with POST")
		return
	}
	var req mintRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 16384)).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, `the body is JSON {"user": NAME, "groups": [...], "ttl": "8h"}: `+err.Error())
		return
	}
	ttl, err := time.ParseDuration(req.TTL)
	if err != nil {
		fail(w, http.StatusBadRequest, "ttl "+req.TTL+" is not a duration: give e.g. 8h")
		return
	}
	t, exp, err := Mint(r.Context(), c.Tokens, req.User, req.Groups, ttl, c.Now())
	if err != nil {
		fail(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	klog.InfoS("Console token minted", "id", t.ID, "user", req.User, "groups", req.Groups, "expires", exp, "by", u.GetName())
	writeJSON(w, MintResponse{Token: t.String(), User: req.User, Groups: req.Groups, Expires: exp})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
