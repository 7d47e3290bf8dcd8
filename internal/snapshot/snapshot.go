// Package snapshot copies every Muster key of a datastore (the API's
// objects and the sealed bootstrap data under /muster/) to a file and back,
// between SQLite, PostgreSQL and etcd alike: `muster-server datastore
// snapshot|restore|migrate`, and the server's scheduled snapshots.
//
// A snapshot is one range read, so every key is at one revision: the
// datastore as it was at that instant, taken while servers run. The file
// is JSON lines: a header, then one line per key. It holds the sealed CA,
// which only the server token opens, and every object, so it is written
// with mode 0600, to a temporary name first and renamed when complete.
//
// The transition history table (muster_transitions, on SQL datastores)
// comes along: its rows up to the snapshot's revision follow the keys in
// the file, and a restore or migrate writes them with their ids into the
// new datastore's table, which the new servers' writer then carries on.
// The file ends with a SHA-256 over every line (format.go).
//
// A restore writes every key into an empty datastore. The objects keep
// their names, uids, specs and statuses (transitions included); the sealed
// CA is the same, so the agents' certificates stay valid and they do not
// register again. Resource versions are the new datastore's, which clients
// handle as after any relist.
package snapshot

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/internal/atomicfile"
	"github.com/muster-io/muster/internal/history"
	"github.com/muster-io/muster/internal/rejoin"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// prefixes hold every key Muster writes: the API's objects and the
// bootstrap data. Kine's own keys (its health check, its compaction mark)
// stay out: each datastore has its own.
var prefixes = []string{"/registry/muster.io/", "/muster/"}

// list reads every Muster key at one revision: the first read fixes the
// revision, the others read at it.
func list(ctx context.Context, c *clientv3.Client) ([]*mvccpb.KeyValue, int64, error) {
	var kvs []*mvccpb.KeyValue
	var rev int64
	for _, p := range prefixes {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.Get(ctx, p, opts...)
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		kvs = append(kvs, resp.Kvs...)
	}
	return kvs, rev, nil
}

// count is how many Muster keys a datastore holds.
func count(ctx context.Context, c *clientv3.Client) (int64, error) {
	var n int64
	for _, p := range prefixes {
		resp, err := c.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		n += resp.Count
	}
	return n, nil
}

// Header is the first line of a snapshot file.
type Header struct {
	Format   string    `json:"format"`
	Revision int64     `json:"revision"`
	Keys     int       `json:"keys"`
	Taken    time.Time `json:"taken"`
	// Backend is the datastore it was taken from: sqlite, postgres or etcd.
	Backend string `json:"backend"`
	// HistoryRows is how many transition history rows follow the keys.
	HistoryRows int `json:"history,omitempty"`
	// Deployment is whose datastore it is; nil when the command that took
	// it had no data dir with the deployment's CA.
	Deployment *Deployment `json:"deployment,omitempty"`
}

// Option adds to what Take, Restore and Copy do.
type Option func(*options)

type options struct {
	fromDB, toDB           *sql.DB
	fromDialect, toDialect string
	deployment             *Deployment
}

// HistoryFrom reads the transition history from db, the SQL database of
// the datastore a snapshot or migrate reads (nil on etcd: none).
func HistoryFrom(db *sql.DB, dialect string) Option {
	return func(o *options) { o.fromDB, o.fromDialect = db, dialect }
}

// HistoryTo writes the transition history into db, the SQL database of
// the datastore a restore or migrate writes (nil on etcd: none).
func HistoryTo(db *sql.DB, dialect string) Option {
	return func(o *options) { o.toDB, o.toDialect = db, dialect }
}

// Of records the deployment a snapshot is taken of: the SHA-256 of its CA
// certificate (pki.Hash), "" when unknown.
func Of(caHash string) Option {
	return func(o *options) {
		if caHash != "" {
			o.deployment = &Deployment{CA: caHash}
		}
	}
}

