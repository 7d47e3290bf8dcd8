package store

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

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
func SQLitePath(dataDir string) string { return filepath.Join(dataDir, "db", "state.db") }

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

// rebind turns the ? placeholders of a query into PostgreSQL's $1, $2, ...
func rebind(dialect, q string) string {
	if dialect != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
