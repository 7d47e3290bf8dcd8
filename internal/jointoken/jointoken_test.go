package jointoken

import (
	"strings"
	"testing"
)

const caHash = "8133569eda2e1da1e7c89c07530421c3250e9e82de316e2bd6b06d58df450ebe"

func TestGenerateParseRoundTrip(t *testing.T) {
	tok, err := Generate(caHash)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.Secret) != 32 {
		t.Errorf("secret %d hex digits, want 32 (128 bits)", len(tok.Secret))
	}
	got, err := Parse(tok.String())
	if err != nil || got != tok {
		t.Fatalf("Parse(String()) = %+v, %v; want %+v", got, err, tok)
	}
	if !VerifySecret(HashSecret(tok.Secret), tok.Secret) || VerifySecret(HashSecret(tok.Secret), tok.Secret+"x") {
		t.Error("VerifySecret disagrees with HashSecret")
	}
	other, _ := Generate(caHash)
	if other.ID == tok.ID && other.Secret == tok.Secret {
		t.Error("two generated tokens are equal")
	}
}

func TestParse(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	cases := []struct {
		in      string
		want    Token
		wantErr string
	}{
		{in: "K10" + caHash + "::abc123." + secret, want: Token{CAHash: caHash, ID: "abc123", Secret: secret}},
		{in: "abc123." + secret, want: Token{ID: "abc123", Secret: secret}},
		{in: "  abc123." + secret + "\n", want: Token{ID: "abc123", Secret: secret}},
		{in: "", wantErr: "expected <id>.<secret>"},
		{in: "K10" + caHash + "abc123." + secret, wantErr: "expected K10<ca-hash>::"},
		{in: "K10deadbeef::abc123." + secret, wantErr: "64 lowercase hex"},
		{in: "K10" + caHash + "::abc123", wantErr: "expected <id>.<secret>"},
		{in: "AB.CD" + secret, wantErr: "id must be"},
		{in: "abc123.short", wantErr: "secret must be"},
		{in: "abc123.UPPERCASE0123456789ABCDEF", wantErr: "secret must be"},
	}
	for _, tc := range cases {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) = %+v, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("Parse error repeats the secret: %v", err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestHashFormatMatchesTheAPIValidation(t *testing.T) {
	h := HashSecret("anything")
	if !strings.HasPrefix(h, "sha256$") || len(h) != len("sha256$")+64 {
		t.Fatalf("hash %q is not sha256$<64 hex>", h)
	}
}
