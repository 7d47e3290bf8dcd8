// Command provider is the OpenID provider muster's sign-in tests run in a
// process of its own: zitadel/oidc v3's OpenID Provider (pkg/op), an
// OpenID-certified library, with its example login pages and in-memory
// storage, serving HTTPS. What the example hard-codes, a file configures
// here: the issuer, the users (with passwords and groups, which every ID
// token carries in the "groups" claim) and the clients (public ones with
// PKCE, confidential ones with a secret; authorization code, device flow
// and refresh tokens). Tests rotate its signing key through two admin
// endpoints, as an identity provider rotates its keys:
//
//	POST /muster-test/rotate  a new signing key; the old ones stay published
//	POST /muster-test/retire  publish only the current key
//
// both with "Authorization: Bearer <adminToken>" from the file.
//
//	provider --config FILE --listen 127.0.0.1:PORT --tls-cert CERT --tls-key KEY
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

type config struct {
	// Issuer is https://HOST:PORT, what every token's iss says.
	Issuer     string         `json:"issuer"`
	Users      []userConfig   `json:"users"`
	Clients    []clientConfig `json:"clients"`
	AdminToken string         `json:"adminToken"`
}

type userConfig struct {
	// Username is also the subject (sub) of the user's tokens.
	Username string   `json:"username"`
	Password string   `json:"password"`
	Email    string   `json:"email"`
	Groups   []string `json:"groups"`
}

type clientConfig struct {
	ID string `json:"id"`
	// Secret empty: a public client (a CLI), which must use PKCE.
	Secret       string   `json:"secret"`
	RedirectURIs []string `json:"redirectURIs"`
	// IDTokenLifetime is a Go duration, 5m when empty.
	IDTokenLifetime string `json:"idTokenLifetime"`
}

func main() {
	cfgFile := flag.String("config", "", "the provider's JSON configuration: issuer, users, clients, adminToken")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve HTTPS on")
	certFile := flag.String("tls-cert", "", "serving certificate (PEM)")
	keyFile := flag.String("tls-key", "", "serving certificate's key (PEM)")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(*cfgFile, *listen, *certFile, *keyFile, logger); err != nil {
		logger.Error("provider stopped", "error", err)
		os.Exit(1)
	}
}

func run(cfgFile, listen, certFile, keyFile string, logger *slog.Logger) error {
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		return fmt.Errorf("reading --config: %w", err)
	}
	var cfg config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("--config %s: %w", cfgFile, err)
	}
	if cfg.Issuer == "" || cfg.AdminToken == "" {
		return fmt.Errorf("--config %s needs issuer and adminToken", cfgFile)
	}
	s, err := newStore(cfg)
	if err != nil {
		return err
	}
	router := exampleop.SetupServer(cfg.Issuer, s, logger, false)
	mux := http.NewServeMux()
	mux.Handle("/", router)
	mux.HandleFunc("POST /muster-test/rotate", s.admin(cfg.AdminToken, s.rotate))
	mux.HandleFunc("POST /muster-test/retire", s.admin(cfg.AdminToken, s.retire))
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("provider serving", "issuer", cfg.Issuer, "listen", listen)
	return srv.ListenAndServeTLS(certFile, keyFile)
}

// store is the example's in-memory storage with this file's users,
// clients, groups and rotating keys.
type store struct {
	*storage.Storage
	users   map[string]userConfig
	clients map[string]*client

	mu        sync.Mutex
	current   *key
	published []*key
}

func newStore(cfg config) (*store, error) {
	s := &store{users: map[string]userConfig{}, clients: map[string]*client{}}
	for _, u := range cfg.Users {
		s.users[u.Username] = u
	}
	// The example storage checks that a device flow's client exists in
	// its own map; the clients themselves are this file's (GetClientByClientID).
	known := map[string]*storage.Client{}
	for _, c := range cfg.Clients {
		life := 5 * time.Minute
		if c.IDTokenLifetime != "" {
			d, err := time.ParseDuration(c.IDTokenLifetime)
			if err != nil {
				return nil, fmt.Errorf("client %s: idTokenLifetime: %w", c.ID, err)
			}
			life = d
		}
		s.clients[c.ID] = &client{cfg: c, lifetime: life}
		known[c.ID] = storage.NativeClient(c.ID, c.RedirectURIs...)
	}
	s.Storage = storage.NewStorageWithClients(userStore{s.users}, known)
	k, err := newKey()
	if err != nil {
		return nil, err
	}
	s.current, s.published = k, []*key{k}
	return s, nil
}

