package e2e

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/oidctest"
)

// The sign-in tests run a real OpenID provider (zitadel/oidc's, in its own
// process: internal/testenv/oidctest) and a real muster-server reading an
// AuthenticationConfiguration, and sign users in the way a browser or
// kubectl muster login does. No token is made by the test except the
// forged ones of TestOIDCBadTokensRefused, which stand for an attacker's.

const cliClient = "muster-cli"

// loopbackClient is a public client (a CLI: PKCE, no secret) whose loopback
// redirect matches any port.
func loopbackClient(id string, life time.Duration) oidctest.Client {
	return oidctest.Client{ID: id, RedirectURIs: []string{"http://127.0.0.1/callback"}, IDTokenLifetime: life}
}

// jwtEntry is one jwt entry of an AuthenticationConfiguration, as an
// operator writes it.
func jwtEntry(p *oidctest.Provider, audiences []string, claimMappings map[string]any) map[string]any {
	issuer := map[string]any{"url": p.Issuer, "audiences": audiences, "certificateAuthority": string(p.CAPEM)}
	if len(audiences) > 1 {
		issuer["audienceMatchPolicy"] = "MatchAny"
	}
	return map[string]any{"issuer": issuer, "claimMappings": claimMappings}
}

// writeAuthConfig writes an AuthenticationConfiguration (JSON, which is
// YAML) with the given jwt entries and returns its path.
func writeAuthConfig(t *testing.T, entries ...map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthenticationConfiguration", "jwt": entries,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "authentication-config.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tokenKubeconfig writes a kubeconfig for s whose user presents token.
func tokenKubeconfig(t *testing.T, s *server, name, token string) string {
	t.Helper()
	ca := base64.StdEncoding.EncodeToString(s.caPEM(t))
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: muster
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: %s
  user: {token: %q}
contexts:
- name: muster
  context: {cluster: muster, user: %s}
current-context: muster
`, s.url(), ca, name, token, name)
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// directGroups maps the token's email to the user and its groups claim as
// is: the provider's groups are named as Muster's roles.
var directGroups = map[string]any{
	"username": map[string]any{"claim": "email", "prefix": ""},
	"groups":   map[string]any{"claim": "groups", "prefix": ""},
}

// People signed in through two providers at once get the role their
// provider's groups decide: provider A names its groups as Muster's roles;
// provider B's group "platform-ops" is mapped to muster:operators by a CEL
// expression and its users are prefixed. A provider's key rotation is
// picked up without a restart.
func TestOIDCRolesFromProviderGroups(t *testing.T) {
	t.Parallel()
	a := oidctest.Start(t, oidctest.Options{
		Users: []oidctest.User{
			{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Groups: []string{"muster:operators"}},
			{Username: "victor", Password: "pw-victor", Email: "victor@example.com", Groups: []string{"muster:viewers"}},
			{Username: "nadia", Password: "pw-nadia", Email: "nadia@example.com", Groups: []string{"sales"}},
		},
		Clients: []oidctest.Client{loopbackClient(cliClient, 0)},
	})
	b := oidctest.Start(t, oidctest.Options{
		Users:   []oidctest.User{{Username: "bob", Password: "pw-bob", Email: "bob@corp.example", Groups: []string{"platform-ops", "finance"}}},
		Clients: []oidctest.Client{loopbackClient("muster-b", 0)},
	})
	cfg := writeAuthConfig(t,
		jwtEntry(a, []string{cliClient}, directGroups),
		jwtEntry(b, []string{"muster-b"}, map[string]any{
			"username": map[string]any{"claim": "email", "prefix": "corp:"},
			"groups":   map[string]any{"expression": `dyn(claims.groups).map(g, g == "platform-ops" ? "muster:operators" : "corp:" + g)`},
		}))
	s := startServer(t, "", "--authentication-config", cfg)

	as := func(p *oidctest.Provider, client, user, password string) string {
		return tokenKubeconfig(t, s, user, p.IDToken(t, client, user, password))
	}
	alice, victor, nadia := as(a, cliClient, "alice", "pw-alice"), as(a, cliClient, "victor", "pw-victor"), as(a, cliClient, "nadia", "pw-nadia")
	bob := as(b, "muster-b", "bob", "pw-bob")

	// Deleting a Machine that does not exist: an operator is allowed to
	// try (NotFound), a viewer is not (Forbidden).
	for _, c := range []struct {
		who, kubeconfig string
		list, del       string // what the output must contain
	}{
		{"alice (muster:operators from A)", alice, "No resources found", "NotFound"},
		{"victor (muster:viewers from A)", victor, "No resources found", "Forbidden"},
		{"nadia (no role from A)", nadia, "Forbidden", "Forbidden"},
		{"bob (platform-ops mapped to muster:operators from B)", bob, "No resources found", "NotFound"},
	} {
		out, _ := kubectlAs(c.kubeconfig, "get", "machines")
		if !strings.Contains(out, c.list) {
			t.Errorf("%s: kubectl get machines said %q, want %q", c.who, out, c.list)
		}
		out, _ = kubectlAs(c.kubeconfig, "delete", "machine", "no-such-machine")
		if !strings.Contains(out, c.del) {
			t.Errorf("%s: kubectl delete machine said %q, want %q", c.who, out, c.del)
		}
	}
	// A refusal names the user as the provider's claims mapped them.
	if out, _ := kubectlAs(nadia, "get", "machines"); !strings.Contains(out, `"nadia@example.com"`) {
		t.Errorf("nadia's refusal %q does not name her by the provider's email claim", out)
	}

	// The provider rotates its signing key: a token signed with the new
	// key is accepted by the running server, which fetches the new key.
	before := a.IDToken(t, cliClient, "alice", "pw-alice")
	kid := a.Rotate(t)
	after := a.IDToken(t, cliClient, "alice", "pw-alice")
	if h := jwtHeader(t, after); h["kid"] != kid {
		t.Fatalf("after rotation the provider signed with %v, want %s", h["kid"], kid)
	}
	for name, tok := range map[string]string{"signed before the rotation": before, "signed with the new key": after} {
		if out, err := kubectlAs(tokenKubeconfig(t, s, "alice", tok), "get", "machines"); err != nil {
			t.Errorf("alice's token %s: %v\n%s\n%s", name, err, out, lastLines(s.log.String(), 20))
		}
	}
}

func jwtHeader(t *testing.T, jwt string) map[string]any {
	t.Helper()
	var h map[string]any
	b, err := base64.RawURLEncoding.DecodeString(strings.Split(jwt, ".")[0])
	if err != nil || json.Unmarshal(b, &h) != nil {
		t.Fatalf("not a JWT header: %v", err)
	}
	return h
}

func jwtClaims(t *testing.T, jwt string) map[string]any {
	t.Helper()
	var c map[string]any
	b, err := base64.RawURLEncoding.DecodeString(strings.Split(jwt, ".")[1])
	if err != nil || json.Unmarshal(b, &c) != nil {
		t.Fatalf("not a JWT payload: %v", err)
	}
	return c
}

// forge signs header and claims with key (RS256), as an attacker holding
// a key of their own would.
func forge(t *testing.T, header, claims map[string]any, key *rsa.PrivateKey) string {
	t.Helper()
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	signing := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// Every kind of bad ID token is refused with 401, and the server's log
// says why in a line that does not hold the token.
func TestOIDCBadTokensRefused(t *testing.T) {
	t.Parallel()
	users := []oidctest.User{{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Groups: []string{"muster:operators"}}}
	// A provider account whose group, mapped without a prefix, is the one
	// Muster gives its servers: a real token, and still refused.
	mallory := oidctest.User{Username: "mallory", Password: "pw-mallory", Email: "mallory@example.com", Groups: []string{"muster:servers"}}
	p := oidctest.Start(t, oidctest.Options{Users: append(users, mallory), Clients: []oidctest.Client{
		loopbackClient(cliClient, 0),
		loopbackClient("short-lived", 2*time.Second),
		loopbackClient("another-app", 0),
	}})
	// A provider this server does not trust, with the same user and client.
	stranger := oidctest.Start(t, oidctest.Options{Users: users, Clients: []oidctest.Client{loopbackClient(cliClient, 0)}})
	s := startServer(t, "", "--authentication-config", writeAuthConfig(t, jwtEntry(p, []string{cliClient, "short-lived"}, directGroups)))

	good := p.IDToken(t, cliClient, "alice", "pw-alice")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool(), MinVersion: tls.VersionTLS12}}}
	status := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, s.url()+"/apis/muster.io/v1alpha1/machines", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := status(good); code != http.StatusOK {
		t.Fatalf("a good token: %d, want 200\n%s", code, lastLines(s.log.String(), 20))
	}

	expired := p.IDToken(t, "short-lived", "alice", "pw-alice")
	exp := time.Unix(int64(jwtClaims(t, expired)["exp"].(float64)), 0)
	waitFor(t, 30*time.Second, "the short-lived token to expire", func() bool { return time.Now().After(exp.Add(time.Second)) })

	header, claims := jwtHeader(t, good), jwtClaims(t, good)
	none := func() string {
		h, _ := json.Marshal(map[string]any{"alg": "none", "typ": "JWT", "kid": header["kid"]})
		c, _ := json.Marshal(claims)
		return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c) + "."
	}()
	attackerKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	unknownKey := forge(t, map[string]any{"alg": "RS256", "typ": "JWT", "kid": "attackers-key"}, claims, attackerKey)
	// The same claims signed with the attacker's key under the provider's
	// own key id: the signature, not the kid, must decide.
	stolenKid := forge(t, map[string]any{"alg": "RS256", "typ": "JWT", "kid": header["kid"]}, claims, attackerKey)

	cases := []struct {
		name  string
		token func() string
		why   string // in the server's log line
	}{
		{"expired", func() string { return expired }, "token is expired"},
		{"wrong audience", func() string { return p.IDToken(t, "another-app", "alice", "pw-alice") }, "expected audience"},
		{"wrong issuer", func() string { return stranger.IDToken(t, cliClient, "alice", "pw-alice") }, "is none of the providers"},
		{"alg none", func() string { return none }, "id token signed with unsupported algorithm"},
		{"unknown key", func() string { return unknownKey }, "failed to verify id token signature"},
		{"provider's kid, other key", func() string { return stolenKid }, "failed to verify id token signature"},
		{"mapped to a server's group", func() string { return p.IDToken(t, cliClient, "mallory", "pw-mallory") }, "claims an identity only muster issues"},
		{"key rotated out", func() string {
			// good was signed with the first key. The provider rotates,
			// retires the first key, and signs a token with the new
			// one; the server fetches the provider's keys for it and
			// so learns the first key is gone.
			p.Rotate(t)
			p.Retire(t)
			if code := status(p.IDToken(t, cliClient, "alice", "pw-alice")); code != http.StatusOK {
				t.Fatalf("a token signed with the new key: %d, want 200\n%s", code, lastLines(s.log.String(), 20))
			}
			return good
		}, "failed to verify id token signature"},
	}
	for _, c := range cases {
		token := c.token()
		seen := strings.Count(s.log.String(), c.why)
		if code := status(token); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", c.name, code)
			continue
		}
		waitFor(t, 10*time.Second, c.name+": the server's log line saying why", func() bool {
			return strings.Count(s.log.String(), c.why) > seen
		})
		if sig := token[strings.LastIndex(token, ".")+1:]; sig != "" && strings.Contains(s.log.String(), sig) {
			t.Errorf("%s: the server's log holds the token's signature", c.name)
		}
		if body := token[strings.Index(token, ".")+1 : strings.LastIndex(token, ".")]; strings.Contains(s.log.String(), body) {
			t.Errorf("%s: the server's log holds the token's claims", c.name)
		}
	}
}

// loginProcess is a running `kubectl muster login`, its stderr read line
// by line (the URL or the device code the person acts on).
type loginProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	stdout *bytes.Buffer
	stderr *syncBuffer
	done   chan error
}

func startLogin(t *testing.T, kubeconfig string, args ...string) *loginProcess {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"muster", "login"}, args...)...)
	cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG", "KUBERNETES_EXEC_INFO"), "KUBECONFIG="+kubeconfig,
		"PATH="+pluginDir(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	l := &loginProcess{cmd: cmd, lines: make(chan string, 100), stdout: &bytes.Buffer{}, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout = l.stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			_, _ = l.stderr.Write([]byte(sc.Text() + "\n"))
			l.lines <- sc.Text()
		}
		close(l.lines)
		l.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return l
}

// waitLine returns the first match of re in the login's stderr.
func (l *loginProcess) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-l.lines:
			if !ok {
				t.Fatalf("kubectl muster login ended without printing %s:\n%s", re, l.stderr.String())
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("kubectl muster login printed no %s within 60s:\n%s", re, l.stderr.String())
		}
	}
}

func (l *loginProcess) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-l.done:
		if err != nil {
			t.Fatalf("kubectl muster login: %v\n%s%s", err, l.stdout.String(), l.stderr.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("kubectl muster login did not end within 90s:\n%s", l.stderr.String())
	}
}

// A person signs in with `kubectl muster login`, through the browser
// (authorization code with PKCE) or with the device flow, then runs plain
// kubectl commands with the role the provider's groups give; when the ID
// token expires, the kubeconfig's credential plugin refreshes it.
func TestOIDCKubectlLogin(t *testing.T) {
	t.Parallel()
	p := oidctest.Start(t, oidctest.Options{
		Users: []oidctest.User{
			{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Groups: []string{"muster:operators"}},
			{Username: "victor", Password: "pw-victor", Email: "victor@example.com", Groups: []string{"muster:viewers"}},
		},
		// Short-lived ID tokens, so that the test sees one refreshed.
		Clients: []oidctest.Client{loopbackClient(cliClient, 15*time.Second)},
	})
	s := startServer(t, "", "--authentication-config", writeAuthConfig(t, jwtEntry(p, []string{cliClient}, directGroups)))
	serverCA := filepath.Join(t.TempDir(), "muster-ca.crt")
	if err := os.WriteFile(serverCA, s.caPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	login := func(kubeconfig, cache string, extra ...string) *loginProcess {
		return startLogin(t, kubeconfig, append([]string{"--server", s.url(), "--certificate-authority", serverCA,
			"--issuer", p.Issuer, "--issuer-ca", p.CAFile, "--client-id", cliClient, "--cache-dir", cache, "--open-browser=false"}, extra...)...)
	}

	// Alice, through the browser: the test is her browser, following the
	// printed URL through the provider's login page back to the CLI's
	// loopback listener.
	aliceKC, aliceCache := filepath.Join(t.TempDir(), "config"), t.TempDir()
	l := login(aliceKC, aliceCache)
	authURL := l.waitLine(t, regexp.MustCompile(`^\s+(https://\S+)$`))[1]
	back := p.Login(t, nil, authURL, "alice", "pw-alice")
	if back.Hostname() != "127.0.0.1" || back.Query().Get("code") == "" {
		t.Fatalf("the provider sent the browser to %s, want the CLI's loopback listener with a code", back)
	}
	resp, err := http.Get(back.String())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Signed in as alice@example.com") {
		t.Fatalf("the CLI's listener answered %s %s", resp.Status, page)
	}
	l.wait(t)
	if !strings.Contains(l.stdout.String(), "Signed in as alice@example.com") {
		t.Errorf("login printed %q", l.stdout.String())
	}
	for _, f := range []string{aliceKC, cacheFileIn(t, aliceCache)} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600 (it signs alice in)", f, err, fi.Mode())
		}
	}
	if out, err := kubectlAs(aliceKC, "get", "machines"); err != nil || !strings.Contains(out, "No resources found") {
		t.Fatalf("alice: kubectl get machines: %v\n%s\n%s", err, out, lastLines(s.log.String(), 10))
	}
	if out, _ := kubectlAs(aliceKC, "delete", "machine", "no-such-machine"); !strings.Contains(out, "NotFound") {
		t.Errorf("alice (muster:operators) deleting a machine: %s, want NotFound", out)
	}

	// Her ID token expires: the credential plugin refreshes it with the
	// refresh token, and kubectl goes on working.
	first := readCache(t, aliceCache)
	exp := time.Unix(int64(jwtClaims(t, first.IDToken)["exp"].(float64)), 0)
	waitFor(t, 30*time.Second, "alice's ID token to be due for a refresh", func() bool { return time.Until(exp) < 3*time.Second })
	if out, err := kubectlAs(aliceKC, "get", "machines"); err != nil {
		t.Fatalf("alice after her ID token expired: %v\n%s", err, out)
	}
	if again := readCache(t, aliceCache); again.IDToken == first.IDToken || again.IDToken == "" {
		t.Errorf("the credential plugin did not refresh alice's ID token")
	}

	// Victor, on a host without a browser: the device flow. He enters the
	// printed code on the provider's device page elsewhere.
	victorKC, victorCache := filepath.Join(t.TempDir(), "config"), t.TempDir()
	l = login(victorKC, victorCache, "--device")
	code := l.waitLine(t, regexp.MustCompile(`enter the code (\S+)`))[1]
	p.ApproveDevice(t, code, "victor", "pw-victor")
	l.wait(t)
	if out, err := kubectlAs(victorKC, "get", "machines"); err != nil || !strings.Contains(out, "No resources found") {
		t.Fatalf("victor: kubectl get machines: %v\n%s", err, out)
	}
	if out, _ := kubectlAs(victorKC, "delete", "machine", "no-such-machine"); !strings.Contains(out, "Forbidden") {
		t.Errorf("victor (muster:viewers) deleting a machine: %s, want Forbidden", out)
	}
}

