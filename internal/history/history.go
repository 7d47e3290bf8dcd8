// Package history keeps the full transition history of every lifecycle
// object (Cluster, ClusterRegistrationToken, ClusterRegistration, Machine)
// in the muster_transitions table beside kine's (migrations/), after the
// bounded status.transitions has rolled over and after the object is gone.
//
// Why it cannot miss a transition after a kill -9: the writer follows the
// datastore's own change feed (an etcd watch on kine), and records each
// batch of changes together with the revision it has read up to
// (muster_history_cursor) in one SQL transaction. A server killed at any
// point restarts from the last committed revision and reads the changes
// again, deletions included; each record is keyed by (uid, seq), the
// object's uid and the transition's number in its life, so what was already
// written is not written twice. Only when the feed was compacted past the
// cursor (kine keeps at least 1,000 revisions, compacting every 5 minutes)
// does it fall back to the objects as they are now, and says so.
//
// On PostgreSQL every server runs a writer but one at a time writes: an
// advisory lock, released when its holder's connection drops, hands the
// cursor to the next.
package history

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/muster-io/muster/internal/sqldialect"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Prefix is where the API keeps muster.io objects in the datastore.
const Prefix = "/registry/muster.io/"

// lifecycleKinds are the kinds with status.transitions.
var lifecycleKinds = map[string]bool{"Cluster": true, "ClusterRegistrationToken": true, "ClusterRegistration": true, "Machine": true}

// pgWriterLock is the advisory lock that elects the one writer.
const pgWriterLock = 0x6d7573746869 // "musthi"

// sqliteTime is how times are stored in SQLite (see migrations/).
const sqliteTime = "2006-01-02 15:04:05"

// Retention bounds the table; zero values keep everything.
type Retention struct {
	// MaxAge drops records older than this.
	MaxAge time.Duration
	// MaxRecords keeps only the newest this many records.
	MaxRecords int
}

// Writer copies transitions from the datastore's change feed into SQL.
type Writer struct {
	DB        *sql.DB
	Dialect   string // "sqlite" or "postgres"
	Client    *clientv3.Client
	Retention Retention
	// PruneEvery is how often retention is applied; zero for an hour.
	PruneEvery time.Duration
	// Read, if set, turns a stored value into the object's JSON: it
	// decrypts the kinds encrypted at rest (internal/encryption's Read).
	// Nil reads values as stored.
	Read func(ctx context.Context, key string, stored []byte) ([]byte, error)
}

// recordsOfKV returns the transitions of a stored object, decrypted first
// when it is encrypted at rest. A value that cannot be decrypted is an
// error: the server refused to start on one (internal/encryption), so it
// is a key removed while running, and the writer retries.
func (w *Writer) recordsOfKV(ctx context.Context, key string, value []byte, revision int64) ([]Record, error) {
	if w.Read != nil {
		var err error
		if value, err = w.Read(ctx, key, value); err != nil {
			return nil, err
		}
	}
	return recordsOf(value, revision), nil
}

// Record is one transition as stored, and as the history subresources
// serve it (internal/registry).
type Record struct {
	Kind     string    `json:"kind"`
	Name     string    `json:"name"`
	UID      string    `json:"uid"`
	Seq      int64     `json:"seq"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	Event    string    `json:"event"`
	Reason   string    `json:"reason,omitempty"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at"`
	Revision int64     `json:"revision"`
}

// stored is what the writer reads of a stored object (JSON, see
// internal/apiserver): its identity and its transitions.
type stored struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Transitions []struct {
			From   string    `json:"from"`
			To     string    `json:"to"`
			Event  string    `json:"event"`
			Reason string    `json:"reason"`
			Time   time.Time `json:"time"`
			Seq    int64     `json:"seq"`
			By     string    `json:"by"`
		} `json:"transitions"`
	} `json:"status"`
}

// recordsOf returns the transitions a stored object carries; none for a
// kind without a lifecycle or a value that is not one of ours.
func recordsOf(value []byte, revision int64) []Record {
	var o stored
	if err := json.Unmarshal(value, &o); err != nil || !lifecycleKinds[o.Kind] || o.Metadata.UID == "" {
		return nil
	}
	out := make([]Record, 0, len(o.Status.Transitions))
	for i, t := range o.Status.Transitions {
		seq := t.Seq
		if seq == 0 {
			// Written before transitions were numbered: by position, the
			// best identity there is.
			seq = int64(i) + 1
		}
		out = append(out, Record{Kind: o.Kind, Name: o.Metadata.Name, UID: o.Metadata.UID, Seq: seq,
			From: t.From, To: t.To, Event: t.Event, Reason: t.Reason, By: t.By, At: t.Time.UTC(), Revision: revision})
	}
	return out
}

