package kubectlmuster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/muster-io/muster/internal/atomicfile"
)

// Sign-in with the organisation's identity provider (OpenID Connect), for
// a server started with --authentication-config:
//
//	kubectl muster login --server https://muster:9443 --certificate-authority ca.crt \
//	    --issuer https://idp.example --client-id muster-cli [--device]
//
// signs the person in (authorization code with PKCE through a browser and
// a loopback redirect, or the device flow on a host without one), keeps the
// ID token and refresh token in a file of mode 0600, and writes a
// kubeconfig whose user runs `kubectl muster token`: kubectl asks it for a
// token before each use, and it answers from the file, refreshing the ID
// token with the refresh token when it expires, so plain kubectl commands
// work until the provider ends the session.

// Provider says which identity provider and client to sign in with, and
// where the tokens are kept.
type Provider struct {
	// Issuer is the provider's issuer URL, as the server's
	// AuthenticationConfiguration names it.
	Issuer string
	// IssuerCA is a PEM file of the CA that signed the provider's
	// certificate; empty trusts the system's roots.
	IssuerCA string
	// ClientID is a public client registered with the provider for this
	// CLI (no secret: PKCE protects the code), whose ID tokens' audience
	// the server accepts.
	ClientID string
	// Scopes are asked for beside "openid" and "offline_access" (the
	// refresh token): by default profile, email and groups.
	Scopes []string
	// Device uses the device flow: a code to enter on another device's
	// browser, for a host without one.
	Device bool
	// CacheDir holds the tokens; empty is ~/.kube/cache/muster-oidc.
	CacheDir string
	// Listen is the loopback address of the redirect; empty picks a port.
	Listen string
	// OpenBrowser runs xdg-open (open on macOS) on the sign-in URL; the
	// URL is printed whatever it does.
	OpenBrowser bool
}

// LoginOptions are kubectl muster login's: the provider, and the server
// the kubeconfig it writes points at.
type LoginOptions struct {
	Provider
	// Server is the muster-server's URL, CertificateAuthority a PEM file
	// of its CA (empty: the system's roots).
	Server, CertificateAuthority string
	// Name names the kubeconfig's cluster, user and context.
	Name string
}

// cached is what the token file holds.
type cached struct {
	IDToken      string `json:"idToken"`
	RefreshToken string `json:"refreshToken,omitempty"`
}

// execInfoEnv is how kubectl tells a credential plugin about the call.
const execInfoEnv = "KUBERNETES_EXEC_INFO"

// live says whether an ID token has life left: more than a quarter of its
// lifetime or 30s, whichever is less, so that it does not expire on its
// way to the server.
func live(jwt string) bool {
	exp := expiry(jwt)
	margin := 30 * time.Second
	if iat, ok := claims(jwt)["iat"].(float64); ok {
		margin = min(margin, exp.Sub(time.Unix(int64(iat), 0))/4)
	}
	return time.Until(exp) > margin
}

// Login signs in and writes the kubeconfig.
func (o Options) Login(ctx context.Context, l LoginOptions) error {
	if l.Server == "" {
		return errors.New("give --server, the muster-server's URL (https://HOST:9443)")
	}
	if l.Name == "" {
		l.Name = "muster-oidc"
	}
	if err := l.check(); err != nil {
		return err
	}
	c, err := o.signIn(ctx, l.Provider)
	if err != nil {
		return err
	}
	if err := l.save(c); err != nil {
		return err
	}
	path, err := o.writeKubeconfig(l)
	if err != nil {
		return err
	}
	who := claim(c.IDToken, "email")
	if who == "" {
		who = claim(c.IDToken, "sub")
	}
	fmt.Fprintf(o.Stdout, "Signed in as %s; kubeconfig %s, context %s. Plain kubectl commands now use this sign-in.\n", who, path, l.Name)
	return nil
}

