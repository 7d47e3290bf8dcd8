package e2e

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"

	"github.com/muster-io/muster/internal/bootstrap"
	"github.com/muster-io/muster/internal/store"
)

// openDatastoreSQL opens the SQL database a server keeps its state in, the
// way an operator's SQL client would.
func openDatastoreSQL(t *testing.T, s *server) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if s.endpoint == "" {
		db, err = sql.Open("sqlite3", "file:"+filepath.Join(s.dataDir, "db", "state.db")+"?_busy_timeout=30000")
	} else {
		db, err = sql.Open("pgx", s.endpoint)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Two servers started at the same moment on an empty PostgreSQL: both come
// up, the migrations are applied once (one row per version, one "Applied"
// line per version across both logs).
func TestDatastoreMigrationsOnceWhenServersStartTogether(t *testing.T) {
	t.Parallel()
	dsn := backends[1].endpoint(t)
	token, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	a := newServer(t, "127.0.0.1", dsn, "--token", token)
	b := newServer(t, "127.0.0.2", dsn, "--token", token)
	a.launch()
	b.launch()
	for _, s := range []*server{a, b} {
		if err := s.waitReady(90 * time.Second); err != nil {
			t.Fatalf("%s did not become ready: %v\n%s", s.host, err, s.log.String())
		}
	}
	list, err := store.Migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	db := openDatastoreSQL(t, a)
	rows, err := db.Query(`SELECT version, count(*) FROM muster_schema_version GROUP BY version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions []string
	for rows.Next() {
		var v, n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, fmt.Sprintf("%d×%d", v, n))
	}
	var want []string
	for _, m := range list {
		want = append(want, fmt.Sprintf("%d×1", m.Version))
	}
	if strings.Join(versions, " ") != strings.Join(want, " ") {
		t.Errorf("muster_schema_version rows (version×count) = %v, want %v", versions, want)
	}
	applied := strings.Count(a.log.String(), "Applied datastore migration") + strings.Count(b.log.String(), "Applied datastore migration")
	if applied != len(list) {
		t.Errorf("the two servers logged %d applied migrations, want %d", applied, len(list))
	}
}

// A server whose binary is older than the datastore's schema (a newer
// server migrated it) refuses to start, naming both versions, and changes
// nothing.
func TestDatastoreRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		s.stop()
		db := openDatastoreSQL(t, s)
		dialect := map[bool]string{true: "sqlite", false: "postgres"}[endpoint == ""]
		list, err := store.Migrations(dialect)
		if err != nil {
			t.Fatal(err)
		}
		newer := len(list) + 1
		q := `INSERT INTO muster_schema_version (version, name, applied_at, applied_by) VALUES ($1, $2, $3, 'a newer muster-server')`
		at := any(time.Now().UTC())
		if dialect == "sqlite" {
			q = strings.NewReplacer("$1", "?", "$2", "?", "$3", "?").Replace(q)
			at = time.Now().UTC().Format("2006-01-02 15:04:05")
		}
		name := fmt.Sprintf("%04d_from_the_future.sql", newer)
		if _, err := db.Exec(q, newer, name, at); err != nil {
			t.Fatal(err)
		}
		s.launch()
		select {
		case <-s.exited:
		case <-time.After(60 * time.Second):
			t.Fatalf("the server did not refuse the newer schema\n%s", s.log.String())
		}
		out := s.log.String()
		for _, want := range []string{fmt.Sprintf("version %d (%s)", newer, name), fmt.Sprintf("newer than version %d", len(list))} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal does not say %q:\n%s", want, out)
			}
		}
		if s.cmd.ProcessState.ExitCode() == 0 {
			t.Errorf("exit code 0 for a refused start")
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM muster_schema_version`).Scan(&n); err != nil || n != newer {
			t.Errorf("schema version rows = %d, %v; want %d, untouched", n, err, newer)
		}
	})
}