// Run writes until ctx ends. Errors are retried with a pause: the history
// is worth keeping through a datastore outage.
func (w *Writer) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := w.run(ctx)
		if ctx.Err() != nil {
			return
		}
		klog.ErrorS(err, "Transition history writer stopped; restarting in 2s")
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

func (w *Writer) run(ctx context.Context) error {
	if w.Dialect == "postgres" {
		conn, err := w.DB.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		// Blocks while another server writes; its death releases the lock.
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pgWriterLock); err != nil {
			return fmt.Errorf("taking the history writer lock: %w", err)
		}
		defer conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, pgWriterLock) //nolint:errcheck
	}
	go w.prune(ctx)
	cursor, err := w.cursor(ctx)
	if err != nil {
		return err
	}
	if cursor == 0 {
		if cursor, err = w.catchUp(ctx, "first start"); err != nil {
			return err
		}
	}
	for {
		next, err := w.follow(ctx, cursor)
		if errors.Is(err, rpctypes.ErrCompacted) {
			klog.InfoS("The datastore compacted changes the transition history had not read yet; catching up from the objects as they are now. Transitions of objects deleted meanwhile may be missing", "cursor", cursor)
			if next, err = w.catchUp(ctx, "compacted"); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		cursor = next
	}
}

// catchUp records the transitions of every object as it is now and moves
// the cursor to that revision.
func (w *Writer) catchUp(ctx context.Context, why string) (int64, error) {
	resp, err := w.Client.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("reading the objects for the transition history: %w", err)
	}
	var recs []Record
	for _, kv := range resp.Kvs {
		got, err := w.recordsOfKV(ctx, string(kv.Key), kv.Value, kv.ModRevision)
		if err != nil {
			return 0, err
		}
		recs = append(recs, got...)
	}
	rev := resp.Header.Revision
	if err := w.write(ctx, recs, rev); err != nil {
		return 0, err
	}
	klog.InfoS("Transition history caught up", "why", why, "objects", len(resp.Kvs), "transitions", len(recs), "revision", rev)
	return rev, nil
}

// follow writes each batch of changes after cursor with the revision it
// reached, until the watch ends; it returns the last revision written.
func (w *Writer) follow(ctx context.Context, cursor int64) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range w.Client.Watch(wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(cursor+1)) {
		if err := resp.Err(); err != nil {
			return cursor, err
		}
		var recs []Record
		last := cursor
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				got, err := w.recordsOfKV(ctx, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
				if err != nil {
					return cursor, err
				}
				recs = append(recs, got...)
			}
			last = max(last, ev.Kv.ModRevision)
		}
		if last == cursor {
			continue
		}
		if err := w.write(ctx, recs, last); err != nil {
			return cursor, err
		}
		cursor = last
	}
	return cursor, ctx.Err()
}

func (w *Writer) cursor(ctx context.Context) (int64, error) { return Cursor(ctx, w.DB) }

