package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/muster-io/muster/internal/sqldialect"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/muster-io/muster/migrations"
)

// Migration is one versioned SQL file of migrations/.
type Migration struct {
	// Version is the file's NNNN prefix; versions are applied in order.
	Version int
	// Name is the file name, e.g. 0001_transition_history.sql.
	Name string
	// SQL is the file's statements, separated by semicolons.
	SQL string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// Migrations lists the embedded migrations of a dialect ("sqlite" or
// "postgres") in version order, and refuses a gap or a duplicate version:
// either would make "the schema is at version N" mean two things.
func Migrations(dialect string) ([]Migration, error) {
	return loadMigrations(migrations.SQL, dialect)
}

func loadMigrations(fsys fs.FS, dialect string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dialect)
	if err != nil {
		return nil, fmt.Errorf("migrations for %s: %w", dialect, err)
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations/%s/%s is not named NNNN_name.sql", dialect, e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		b, err := fs.ReadFile(fsys, path.Join(dialect, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations/%s: expected version %04d, found %s (versions start at 0001 with no gaps or duplicates)", dialect, i+1, m.Name)
		}
	}
	return out, nil
}

// SchemaTooNewError means the datastore's schema was written by a newer
// muster-server than this one.
type SchemaTooNewError struct {
	// Have is the datastore's schema version, Name its last migration.
	Have int
	Name string
	// Know is the newest version this binary carries.
	Know int
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("the datastore's schema is at version %d (%s), newer than version %d, the newest this muster-server knows: "+
		"a newer muster-server has used this datastore. Run that newer muster-server (or restore a snapshot taken before the upgrade); "+
		"nothing was changed", e.Have, e.Name, e.Know)
}

// pgMigrationLock is the PostgreSQL advisory lock key every muster-server
// takes around its migrations ("muster" in ASCII): the first server applies
// them, the others wait on the lock and then find nothing left to do.
const pgMigrationLock = 0x6d7573746572

// Migrate brings the schema of db to the newest version this binary knows,
// one transaction per migration, each recorded in muster_schema_version.
// A datastore at a newer version than the binary knows is refused with a
// *SchemaTooNewError and left as it is.
func Migrate(ctx context.Context, db *sql.DB, dialect string) (applied []int, err error) {
	list, err := Migrations(dialect)
	if err != nil {
		return nil, err
	}
	return migrate(ctx, db, dialect, list)
}

func migrate(ctx context.Context, db *sql.DB, dialect string, list []Migration) (applied []int, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to the datastore to apply migrations: %w", err)
	}
	defer conn.Close()
	if dialect == "postgres" {
		// A session lock, held by this connection: a server killed while it
		// holds it loses the connection and so the lock, and a migration
		// half applied was rolled back with its transaction.
		waitSay := time.AfterFunc(5*time.Second, func() {
			klog.InfoS("Waiting for another muster-server to finish applying datastore migrations")
		})
		_, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pgMigrationLock)
		waitSay.Stop()
		if err != nil {
			return nil, fmt.Errorf("taking the migration lock: %w", err)
		}
		defer conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, pgMigrationLock) //nolint:errcheck
	}
	if _, err := conn.ExecContext(ctx, versionTableDDL(dialect)); err != nil {
		return nil, fmt.Errorf("creating muster_schema_version: %w", err)
	}
	know := len(list)
	for {
		have, name, err := schemaVersion(ctx, conn)
		if err != nil {
			return applied, err
		}
		if have > know {
			return applied, &SchemaTooNewError{Have: have, Name: name, Know: know}
		}
		if have == know {
			return applied, nil
		}
		m := list[have]
		if err := applyOne(ctx, conn, dialect, m); err != nil {
			return applied, err
		}
		klog.InfoS("Applied datastore migration", "version", m.Version, "name", m.Name)
		applied = append(applied, m.Version)
	}
}

func versionTableDDL(dialect string) string {
	at := "TEXT"
	if dialect == "postgres" {
		at = "TIMESTAMPTZ"
	}
	return `CREATE TABLE IF NOT EXISTS muster_schema_version (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at ` + at + ` NOT NULL,
	applied_by TEXT NOT NULL
)`
}

// SchemaVersion is the datastore's schema version and the name of its last
// migration; 0 and "" before the first.
func SchemaVersion(ctx context.Context, db *sql.DB) (int, string, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	return schemaVersion(ctx, conn)
}

func schemaVersion(ctx context.Context, conn *sql.Conn) (int, string, error) {
	var v int
	var name string
	err := conn.QueryRowContext(ctx, `SELECT version, name FROM muster_schema_version ORDER BY version DESC LIMIT 1`).Scan(&v, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("reading muster_schema_version: %w", err)
	}
	return v, name, nil
}

// applyOne runs a migration and records it in one transaction, so that a
// server killed in the middle leaves the schema at the previous version,
// not between two. Both SQLite and PostgreSQL roll DDL back.
func applyOne(ctx context.Context, conn *sql.Conn, dialect string, m Migration) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("applying datastore migration %s: %w", m.Name, err)
	}
	host, _ := os.Hostname()
	now := any(time.Now().UTC())
	if dialect == "sqlite" {
		now = time.Now().UTC().Format(sqliteTime)
	}
	if _, err := tx.ExecContext(ctx, sqldialect.Rebind(dialect, `INSERT INTO muster_schema_version (version, name, applied_at, applied_by) VALUES (?, ?, ?, ?)`),
		m.Version, m.Name, now, fmt.Sprintf("%s pid %d", host, os.Getpid())); err != nil {
		return fmt.Errorf("recording datastore migration %s: %w", m.Name, err)
	}
	return tx.Commit()
}