// Token is the kubeconfig's credential plugin: it prints an
// ExecCredential with a live ID token, from the file, else refreshed, else
// (when kubectl runs it interactively) signed in anew.
func (o Options) Token(ctx context.Context, p Provider) error {
	if err := p.check(); err != nil {
		return err
	}
	path, err := p.cacheFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating the token cache %s: %w", filepath.Dir(path), err)
	}
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	c, _ := p.load()
	if c.IDToken != "" && live(c.IDToken) {
		return o.credential(c.IDToken)
	}
	var refreshErr error
	if c.RefreshToken != "" {
		var fresh cached
		if fresh, refreshErr = p.refresh(ctx, c.RefreshToken); refreshErr == nil {
			if err := p.save(fresh); err != nil {
				return err
			}
			return o.credential(fresh.IDToken)
		}
	}
	if !interactive() {
		why := "there is no sign-in yet"
		if c.IDToken != "" {
			why = "the sign-in has expired"
		}
		if refreshErr != nil {
			why += " and refreshing it failed (" + refreshErr.Error() + ")"
		}
		return fmt.Errorf("%s: run kubectl muster login --issuer %s --client-id %s again", why, p.Issuer, p.ClientID)
	}
	fresh, err := o.signIn(ctx, p)
	if err != nil {
		return err
	}
	if err := p.save(fresh); err != nil {
		return err
	}
	return o.credential(fresh.IDToken)
}

func (p Provider) check() error {
	if !strings.HasPrefix(p.Issuer, "https://") {
		return fmt.Errorf("--issuer %q: give the identity provider's https:// issuer URL, as the server's --authentication-config names it", p.Issuer)
	}
	if p.ClientID == "" {
		return errors.New("give --client-id, the client registered with the identity provider for kubectl (a public one, with PKCE)")
	}
	return nil
}

// interactive says whether kubectl lets the plugin talk to the person
// (a terminal on stdin); when run by hand, it does.
func interactive() bool {
	v := os.Getenv(execInfoEnv)
	if v == "" {
		return true
	}
	var info struct {
		Spec struct {
			Interactive bool `json:"interactive"`
		} `json:"spec"`
	}
	return json.Unmarshal([]byte(v), &info) == nil && info.Spec.Interactive
}

func (o Options) credential(idToken string) error {
	status := map[string]any{"token": idToken}
	if exp := expiry(idToken); !exp.IsZero() {
		status["expirationTimestamp"] = exp.UTC().Format(time.RFC3339)
	}
	return json.NewEncoder(o.Stdout).Encode(map[string]any{
		"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status,
	})
}

// claims reads a JWT's payload without verifying it: the server verifies
// the token; the plugin only reads when it expires and whom it names.
func claims(jwt string) map[string]any {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var c map[string]any
	if json.Unmarshal(b, &c) != nil {
		return nil
	}
	return c
}

func claim(jwt, name string) string {
	s, _ := claims(jwt)[name].(string)
	return s
}

func expiry(jwt string) time.Time {
	if exp, ok := claims(jwt)["exp"].(float64); ok {
		return time.Unix(int64(exp), 0)
	}
	return time.Time{}
}

// cacheFile is the token file of this issuer and client.
func (p Provider) cacheFile() (string, error) {
	dir := p.CacheDir
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the home directory for the token cache: %w; give --cache-dir", err)
		}
		dir = filepath.Join(home, ".kube", "cache", "muster-oidc")
	}
	sum := sha256.Sum256([]byte(p.Issuer + "\x00" + p.ClientID))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+".json"), nil
}

func (p Provider) load() (cached, error) {
	var c cached
	path, err := p.cacheFile()
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// save writes the tokens to a file only the user reads (0600, in a 0700
// directory): they sign the person in.
func (p Provider) save(c cached) error {
	path, err := p.cacheFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating the token cache %s: %w", filepath.Dir(path), err)
	}
	b, _ := json.Marshal(c)
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("writing the token cache %s: %w", path, err)
	}
	return nil
}

// oauth is the provider's endpoints (from its discovery document) and the
// HTTP client that trusts its CA.
type oauth struct {
	cfg oauth2.Config
	hc  *http.Client
}