// write inserts recs, skipping those already there, and moves the cursor
// to rev, in one transaction.
func (w *Writer) write(ctx context.Context, recs []Record, rev int64) error {
	tx, err := w.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	if len(recs) > 0 {
		stmt, err := tx.PrepareContext(ctx, w.rebind(`INSERT INTO muster_transitions
			(kind, name, uid, seq, from_phase, to_phase, event, reason, caused_by, at, revision)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid, seq) DO NOTHING`))
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, r := range recs {
			if _, err := stmt.ExecContext(ctx, r.Kind, r.Name, r.UID, r.Seq, r.From, r.To, r.Event, r.Reason, r.By, w.timeArg(r.At), r.Revision); err != nil {
				return fmt.Errorf("writing the transition history: %w", err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, w.rebind(`INSERT INTO muster_history_cursor (id, revision) VALUES (1, ?)
		ON CONFLICT (id) DO UPDATE SET revision = excluded.revision`), rev); err != nil {
		return fmt.Errorf("moving the transition history cursor: %w", err)
	}
	return tx.Commit()
}

func (w *Writer) prune(ctx context.Context) {
	every := w.PruneEvery
	if every == 0 {
		every = time.Hour
	}
	for {
		if err := Prune(ctx, w.DB, w.Dialect, w.Retention, time.Now()); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Applying the transition history retention")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// Prune applies the retention; it returns how many records it dropped.
func Prune(ctx context.Context, db *sql.DB, dialect string, r Retention, now time.Time) error {
	if r.MaxAge > 0 {
		if _, err := db.ExecContext(ctx, sqldialect.Rebind(dialect, `DELETE FROM muster_transitions WHERE at < ?`), timeArg(dialect, now.Add(-r.MaxAge))); err != nil {
			return err
		}
	}
	if r.MaxRecords > 0 {
		if _, err := db.ExecContext(ctx, sqldialect.Rebind(dialect, `DELETE FROM muster_transitions WHERE id <= (SELECT id FROM muster_transitions ORDER BY id DESC LIMIT 1 OFFSET ?)`), r.MaxRecords); err != nil {
			return err
		}
	}
	return nil
}

// Query is what `muster-server history` asks for.
type Query struct {
	Kind, Name   string
	Since, Until time.Time // zero: unbounded
	// Limit keeps the newest Limit records (still returned oldest first);
	// zero returns them all.
	Limit int
}

// Read returns the records of one object name (every object that had the
// name, deleted ones included), oldest first.
func Read(ctx context.Context, db *sql.DB, dialect string, q Query) ([]Record, error) {
	where := []string{"kind = ?", "name = ?"}
	args := []any{q.Kind, q.Name}
	if !q.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, timeArg(dialect, q.Since))
	}
	if !q.Until.IsZero() {
		where, args = append(where, "at <= ?"), append(args, timeArg(dialect, q.Until))
	}
	query := `SELECT kind, name, uid, seq, from_phase, to_phase, event, reason, caused_by, at, revision
		FROM muster_transitions WHERE ` + strings.Join(where, " AND ")
	if q.Limit > 0 {
		// The newest, put back in order below.
		query += ` ORDER BY at DESC, uid DESC, seq DESC LIMIT ` + strconv.Itoa(q.Limit)
	} else {
		query += ` ORDER BY at, uid, seq`
	}
	rows, err := db.QueryContext(ctx, sqldialect.Rebind(dialect, query), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the transition history: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var r Record
		var at any
		if err := rows.Scan(&r.Kind, &r.Name, &r.UID, &r.Seq, &r.From, &r.To, &r.Event, &r.Reason, &r.By, &at, &r.Revision); err != nil {
			return nil, err
		}
		r.At = scanAt(at)
		out = append(out, r)
	}
	if q.Limit > 0 {
		slices.Reverse(out)
	}
	return out, rows.Err()
}

func (w *Writer) rebind(q string) string  { return sqldialect.Rebind(w.Dialect, q) }
func (w *Writer) timeArg(t time.Time) any { return timeArg(w.Dialect, t) }

func timeArg(dialect string, t time.Time) any {
	if dialect == "sqlite" {
		return t.UTC().Format(sqliteTime)
	}
	return t.UTC()
}

// Print writes records as a table, oldest first.
func Print(w io.Writer, recs []Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tNAME\tUID\tSEQ\tFROM\tTO\tEVENT\tREASON\tBY")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.At.UTC().Format(time.RFC3339), r.Kind, r.Name, shortUID(r.UID), r.Seq,
			r.From, r.To, r.Event, dash(r.Reason), dash(r.By))
	}
	return tw.Flush()
}

func shortUID(uid string) string {
	if len(uid) > 8 {
		return uid[:8]
	}
	return uid
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Kinds maps what a user may type (kubectl's names) to a lifecycle kind.
var Kinds = map[string]string{
	"machine": "Machine", "machines": "Machine",
	"cluster": "Cluster", "clusters": "Cluster",
	"clusterregistration": "ClusterRegistration", "clusterregistrations": "ClusterRegistration", "registration": "ClusterRegistration",
	"clusterregistrationtoken": "ClusterRegistrationToken", "clusterregistrationtokens": "ClusterRegistrationToken", "token": "ClusterRegistrationToken",
}

// ParseObject reads KIND/NAME.
func ParseObject(arg string) (kind, name string, err error) {
	k, n, ok := strings.Cut(arg, "/")
	kind = Kinds[strings.ToLower(k)]
	if !ok || n == "" || kind == "" {
		return "", "", fmt.Errorf("%q is not KIND/NAME: give machine/NAME, cluster/NAME, clusterregistration/NAME or clusterregistrationtoken/NAME", arg)
	}
	return kind, n, nil
}
