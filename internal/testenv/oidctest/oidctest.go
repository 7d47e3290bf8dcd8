// Package oidctest gives tests a real OpenID provider: zitadel/oidc v3's
// OpenID Provider (hack/oidc/provider) in its own process, serving HTTPS
// on a free loopback port with a certificate from a throwaway CA, with the
// users, groups and clients a test asks for. hack/oidc.sh builds it (`make
// oidc`) into ~/.cache/muster/oidc; $MUSTER_TEST_OIDC_PROVIDER names
// another binary. Without one, tests fail under CI and skip elsewhere
// with the command that builds it.
//
// A test signs a user in the way a browser does: it follows the provider's
// redirects with an HTTP client and posts the provider's login form
// (Login), or approves a device code on the provider's device page
// (ApproveDevice). Nothing here makes a token: the provider does.
package oidctest

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/testcert"

	"github.com/muster-io/muster/internal/testenv/proc"
)

// User is a person the provider signs in.
type User struct {
	Username, Password, Email string
	// Groups go into every ID token's "groups" claim.
	Groups []string
}

// Client is a relying party registered with the provider.
type Client struct {
	ID string
	// Secret empty: a public client (PKCE, no secret), as a CLI is.
	Secret string
	// RedirectURIs: for a public client, a loopback http URI matches any
	// port (RFC 8252).
	RedirectURIs []string
	// IDTokenLifetime is 5 minutes when zero.
	IDTokenLifetime time.Duration
}

// Options are the provider's users and clients.
type Options struct {
	Users   []User
	Clients []Client
}

// Provider is a running OpenID provider.
type Provider struct {
	// Issuer is https://127.0.0.1:PORT.
	Issuer string
	// CAFile holds the CA that signed the provider's serving certificate;
	// CAPEM is its content.
	CAFile string
	CAPEM  []byte
	// CertFile is the provider's serving certificate (a browser's test
	// pins its key).
	CertFile string
	Dir      string

	admin string
	proc  *proc.Proc
}

// Binary is the provider to run: $MUSTER_TEST_OIDC_PROVIDER, else the one
// hack/oidc.sh builds.
func Binary() (string, error) {
	if b := os.Getenv("MUSTER_TEST_OIDC_PROVIDER"); b != "" {
		return b, nil
	}
	dir := os.Getenv("MUSTER_OIDC_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "/root"
		}
		dir = filepath.Join(home, ".cache", "muster", "oidc")
	}
	b := filepath.Join(dir, "provider")
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Errorf("no OpenID provider at %s: run make oidc (hack/oidc.sh builds it), or set MUSTER_TEST_OIDC_PROVIDER", b)
	}
	return b, nil
}

// Start runs a provider for this test and waits until it serves its
// discovery document.
func Start(t testing.TB, opts Options) *Provider {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("an OpenID provider is required under CI: %v", err)
		}
		t.Skipf("no OpenID provider for this test: %v", err)
	}
	dir, err := os.MkdirTemp("", "muster-oidctest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	host := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := &Provider{Issuer: "https://" + host, Dir: dir, admin: random(16), CAFile: filepath.Join(dir, "ca.crt")}
	cert, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	p.CertFile = cert
	if err := testcert.Write(p.CAFile, cert, key, "oidc provider"); err != nil {
		t.Fatalf("writing the test TLS certificates: %v", err)
	}
	if p.CAPEM, err = os.ReadFile(p.CAFile); err != nil {
		t.Fatal(err)
	}
	type userJSON struct {
		Username string   `json:"username"`
		Password string   `json:"password"`
		Email    string   `json:"email"`
		Groups   []string `json:"groups"`
	}
	type clientJSON struct {
		ID              string   `json:"id"`
		Secret          string   `json:"secret,omitempty"`
		RedirectURIs    []string `json:"redirectURIs"`
		IDTokenLifetime string   `json:"idTokenLifetime,omitempty"`
	}
	cfg := struct {
		Issuer     string       `json:"issuer"`
		Users      []userJSON   `json:"users"`
		Clients    []clientJSON `json:"clients"`
		AdminToken string       `json:"adminToken"`
	}{Issuer: p.Issuer, AdminToken: p.admin}
	for _, u := range opts.Users {
		cfg.Users = append(cfg.Users, userJSON(u))
	}
	for _, c := range opts.Clients {
		cj := clientJSON{ID: c.ID, Secret: c.Secret, RedirectURIs: c.RedirectURIs}
		if c.IDTokenLifetime > 0 {
			cj.IDTokenLifetime = c.IDTokenLifetime.String()
		}
		cfg.Clients = append(cfg.Clients, cj)
	}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "provider.json")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfgFile, "--listen", host, "--tls-cert", cert, "--tls-key", key)
	p.proc = proc.Start(t, cmd, filepath.Join(dir, "provider.log"))
	if err := p.waitReady(30 * time.Second); err != nil {
		t.Fatalf("OpenID provider at %s did not answer: %v\n%s", p.Issuer, err, p.Log())
	}
	return p
}