func (s *store) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, fmt.Errorf("client %q not found", id)
	}
	return c, nil
}

func (s *store) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.clients[id]
	if !ok || c.cfg.Secret == "" || subtle.ConstantTimeCompare([]byte(c.cfg.Secret), []byte(secret)) != 1 {
		return fmt.Errorf("client %q: wrong secret", id)
	}
	return nil
}

func (s *store) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, nil
}

func (s *store) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *store) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, 0, len(s.published))
	for _, k := range s.published {
		keys = append(keys, publicKey{k})
	}
	return keys, nil
}

// SetUserinfoFromRequest fills the ID token's claims: the user's name,
// email and groups, whatever the scopes (the groups are what the
// relying party maps to roles).
func (s *store) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, token op.IDTokenRequest, _ []string) error {
	u, ok := s.users[token.GetSubject()]
	if !ok {
		return fmt.Errorf("user %q not found", token.GetSubject())
	}
	info.Subject = u.Username
	info.PreferredUsername = u.Username
	if u.Email != "" {
		info.Email = u.Email
		info.EmailVerified = oidc.Bool(true)
	}
	info.AppendClaims("groups", append([]string{}, u.Groups...))
	return nil
}

func (s *store) admin(token string, next func() (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
			http.Error(w, "admin endpoints need Authorization: Bearer <adminToken>", http.StatusUnauthorized)
			return
		}
		kid, err := next()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"kid": kid})
	}
}

// rotate signs with a new key from now on and publishes it beside the
// old ones, so that tokens already issued stay valid.
func (s *store) rotate() (string, error) {
	k, err := newKey()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = k
	s.published = append(s.published, k)
	slog.Info("signing key rotated", "kid", k.id)
	return k.id, nil
}

// retire stops publishing every key but the current one: tokens signed
// with the others no longer verify.
func (s *store) retire() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.published = []*key{s.current}
	slog.Info("old signing keys retired", "kid", s.current.id)
	return s.current.id, nil
}

type userStore struct{ users map[string]userConfig }

func (u userStore) user(name string) *storage.User {
	c, ok := u.users[name]
	if !ok {
		return nil
	}
	return &storage.User{ID: c.Username, Username: c.Username, Password: c.Password, Email: c.Email, EmailVerified: c.Email != ""}
}

func (u userStore) GetUserByID(id string) *storage.User         { return u.user(id) }
func (u userStore) GetUserByUsername(name string) *storage.User { return u.user(name) }
func (u userStore) ExampleClientID() string                     { return "" }

type key struct {
	id   string
	priv *rsa.PrivateKey
}

func newKey() (*key, error) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &key{id: hex.EncodeToString(b), priv: priv}, nil
}

func (k *key) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *key) Key() any                                    { return k.priv }
func (k *key) ID() string                                  { return k.id }

type publicKey struct{ k *key }

func (p publicKey) ID() string                         { return p.k.id }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return &p.k.priv.PublicKey }

// client is one configured client: public (PKCE, no secret) or
// confidential, with the authorization code, device and refresh grants.
type client struct {
	cfg      clientConfig
	lifetime time.Duration
}

func (c *client) GetID() string                    { return c.cfg.ID }
func (c *client) RedirectURIs() []string           { return c.cfg.RedirectURIs }
func (c *client) PostLogoutRedirectURIs() []string { return nil }
func (c *client) ApplicationType() op.ApplicationType {
	if c.cfg.Secret == "" {
		return op.ApplicationTypeNative
	}
	return op.ApplicationTypeWeb
}
func (c *client) AuthMethod() oidc.AuthMethod {
	if c.cfg.Secret == "" {
		return oidc.AuthMethodNone
	}
	return oidc.AuthMethodBasic
}
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken, oidc.GrantTypeDeviceCode}
}
func (c *client) LoginURL(id string) string            { return "/login/username?authRequestID=" + id }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration       { return c.lifetime }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
