package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/muster-io/muster/internal/testenv/oidctest"
)

// spkiOf is the base64 SHA-256 of a certificate file's public key, the
// form chromium's --ignore-certificate-errors-spki-list takes.
func spkiOf(t testing.TB, certFile string) string {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// browserTrusting is browser (console_test.go) trusting the keys of the
// server's and the identity provider's certificates, and nothing else.
func browserTrusting(t testing.TB, s *server, p *oidctest.Provider) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", servingSPKI(t, s)+","+spkiOf(t, p.CertFile)),
		chromedp.WindowSize(1280, 800),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium (%s): %v", chromiumPath(t), err)
	}
	return ctx
}

// A person signs in to the console with the identity provider, in a real
// chromium: the sign-in page offers "Sign in with <provider>" beside the
// console token, the provider's login page signs her in, and the console
// shows her as the provider's claims map her, with the role her groups
// give. A callback whose state is not the browser's own is refused.
func TestOIDCConsoleSignIn(t *testing.T) {
	t.Parallel()
	// The provider needs the console's redirect URI, which names the
	// server's port: the server is prepared first, started after.
	s := newServer(t, "127.0.0.1", "")
	callback := s.url() + "/console/oidc/callback"
	p := oidctest.Start(t, oidctest.Options{
		Users: []oidctest.User{{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Groups: []string{"muster:operators"}}},
		Clients: []oidctest.Client{
			loopbackClient(cliClient, 0),
			// The console is a confidential client, with a secret.
			{ID: "muster-console", Secret: "console-secret-0123456789", RedirectURIs: []string{callback}},
		},
	})
	secretFile := filepath.Join(t.TempDir(), "console-client-secret")
	if err := os.WriteFile(secretFile, []byte("console-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.extra = []string{"--authentication-config", writeAuthConfig(t, jwtEntry(p, []string{cliClient, "muster-console"}, directGroups)),
		"--console-oidc-client-id", "muster-console", "--console-oidc-client-secret-file", secretFile, "--console-oidc-name", "Example IdP"}
	s.start()

	ctx := browserTrusting(t, s, p)
	open(t, ctx, s.url()+"/console/")
	run(t, ctx, "the sign-in page offering the provider", 30*time.Second, chromedp.WaitVisible(chromedp.ID("signin-oidc")), chromedp.WaitVisible(chromedp.ID("token")))
	if got := textOf(t, ctx, "#signin-oidc"); got != "Sign in with Example IdP" {
		t.Errorf("the provider's button says %q", got)
	}
	run(t, ctx, "signing in at the provider", 60*time.Second,
		chromedp.Click(chromedp.ID("signin-oidc")),
		chromedp.WaitVisible(chromedp.ID("username")),
		chromedp.SendKeys(chromedp.ID("username"), "alice"),
		chromedp.SendKeys(chromedp.ID("password"), "pw-alice"),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
	)
	// Back at the console, signed in (a dropped app.js is reloaded, as
	// open does).
	waitFor(t, 30*time.Second, "the console after the provider's redirect", func() bool {
		return strings.HasPrefix(eval[string](t, ctx, `location.href`), s.url()+"/console/")
	})
	open(t, ctx, s.url()+"/console/")
	run(t, ctx, "the console signed in", 30*time.Second, chromedp.WaitVisible(chromedp.ID("signout")))
	if who := textOf(t, ctx, "#who"); who != "alice@example.com (muster:operators)" {
		t.Errorf("the console shows %q, want alice@example.com (muster:operators)", who)
	}
	// Her session is an operator's: she may delete (a Machine that is not
	// there: 404, not 403).
	if code := jsFetch(t, ctx, "DELETE", "/apis/muster.io/v1alpha1/machines/no-such-machine", true, ""); code != http.StatusNotFound {
		t.Errorf("alice deleting a machine from the console: %d, want 404", code)
	}
	if !strings.Contains(s.log.String(), `"Console sign-in" user="alice@example.com"`) {
		t.Errorf("the server logged no console sign-in for alice:\n%s", lastLines(s.log.String(), 20))
	}

	// A callback with another state than the one this browser started
	// with is refused, and signs nobody in.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool(), MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, q := range []string{"state=forged&code=whatever", "code=whatever"} {
		// This browser starts a sign-in (its cookie holds the state)...
		resp, err := hc.Get(s.url() + "/console/oidc/start")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), p.Issuer) {
			t.Fatalf("start: %s to %q, want a redirect to the provider", resp.Status, resp.Header.Get("Location"))
		}
		// ...and is sent back with another.
		resp, err = hc.Get(s.url() + "/console/oidc/callback?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "state") {
			t.Errorf("callback ?%s: %s %s, want 400 saying the state is not this browser's", q, resp.Status, body)
		}
		for _, c := range resp.Cookies() {
			if c.Name == "muster_console" && c.Value != "" {
				t.Errorf("callback ?%s set a session cookie", q)
			}
		}
	}
}
