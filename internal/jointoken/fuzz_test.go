package jointoken

import (
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; what it accepts has the documented shape,
// prints back to a token that parses to the same thing, and its errors
// never repeat the secret (they reach logs and terminals).
func FuzzParse(f *testing.F) {
	tok, err := Generate(caHash)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		tok.String(), tok.Bearer(), " " + tok.String() + "\n",
		"K10" + caHash + "::abcdef.0123456789abcdef0123456789abcdef",
		"abcdef.0123456789abcdef", "K10" + caHash + "::abcdef", "K10::abcdef.0123456789abcdef",
		"K10" + strings.ToUpper(caHash) + "::abcdef.0123456789abcdef", "ABCDEF.0123456789abcdef",
		"abcdef.0123456789abcdef.extra", "abcdef.0123456789abcdef\x00", "", ".", "::", "K10",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse(s)
		if err != nil {
			if i := strings.LastIndexByte(s, '.'); i >= 0 {
				if secret := strings.TrimSpace(s[i+1:]); len(secret) >= 16 && strings.Contains(err.Error(), secret) {
					t.Fatalf("the error repeats the secret: %v", err)
				}
			}
			return
		}
		if !idPattern.MatchString(got.ID) || !secretPattern.MatchString(got.Secret) ||
			(got.CAHash != "" && !caHashPattern.MatchString(got.CAHash)) {
			t.Fatalf("Parse(%q) accepted a malformed token: %+v", s, got)
		}
		again, err := Parse(got.String())
		if err != nil || again != got {
			t.Fatalf("Parse(String()) = %+v, %v; want %+v", again, err, got)
		}
		if bearer, err := Parse(got.Bearer()); err != nil || bearer.ID != got.ID || bearer.Secret != got.Secret || bearer.CAHash != "" {
			t.Fatalf("Parse(Bearer()) = %+v, %v; want %+v without the CA hash", bearer, err, got)
		}
		if !VerifySecret(HashSecret(got.Secret), got.Secret) {
			t.Fatalf("the secret does not verify against its own hash")
		}
	})
}
