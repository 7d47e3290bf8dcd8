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
// A restore writes every key into an empty datastore. The objects keep
// their names, uids, specs and statuses (transitions included); the sealed
// CA is the same, so the agents' certificates stay valid and they do not
// register again. Resource versions are the new datastore's, which clients
// handle as after any relist.
package snapshot

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/internal/atomicfile"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Format names the file format; a restore refuses any other.
const Format = "muster.io/datastore-snapshot/v1"

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
}

type entry struct {
	Key   string `json:"k"`
	Value []byte `json:"v"`
}

// Result says what a snapshot or restore did.
type Result struct {
	Header
	Bytes    int64
	Duration time.Duration
}

// Take writes every key of the datastore behind c, at one revision, to
// file (mode 0600), replacing it only once the new one is complete.
func Take(ctx context.Context, c *clientv3.Client, backend, file string) (Result, error) {
	start := time.Now()
	kvs, rev, err := list(ctx, c)
	if err != nil {
		return Result{}, fmt.Errorf("reading the datastore: %w", err)
	}
	h := Header{Format: Format, Revision: rev, Keys: len(kvs), Taken: time.Now().UTC(), Backend: backend}
	err = atomicfile.WriteFunc(file, 0o600, func(out io.Writer) error {
		w := bufio.NewWriterSize(out, 1<<20)
		enc := json.NewEncoder(w)
		if err := enc.Encode(h); err != nil {
			return err
		}
		for _, kv := range kvs {
			if err := enc.Encode(entry{Key: string(kv.Key), Value: kv.Value}); err != nil {
				return err
			}
		}
		return w.Flush()
	})
	if err != nil {
		return Result{}, fmt.Errorf("the snapshot: %w", err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return Result{}, err
	}
	return Result{Header: h, Bytes: fi.Size(), Duration: time.Since(start)}, nil
}

// Read parses a snapshot file.
func Read(file string) (Header, []entry, error) {
	f, err := os.Open(file)
	if err != nil {
		return Header{}, nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	var h Header
	if err := dec.Decode(&h); err != nil || h.Format != Format {
		return Header{}, nil, fmt.Errorf("%s is not a muster datastore snapshot (want format %s, first line: %v): give a file written by muster-server datastore snapshot", file, Format, errOr(err, h.Format))
	}
	var out []entry
	for {
		var e entry
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Header{}, nil, fmt.Errorf("%s is cut short or damaged after %d of %d keys: %w; take the snapshot again", file, len(out), h.Keys, err)
		}
		out = append(out, e)
	}
	if len(out) != h.Keys {
		return Header{}, nil, fmt.Errorf("%s holds %d keys, its header says %d: the file is incomplete; take the snapshot again", file, len(out), h.Keys)
	}
	return h, out, nil
}

func errOr(err error, format string) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("format %q", format)
}

// Restore writes a snapshot's keys into the empty datastore behind c. It
// refuses a datastore that holds any Muster key, so that nothing is mixed
// or overwritten.
func Restore(ctx context.Context, c *clientv3.Client, file string) (Result, error) {
	start := time.Now()
	h, entries, err := Read(file)
	if err != nil {
		return Result{}, err
	}
	have, err := count(ctx, c)
	if err != nil {
		return Result{}, fmt.Errorf("reading the target datastore: %w", err)
	}
	if have > 0 {
		return Result{}, fmt.Errorf("the target datastore is not empty (%d keys): restore only into an empty one (a new --data-dir for SQLite, a new database for PostgreSQL); nothing was written", have)
	}
	return write(ctx, c, h, entries, start)
}

// Copy copies every key from one datastore into another, empty one.
func Copy(ctx context.Context, from, to *clientv3.Client, backend string) (Result, error) {
	start := time.Now()
	kvs, rev, err := list(ctx, from)
	if err != nil {
		return Result{}, fmt.Errorf("reading the source datastore: %w", err)
	}
	have, err := count(ctx, to)
	if err != nil {
		return Result{}, fmt.Errorf("reading the target datastore: %w", err)
	}
	if have > 0 {
		return Result{}, fmt.Errorf("the target datastore is not empty (%d keys): migrate only into an empty one; nothing was written", have)
	}
	entries := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		entries = append(entries, entry{Key: string(kv.Key), Value: kv.Value})
	}
	h := Header{Format: Format, Revision: rev, Keys: len(entries), Taken: time.Now().UTC(), Backend: backend}
	return write(ctx, to, h, entries, start)
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
			for !done.Load() {
				r, err := c.Put(ctx, key, "")
				if err != nil {
					errs <- err
					return
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
func write(ctx context.Context, c *clientv3.Client, h Header, entries []entry, start time.Time) (Result, error) {
	if err := raiseRevision(ctx, c, h.Revision); err != nil {
		return Result{}, err
	}
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
