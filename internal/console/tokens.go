// Package console is the web console muster-server serves at /console/:
// embedded static assets, console tokens (minted by `muster-server
// console-token`, stored only as hashes in the datastore), browser sessions
// (an opaque cookie mapped in memory to a user, groups and an expiry) and
// the authenticator that turns such a session into an API identity, only
// for requests that carry the X-Muster-Console header (the CSRF guard).
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/muster-io/muster/internal/jointoken"
)

// TokenPrefix starts every console token, so that one pasted in the wrong
// place (a join, a kubeconfig) is recognisable.
const TokenPrefix = "mct_"

// tokenKeyPrefix is where console tokens live in the datastore, beside the
// sealed cluster CA (/muster/bootstrap/ca): not an API kind, nothing any
// API client can list.
const tokenKeyPrefix = "/muster/console/tokens/"

// MaxTTL bounds a console token's life (and so every session's).
const MaxTTL = 7 * 24 * time.Hour

// Record is what the datastore keeps of a console token: the hash of its
// secret, never the secret, and the identity it signs in as.
type Record struct {
	SecretHash string    `json:"secretHash"`
	User       string    `json:"user"`
	Groups     []string  `json:"groups,omitempty"`
	Expires    time.Time `json:"expires"`
}

// TokenStore keeps console token records by id.
type TokenStore interface {
	Put(ctx context.Context, id string, r Record) error
	Get(ctx context.Context, id string) (Record, bool, error)
	Delete(ctx context.Context, id string) error
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
func Mint(ctx context.Context, store TokenStore, user string, groups []string, ttl time.Duration, now time.Time) (Token, time.Time, error) {
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
func Check(ctx context.Context, store TokenStore, presented string, now time.Time) (Record, error) {
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

// EtcdTokens keeps console tokens as datastore keys (kine or etcd).
type EtcdTokens struct{ Client *clientv3.Client }

// Put implements TokenStore.
func (e EtcdTokens) Put(ctx context.Context, id string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	// kine serves the apiserver's access pattern only: create-if-absent,
	// not a plain put (ids are random, so a clash is a bug, not a retry).
	key := tokenKeyPrefix + id
	resp, err := e.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("console token id %s already exists; mint again", id)
	}
	return nil
}

// Get implements TokenStore.
func (e EtcdTokens) Get(ctx context.Context, id string) (Record, bool, error) {
	resp, err := e.Client.Get(ctx, tokenKeyPrefix+id)
	if err != nil || len(resp.Kvs) == 0 {
		return Record{}, false, err
	}
	var r Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return Record{}, false, fmt.Errorf("console token %s is corrupt in the datastore: %w", id, err)
	}
	return r, true, nil
}

// Delete implements TokenStore.
func (e EtcdTokens) Delete(ctx context.Context, id string) error {
	key := tokenKeyPrefix + id
	resp, err := e.Client.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return err
	}
	// A compare-and-delete, as kine has no plain delete.
	_, err = e.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	return err
}
