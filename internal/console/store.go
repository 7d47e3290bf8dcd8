package console

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Where console tokens and sessions live in the datastore, beside the
// sealed cluster CA (/muster/bootstrap/ca): not API kinds, nothing any API
// client can list.
const (
	TokenKeyPrefix   = "/muster/console/tokens/"
	SessionKeyPrefix = "/muster/console/sessions/"
)

// Store keeps records (console tokens, sessions) by id.
type Store interface {
	Put(ctx context.Context, id string, r Record) error
	Get(ctx context.Context, id string) (Record, bool, error)
	Delete(ctx context.Context, id string) error
}

// EtcdStore keeps records as datastore keys under Prefix (kine or etcd),
// each on a lease that ends when the record expires, so the datastore
// forgets expired tokens and sessions by itself.
type EtcdStore struct {
	Client *clientv3.Client
	Prefix string
}

// Put implements Store.
func (e EtcdStore) Put(ctx context.Context, id string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ttl := int64(math.Ceil(time.Until(r.Expires).Seconds()))
	if ttl < 1 {
		return fmt.Errorf("the record expires at %s, already past; check the server's clock", r.Expires)
	}
	lease, err := e.Client.Grant(ctx, ttl)
	if err != nil {
		return err
	}
	// kine serves the apiserver's access pattern only: create-if-absent,
	// not a plain put (ids are random, so a clash is a bug, not a retry).
	key := e.Prefix + id
	resp, err := e.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease.ID))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("id %s already exists under %s; try again", id, e.Prefix)
	}
	return nil
}

// Get implements Store.
func (e EtcdStore) Get(ctx context.Context, id string) (Record, bool, error) {
	resp, err := e.Client.Get(ctx, e.Prefix+id)
	if err != nil || len(resp.Kvs) == 0 {
		return Record{}, false, err
	}
	var r Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return Record{}, false, fmt.Errorf("%s%s is corrupt in the datastore: %w", e.Prefix, id, err)
	}
	return r, true, nil
}

// Delete implements Store.
func (e EtcdStore) Delete(ctx context.Context, id string) error {
	key := e.Prefix + id
	resp, err := e.Client.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return err
	}
	// A compare-and-delete with a read on failure: the one delete form
	// kine serves (the apiserver's). Without the Else, kine refuses the
	// transaction as unsupported.
	_, err = e.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	return err
}
