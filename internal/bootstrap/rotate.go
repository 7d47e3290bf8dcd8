package bootstrap

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
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
