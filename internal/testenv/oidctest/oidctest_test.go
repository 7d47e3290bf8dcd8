package oidctest

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// header and claims of a JWT, unverified: the test looks at what the
// provider issued, it does not trust it.
func parts(t *testing.T, jwt string) (header, claims map[string]any) {
	t.Helper()
	p := strings.Split(jwt, ".")
	if len(p) != 3 {
		t.Fatalf("not a JWT: %d parts", len(p))
	}
	for i, into := range []*map[string]any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(p[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}
	return header, claims
}

// The provider signs a configured user in through its login page and
// issues an ID token with the user's groups, for the client, from its
// issuer; after a rotation it signs with the new key.
func TestProviderIssuesTokensAndRotates(t *testing.T) {
	p := Start(t, Options{
		Users:   []User{{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Groups: []string{"team-a", "muster:operators"}}},
		Clients: []Client{{ID: "cli", RedirectURIs: []string{"http://127.0.0.1/callback"}}},
	})
	header, claims := parts(t, p.IDToken(t, "cli", "alice", "pw-alice"))
	if claims["iss"] != p.Issuer || claims["aud"] == nil || claims["email"] != "alice@example.com" || claims["sub"] != "alice" {
		t.Fatalf("claims %v: want iss %s, sub alice, email alice@example.com", claims, p.Issuer)
	}
	groups, _ := claims["groups"].([]any)
	if !slices.Contains(groups, any("muster:operators")) || !slices.Contains(groups, any("team-a")) {
		t.Fatalf("groups %v, want team-a and muster:operators", claims["groups"])
	}
	kid := p.Rotate(t)
	if kid == header["kid"] {
		t.Fatalf("rotation kept key %s", kid)
	}
	if h, _ := parts(t, p.IDToken(t, "cli", "alice", "pw-alice")); h["kid"] != kid {
		t.Fatalf("after rotation the token is signed by %v, want %s", h["kid"], kid)
	}
}