type tokenCache struct {
	IDToken      string `json:"idToken"`
	RefreshToken string `json:"refreshToken"`
}

func cacheFileIn(t *testing.T, dir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("token cache %s holds %v, want one file", dir, files)
	}
	return files[0]
}

func readCache(t *testing.T, dir string) tokenCache {
	t.Helper()
	b, err := os.ReadFile(cacheFileIn(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	var c tokenCache
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// A change to --authentication-config takes effect without a restart:
// a provider added to the file signs people in, a file that does not
// validate is refused (the running providers stay), and a provider taken
// out of the file signs nobody in any more.
func TestOIDCConfigReload(t *testing.T) {
	t.Parallel()
	users := []oidctest.User{{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Groups: []string{"muster:viewers"}}}
	a := oidctest.Start(t, oidctest.Options{Users: users, Clients: []oidctest.Client{loopbackClient(cliClient, 0)}})
	b := oidctest.Start(t, oidctest.Options{Users: users, Clients: []oidctest.Client{loopbackClient(cliClient, 0)}})
	cfg := writeAuthConfig(t, jwtEntry(a, []string{cliClient}, directGroups))
	s := startServer(t, "", "--authentication-config", cfg)
	fromA, fromB := a.IDToken(t, cliClient, "alice", "pw-alice"), b.IDToken(t, cliClient, "alice", "pw-alice")
	works := func(token string) bool {
		_, err := kubectlAs(tokenKubeconfig(t, s, "alice", token), "get", "machines")
		return err == nil
	}
	if !works(fromA) || works(fromB) {
		t.Fatalf("before the change: provider A's token works %v (want true), B's %v (want false)", works(fromA), works(fromB))
	}
	// The operator adds provider B to the file in place.
	rewrite := func(content []byte) {
		t.Helper()
		if err := os.WriteFile(cfg, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	both, err := os.ReadFile(writeAuthConfig(t, jwtEntry(a, []string{cliClient}, directGroups), jwtEntry(b, []string{cliClient}, directGroups)))
	if err != nil {
		t.Fatal(err)
	}
	rewrite(both)
	waitFor(t, 60*time.Second, "provider B's token to work after B was added to the file", func() bool { return works(fromB) })

	// A file that does not validate changes nothing, and says why.
	rewrite([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {url: http://plain.example, audiences: [x]}\n"))
	waitFor(t, 60*time.Second, "the server to refuse the broken file", func() bool {
		return strings.Contains(s.log.String(), "The changed --authentication-config is refused")
	})
	if !works(fromA) || !works(fromB) {
		t.Fatalf("after a broken file: A's token works %v, B's %v; want both", works(fromA), works(fromB))
	}

	// Provider A is taken out.
	onlyB, err := os.ReadFile(writeAuthConfig(t, jwtEntry(b, []string{cliClient}, directGroups)))
	if err != nil {
		t.Fatal(err)
	}
	rewrite(onlyB)
	waitFor(t, 60*time.Second, "provider A's token to stop working after A was taken out", func() bool { return !works(fromA) })
	if !works(fromB) {
		t.Errorf("provider B's token stopped working")
	}
}
