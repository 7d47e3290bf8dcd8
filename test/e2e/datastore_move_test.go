package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// moveObjects is how many Clusters the history move tests create: a few
// hundred for make test (under a minute here), the 10,000 with
// MUSTER_MOVE_OBJECTS=10000.
func moveObjects(t *testing.T) int {
	if v := os.Getenv("MUSTER_MOVE_OBJECTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("MUSTER_MOVE_OBJECTS=%q: give a number of objects", v)
		}
		return n
	}
	return 300
}

// historyFleet is a stopped server on SQLite whose history table holds
// more than its objects do: Clusters with their transitions, and a few
// simulated machines whose plans changed so often that their
// status.transitions (the last 20) has long dropped their first
// transitions, which only the table still has. It returns the server and
// the machines' names.
func historyFleet(t *testing.T) (*server, []string) {
	s, _ := fleet(t, moveObjects(t), 0)
	const machines = 3
	sim := runAgentBinary(t, "simulate", "--server", s.url(), "--token", newToken(t, s), "--count", fmt.Sprint(machines), "--concurrency", "3",
		"--plan-updates", "20", "--kubeconfig", s.kubeconfig())
	sim.waitOutput(fmt.Sprintf("simulate: joined %d/%d", machines, machines), 120*time.Second)
	db := openDatastoreSQL(t, s)
	// Enough plan changes that every machine's history outgrew its
	// status.transitions: the case the old migrate lost.
	waitFor(t, 180*time.Second, "each simulated machine to have more than 30 transitions in the history table", func() bool {
		var n int
		err := db.QueryRow(`SELECT count(*) FROM (SELECT uid FROM muster_transitions WHERE kind = 'Machine' GROUP BY uid HAVING count(*) > 30)`).Scan(&n)
		return err == nil && n == machines
	})
	_ = sim.cmd.Process.Signal(syscall.SIGINT)
	sim.waitExit(30 * time.Second)
	s.stop()
	var names []string
	for i := range machines {
		names = append(names, fmt.Sprintf("sim-%d", i))
	}
	return s, names
}

