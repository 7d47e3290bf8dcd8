// Package jointoken is the join token: its k3s "secure" format
// K10<sha256 of the server CA>::<id>.<secret>, how it is generated, and how
// its secret is hashed for storage. The id names the
// ClusterRegistrationToken object; the secret is shown once and only its
// hash is kept.
package jointoken

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

const (
	prefix = "K10"
	// idLen and secretBytes follow k3s's bootstrap tokens in shape; the
	// secret carries 128 random bits, so a fast hash is safe to store it
	// (no dictionary to search; see docs/security.md).
	idLen       = 6
	secretBytes = 16
	hashAlgo    = "sha256"
)

var (
	idPattern     = regexp.MustCompile(`^[a-z0-9]{6,32}$`)
	secretPattern = regexp.MustCompile(`^[a-z0-9]{16,64}$`)
	caHashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Token is a parsed join token. CAHash is empty for a token given without
// the CA pin (accepted only with an explicit insecure flag).
type Token struct {
	CAHash string
	ID     string
	Secret string
}

// Generate makes a new token pinned to the CA whose SHA-256 is caHash.
func Generate(caHash string) (Token, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	id := make([]byte, idLen)
	raw := make([]byte, idLen)
	if _, err := rand.Read(raw); err != nil {
		return Token{}, err
	}
	for i, b := range raw {
		// 256 is not a multiple of 36; the bias this leaves is harmless in an
		// identifier, which is not secret.
		id[i] = alphabet[int(b)%len(alphabet)]
	}
	secret := make([]byte, secretBytes)
	if _, err := rand.Read(secret); err != nil {
		return Token{}, err
	}
	return Token{CAHash: caHash, ID: string(id), Secret: hex.EncodeToString(secret)}, nil
}

// String is the full join token.
func (t Token) String() string {
	if t.CAHash == "" {
		return t.ID + "." + t.Secret
	}
	return prefix + t.CAHash + "::" + t.ID + "." + t.Secret
}

// Bearer is what an agent sends as its bootstrap credential: "<id>.<secret>".
func (t Token) Bearer() string { return t.ID + "." + t.Secret }

// Parse reads a join token in the secure form or the short "<id>.<secret>"
// form. Errors never repeat the secret.
func Parse(s string) (Token, error) {
	s = strings.TrimSpace(s)
	var t Token
	rest := s
	if strings.HasPrefix(s, prefix) {
		hash, after, ok := strings.Cut(strings.TrimPrefix(s, prefix), "::")
		if !ok {
			return Token{}, fmt.Errorf("malformed join token: expected K10<ca-hash>::<id>.<secret>")
		}
		if !caHashPattern.MatchString(hash) {
			return Token{}, fmt.Errorf("malformed join token: the CA hash after K10 must be 64 lowercase hex digits")
		}
		t.CAHash, rest = hash, after
	}
	id, secret, ok := strings.Cut(rest, ".")
	if !ok {
		return Token{}, fmt.Errorf("malformed join token: expected <id>.<secret> after the CA hash; create one with 'muster-server token create'")
	}
	if !idPattern.MatchString(id) {
		return Token{}, fmt.Errorf("malformed join token: the id must be 6 to 32 lowercase letters and digits")
	}
	if !secretPattern.MatchString(secret) {
		return Token{}, fmt.Errorf("malformed join token: the secret must be 16 to 64 lowercase letters and digits")
	}
	t.ID, t.Secret = id, secret
	return t, nil
}

// HashSecret is what the ClusterRegistrationToken stores: "sha256$<hex>".
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hashAlgo + "$" + hex.EncodeToString(sum[:])
}

// VerifySecret compares a presented secret with a stored hash in constant time.
func VerifySecret(storedHash, secret string) bool {
	return subtle.ConstantTimeCompare([]byte(storedHash), []byte(HashSecret(secret))) == 1
}
