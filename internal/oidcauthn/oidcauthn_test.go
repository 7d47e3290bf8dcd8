package oidcauthn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n"+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Read accepts what kube-apiserver accepts (several providers, claim
// and CEL mappings) and refuses, saying why, what it refuses or what
// Muster decides itself (anonymous access).
func TestRead(t *testing.T) {
	provider := func(url, groups string) string {
		return `- issuer: {url: ` + url + `, audiences: [muster]}
  claimMappings:
    username: {claim: email, prefix: ""}
    groups: ` + groups + "\n"
	}
	for _, c := range []struct {
		name, body, refusal string
	}{
		{"one provider", "jwt:\n" + provider("https://idp.example", `{claim: groups, prefix: ""}`), ""},
		{"group mapping by expression", "jwt:\n" + provider("https://idp.example",
			`{expression: 'dyn(claims.groups).map(g, g == "platform-ops" ? "muster:operators" : "corp:" + g)'}`), ""},
		{"two providers", "jwt:\n" + provider("https://a.example", `{claim: groups, prefix: ""}`) + provider("https://b.example", `{claim: groups, prefix: "b:"}`), ""},
		{"no provider", "jwt: []\n", "names no provider"},
		{"anonymous section", "anonymous: {enabled: true}\njwt:\n" + provider("https://idp.example", `{claim: groups, prefix: ""}`), "remove the anonymous section"},
		{"http issuer", "jwt:\n" + provider("http://idp.example", `{claim: groups, prefix: ""}`), "https"},
		{"same issuer twice", "jwt:\n" + provider("https://a.example", `{claim: groups, prefix: ""}`) + provider("https://a.example", `{claim: groups, prefix: ""}`), "Duplicate"},
		{"claim without prefix", "jwt:\n" + provider("https://idp.example", `{claim: groups}`), "prefix"},
		{"unknown field", "jwt:\n" + provider("https://idp.example", `{claim: groups, prefix: "", colour: red}`), "unknown field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(writeConfig(t, c.body))
			switch {
			case c.refusal == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)):
				t.Fatalf("got %v, want a refusal saying %q", err, c.refusal)
			}
		})
	}
}

func TestUnverifiedIssuer(t *testing.T) {
	for _, c := range []struct {
		token, iss string
		jwt        bool
	}{
		{"abcdef.0123456789abcdef", "", false}, // a join token
		{"mct_0123.4567", "", false},
		{"eyJhbGciOiJub25lIn0.eyJpc3MiOiJodHRwczovL2lkcC5leGFtcGxlIn0.", "https://idp.example", true},
		{"a.b.c", "", false},
	} {
		iss, jwt := unverifiedIssuer(c.token)
		if iss != c.iss || jwt != c.jwt {
			t.Errorf("%q: got %q %v, want %q %v", c.token, iss, jwt, c.iss, c.jwt)
		}
	}
}
