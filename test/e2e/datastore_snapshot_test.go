package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// datastoreObjects is the state a move between datastores must keep.
type datastoreObjects struct {
	clusters      map[string]string // name → uid, spec, status as JSON
	machines      map[string]string // name → uid, spec, phase
	transitions   map[string][]api.Transition
	registrations int
}

func readObjects(t *testing.T, c clientset.Interface) datastoreObjects {
	t.Helper()
	ctx := context.Background()
	o := datastoreObjects{clusters: map[string]string{}, machines: map[string]string{}, transitions: map[string][]api.Transition{}}
	clusters, err := c.MusterV1alpha1().Clusters().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range clusters.Items {
		// The clusters the test made keep their whole status; the agents'
		// own clusters count their machines again as the agents reconnect.
		// (The test's own carry the label n; an agent's cluster is named
		// c-<hex>, so a name prefix cannot tell them apart.)
		what := []any{x.UID, x.Spec, x.Status}
		if _, made := x.Labels["n"]; !made {
			what = what[:2]
		}
		b, _ := json.Marshal(what)
		o.clusters[x.Name] = string(b)
	}
	machines, err := c.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range machines.Items {
		b, _ := json.Marshal([]any{x.UID, x.Spec, x.Status.Phase})
		o.machines[x.Name] = string(b)
		o.transitions[x.Name] = x.Status.Transitions
	}
	regs, err := c.MusterV1alpha1().ClusterRegistrations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o.registrations = len(regs.Items)
	return o
}

// sameObjects checks after holds what before held: every Cluster as it
// was, every Machine with its uid, spec and phase, its transitions kept (the
// new ones the reconnecting agents cause come after them), and not one
// ClusterRegistration more.
func sameObjects(t *testing.T, before, after datastoreObjects) {
	t.Helper()
	if len(after.clusters) != len(before.clusters) || len(after.machines) != len(before.machines) {
		t.Errorf("after: %d clusters, %d machines; before: %d, %d", len(after.clusters), len(after.machines), len(before.clusters), len(before.machines))
	}
	for name, want := range before.clusters {
		if after.clusters[name] != want {
			t.Errorf("cluster %s changed:\n%s\n%s", name, want, after.clusters[name])
		}
	}
	for name, want := range before.machines {
		if after.machines[name] != want {
			t.Errorf("machine %s changed:\n%s\n%s", name, want, after.machines[name])
		}
		got := after.transitions[name]
		for i, tr := range before.transitions[name] {
			if i >= len(got) || got[i].Seq != tr.Seq || got[i].Event != tr.Event || !got[i].Time.Equal(&tr.Time) {
				t.Errorf("machine %s lost its transition #%d %+v", name, tr.Seq, tr)
				break
			}
		}
	}
	if after.registrations != before.registrations {
		t.Errorf("%d ClusterRegistrations after, %d before: an agent registered again", after.registrations, before.registrations)
	}
}

// fleet is a server on SQLite with objects and real joined agents.
func fleet(t *testing.T, objects, agents int) (*server, []string) {
	s := startServer(t, "")
	c := adminClient(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, objects)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := c.MusterV1alpha1().Clusters().Create(context.Background(), &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%05d", i), Labels: map[string]string{"n": fmt.Sprint(i)}}}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range objects {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating clusters: %v", err)
	}
	// Every Cluster settled by the controllers, so that what is read
	// after a snapshot is what the snapshot holds.
	waitFor(t, 120*time.Second, "the clusters to leave Pending", func() bool {
		list, err := c.MusterV1alpha1().Clusters().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, x := range list.Items {
			if x.Status.Phase == "" || x.Status.Phase == api.ClusterPhasePending {
				return false
			}
		}
		return true
	})
	token := newToken(t, s)
	var names []string
	for i := range agents {
		name := fmt.Sprintf("edge-%d", i)
		a := startAgent(t, s, t.TempDir(), "--token", token, "--node-name", name)
		a.waitOutput("running as machine "+name, 60*time.Second)
		names = append(names, name)
	}
	for _, n := range names {
		waitPhase(t, s, n, "Running", 60*time.Second)
	}
	return s, names
}

// agentsWork: each agent reconnected with its certificate: its Machine is
// Running and it applies a plan set now.
func agentsWork(t *testing.T, s *server, names []string) {
	t.Helper()
	c := adminClient(t, s)
	for _, n := range names {
		setPlan(t, c, n, "echo moved")
	}
	for _, n := range names {
		waitFor(t, 90*time.Second, n+" to apply a plan on the new datastore", func() bool { return planApplied(c, n) })
		waitPhase(t, s, n, "Running", 30*time.Second)
	}
}

