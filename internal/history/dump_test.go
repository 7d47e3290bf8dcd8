package history

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/store"
	"github.com/muster-io/muster/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m.Run)) }

// TestLoadKeepsIDs: rows loaded with their ids read back as they were, on
// both dialects; Rows leaves out records of later revisions; and the
// writer's next record takes an id after the loaded ones (PostgreSQL's
// sequence does not follow explicit ids by itself).
func TestLoadKeepsIDs(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			ctx := context.Background()
			endpoint := ""
			if dialect == "postgres" {
				endpoint = pgtest.DSN(t)
			}
			dir := t.TempDir()
			if err := os.MkdirAll(dir+"/db", 0o700); err != nil {
				t.Fatal(err)
			}
			db, _, err := store.OpenSQL(dir, endpoint)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := store.Migrate(ctx, db, dialect); err != nil {
				t.Fatal(err)
			}
			at := time.Date(2026, 11, 17, 9, 0, 0, 0, time.UTC)
			rows := []Row{
				{ID: 5, Record: Record{Kind: "Machine", Name: "m", UID: "u", Seq: 1, From: "", To: "Pending", Event: "register", By: "muster-server", At: at, Revision: 10}},
				{ID: 9, Record: Record{Kind: "Machine", Name: "m", UID: "u", Seq: 2, From: "Pending", To: "Running", Event: "run", Reason: "r", At: at.Add(time.Second), Revision: 20}},
			}
			if err := Load(ctx, db, dialect, rows); err != nil {
				t.Fatal(err)
			}
			if err := Loaded(ctx, db, dialect); err != nil {
				t.Fatal(err)
			}
			got, err := Rows(ctx, db, dialect, 0, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0] != rows[0] || got[1] != rows[1] {
				t.Fatalf("read back %+v, want %+v", got, rows)
			}
			if got, _ := Rows(ctx, db, dialect, 0, 15, 100); len(got) != 1 || got[0].ID != 5 {
				t.Errorf("rows up to revision 15: %+v, want only id 5", got)
			}
			// Loading again is a no-op, not an error: a retried batch.
			if err := Load(ctx, db, dialect, rows); err != nil {
				t.Errorf("loading the same rows again: %v", err)
			}
			w := &Writer{DB: db, Dialect: dialect}
			next := Record{Kind: "Machine", Name: "m", UID: "u", Seq: 3, From: "Running", To: "Applying", Event: "apply", At: at.Add(2 * time.Second), Revision: 30}
			if err := w.write(ctx, []Record{next}, 30); err != nil {
				t.Fatalf("the writer after a load: %v", err)
			}
			got, _ = Rows(ctx, db, dialect, 9, 0, 100)
			if len(got) != 1 || got[0].Seq != 3 {
				t.Errorf("the writer's record after the loaded ones: %+v, want seq 3 with an id above 9", got)
			}
			if n, _ := Count(ctx, db); n != 3 {
				t.Errorf("%d rows, want 3", n)
			}
		})
	}
}
