package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/muster-io/muster/internal/testenv/pgtest"
)

func TestLoadMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cases := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{"in order", fstest.MapFS{"x/0002_b.sql": file("B"), "x/0001_a.sql": file("A")}, []int{1, 2}, ""},
		{"gap", fstest.MapFS{"x/0001_a.sql": file("A"), "x/0003_c.sql": file("C")}, nil, "expected version 0002"},
		{"duplicate", fstest.MapFS{"x/0001_a.sql": file("A"), "x/0001_b.sql": file("B")}, nil, "expected version 0002"},
		{"bad name", fstest.MapFS{"x/1_a.sql": file("A")}, nil, "not named NNNN_name.sql"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadMigrations(tc.files, "x")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var versions []int
			for _, m := range got {
				versions = append(versions, m.Version)
			}
			if len(versions) != len(tc.want) || versions[0] != tc.want[0] || versions[len(versions)-1] != tc.want[len(tc.want)-1] {
				t.Errorf("versions = %v, want %v", versions, tc.want)
			}
		})
	}
}

// Both dialects carry the same versions under the same names, so that
// "schema version N" means one thing whatever the datastore.
func TestDialectsAgree(t *testing.T) {
	lite, err := Migrations("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := Migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if len(lite) != len(pg) || len(lite) == 0 {
		t.Fatalf("sqlite has %d migrations, postgres %d", len(lite), len(pg))
	}
	for i := range lite {
		if lite[i].Name != pg[i].Name {
			t.Errorf("version %d: sqlite %s, postgres %s", i+1, lite[i].Name, pg[i].Name)
		}
	}
}

func sqlBackends() []struct {
	name string
	open func(t *testing.T) *sql.DB
} {
	return []struct {
		name string
		open func(t *testing.T) *sql.DB
	}{
		{"sqlite", func(t *testing.T) *sql.DB {
			dir := t.TempDir()
			db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "state.db")+"?"+sqliteParams)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}},
		{"postgres", func(t *testing.T) *sql.DB {
			dsn := pgtest.DSN(t)
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}},
	}
}

// Migrations apply once, in order, are recorded, and a second run applies
// nothing; a schema newer than the binary is refused naming both versions
// and left untouched.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	for _, b := range sqlBackends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			list, err := Migrations(b.name)
			if err != nil {
				t.Fatal(err)
			}
			applied, err := Migrate(ctx, db, b.name)
			if err != nil {
				t.Fatal(err)
			}
			if len(applied) != len(list) {
				t.Fatalf("applied %v, want all %d", applied, len(list))
			}
			if again, err := Migrate(ctx, db, b.name); err != nil || len(again) != 0 {
				t.Fatalf("second run applied %v, %v; want nothing", again, err)
			}
			if _, err := db.Exec(`SELECT count(*) FROM muster_transitions`); err != nil {
				t.Fatalf("history table missing: %v", err)
			}
			// A newer server applied version N+1.
			extra := append(list, Migration{Version: len(list) + 1, Name: "9999_future.sql", SQL: "CREATE TABLE muster_future (x INTEGER)"})
			if _, err := migrate(ctx, db, b.name, extra); err != nil {
				t.Fatal(err)
			}
			_, err = Migrate(ctx, db, b.name)
			var tooNew *SchemaTooNewError
			if !errors.As(err, &tooNew) || tooNew.Have != len(list)+1 || tooNew.Know != len(list) {
				t.Fatalf("err = %v, want a SchemaTooNewError %d > %d", err, len(list)+1, len(list))
			}
			for _, want := range []string{"version 2 (9999_future.sql)", "version 1,"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not name %q", err, want)
				}
			}
			if v, _, _ := SchemaVersion(ctx, db); v != len(list)+1 {
				t.Errorf("schema version after refusal = %d; the refusal must change nothing", v)
			}
		})
	}
}

// Servers starting together on one PostgreSQL: every one returns, the
// migrations are applied once.
func TestMigrateConcurrently(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	const servers = 6
	var wg sync.WaitGroup
	total := make(chan int, servers)
	errs := make(chan error, servers)
	for range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			applied, err := Migrate(ctx, db, "postgres")
			errs <- err
			total <- len(applied)
		}()
	}
	wg.Wait()
	close(errs)
	close(total)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sum := 0
	for n := range total {
		sum += n
	}
	list, _ := Migrations("postgres")
	if sum != len(list) {
		t.Errorf("%d servers applied %d migrations between them, want %d (each once)", servers, sum, len(list))
	}
}