// historyRows is the whole history table of s's datastore, one line per
// row with its id, by id: what "the same rows" means.
func historyRows(t *testing.T, s *server) []string {
	t.Helper()
	db := openDatastoreSQL(t, s)
	rows, err := db.Query(`SELECT id, kind, name, uid, seq, from_phase, to_phase, event, reason, caused_by, at, revision FROM muster_transitions ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, seq, rev int64
		var kind, name, uid, from, to, event, reason, by string
		var at any
		if err := rows.Scan(&id, &kind, &name, &uid, &seq, &from, &to, &event, &reason, &by, &at, &rev); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s/%s %s #%d %s→%s %s %q %s %s @%d", id, kind, name, uid, seq, from, to, event, reason, by, sqlTime(t, at).UTC().Format(time.RFC3339), rev))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// historyOutputs is what `muster-server history` prints for each machine
// and for the first and last Cluster.
func historyOutputs(t *testing.T, s *server, machines []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	objects := []string{"cluster/c-00000", fmt.Sprintf("cluster/c-%05d", moveObjects(t)-1)}
	for _, m := range machines {
		objects = append(objects, "machine/"+m)
	}
	for _, o := range objects {
		got, err := historyCLI(s, o)
		if err != nil {
			t.Fatalf("muster-server history %s: %v\n%s", o, err, got)
		}
		out[o] = got
	}
	return out
}

// sameHistory: the new datastore's table holds exactly the old rows, and
// `history` prints the same for every object asked.
func sameHistory(t *testing.T, wantRows, gotRows []string, wantOut, gotOut map[string]string) {
	t.Helper()
	if len(gotRows) != len(wantRows) {
		t.Errorf("the history table holds %d rows, the old one %d", len(gotRows), len(wantRows))
	}
	for i := range min(len(wantRows), len(gotRows)) {
		if gotRows[i] != wantRows[i] {
			t.Errorf("history row %d is\n  %s\nwas\n  %s", i, gotRows[i], wantRows[i])
			break
		}
	}
	for o, want := range wantOut {
		if gotOut[o] != want {
			t.Errorf("muster-server history %s on the new datastore:\n%s\non the old:\n%s", o, gotOut[o], want)
		}
	}
}

// machineHistoryLen is how many transitions `history` printed for the
// busiest machine: more than status.transitions keeps, or the test did
// not exercise what a move used to lose.
func checkOutgrown(t *testing.T, outs map[string]string, machines []string) {
	t.Helper()
	for _, m := range machines {
		if n := strings.Count(outs["machine/"+m], "\n") - 1; n <= 20 {
			t.Fatalf("machine %s has %d transitions in the history, not more than the 20 status.transitions keeps: the test did not exercise the history table", m, n)
		}
	}
}

// newHistoryRecorded: a server on the new datastore records a new
// object's transitions after the moved rows (on PostgreSQL the id
// sequence must have been moved past them).
func newHistoryRecorded(t *testing.T, s *server) {
	t.Helper()
	_, err := adminClient(t, s).MusterV1alpha1().Clusters().Create(context.Background(), &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "after-the-move"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the new cluster's transitions in the history", func() bool {
		out, err := historyCLI(s, "cluster/after-the-move")
		return err == nil && strings.Contains(out, "after-the-move")
	})
	if strings.Contains(s.log.String(), "Transition history writer stopped") {
		t.Errorf("the history writer failed on the new datastore:\n%s", s.log.String())
	}
}

// TestDatastoreMoveHistorySnapshotRestore: a snapshot carries the whole
// transition history; `datastore verify` checks it; restored into a new
// SQLite data dir and into a new PostgreSQL database, `muster-server
// history` prints what it printed on the old datastore, every row with
// its id, including the transitions the objects' status.transitions had
// dropped. A server on the restored datastore then records new ones.
func TestDatastoreMoveHistorySnapshotRestore(t *testing.T) {
	t.Parallel()
	s, machines := historyFleet(t)
	wantRows := historyRows(t, s)
	wantOut := historyOutputs(t, s, machines)
	checkOutgrown(t, wantOut, machines)
	tokenFile := writeSecretFile(t, serverToken(t, s))

	file := filepath.Join(t.TempDir(), "muster.snapshot")
	start := time.Now()
	out, err := datastoreCLI(s, nil, "datastore", "snapshot", file)
	if err != nil {
		t.Fatalf("snapshot: %v\n%s", err, out)
	}
	fi, _ := os.Stat(file)
	t.Logf("snapshot of %d objects and %d history rows: %s, %d bytes: %s", moveObjects(t), len(wantRows), time.Since(start).Round(time.Millisecond), fi.Size(), strings.TrimSpace(out))
	out, err = datastoreCLI(s, nil, "datastore", "verify", file)
	if err != nil || !strings.Contains(out, "OK") || !strings.Contains(out, fmt.Sprintf("%d transition history rows", len(wantRows))) {
		t.Fatalf("verify of a good snapshot: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))

	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			endpoint := b.endpoint(t)
			r := newServer(t, "127.0.0.1", endpoint, "--token-file", tokenFile)
			start := time.Now()
			out, err := datastoreCLI(r, []string{"MUSTER_DATASTORE_ENDPOINT=" + endpoint}, "datastore", "restore", file)
			if err != nil {
				t.Fatalf("restore: %v\n%s", err, out)
			}
			t.Logf("restore into %s: %s: %s", b.name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
			// Before any server runs on it: the table is the old one.
			sameHistory(t, wantRows, historyRows(t, r), wantOut, historyOutputs(t, r, machines))
			r.start()
			newHistoryRecorded(t, r)
			r.stop()
		})
	}
}

// TestDatastoreMoveHistoryMigrate: the acceptance, SQLite →
// PostgreSQL migrate of the objects with their history: `history` shows
// the same rows; the server on PostgreSQL records new transitions after
// them. (MUSTER_MOVE_OBJECTS=10000 for the 10,000 objects.)
func TestDatastoreMoveHistoryMigrate(t *testing.T) {
	t.Parallel()
	s, machines := historyFleet(t)
	wantRows := historyRows(t, s)
	wantOut := historyOutputs(t, s, machines)
	checkOutgrown(t, wantOut, machines)

	dsn := backends[1].endpoint(t)
	start := time.Now()
	out, err := datastoreCLI(s, nil, "datastore", "migrate", "--to-file", writeSecretFile(t, dsn))
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	t.Logf("migrate of %d objects and %d history rows to PostgreSQL: %s: %s", moveObjects(t), len(wantRows), time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	s.endpoint = dsn
	sameHistory(t, wantRows, historyRows(t, s), wantOut, historyOutputs(t, s, machines))
	s.start()
	newHistoryRecorded(t, s)
}

// TestDatastoreMoveBadInputs: each bad input is refused with what
// happened and what to do, and changes nothing: a truncated snapshot, one
// with a flipped byte, a restore into another deployment's data dir, and
// a restore into a datastore that is not empty.
func TestDatastoreMoveBadInputs(t *testing.T) {
	t.Parallel()
	a, _ := fleet(t, 20, 0)
	file := filepath.Join(t.TempDir(), "a.snapshot")
	// Taken online, through the running server.
	if out, err := datastoreCLI(a, nil, "datastore", "snapshot", file); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, out)
	}
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := datastoreCLI(a, nil, "datastore", "verify", file); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("verify of a good snapshot: %v\n%s", err, out)
	}
	// A letter of the first key's base64 value changes case: still JSON,
	// still base64, so only the checksum can tell.
	flipped := bytes.Clone(good)
	i := bytes.Index(flipped, []byte(`"v":"`)) + 10
	flipped[i] ^= 0x20
	damaged := map[string][]byte{
		"truncated":       good[:len(good)*2/3],
		"truncated-lines": good[:bytes.LastIndexByte(good[:len(good)-1], '\n')+1], // whole lines, only the end line gone
		"bit-flipped":     flipped,
	}
	for name, b := range damaged {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), name+".snapshot")
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"truncated": "cut short", "truncated-lines": "cut short", "bit-flipped": "damaged"}[name]
			out, err := datastoreCLI(a, nil, "datastore", "verify", f)
			if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "take the snapshot again") {
				t.Errorf("verify of a %s snapshot: %v, want %q and what to do:\n%s", name, err, want, out)
			}
			t.Logf("verify of a %s snapshot: %s", name, strings.TrimSpace(out))
			r := newServer(t, "127.0.0.1", "")
			out, err = datastoreCLI(r, nil, "datastore", "restore", f)
			if err == nil || !strings.Contains(out, want) {
				t.Errorf("restore of a %s snapshot: %v, want %q:\n%s", name, err, want, out)
			}
			if _, err := os.Stat(filepath.Join(r.dataDir, "db")); err == nil {
				t.Errorf("a refused restore created a datastore in %s", r.dataDir)
			}
		})
	}

	// Another deployment: b has its own CA and token. With its datastore
	// moved aside (empty), a's snapshot is still refused for b's data dir.
	b := startServer(t, "")
	b.stop()
	if err := os.Rename(filepath.Join(b.dataDir, "db"), filepath.Join(b.dataDir, "db.aside")); err != nil {
		t.Fatal(err)
	}
	out, err := datastoreCLI(b, nil, "datastore", "restore", file)
	if err == nil || !strings.Contains(out, "another deployment") || !strings.Contains(out, "new, empty --data-dir") {
		t.Errorf("restore of another deployment's snapshot: %v\n%s", err, out)
	}
	t.Logf("restore of another deployment's snapshot: %s", strings.TrimSpace(out))
	if _, err := os.Stat(filepath.Join(b.dataDir, "db")); err == nil {
		t.Errorf("a refused restore created a datastore in %s", b.dataDir)
	}

	// A snapshot written before the history and the checksum (format v1:
	// the header and the keys) still restores into a new data dir; into
	// b's it records no CA, and b's server token not opening its sealed
	// CA is what refuses it.
	v1 := v1Snapshot(t, good)
	out, err = datastoreCLI(b, nil, "datastore", "restore", v1)
	if err == nil || !strings.Contains(out, "server token of --data-dir") || !strings.Contains(out, "nothing was written") {
		t.Errorf("restore of another deployment's v1 snapshot: %v\n%s", err, out)
	}
	t.Logf("restore of another deployment's v1 snapshot: %s", strings.TrimSpace(out))
	if out, err := datastoreCLI(newServer(t, "127.0.0.1", ""), nil, "datastore", "restore", v1); err != nil || !strings.Contains(out, "restored") {
		t.Errorf("restore of a v1 snapshot into a new data dir: %v\n%s", err, out)
	}

	// Not empty: a's own snapshot into a's own datastore.
	a.stop()
	beforeRows := historyRows(t, a)
	out, err = datastoreCLI(a, nil, "datastore", "restore", file)
	if err == nil || !strings.Contains(out, "not empty") || !strings.Contains(out, "nothing was written") {
		t.Errorf("restore into a datastore that is not empty: %v\n%s", err, out)
	}
	t.Logf("restore into a datastore that is not empty: %s", strings.TrimSpace(out))
	if got := historyRows(t, a); strings.Join(got, "\n") != strings.Join(beforeRows, "\n") {
		t.Errorf("a refused restore changed the history table")
	}
	a.start()
	if n := len(readObjects(t, adminClient(t, a)).clusters); n != 20 {
		t.Errorf("after a refused restore the datastore holds %d clusters, want the 20 it had", n)
	}
}

// v1Snapshot rewrites a snapshot as the format before 2026-11-27 wrote it:
// the header with format v1 and no history or deployment, then the keys.
func v1Snapshot(t *testing.T, v2 []byte) string {
	t.Helper()
	lines := bytes.Split(bytes.TrimSpace(v2), []byte("\n"))
	var h map[string]any
	if err := json.Unmarshal(lines[0], &h); err != nil {
		t.Fatal(err)
	}
	h["format"] = "muster.io/datastore-snapshot/v1"
	delete(h, "history")
	delete(h, "deployment")
	head, _ := json.Marshal(h)
	out := append(head, '\n')
	for _, l := range lines[1:] {
		if bytes.HasPrefix(l, []byte(`{"k":`)) {
			out = append(append(out, l...), '\n')
		}
	}
	f := filepath.Join(t.TempDir(), "v1.snapshot")
	if err := os.WriteFile(f, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