func optionsOf(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// maxUnrecordedCheck bounds how many objects written after a stopped
// history writer's cursor a snapshot checks one by one.
const maxUnrecordedCheck = 2000

// historyBatch is how many history rows a migrate reads and writes at a time.
const historyBatch = 1000

// Result says what a snapshot or restore did.
type Result struct {
	Header
	Bytes    int64
	Duration time.Duration
	// HistoryBehind is the revision the source's history writer had read
	// up to when objects written after it carry transitions the table
	// does not hold (its server stopped before it caught up), and
	// HistoryUnrecorded how many (minus the number of objects written
	// after it, when too many to check); zero when it was not behind.
	HistoryBehind     int64
	HistoryUnrecorded int
}

// Take writes every key of the datastore behind c, at one revision, to
// file (mode 0600), replacing it only once the new one is complete.
//
// With HistoryFrom, the transition history rows up to the snapshot's
// revision follow the keys.
func Take(ctx context.Context, c *clientv3.Client, backend, file string, opts ...Option) (Result, error) {
	// Taken is when the read began: every Machine created before it is in
	// the snapshot, which the rejoin after a restore relies on.
	start := time.Now()
	o := optionsOf(opts)
	kvs, rev, err := list(ctx, c)
	if err != nil {
		return Result{}, fmt.Errorf("reading the datastore: %w", err)
	}
	var rows []history.Row
	var behind int64
	var unrecorded int
	if o.fromDB != nil {
		if behind, unrecorded, err = waitHistory(ctx, o.fromDB, o.fromDialect, kvs); err != nil {
			return Result{}, err
		}
		if rows, err = allRows(ctx, o.fromDB, o.fromDialect, rev); err != nil {
			return Result{}, err
		}
	}
	h := Header{Format: Format, Revision: rev, Keys: len(kvs), Taken: start.UTC(), Backend: backend, HistoryRows: len(rows), Deployment: o.deployment}
	entries := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		entries = append(entries, entry{Key: string(kv.Key), Value: kv.Value})
	}
	err = atomicfile.WriteFunc(file, 0o600, func(out io.Writer) error { return encode(out, h, entries, rows) })
	if err != nil {
		return Result{}, fmt.Errorf("the snapshot: %w", err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return Result{}, err
	}
	return Result{Header: h, Bytes: fi.Size(), Duration: time.Since(start), HistoryBehind: behind, HistoryUnrecorded: unrecorded}, nil
}

// waitHistory gives a running server's history writer the moment it needs
// to read the changes up to the newest of the snapshot's objects, so that
// the history taken is complete up to the snapshot. When the writer stays
// behind (it is not running: its server stopped before it caught up), it
// returns the writer's cursor and how many transitions of the objects
// written after it the table lacks, if any; those are still in the
// objects' status.transitions, which the new datastore's writer reads.
func waitHistory(ctx context.Context, db *sql.DB, dialect string, kvs []*mvccpb.KeyValue) (int64, int, error) {
	var newest int64
	for _, kv := range kvs {
		if strings.HasPrefix(string(kv.Key), history.Prefix) {
			newest = max(newest, kv.ModRevision)
		}
	}
	last, moved := int64(-1), time.Now()
	for {
		cur, err := history.Cursor(ctx, db)
		if err != nil {
			return 0, 0, fmt.Errorf("reading the transition history's cursor: %w", err)
		}
		if cur >= newest || cur == 0 {
			// Caught up; or no writer ever ran here (--transition-history
			// off): nothing to wait for, the new datastore's writer
			// starts from the objects.
			return 0, 0, nil
		}
		if cur != last {
			last, moved = cur, time.Now()
		}
		if time.Since(moved) > 2*time.Second {
			// Only what the objects written since carry matters: most
			// writes (status, Events) are no transition.
			var after [][]byte
			for _, kv := range kvs {
				if kv.ModRevision > cur && strings.HasPrefix(string(kv.Key), history.Prefix) {
					after = append(after, kv.Value)
				}
			}
			if len(after) > maxUnrecordedCheck {
				// A writer long stopped (turned off since): counting
				// would cost a query per transition; say how many
				// objects instead.
				return cur, -len(after), nil
			}
			n, err := history.Unrecorded(ctx, db, dialect, after)
			if err != nil || n == 0 {
				return 0, 0, err
			}
			return cur, n, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// allRows reads every history row up to revision rev, in batches.
func allRows(ctx context.Context, db *sql.DB, dialect string, rev int64) ([]history.Row, error) {
	var out []history.Row
	err := eachBatch(ctx, db, dialect, rev, func(b []history.Row) error {
		out = append(out, b...)
		return nil
	})
	return out, err
}

func eachBatch(ctx context.Context, db *sql.DB, dialect string, rev int64, f func([]history.Row) error) error {
	var after int64
	for {
		b, err := history.Rows(ctx, db, dialect, after, rev, historyBatch)
		if err != nil {
			return err
		}
		if len(b) == 0 {
			return nil
		}
		if err := f(b); err != nil {
			return err
		}
		after = b[len(b)-1].ID
	}
}

// Read parses and checks a snapshot file (Load) and returns its header
// and keys.
func Read(file string) (Header, []entry, error) {
	c, err := Load(file)
	if err != nil {
		return Header{}, nil, err
	}
	return c.Header, c.Entries, nil
}

// Restore writes a snapshot's keys into the empty datastore behind c. It
// refuses a datastore that holds any Muster key, so that nothing is mixed
// or overwritten.
//
// With HistoryTo, the snapshot's transition history rows go into the
// target's table, which must be empty too.
func Restore(ctx context.Context, c *clientv3.Client, file string, opts ...Option) (Result, error) {
	start := time.Now()
	snap, err := Load(file)
	if err != nil {
		return Result{}, err
	}
	return restore(ctx, c, snap, start, opts)
}

// RestoreLoaded is Restore of a snapshot already read and checked by Load.
func RestoreLoaded(ctx context.Context, c *clientv3.Client, snap *Contents, opts ...Option) (Result, error) {
	return restore(ctx, c, snap, time.Now(), opts)
}

func restore(ctx context.Context, c *clientv3.Client, snap *Contents, start time.Time, opts []Option) (Result, error) {
	o := optionsOf(opts)
	if err := empty(ctx, c, o.toDB, "restore only into an empty one (a new --data-dir for SQLite, a new database for PostgreSQL)"); err != nil {
		return Result{}, err
	}
	load := func(ctx context.Context) (int, error) {
		if o.toDB == nil {
			return 0, nil
		}
		for i := 0; i < len(snap.History); i += historyBatch {
			if err := history.Load(ctx, o.toDB, o.toDialect, snap.History[i:min(i+historyBatch, len(snap.History))]); err != nil {
				return 0, err
			}
		}
		return len(snap.History), history.Loaded(ctx, o.toDB, o.toDialect)
	}
	return write(ctx, c, snap.Header, withRestoreRecord(snap, start), load, start)
}

// withRestoreRecord is the snapshot's keys with the record of this restore
// in place of any earlier one (a snapshot of a datastore restored before):
// the servers read it to let the machines that joined after the snapshot
// rejoin by themselves (internal/rejoin).
func withRestoreRecord(snap *Contents, at time.Time) []entry {
	out := make([]entry, 0, len(snap.Entries)+1)
	for _, e := range snap.Entries {
		if e.Key != rejoin.Key {
			out = append(out, e)
		}
	}
	rec := rejoin.Record{SnapshotTaken: snap.Taken, Restored: at.UTC(), Revision: snap.Revision}
	return append(out, entry{Key: rejoin.Key, Value: rec.Encode()})
}

// empty refuses a target datastore that holds any Muster key or any
// transition history row, so that nothing is mixed or overwritten.
func empty(ctx context.Context, c *clientv3.Client, db *sql.DB, what string) error {
	have, err := count(ctx, c)
	if err != nil {
		return fmt.Errorf("reading the target datastore: %w", err)
	}
	if have > 0 {
		return fmt.Errorf("the target datastore is not empty (%d keys): %s; nothing was written", have, what)
	}
	if db != nil {
		n, err := history.Count(ctx, db)
		if err != nil {
			return fmt.Errorf("reading the target datastore: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("the target datastore is not empty (no keys, but %d transition history rows in muster_transitions): %s; nothing was written", n, what)
		}
	}
	return nil
}

// Copy copies every key from one datastore into another, empty one.
// With HistoryFrom and HistoryTo, the transition history rows up to the
// copy's revision go along, historyBatch rows per read and per
// transaction.
func Copy(ctx context.Context, from, to *clientv3.Client, backend string, opts ...Option) (Result, error) {
	start := time.Now()
	o := optionsOf(opts)
	kvs, rev, err := list(ctx, from)
	if err != nil {
		return Result{}, fmt.Errorf("reading the source datastore: %w", err)
	}
	if err := empty(ctx, to, o.toDB, "migrate only into an empty one"); err != nil {
		return Result{}, err
	}
	var behind int64
	var unrecorded int
	if o.fromDB != nil {
		if behind, unrecorded, err = waitHistory(ctx, o.fromDB, o.fromDialect, kvs); err != nil {
			return Result{}, err
		}
	}
	entries := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		entries = append(entries, entry{Key: string(kv.Key), Value: kv.Value})
	}
	h := Header{Format: Format, Revision: rev, Keys: len(entries), Taken: time.Now().UTC(), Backend: backend}
	load := func(ctx context.Context) (int, error) {
		if o.fromDB == nil || o.toDB == nil {
			return 0, nil
		}
		n := 0
		err := eachBatch(ctx, o.fromDB, o.fromDialect, rev, func(b []history.Row) error {
			n += len(b)
			return history.Load(ctx, o.toDB, o.toDialect, b)
		})
		if err != nil {
			return 0, err
		}
		return n, history.Loaded(ctx, o.toDB, o.toDialect)
	}
	res, err := write(ctx, to, h, entries, load, start)
	res.HistoryBehind, res.HistoryUnrecorded = behind, unrecorded
	return res, err
}

// floorKey prefixes the keys written over and over to raise a new
// datastore's revision.
const floorKey = "/muster-restore/revision-floor"

// raiseRevision brings the target's revision past the source's before
// anything is written. Agents and controllers hold resource versions of
// the old datastore; on one whose revisions are lower, their watches would
// ask for a future revision and wait for it instead of receiving changes.
// Revisions are the datastore's own, so the only portable way up is
// writes. Each worker rewrites a key of its own: kine drops a put that
// races another put of the same key without an error, so one shared key
// raised the revision by far less than the puts sent. The loop goes on
// until the datastore says its revision is past floor.
func raiseRevision(ctx context.Context, c *clientv3.Client, floor int64) error {
	resp, err := c.Get(ctx, floorKey, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("reading the target datastore's revision: %w", err)
	}
	if resp.Header.Revision > floor {
		return nil
	}
	const workers = 8
	errs := make(chan error, workers)
	var done atomic.Bool
	for w := range workers {
		go func() {
			key := fmt.Sprintf("%s/%d", floorKey, w)
			// A compare-and-swap on the key's revision, as the apiserver
			// writes, not a plain put: kine's put reads the key back after
			// a failed create and dereferences nil when that read misses
			// it (kine v0.17.5 pkg/server/put.go), which killed a restore
			// into PostgreSQL.
			var modRev int64 // 0: the key does not exist yet
			for !done.Load() {
				r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
					Then(clientv3.OpPut(key, "")).Else(clientv3.OpGet(key)).Commit()
				if err != nil {
					errs <- err
					return
				}
				switch {
				case r.Succeeded:
					modRev = r.Header.Revision
				case len(r.Responses) > 0 && len(r.Responses[0].GetResponseRange().GetKvs()) > 0:
					modRev = r.Responses[0].GetResponseRange().GetKvs()[0].ModRevision
				default:
					modRev = 0
				}
				if r.Header.Revision > floor {
					done.Store(true)
				}
			}
			errs <- nil
		}()
	}
	var firstErr error
	for range workers {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
			done.Store(true)
		}
	}
	if firstErr != nil {
		return fmt.Errorf("raising the target datastore's revision past %d: %w", floor, firstErr)
	}
	// kine deletes only in a transaction that names the revision.
	got, err := c.Get(ctx, floorKey, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	for _, kv := range got.Kvs {
		if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).Then(clientv3.OpDelete(string(kv.Key))).Else(clientv3.OpGet(string(kv.Key))).Commit(); err != nil {
			return err
		}
	}
	return nil
}

// write creates every key, a few transactions at a time; each is a
// create-if-absent, so a restore racing a server that started on the same
// datastore fails instead of overwriting.
//
// The history rows go in first (load): a server started on the target
// before the keys are in would otherwise have its writer take ids the
// rows need.
func write(ctx context.Context, c *clientv3.Client, h Header, entries []entry, load func(context.Context) (int, error), start time.Time) (Result, error) {
	if err := raiseRevision(ctx, c, h.Revision); err != nil {
		return Result{}, err
	}
	rows, err := load(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("restoring the transition history: %w", err)
	}
	h.HistoryRows = rows
	// The bootstrap data last: a server started too early then finds no
	// sealed CA and no objects, rather than a CA and half the objects.
	sort.SliceStable(entries, func(i, j int) bool {
		return !strings.HasPrefix(entries[i].Key, "/muster/") && strings.HasPrefix(entries[j].Key, "/muster/")
	})
	const workers = 8
	errs := make(chan error, workers)
	next := make(chan entry)
	for range workers {
		go func() {
			for e := range next {
				resp, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(e.Key), "=", 0)).Then(clientv3.OpPut(e.Key, string(e.Value))).Commit()
				if err == nil && !resp.Succeeded {
					err = fmt.Errorf("key %s appeared in the target datastore during the restore: is a server running on it?", e.Key)
				}
				if err != nil {
					errs <- err
					for range next {
					}
					return
				}
			}
			errs <- nil
		}()
	}
	var firstErr error
	sent := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Key, "/muster/") && sent > 0 {
			break
		}
		next <- e
		sent++
	}
	close(next)
	for range workers {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return Result{}, fmt.Errorf("restoring: %w", firstErr)
	}
	// Then the bootstrap data, once every object is in.
	for _, e := range entries[sent:] {
		if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(e.Key), "=", 0)).Then(clientv3.OpPut(e.Key, string(e.Value))).Commit(); err != nil {
			return Result{}, fmt.Errorf("restoring %s: %w", e.Key, err)
		}
	}
	return Result{Header: h, Duration: time.Since(start)}, nil
}

// entry is one key of a snapshot.
type entry struct {
	Key   string
	Value []byte
}