// TestDatastoreMigrateSQLiteToPostgres: a stopped server's SQLite datastore
// with objects and joined agents is migrated to PostgreSQL; the server on
// PostgreSQL serves the same objects, the agents carry on with their
// certificates, and no agent registers again. Then back to SQLite.
// (make bench: 10,000 objects and 20 agents with MUSTER_DATASTORE_SCALE=full.)
func TestDatastoreMigrateSQLiteToPostgres(t *testing.T) {
	t.Parallel()
	objects, agents := datastoreScale()
	s, names := fleet(t, objects, agents)
	before := readObjects(t, adminClient(t, s))
	s.stop()

	dsn := backends[1].endpoint(t)
	start := time.Now()
	out, err := datastoreCLI(s, nil, "datastore", "migrate", "--to-file", writeSecretFile(t, dsn))
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	t.Logf("migrate of %d objects took %s: %s", objects, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	s.endpoint = dsn
	s.start()
	agentsWork(t, s, names)
	sameObjects(t, before, readObjects(t, adminClient(t, s)))

	// And back: PostgreSQL to a SQLite in a data dir that has none.
	before = readObjects(t, adminClient(t, s))
	s.stop()
	if err := os.Rename(filepath.Join(s.dataDir, "db"), filepath.Join(s.dataDir, "db.before-postgres")); err != nil {
		t.Fatal(err)
	}
	out, err = datastoreCLI(s, []string{"MUSTER_DATASTORE_ENDPOINT=" + dsn}, "datastore", "migrate", "--to", "sqlite")
	if err != nil {
		t.Fatalf("migrate back: %v\n%s", err, out)
	}
	s.endpoint = ""
	s.start()
	agentsWork(t, s, names)
	sameObjects(t, before, readObjects(t, adminClient(t, s)))
}

// TestDatastoreSnapshotRestore: an online snapshot (mode 0600) restored
// into a fresh SQLite data dir, and a snapshot of that server restored into
// a fresh PostgreSQL: each server serves the same objects and the agents
// carry on without registering. (Each snapshot is of the server the agents
// last saw: see docs/datastore.md on restoring an older snapshot.)
func TestDatastoreSnapshotRestore(t *testing.T) {
	t.Parallel()
	objects, agents := datastoreScale()
	cur, names := fleet(t, objects, agents)
	tokenFile := writeSecretFile(t, serverToken(t, cur))
	parent := t // the servers outlive each subtest: the next starts from them
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "muster.snapshot")
			env := []string{"MUSTER_DATASTORE_ENDPOINT=" + cur.endpoint}
			out, err := datastoreCLI(cur, env, "datastore", "snapshot", file)
			if err != nil {
				t.Fatalf("snapshot: %v\n%s", err, out)
			}
			t.Log(strings.TrimSpace(out))
			if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("snapshot file mode %v, %v; want 0600", fi.Mode().Perm(), err)
			}
			before := readObjects(t, adminClient(t, cur))
			cur.stop()

			endpoint := b.endpoint(parent)
			r := newServer(parent, cur.host, endpoint, "--token-file", tokenFile)
			r.port = cur.port // where the agents look for it
			out, err = datastoreCLI(r, []string{"MUSTER_DATASTORE_ENDPOINT=" + endpoint}, "datastore", "restore", file)
			if err != nil {
				t.Fatalf("restore: %v\n%s", err, out)
			}
			t.Log(strings.TrimSpace(out))
			// What the command did, not how kine set itself up.
			if strings.Contains(out, `component="kine"`) {
				t.Errorf("restore printed kine's own log lines:\n%s", out)
			}
			if out, err := datastoreCLI(r, []string{"MUSTER_DATASTORE_ENDPOINT=" + endpoint}, "datastore", "restore", file); err == nil || !strings.Contains(out, "not empty") {
				t.Errorf("a second restore into the same datastore: %v\n%s", err, out)
			}
			r.start()
			agentsWork(t, r, names)
			sameObjects(t, before, readObjects(t, adminClient(t, r)))
			cur = r
		})
	}
}

// datastoreScale is the objects and agents of the move tests: small for
// make test, the 10,000 and 20 with MUSTER_DATASTORE_SCALE=full.
func datastoreScale() (objects, agents int) {
	if os.Getenv("MUSTER_DATASTORE_SCALE") == "full" {
		return 10000, 20
	}
	return 300, 2
}

// TestDatastoreScheduledSnapshots: --snapshot-interval takes snapshots
// (mode 0600) and --snapshot-retention keeps the newest.
func TestDatastoreScheduledSnapshots(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", "--snapshot-interval", "1s", "--snapshot-retention", "2")
	dir := filepath.Join(s.dataDir, "snapshots")
	waitFor(t, 60*time.Second, "four scheduled snapshots", func() bool {
		return strings.Count(s.log.String(), "Scheduled snapshot taken") >= 4
	})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".snapshot") {
			kept = append(kept, e.Name())
			fi, err := e.Info()
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v, %v; want 0600", e.Name(), fi.Mode().Perm(), err)
			}
		}
	}
	if len(kept) < 1 || len(kept) > 3 { // 2 kept, plus one being written at most
		t.Errorf("kept %v, want the newest 2", kept)
	}
	// A scheduled snapshot restores like any other.
	r := newServer(t, "127.0.0.1", "")
	if out, err := datastoreCLI(r, nil, "datastore", "restore", filepath.Join(dir, kept[len(kept)-1])); err != nil {
		t.Fatalf("restore of a scheduled snapshot: %v\n%s", err, out)
	}
}
