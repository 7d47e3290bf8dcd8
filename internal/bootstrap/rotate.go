package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/muster-io/muster/internal/pki"
)

// RotateStored re-seals the cluster CA stored in the datastore (SharedCAKey)
// from the current server token to next ('muster-server token rotate').
// It writes only over the blob it read, in one compare-and-swap, so that a
// concurrent rotation loses rather than being overwritten. resealed is
// false, and nothing is written, when the datastore is already sealed with
// next: the command ran on another server of the deployment first. current
// is needed only when there is something to re-seal.
func RotateStored(ctx context.Context, kv clientv3.KV, current, next string) (resealed bool, err error) {
	resp, err := kv.Get(ctx, SharedCAKey)
	if err != nil {
		return false, fmt.Errorf("reading the sealed cluster CA: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return false, errors.New("the datastore holds no sealed cluster CA: start muster-server on it once first")
	}
	stored := resp.Kvs[0]
	if _, err := OpenCA(next, stored.Value); err == nil {
		return false, nil
	}
	if current == "" {
		return false, errors.New("no current server token: give it with --token-file, or --data-dir of a server that has it")
	}
	blob, err := Reseal(current, next, stored.Value)
	if errors.Is(err, ErrWrongToken) {
		return false, errors.New("the current token (from --token-file or the data dir) does not open the datastore's sealed CA: give the token the servers run with; nothing was changed")
	}
	if err != nil {
		return false, err
	}
	txn, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(SharedCAKey), "=", stored.ModRevision)).
		Then(clientv3.OpPut(SharedCAKey, string(blob))).
		Else(clientv3.OpGet(SharedCAKey)).Commit()
	if err != nil {
		return false, fmt.Errorf("storing the re-sealed CA: %w", err)
	}
	if !txn.Succeeded {
		return false, errors.New("the sealed CA changed while it was re-sealed (another rotation?): run the command again; nothing was changed")
	}
	return true, nil
}

// ErrNotStaged is RetireCA's answer when no CA rotation is under way.
var ErrNotStaged = errors.New("no CA rotation is under way (nothing to retire): start one with 'muster-server certificate rotate-ca'")

// RotateCA stages a new cluster CA in the datastore ('muster-server
// certificate rotate-ca'): the record's CA becomes a new one, which signs
// every certificate from the servers' next start, and the current one is
// kept as the retiring CA, still trusted, until RetireCA. It returns the
// SHA-256 of the new CA. A rotation already under way is refused: two
// retiring CAs would leave agents that hold only the oldest behind.
func RotateCA(ctx context.Context, kv clientv3.KV, token string) (string, error) {
	return updateShared(ctx, kv, token, func(shared *SharedCA) (*SharedCA, error) {
		if shared.Retiring != nil {
			return nil, fmt.Errorf("a CA rotation is already under way (new CA sha256 %s, retiring %s): finish it with 'muster-server certificate rotate-ca --retire' before starting another; nothing was changed",
				pki.Hash(shared.CertPEM), pki.Hash(shared.Retiring.CertPEM))
		}
		ca, err := pki.NewCA(fmt.Sprintf("muster-ca@%d", time.Now().Unix()))
		if err != nil {
			return nil, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		return &SharedCA{CertPEM: ca.CertPEM, KeyPEM: keyPEM, Retiring: &RetiringCA{CertPEM: shared.CertPEM, KeyPEM: shared.KeyPEM}}, nil
	})
}

// RetireCA ends a CA rotation: the retiring CA is dropped from the record,
// so that servers, from their next start, trust only the new one. It
// returns the SHA-256 of the CA retired.
func RetireCA(ctx context.Context, kv clientv3.KV, token string) (string, error) {
	return updateShared(ctx, kv, token, func(shared *SharedCA) (*SharedCA, error) {
		if shared.Retiring == nil {
			return nil, ErrNotStaged
		}
		return &SharedCA{CertPEM: shared.CertPEM, KeyPEM: shared.KeyPEM}, nil
	})
}

// StoredCA opens the datastore's sealed CA record.
func StoredCA(ctx context.Context, kv clientv3.KV, token string) (*SharedCA, error) {
	resp, err := kv.Get(ctx, SharedCAKey)
	if err != nil {
		return nil, fmt.Errorf("reading the sealed cluster CA: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, errors.New("the datastore holds no sealed cluster CA: start muster-server on it once first")
	}
	shared, err := OpenCA(token, resp.Kvs[0].Value)
	if errors.Is(err, ErrWrongToken) {
		return nil, errors.New("the server token (from --token-file or the data dir) does not open the datastore's sealed CA: give the token the servers run with; nothing was changed")
	}
	return shared, err
}

// updateShared rewrites the sealed record with change's answer, in one
// compare-and-swap over the blob it read. It returns the hash of the CA
// the change touched (the new one, or the one retired).
func updateShared(ctx context.Context, kv clientv3.KV, token string, change func(*SharedCA) (*SharedCA, error)) (string, error) {
	if token == "" {
		return "", errors.New("no server token: give it with --token-file, or --data-dir of a server that has it")
	}
	resp, err := kv.Get(ctx, SharedCAKey)
	if err != nil {
		return "", fmt.Errorf("reading the sealed cluster CA: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", errors.New("the datastore holds no sealed cluster CA: start muster-server on it once first")
	}
	stored := resp.Kvs[0]
	shared, err := StoredCA(ctx, kv, token)
	if err != nil {
		return "", err
	}
	next, err := change(shared)
	if err != nil {
		return "", err
	}
	blob, err := SealShared(token, next)
	if err != nil {
		return "", err
	}
	txn, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(SharedCAKey), "=", stored.ModRevision)).
		Then(clientv3.OpPut(SharedCAKey, string(blob))).
		// kine serves only this shape of transaction (with an Else).
		Else(clientv3.OpGet(SharedCAKey)).Commit()
	if err != nil {
		return "", fmt.Errorf("storing the sealed CA: %w", err)
	}
	if !txn.Succeeded {
		return "", errors.New("the sealed CA changed while it was rewritten (another rotation?): run the command again; nothing was changed")
	}
	if next.Retiring == nil {
		return pki.Hash(shared.Retiring.CertPEM), nil
	}
	return pki.Hash(next.CertPEM), nil
}
