package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/muster-io/muster/internal/sqldialect"
)

// Row is one record of the table with its id. A snapshot, restore or
// migrate keeps ids, so the new table's insertion order, and hence which
// records --history-max-records keeps, is the old one's.
type Row struct {
	ID int64 `json:"id"`
	Record
}

// Rows returns up to limit rows with an id above after, by id; with
// maxRevision above zero, only records read from datastore revisions up
// to it (a snapshot at revision R holds the history up to R: a record of
// a later write would collide with the transition the restored object
// makes next, which has the same seq).
func Rows(ctx context.Context, db *sql.DB, dialect string, after, maxRevision int64, limit int) ([]Row, error) {
	q := `SELECT id, kind, name, uid, seq, from_phase, to_phase, event, reason, caused_by, at, revision
		FROM muster_transitions WHERE id > ?`
	args := []any{after}
	if maxRevision > 0 {
		q += ` AND revision <= ?`
		args = append(args, maxRevision)
	}
	q += ` ORDER BY id LIMIT ?`
	args = append(args, limit)
	rows, err := db.QueryContext(ctx, sqldialect.Rebind(dialect, q), args...)
	if err != nil {
		return nil, fmt.Errorf("reading the transition history: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var at any
		if err := rows.Scan(&r.ID, &r.Kind, &r.Name, &r.UID, &r.Seq, &r.From, &r.To, &r.Event, &r.Reason, &r.By, &at, &r.Revision); err != nil {
			return nil, err
		}
		r.At = scanAt(at)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Count is how many records the table holds.
func Count(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM muster_transitions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting the transition history: %w", err)
	}
	return n, nil
}

// Cursor is the datastore revision the writer has read up to; zero when
// it has not run.
func Cursor(ctx context.Context, db *sql.DB) (int64, error) {
	var rev int64
	err := db.QueryRowContext(ctx, `SELECT revision FROM muster_history_cursor WHERE id = 1`).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return rev, err
}

// Load inserts rows with their ids, in one transaction. A row whose id or
// (uid, seq) is already there is left as it is.
func Load(ctx context.Context, db *sql.DB, dialect string, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	stmt, err := tx.PrepareContext(ctx, sqldialect.Rebind(dialect, `INSERT INTO muster_transitions
		(id, kind, name, uid, seq, from_phase, to_phase, event, reason, caused_by, at, revision)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`))
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.ID, r.Kind, r.Name, r.UID, r.Seq, r.From, r.To, r.Event, r.Reason, r.By, timeArg(dialect, r.At), r.Revision); err != nil {
			return fmt.Errorf("writing the transition history: %w", err)
		}
	}
	return tx.Commit()
}

// Loaded finishes a Load of rows with their own ids: PostgreSQL's id
// sequence does not move for ids given explicitly, so the writer's next
// insert would take an id already used. (SQLite's AUTOINCREMENT follows
// the largest id by itself.)
func Loaded(ctx context.Context, db *sql.DB, dialect string) error {
	if dialect != sqldialect.Postgres {
		return nil
	}
	_, err := db.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence('muster_transitions', 'id'),
		(SELECT GREATEST(COALESCE(MAX(id), 1), 1) FROM muster_transitions), (SELECT COUNT(*) > 0 FROM muster_transitions))`)
	if err != nil {
		return fmt.Errorf("moving the transition history's id sequence past the loaded rows: %w", err)
	}
	return nil
}

// scanAt reads the at column: a time on PostgreSQL, text on SQLite.
func scanAt(v any) time.Time {
	switch x := v.(type) {
	case time.Time:
		return x.UTC()
	case string:
		t, _ := time.Parse(sqliteTime, x)
		return t
	case []byte:
		t, _ := time.Parse(sqliteTime, string(x))
		return t
	}
	return time.Time{}
}

// Unrecorded counts the transitions that the stored objects values carry
// and the table does not hold (a writer stopped before it read them).
func Unrecorded(ctx context.Context, db *sql.DB, dialect string, values [][]byte) (int, error) {
	q := sqldialect.Rebind(dialect, `SELECT count(*) FROM muster_transitions WHERE uid = ? AND seq = ?`)
	n := 0
	for _, v := range values {
		for _, r := range recordsOf(v, 0) {
			var have int
			if err := db.QueryRowContext(ctx, q, r.UID, r.Seq).Scan(&have); err != nil {
				return 0, fmt.Errorf("reading the transition history: %w", err)
			}
			if have == 0 {
				n++
			}
		}
	}
	return n, nil
}
