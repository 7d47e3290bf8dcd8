package kubectlmuster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func jwtWith(t *testing.T, claims map[string]any) string {
	t.Helper()
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString(b) + ".c2ln"
}

// A cached ID token is used while it has a quarter of its life (at most
// 30s) left, and refreshed after.
func TestLive(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name     string
		iat, exp time.Time
		want     bool
	}{
		{"fresh hour-long token", now, now.Add(time.Hour), true},
		{"hour-long token with 20s left", now.Add(-time.Hour), now.Add(20 * time.Second), false},
		{"15s token just issued", now, now.Add(15 * time.Second), true},
		{"15s token with 3s left", now.Add(-12 * time.Second), now.Add(3 * time.Second), false},
		{"expired", now.Add(-time.Hour), now.Add(-time.Minute), false},
	} {
		if got := live(jwtWith(t, map[string]any{"iat": c.iat.Unix(), "exp": c.exp.Unix()})); got != c.want {
			t.Errorf("%s: live %v, want %v", c.name, got, c.want)
		}
	}
}

// The plugin prints the cached token as kubectl's ExecCredential, with
// its expiry, so kubectl asks again only when it expires.
func TestTokenFromCache(t *testing.T) {
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	p := Provider{Issuer: "https://idp.example", ClientID: "cli", CacheDir: t.TempDir()}
	tok := jwtWith(t, map[string]any{"iat": time.Now().Unix(), "exp": exp.Unix()})
	if err := p.save(cached{IDToken: tok}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := (Options{Stdout: &out}).Token(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	var cred struct {
		APIVersion, Kind string
		Status           struct {
			Token               string
			ExpirationTimestamp time.Time
		}
	}
	if err := json.Unmarshal(out.Bytes(), &cred); err != nil {
		t.Fatal(err)
	}
	if cred.Kind != "ExecCredential" || cred.APIVersion != "client.authentication.k8s.io/v1" || cred.Status.Token != tok || !cred.Status.ExpirationTimestamp.Equal(exp) {
		t.Fatalf("credential %s", out.String())
	}
}

// Run by kubectl without a terminal and without a sign-in, the plugin
// says what to run instead of waiting for a browser nobody sees.
func TestTokenWithoutSignInIsNotInteractive(t *testing.T) {
	t.Setenv(execInfoEnv, `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`)
	p := Provider{Issuer: "https://idp.example", ClientID: "cli", CacheDir: t.TempDir()}
	err := (Options{Stdout: &bytes.Buffer{}}).Token(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "run kubectl muster login") {
		t.Fatalf("got %v, want a refusal saying to run kubectl muster login", err)
	}
}
