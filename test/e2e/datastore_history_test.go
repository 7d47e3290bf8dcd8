package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// transitionKey is one transition as both status.transitions and the
// history table identify it.
type transitionKey struct {
	uid        string
	seq        int64
	from, to   string
	event, by  string
	unixSecond int64
}

// TestDatastoreHistorySurvivesKill9: the server is killed with SIGKILL at
// random moments while agents join and their plans change; afterwards the
// history table holds every transition any object's status.transitions
// recorded, each once. Then a revoked and deleted token's history is still
// printed by `muster-server history`.
func TestDatastoreHistorySurvivesKill9(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		// make test: 40 agents; MUSTER_DATASTORE_SCALE=full: the 200
		// joins, with plan changes going on throughout.
		agents, kills := 40, 4
		if os.Getenv("MUSTER_DATASTORE_SCALE") == "full" {
			agents, kills = 200, 6
		}
		s := startServer(t, endpoint)
		token := newToken(t, s)
		sim := runAgentBinary(t, "simulate", "--server", s.url(), "--token", token, "--count", fmt.Sprint(agents), "--concurrency", "10",
			"--plan-updates", "20", "--kubeconfig", s.kubeconfig())
		defer func() {
			_ = sim.cmd.Process.Signal(syscall.SIGINT)
			sim.waitExit(30 * time.Second)
		}()
		for i := range kills {
			// A random moment: during the joins at first, among plan changes later.
			time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
			t.Logf("kill -9 #%d", i+1)
			s.kill9()
			s.start()
		}
		sim.waitOutput(fmt.Sprintf("simulate: joined %d/%d", agents, agents), 300*time.Second)
		// Plan changes go on; one last kill in the middle of them.
		time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
		s.kill9()
		s.start()
		time.Sleep(2 * time.Second)
		_ = sim.cmd.Process.Signal(syscall.SIGINT)
		sim.waitExit(30 * time.Second)

		c := adminClient(t, s)
		db := openDatastoreSQL(t, s)
		var want map[transitionKey]string
		var missing []string
		waitFor(t, 60*time.Second, "every transition in status.transitions to be in the history table", func() bool {
			want = statusTransitions(t, c)
			have := map[transitionKey]bool{}
			rows, err := db.Query(`SELECT uid, seq, from_phase, to_phase, event, caused_by, at FROM muster_transitions`)
			if err != nil {
				t.Logf("reading the history: %v", err)
				return false
			}
			defer rows.Close()
			for rows.Next() {
				var k transitionKey
				var at any
				if err := rows.Scan(&k.uid, &k.seq, &k.from, &k.to, &k.event, &k.by, &at); err != nil {
					t.Fatal(err)
				}
				k.unixSecond = sqlTime(t, at).Unix()
				have[k] = true
			}
			missing = missing[:0]
			for k, obj := range want {
				if !have[k] {
					missing = append(missing, fmt.Sprintf("%s %+v", obj, k))
				}
			}
			return len(missing) == 0
		})
		if len(missing) > 0 {
			t.Fatalf("%d transitions missing from the history, e.g. %v", len(missing), missing[:min(5, len(missing))])
		}
		// Transitions are numbered 1, 2, ... over an object's life, so the
		// history of each object must be exactly 1..some seq, each once:
		// that covers the records status.transitions has already dropped
		// (it keeps the last 20) and rules out a record written twice.
		// Machines go on changing (they fall silent once the simulated
		// agents stop), so the objects are read after the history: the
		// history may be behind them, never ahead.
		rows, err := db.Query(`SELECT uid, count(*), min(seq), max(seq) FROM muster_transitions GROUP BY uid`)
		if err != nil {
			t.Fatal(err)
		}
		last := map[string]int64{}
		for k := range statusTransitions(t, c) {
			last[k.uid] = max(last[k.uid], k.seq)
		}
		rowsTotal := 0
		for rows.Next() {
			var uid string
			var n, lo, hi int64
			if err := rows.Scan(&uid, &n, &lo, &hi); err != nil {
				t.Fatal(err)
			}
			rowsTotal += int(n)
			if _, exists := last[uid]; !exists {
				// An object deleted during the run (a superseded
				// registration): its history is kept, by design.
				continue
			}
			if lo != 1 || hi > last[uid] || n != hi {
				t.Errorf("object %s: history holds %d records numbered %d..%d, want 1..n each once, n at most the object's last transition %d", uid, n, lo, hi, last[uid])
			}
			delete(last, uid)
		}
		rows.Close()
		if len(last) > 0 {
			t.Errorf("objects with no history at all: %v", last)
		}
		t.Logf("%d transitions in status.transitions, %d rows in the history, after %d kill -9", len(want), rowsTotal, kills+1)
		if len(want) < 3*agents {
			t.Errorf("only %d transitions recorded for %d joins: the run did not exercise the history", len(want), agents)
		}

		// Kept after deletion, printed by the CLI.
		id := strings.TrimPrefix(strings.TrimSpace(s.mustKubectl("get", "clusterregistrationtokens", "-o", "name")), "clusterregistrationtoken.muster.io/")
		s.muster(t, "token", "revoke", id)
		s.mustKubectl("delete", "clusterregistrationtoken", id)
		var out string
		waitFor(t, 30*time.Second, "the revoked token's history", func() bool {
			out, _ = historyCLI(s, "clusterregistrationtoken/"+id)
			return strings.Contains(out, "revoke")
		})
		if !strings.Contains(out, "Active") || !strings.Contains(out, "Revoked") || !strings.Contains(out, "admin") {
			t.Errorf("muster-server history of the deleted token:\n%s", out)
		}
		if out, err := historyCLI(s, "machine/sim-1", "--until", "2000-01-01T00:00:00Z"); err == nil || !strings.Contains(out, "no transitions") {
			t.Errorf("history before 2000 = %v:\n%s", err, out)
		}
	})
}

// statusTransitions reads every lifecycle object's status.transitions.
func statusTransitions(t *testing.T, c clientset.Interface) map[transitionKey]string {
	ctx := context.Background()
	v := c.MusterV1alpha1()
	out := map[transitionKey]string{}
	add := func(kind string, m metav1.ObjectMeta, list []api.Transition) {
		for _, tr := range list {
			out[transitionKey{uid: string(m.UID), seq: tr.Seq, from: tr.From, to: tr.To, event: tr.Event, by: tr.By, unixSecond: tr.Time.Unix()}] = kind + "/" + m.Name
		}
	}
	machines, err := v.Machines().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range machines.Items {
		add("Machine", o.ObjectMeta, o.Status.Transitions)
	}
	regs, err := v.ClusterRegistrations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range regs.Items {
		add("ClusterRegistration", o.ObjectMeta, o.Status.Transitions)
	}
	tokens, err := v.ClusterRegistrationTokens().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range tokens.Items {
		add("ClusterRegistrationToken", o.ObjectMeta, o.Status.Transitions)
	}
	clusters, err := v.Clusters().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range clusters.Items {
		add("Cluster", o.ObjectMeta, o.Status.Transitions)
	}
	return out
}

func sqlTime(t *testing.T, v any) time.Time {
	switch x := v.(type) {
	case time.Time:
		return x
	case string:
		tm, err := time.Parse("2006-01-02 15:04:05", x)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	case []byte:
		return sqlTime(t, string(x))
	}
	t.Fatalf("time of type %T", v)
	return time.Time{}
}
