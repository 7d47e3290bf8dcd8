package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/muster-io/muster/internal/datadir"

	// The drivers kine itself uses, registered as "sqlite3" and "pgx".
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"
)

// sqliteTime is how times are stored in SQLite: UTC, in the form SQLite's
// own date functions read, and sorting as text sorts by time.
const sqliteTime = "2006-01-02 15:04:05"

// sqliteParams are kine's SQLite parameters without its shared cache: a
// second pool on the same file in shared-cache mode gets SQLITE_LOCKED,
// which the busy timeout does not retry.
const sqliteParams = "_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate"

// SQLitePath is the SQLite database of a data dir.
func SQLitePath(dataDir string) string {
	l, err := datadir.New(dataDir)
	if err != nil {
		return ""
	}
	return l.SQLite
}

// OpenSQL opens the SQL database behind a datastore, beside kine's own
// connections, for the tables muster keeps there (migrations/). For etcd
// there is none: nil and no error.
func OpenSQL(dataDir, endpoint string) (*sql.DB, string, error) {
	kind, err := backendOf(endpoint)
	if err != nil {
		return nil, "", err
	}
	switch kind {
	case "sqlite":
		db, err := sql.Open("sqlite3", "file:"+SQLitePath(dataDir)+"?"+sqliteParams)
		return db, kind, err
	case "postgres":
		db, err := sql.Open("pgx", endpoint)
		if err != nil {
			return nil, "", fmt.Errorf("--datastore-endpoint: %s", redact(err.Error(), endpoint))
		}
		db.SetMaxOpenConns(4)
		return db, kind, nil
	}
	return nil, kind, nil
}

// OpenReadSQL opens a datastore's SQL database for reading muster's tables
// from outside a server (muster-server history): it creates nothing, and
// says so when the data dir or database has no muster schema.
func OpenReadSQL(ctx context.Context, dataDir, endpoint string) (*sql.DB, string, error) {
	kind, err := backendOf(endpoint)
	if err != nil {
		return nil, "", err
	}
	if kind == "etcd" {
		return nil, "", fmt.Errorf("the transition history needs a SQL datastore (SQLite or PostgreSQL) and is not kept on an external etcd, which has no SQL; on etcd each object's status.transitions holds its last transitions: kubectl get KIND NAME -o jsonpath='{.status.transitions}'")
	}
	if kind == "sqlite" {
		if _, err := os.Stat(SQLitePath(dataDir)); err != nil {
			return nil, "", fmt.Errorf("no SQLite datastore in --data-dir %s (%v): give the server's --data-dir, or --datastore-endpoint-file for PostgreSQL", dataDir, err)
		}
	}
	db, dialect, err := OpenSQL(dataDir, endpoint)
	if err != nil {
		return nil, "", err
	}
	if v, _, err := SchemaVersion(ctx, db); err != nil || v == 0 {
		db.Close()
		return nil, "", fmt.Errorf("the %s datastore has no muster schema yet: start muster-server on it once (schema version %d, %v)", dialect, v, err)
	}
	return db, dialect, nil
}