// Log is what the provider wrote so far, for failure messages.
func (p *Provider) Log() string { return p.proc.Log() }

// Stop ends the provider.
func (p *Provider) Stop() { p.proc.Stop() }

// HTTPClient trusts the provider's CA, keeps cookies (the provider's
// login sets some) and does not follow redirects, so a test sees each
// step of a sign-in.
func (p *Provider) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CAPEM)
	jar, _ := cookiejar.New(nil)
	return &http.Client{
		Timeout:       30 * time.Second,
		Jar:           jar,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (p *Provider) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	hc := p.HTTPClient()
	for {
		resp, err := hc.Get(p.Issuer + "/.well-known/openid-configuration")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("discovery answered %s", resp.Status)
		}
		select {
		case <-p.proc.Done():
			return errors.New("the provider exited (its log says why)")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

// Rotate makes the provider sign with a new key from now on, still
// publishing the old ones; it returns the new key's id.
func (p *Provider) Rotate(t testing.TB) string {
	t.Helper()
	return p.adminCall(t, "/muster-test/rotate")
}

// Retire stops the provider publishing every key but the current one, as
// a provider does some time after a rotation.
func (p *Provider) Retire(t testing.TB) {
	t.Helper()
	p.adminCall(t, "/muster-test/retire")
}

func (p *Provider) adminCall(t testing.TB, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.Issuer+path, nil)
	req.Header.Set("Authorization", "Bearer "+p.admin)
	resp, err := p.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out struct {
		KID string `json:"kid"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("POST %s: %s\n%s", path, resp.Status, p.Log())
	}
	return out.KID
}

// Login signs username in at authURL (an authorization request to this
// provider) as a browser would: it follows the provider's redirects, posts
// its login form and returns the URL the provider finally sends the
// browser to (the client's redirect URI, with code and state). hc carries
// the browser's cookies; nil is a fresh browser.
func (p *Provider) Login(t testing.TB, hc *http.Client, authURL, username, password string) *url.URL {
	t.Helper()
	if hc == nil {
		hc = p.HTTPClient()
	}
	issuer, _ := url.Parse(p.Issuer)
	next, err := url.Parse(authURL)
	if err != nil {
		t.Fatalf("authorization URL %q: %v", authURL, err)
	}
	for range 10 {
		if next.Host != issuer.Host {
			return next
		}
		var resp *http.Response
		if next.Path == "/login/username" {
			// The login page's form: the auth request's id, user, password.
			form := url.Values{"id": {next.Query().Get("authRequestID")}, "username": {username}, "password": {password}}
			resp, err = hc.PostForm(p.Issuer+"/login/username", form)
		} else {
			resp, err = hc.Get(next.String())
		}
		if err != nil {
			t.Fatalf("signing %s in at %s: %v", username, next, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if loc == "" {
			t.Fatalf("signing %s in: %s answered %s without a redirect: %s", username, next.Path, resp.Status, body)
		}
		if next, err = next.Parse(loc); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("signing %s in: more than 10 redirects", username)
	return nil
}

// ApproveDevice enters userCode on the provider's device page, signs
// username in and allows the device, as the person at a browser does.
func (p *Provider) ApproveDevice(t testing.TB, userCode, username, password string) {
	t.Helper()
	hc := p.HTTPClient()
	resp, err := hc.PostForm(p.Issuer+"/device/login", url.Values{"user_code": {userCode}, "username": {username}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("device login for %s: %s %s", username, resp.Status, body)
	}
	resp, err = hc.PostForm(p.Issuer+"/device/confirm", url.Values{"action": {"allowed"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "allowed") {
		t.Fatalf("approving device code for %s: %s %s", username, resp.Status, body)
	}
}

// IDToken runs an authorization code flow with PKCE for a public client
// (one with a loopback redirect URI) and returns the provider's ID token
// for username: the token a CLI would hold.
func (p *Provider) IDToken(t testing.TB, clientID, username, password string) string {
	t.Helper()
	verifier := random(32)
	sum := sha256.Sum256([]byte(verifier))
	redirect := "http://127.0.0.1/callback"
	q := url.Values{
		"client_id": {clientID}, "response_type": {"code"}, "scope": {"openid profile email groups"},
		"redirect_uri": {redirect}, "state": {random(8)}, "nonce": {random(8)},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	back := p.Login(t, nil, p.Issuer+"/auth?"+q.Encode(), username, password)
	code := back.Query().Get("code")
	if code == "" {
		t.Fatalf("signing %s in: the provider sent no code: %s\n%s", username, back, p.Log())
	}
	resp, err := p.HTTPClient().PostForm(p.Issuer+"/oauth/token", url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect},
		"client_id": {clientID}, "code_verifier": {verifier},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		IDToken string `json:"id_token"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &tok) != nil || tok.IDToken == "" {
		t.Fatalf("exchanging %s's code: %s %s", username, resp.Status, body)
	}
	return tok.IDToken
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
