// Package console is the web console muster-server serves at /console/:
// embedded static assets, console tokens (minted by `muster-server
// console-token`, stored only as hashes in the datastore), browser sessions
// (a cookie whose secret's hash the datastore keeps, shared by HA servers)
// and
// the authenticator that turns such a session into an API identity, only
// for requests that carry the X-Muster-Console header (the CSRF guard).
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/muster-io/muster/internal/jointoken"
)

// TokenPrefix starts every console token, so that one pasted in the wrong
// place (a join, a kubeconfig) is recognisable.
const TokenPrefix = "mct_"

// MaxTTL bounds a console token's life (and so every session's).
const MaxTTL = 7 * 24 * time.Hour

// Record is what the datastore keeps of a console token or a browser
// session: the hash of its secret, never the secret, and the identity it
// signs in as.
type Record struct {
	SecretHash string    `json:"secretHash"`
	User       string    `json:"user"`
	Groups     []string  `json:"groups,omitempty"`
	Expires    time.Time `json:"expires"`
}

// Token is a minted console token: id and secret.
type Token struct{ ID, Secret string }

func (t Token) String() string { return TokenPrefix + t.ID + "." + t.Secret }

// ParseToken splits "mct_<id>.<secret>".
func ParseToken(s string) (Token, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), TokenPrefix)
	id, secret, found := strings.Cut(rest, ".")
	if !ok || !found || !isHex(id, 16) || !isHex(secret, 64) {
		return Token{}, errors.New("not a console token: it looks like mct_<16 hex>.<64 hex>; mint one with 'muster-server console-token --user NAME --group GROUP'")
	}
	return Token{ID: id, Secret: secret}, nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b)
}

// Mint creates a console token for user and groups that expires after ttl,
// stores its hash, and returns the token (shown once, kept nowhere).
func Mint(ctx context.Context, store Store, user string, groups []string, ttl time.Duration, now time.Time) (Token, time.Time, error) {
	if strings.TrimSpace(user) == "" {
		return Token{}, time.Time{}, errors.New("a console token needs a user: give --user NAME")
	}
	if ttl <= 0 || ttl > MaxTTL {
		return Token{}, time.Time{}, fmt.Errorf("--ttl %s is out of range: give a duration between 1s and %s", ttl, MaxTTL)
	}
	t := Token{ID: randomHex(8), Secret: randomHex(32)}
	exp := now.Add(ttl).UTC().Truncate(time.Second)
	if err := store.Put(ctx, t.ID, Record{SecretHash: jointoken.HashSecret(t.Secret), User: user, Groups: groups, Expires: exp}); err != nil {
		return Token{}, time.Time{}, fmt.Errorf("storing the console token: %w", err)
	}
	return t, exp, nil
}

// ErrBadToken is the one answer to a wrong, unknown or expired token, so
// that the answer tells nothing about which ids exist.
var ErrBadToken = errors.New("the console token is wrong or has expired: ask an administrator for a new one ('muster-server console-token')")

// Check verifies a presented token and returns its record.
func Check(ctx context.Context, store Store, presented string, now time.Time) (Record, error) {
	t, err := ParseToken(presented)
	if err != nil {
		return Record{}, err
	}
	r, ok, err := store.Get(ctx, t.ID)
	if err != nil {
		return Record{}, fmt.Errorf("reading console tokens from the datastore: %w; retry in a few seconds", err)
	}
	hash := r.SecretHash
	if !ok {
		hash = jointoken.HashSecret(randomHex(32)) // same work on a miss
	}
	if !jointoken.VerifySecret(hash, t.Secret) || !ok {
		return Record{}, ErrBadToken
	}
	if !now.Before(r.Expires) {
		_ = store.Delete(ctx, t.ID)
		return Record{}, ErrBadToken
	}
	return r, nil
}
