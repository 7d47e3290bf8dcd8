package jointoken

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
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

// TestInactive: the reason a token may not be used, as the refused agent reads it.
func TestInactive(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tok := func(phase api.TokenPhase, reason string, expires *metav1.Time) *api.ClusterRegistrationToken {
		return &api.ClusterRegistrationToken{ObjectMeta: metav1.ObjectMeta{Name: "abcdef"}, Spec: api.ClusterRegistrationTokenSpec{Cluster: "prod"},
			Status: api.ClusterRegistrationTokenStatus{Phase: phase, Reason: reason, ExpiresAt: expires}}
	}
	past, future := metav1.NewTime(now.Add(-time.Second)), metav1.NewTime(now.Add(time.Hour))
	tests := []struct {
		tok  *api.ClusterRegistrationToken
		want string
	}{
		{tok(api.TokenPhaseActive, "", nil), ""},
		{tok(api.TokenPhaseActive, "", &future), ""},
		{tok(api.TokenPhaseActive, "", &past), "join token abcdef expired at"},
		{tok(api.TokenPhaseExpired, "", nil), "join token abcdef has expired"},
		{tok(api.TokenPhaseRevoked, ReasonRevokedByOperator, nil), "join token abcdef was revoked"},
		{tok(api.TokenPhaseRevoked, ReasonClusterDeleted, nil), "join token abcdef was revoked when its cluster prod was deleted"},
	}
	for _, tt := range tests {
		got := Inactive(tt.tok, now)
		if (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s/%s: Inactive = %q, want %q", tt.tok.Status.Phase, tt.tok.Status.Reason, got, tt.want)
		}
	}
}