func (p Provider) discover(ctx context.Context) (*oauth, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if p.IssuerCA != "" {
		pemBytes, err := os.ReadFile(p.IssuerCA)
		if err != nil {
			return nil, fmt.Errorf("--issuer-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("--issuer-ca %s holds no PEM certificate", p.IssuerCA)
		}
		tlsCfg.RootCAs = pool
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}}
	url := strings.TrimSuffix(p.Issuer, "/") + "/.well-known/openid-configuration"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the identity provider's discovery document %s: %w", url, err)
	}
	defer resp.Body.Close()
	var doc struct {
		Issuer        string `json:"issuer"`
		Authorization string `json:"authorization_endpoint"`
		Token         string `json:"token_endpoint"`
		Device        string `json:"device_authorization_endpoint"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the identity provider's discovery document %s answered %s: check --issuer", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return nil, fmt.Errorf("the identity provider's discovery document %s: %w", url, err)
	}
	if strings.TrimSuffix(doc.Issuer, "/") != strings.TrimSuffix(p.Issuer, "/") {
		return nil, fmt.Errorf("the identity provider at %s calls itself %q: give that as --issuer", p.Issuer, doc.Issuer)
	}
	scopes := append([]string{"openid", "offline_access"}, p.Scopes...)
	if len(p.Scopes) == 0 {
		scopes = append(scopes, "profile", "email", "groups")
	}
	return &oauth{hc: hc, cfg: oauth2.Config{
		ClientID: p.ClientID, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: doc.Authorization, TokenURL: doc.Token, DeviceAuthURL: doc.Device, AuthStyle: oauth2.AuthStyleInParams},
	}}, nil
}

func (a *oauth) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, a.hc)
}

func idTokenOf(t *oauth2.Token) (cached, error) {
	id, _ := t.Extra("id_token").(string)
	if id == "" {
		return cached{}, errors.New("the identity provider answered without an ID token: is the openid scope allowed for this client?")
	}
	return cached{IDToken: id, RefreshToken: t.RefreshToken}, nil
}

func (p Provider) refresh(ctx context.Context, refreshToken string) (cached, error) {
	a, err := p.discover(ctx)
	if err != nil {
		return cached{}, err
	}
	t, err := a.cfg.TokenSource(a.ctx(ctx), &oauth2.Token{RefreshToken: refreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return cached{}, err
	}
	c, err := idTokenOf(t)
	if c.RefreshToken == "" {
		c.RefreshToken = refreshToken
	}
	return c, err
}

// signIn runs the browser or the device flow.
func (o Options) signIn(ctx context.Context, p Provider) (cached, error) {
	a, err := p.discover(ctx)
	if err != nil {
		return cached{}, err
	}
	if p.Device {
		return o.deviceFlow(ctx, a)
	}
	return o.browserFlow(ctx, p, a)
}

func (o Options) deviceFlow(ctx context.Context, a *oauth) (cached, error) {
	if a.cfg.Endpoint.DeviceAuthURL == "" {
		return cached{}, errors.New("the identity provider offers no device flow (no device_authorization_endpoint): sign in without --device, through a browser")
	}
	d, err := a.cfg.DeviceAuth(a.ctx(ctx))
	if err != nil {
		return cached{}, fmt.Errorf("starting the device flow: %w", err)
	}
	fmt.Fprintf(o.Stderr, "To sign in, open %s in a browser and enter the code %s\n", d.VerificationURI, d.UserCode)
	if d.VerificationURIComplete != "" {
		fmt.Fprintf(o.Stderr, "(or open %s)\n", d.VerificationURIComplete)
	}
	t, err := a.cfg.DeviceAccessToken(a.ctx(ctx), d)
	if err != nil {
		return cached{}, fmt.Errorf("waiting for the sign-in on the other device: %w", err)
	}
	return idTokenOf(t)
}

func randomString() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// browserFlow: authorization code with PKCE (S256), state and nonce,
// redirected to a listener on the loopback interface (RFC 8252).
func (o Options) browserFlow(ctx context.Context, p Provider, a *oauth) (cached, error) {
	listen := p.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return cached{}, fmt.Errorf("listening on %s for the sign-in's redirect: %w; give another --listen", listen, err)
	}
	defer ln.Close()
	cfg := a.cfg
	cfg.RedirectURL = fmt.Sprintf("http://%s/callback", ln.Addr())
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce))

	type result struct {
		c   cached
		err error
	}
	done := make(chan result, 1)
	finish := func(w http.ResponseWriter, r result) {
		if r.err != nil {
			http.Error(w, "Sign-in failed: "+r.err.Error(), http.StatusBadRequest)
		} else {
			fmt.Fprintf(w, "<!doctype html><title>Signed in</title><p>Signed in as %s. You can close this window and return to kubectl.</p>", html.EscapeString(claim(r.c.IDToken, "email")))
		}
		select {
		case done <- r:
		default:
		}
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		// A request without this sign-in's state is not the provider's
		// answer to it (another tab, or a forged redirect): refused,
		// and the sign-in goes on waiting for the right one.
		if q.Get("state") != state {
			http.Error(w, "this is not the answer to the sign-in kubectl started (state does not match); start again with kubectl muster login", http.StatusBadRequest)
			return
		}
		if e := q.Get("error"); e != "" {
			finish(w, result{err: fmt.Errorf("the identity provider refused: %s %s", e, q.Get("error_description"))})
			return
		}
		t, err := cfg.Exchange(a.ctx(r.Context()), q.Get("code"), oauth2.VerifierOption(verifier))
		if err != nil {
			finish(w, result{err: fmt.Errorf("exchanging the code for tokens: %w", err)})
			return
		}
		c, err := idTokenOf(t)
		if err == nil && claim(c.IDToken, "nonce") != nonce {
			err = errors.New("the ID token's nonce is not this sign-in's: refusing a token meant for another")
		}
		finish(w, result{c: c, err: err})
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	fmt.Fprintf(o.Stderr, "Open this URL in a browser to sign in:\n\n    %s\n\n", authURL)
	if p.OpenBrowser {
		openBrowser(authURL)
	}
	select {
	case r := <-done:
		return r.c, r.err
	case <-ctx.Done():
		return cached{}, fmt.Errorf("waiting for the browser's sign-in: %w", ctx.Err())
	}
}

// openBrowser tries the desktop's opener; the printed URL is the fallback.
func openBrowser(url string) {
	for _, opener := range []string{"xdg-open", "open"} {
		if path, err := exec.LookPath(opener); err == nil {
			_ = exec.Command(path, url).Start()
			return
		}
	}
}

// writeKubeconfig adds (or replaces) the cluster, user and context named
// l.Name in the kubeconfig kubectl reads, makes it current, and keeps the
// file 0600.
func (o Options) writeKubeconfig(l LoginOptions) (string, error) {
	path := o.Kubeconfig
	if path == "" {
		path = clientcmd.NewDefaultClientConfigLoadingRules().GetDefaultFilename()
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if errors.Is(err, os.ErrNotExist) {
		cfg, err = clientcmdapi.NewConfig(), nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the kubeconfig %s: %w", path, err)
	}
	cluster := clientcmdapi.NewCluster()
	cluster.Server = l.Server
	if l.CertificateAuthority != "" {
		if cluster.CertificateAuthorityData, err = os.ReadFile(l.CertificateAuthority); err != nil {
			return "", fmt.Errorf("--certificate-authority: %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		self = "kubectl-muster"
	}
	args := []string{"token", "--issuer", l.Issuer, "--client-id", l.ClientID}
	for _, f := range []struct{ flag, path string }{{"--issuer-ca", l.IssuerCA}, {"--cache-dir", l.CacheDir}} {
		if f.path != "" {
			abs, err := filepath.Abs(f.path)
			if err != nil {
				return "", err
			}
			args = append(args, f.flag, abs)
		}
	}
	if len(l.Scopes) > 0 {
		args = append(args, "--scopes", strings.Join(l.Scopes, ","))
	}
	if l.Device {
		args = append(args, "--device")
	}
	user := clientcmdapi.NewAuthInfo()
	user.Exec = &clientcmdapi.ExecConfig{
		APIVersion: "client.authentication.k8s.io/v1", Command: self, Args: args,
		InstallHint:     "kubectl muster token comes with kubectl-muster: put it on PATH (muster's releases, or make build)",
		InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
	}
	ctx := clientcmdapi.NewContext()
	ctx.Cluster, ctx.AuthInfo = l.Name, l.Name
	cfg.Clusters[l.Name], cfg.AuthInfos[l.Name], cfg.Contexts[l.Name] = cluster, user, ctx
	cfg.CurrentContext = l.Name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing the kubeconfig %s: %w", path, err)
	}
	return path, os.Chmod(path, 0o600)
}
