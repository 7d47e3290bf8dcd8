// Package rejoin is the rule by which an agent whose Machine a restored
// datastore does not know joins again by itself, with its certificate and
// its node password, and without a join token or an operator.
//
// A restore brings back the datastore as it was when the snapshot was
// taken (T). Machines that joined after T hold certificates the cluster CA
// signed (the CA is the same), bound to Machines the restored datastore has
// never seen. From the server's side such a certificate looks like one
// whose Machine was deleted, and a deletion is how an operator revokes a
// machine: it must never be undone by the machine itself. What tells the
// two apart is time. `datastore restore` writes a Record (Key) with the
// snapshot's time and its own: a certificate issued between the two was
// issued for a Machine the restore lost, since every Machine whose
// certificate was issued before T is in the snapshot unless it was deleted
// before T, and no certificate is issued while the datastore is being
// restored. Such a certificate may rejoin once (Claim): a second rejoin
// with it, after the rejoined Machine was deleted, is the revocation of a
// machine, and is refused.
package rejoin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Key is where `datastore restore` records the restore it made.
const Key = "/muster/restore"

// claimPrefix holds one key per machine certificate (by its Machine's
// UID) that has rejoined.
const claimPrefix = "/muster/rejoined/"

// Record is what a restore leaves in the datastore it wrote.
type Record struct {
	// SnapshotTaken is when the snapshot's read began: the datastore holds
	// every Machine created before it.
	SnapshotTaken time.Time `json:"snapshotTaken"`
	// Restored is when the restore wrote the datastore; no certificate
	// was issued between the crash and it.
	Restored time.Time `json:"restored"`
	// Revision is the snapshot's revision, for the operator.
	Revision int64 `json:"revision"`
}

// Admits says why a machine certificate issued at issued may not rejoin
// after this restore, or "" when it may. A certificate's times are whole
// seconds, so issued may be up to a second early.
func (r *Record) Admits(issued time.Time) string {
	switch {
	case r == nil:
		return "the datastore was not restored from a snapshot, so the Machine was deleted"
	case issued.IsZero():
		return "the request carries no certificate issue time"
	case !issued.Add(time.Second).After(r.SnapshotTaken):
		return fmt.Sprintf("the certificate was issued at %s, before the snapshot the datastore was restored from was taken (%s), so its Machine was deleted before the snapshot",
			issued.UTC().Format(time.RFC3339), r.SnapshotTaken.UTC().Format(time.RFC3339))
	case !issued.Before(r.Restored):
		return fmt.Sprintf("the certificate was issued at %s, after the restore (%s), so its Machine was deleted since",
			issued.UTC().Format(time.RFC3339), r.Restored.UTC().Format(time.RFC3339))
	}
	return ""
}

// Encode is the record as the restore writes it under Key.
func (r Record) Encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

// Store reads the record and claims rejoins, on the datastore behind a
// client.
type Store struct{ Client *clientv3.Client }

// Record reads the restore record; nil when the datastore was not restored.
func (s *Store) Record(ctx context.Context) (*Record, error) {
	resp, err := s.Client.Get(ctx, Key)
	if err != nil {
		return nil, fmt.Errorf("reading the restore record %s: %w", Key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	var r Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return nil, fmt.Errorf("the restore record %s is damaged (%v): machines that joined after the snapshot must join again with a join token", Key, err)
	}
	return &r, nil
}

// Claim records that the certificate bound to Machine UID uid rejoined as
// machine name; false when it has rejoined before. The create is the
// arbiter between servers: it succeeds for one request only.
func (s *Store) Claim(ctx context.Context, uid, name string) (bool, error) {
	key := claimPrefix + uid
	resp, err := s.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, name)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("recording the rejoin of machine %s: %w", name, err)
	}
	return resp.Succeeded, nil
}
