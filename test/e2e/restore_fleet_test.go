package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/simulate"
	"github.com/muster-io/muster/internal/testenv/s3test"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// fleetState reads every Machine's phase and every MachinePlan.
func fleetState(c clientset.Interface) (map[string]string, map[string]*api.MachinePlan, error) {
	ms, err := c.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	ps, err := c.MusterV1alpha1().MachinePlans().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	phases := map[string]string{}
	for _, m := range ms.Items {
		phases[m.Name] = string(m.Status.Phase)
	}
	plans := map[string]*api.MachinePlan{}
	for i := range ps.Items {
		plans[ps.Items[i].Name] = &ps.Items[i]
	}
	return phases, plans, nil
}

// heardSince names the machines the server heard from (its liveness, the
// machines table's Last-Seen) no longer ago than since: after a restore,
// the persisted lastSeen the snapshot holds is older than that, so only an
// agent that reached the restored server counts.
func heardSince(s *server, since time.Duration) (map[string]bool, error) {
	out, err := s.kubectl("get", "machines", "--no-headers")
	if err != nil {
		return nil, err
	}
	heard := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		// NAME CLUSTER PHASE PLAN ROLES LAST-SEEN ("4s ago") AGE
		f := strings.Fields(l)
		i := slices.Index(f, "ago")
		if i < 2 {
			continue
		}
		age, err := time.ParseDuration(f[i-1])
		if err == nil && age <= since+time.Second {
			heard[f[0]] = true
		}
	}
	return heard, nil
}

// TestRestoreFleetFromS3 is issue 30's acceptance run of a restore older
// than the fleet, at a smoke scale by default (50 simulated agents and 3
// real ones, 20 plan changes and 5 joins after the snapshot) and at the
// issue's scale in `make bench` (MUSTER_RESTORE_SIMULATED=1000
// MUSTER_RESTORE_REAL=20 MUSTER_RESTORE_CHANGES=200 MUSTER_RESTORE_JOINS=50):
// a snapshot at T to S3 (a real versitygw checking signatures), plan
// changes and joins after it, the server killed with -9 and its data dir
// wiped, the snapshot restored from the bucket into a new one. Every agent
// the snapshot knows is Running again with the snapshot's plan within
// 60 s, none restarted by hand and none registered again; the agents that
// joined after T rejoin by themselves with their node passwords; the
// history holds every transition recorded before T.
//
// Not parallel: the simulated fleet keeps a core busy, and the time to
// Running is a figure.
func TestRestoreFleetFromS3(t *testing.T) {
	nSim := envInt(t, "MUSTER_RESTORE_SIMULATED", 50)
	nReal := envInt(t, "MUSTER_RESTORE_REAL", 3)
	nChanges := envInt(t, "MUSTER_RESTORE_CHANGES", 20)
	nJoins := envInt(t, "MUSTER_RESTORE_JOINS", 5)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	store := s3test.StartTLS(t)
	store.MakeBucket(t, "muster-backups")
	creds := store.CredentialsFile(t, "")
	s := startServer(t, "")
	c := adminClient(t, s)
	token := newToken(t, s)
	tokenFile := writeTokenFile(t, token)

	start := time.Now()
	fleet, err := simulate.New(ctx, simulate.Config{Server: s.url(), Token: token, Count: nSim, Prefix: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	if err := fleet.Join(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var reals []*agentProc
	for i := range nReal {
		reals = append(reals, startAgent(t, s, t.TempDir(), "--token-file", tokenFile, "--node-name", fmt.Sprintf("real-%d", i)))
	}
	known := nSim + nReal
	waitFor(t, 300*time.Second, fmt.Sprintf("%d machines Running", known), func() bool {
		phases, _, err := fleetState(c)
		return err == nil && countPhase(phases, "Running") == known
	})
	t.Logf("%d simulated and %d real agents Running in %s", nSim, nReal, time.Since(start).Round(100*time.Millisecond))
	// A plan of their own on the real machines, the snapshot's.
	for i := range nReal {
		setPlan(t, c, fmt.Sprintf("real-%d", i), "echo snapshot")
	}
	waitFor(t, 120*time.Second, "the real agents to apply the snapshot's plans", func() bool {
		_, plans, err := fleetState(c)
		if err != nil {
			return false
		}
		for i := range nReal {
			if p := plans[fmt.Sprintf("real-%d", i)]; p == nil || !p.Applied() || len(p.Spec.Instructions) == 0 {
				return false
			}
		}
		return true
	})

	// T: what the snapshot holds.
	phasesAtT, plansAtT, err := fleetState(c)
	if err != nil {
		t.Fatal(err)
	}
	snapshotPlan := map[string]string{}
	for name, p := range plansAtT {
		snapshotPlan[name] = p.Status.Checksum
	}
	registrations := registrationCount(t, c)
	historyAtT := map[string]string{}
	for _, name := range []string{"real-0", "fleet-0"} {
		out, err := historyCLI(s, "machine/"+name)
		if err != nil {
			t.Fatalf("history of %s: %v\n%s", name, err, out)
		}
		historyAtT[name] = out
	}
	began := time.Now()
	out, err := datastoreCLI(s, nil, append([]string{"datastore", "snapshot", "s3://muster-backups/site-a/"}, s3CLIFlags(store, creds)...)...)
	if err != nil {
		t.Fatalf("snapshot to S3: %v\n%s", err, out)
	}
	t.Logf("figure: snapshot of %d machines to S3 in %s: %s", len(phasesAtT), time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
	m := regexp.MustCompile(`s3://muster-backups/(site-a/\S+\.snapshot)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the output names no object:\n%s", out)
	}
	object := m[1]

	// After T: plan changes the snapshot will not know, and joins.
	// The real machines first: their agents show they applied the
	// snapshot's plan again.
	var names []string
	for i := range nReal {
		names = append(names, fmt.Sprintf("real-%d", i))
	}
	for name := range plansAtT {
		if !strings.HasPrefix(name, "real-") {
			names = append(names, name)
		}
	}
	for i := range nChanges {
		setPlan(t, c, names[i%len(names)], fmt.Sprintf("echo after-%d", i))
	}
	late, err := simulate.New(ctx, simulate.Config{Server: s.url(), Token: token, Count: nJoins - 1, Prefix: "late"})
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Join(ctx, nil); err != nil {
		t.Fatal(err)
	}
	lateReal := startAgent(t, s, t.TempDir(), "--token-file", tokenFile, "--node-name", "late-real")
	waitFor(t, 120*time.Second, "the agents joined after T to be Running", func() bool {
		phases, _, err := fleetState(c)
		return err == nil && countPhase(phases, "Running") == known+nJoins
	})
	// No agent may need its token again.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}

	// The worst day: the server killed, its disk gone. The operator kept
	// the server token (as docs/datastore.md says), and the bucket.
	serverTokenFile := writeSecretFile(t, serverToken(t, s))
	s.kill9()
	if err := os.RemoveAll(s.dataDir); err != nil {
		t.Fatal(err)
	}
	r := newServer(t, s.host, "", "--token-file", serverTokenFile)
	r.port = s.port
	began = time.Now()
	out, err = datastoreCLI(r, []string{"TMPDIR=" + t.TempDir()}, append([]string{"datastore", "restore", "s3://muster-backups/" + object}, s3CLIFlags(store, creds)...)...)
	if err != nil {
		t.Fatalf("restore from S3: %v\n%s", err, out)
	}
	t.Logf("figure: restore from S3 in %s: %s", time.Since(began).Round(time.Millisecond), strings.TrimSpace(out))
	r.start()
	ready := time.Now()
	rc := adminClient(t, r)

	// Every agent the snapshot knows: heard by the restored server,
	// Running, with the snapshot's plan applied (the real agents whose
	// plan changed after T applied it again), within 60 s of the restored
	// server being ready.
	var last, why string
	behind := 0
	t.Cleanup(func() {
		if t.Failed() {
			out, err := r.kubectl("get", "machines")
			t.Logf("%d agents the snapshot knows were behind; the last: %s (%s); machines (%v):\n%s", behind, last, why, err, out)
		}
	})
	waitFor(t, 60*time.Second, "every agent the snapshot knows heard, Running, with the snapshot's plan", func() bool {
		phases, plans, err := fleetState(rc)
		if err != nil {
			return false
		}
		heard, err := heardSince(r, time.Since(ready))
		if err != nil {
			return false
		}
		behind = 0
		for name := range phasesAtT {
			p := plans[name]
			restored := !strings.HasPrefix(name, "real-") || !slices.Contains(names[:min(nChanges, len(names))], name) || hasOutput(p, "planRestored")
			if !heard[name] || phases[name] != "Running" || p == nil || p.Status.Checksum != snapshotPlan[name] || !p.Applied() || !restored {
				behind++
				last = name
				why = fmt.Sprintf("heard %v, phase %s, plan restored %v, applied %v", heard[name], phases[name], restored, p != nil && p.Applied() && p.Status.Checksum == snapshotPlan[name])
			}
		}
		return behind == 0
	})
	t.Logf("figure: %d agents the snapshot knows (%d simulated, %d real) Running with the snapshot's plans %s after the restored server was ready (last: %s)",
		len(phasesAtT), nSim, nReal, time.Since(ready).Round(100*time.Millisecond), last)

	// The agents that joined after T rejoin by themselves.
	waitFor(t, 120*time.Second, "the agents that joined after T to rejoin and be Running", func() bool {
		phases, _, err := fleetState(rc)
		return err == nil && countPhase(phases, "Running") == known+nJoins && late.Rejoined() == nJoins-1
	})
	lateReal.waitOutput("rejoined as machine late-real", 30*time.Second)
	t.Logf("figure: %d agents that joined after the snapshot rejoined, all Running %s after the restored server was ready",
		nJoins, time.Since(ready).Round(100*time.Millisecond))

	if n := fleet.Rejoined(); n != 0 {
		t.Errorf("%d agents the snapshot knows rejoined: none should have needed to", n)
	}
	for _, a := range reals {
		select {
		case <-a.exited:
			t.Fatalf("real agent exited after the restore:\n%s", a.log.String())
		default:
		}
		if strings.Contains(a.log.String(), "rejoined as machine") {
			t.Errorf("a real agent the snapshot knows rejoined:\n%s", a.log.String())
		}
	}
	if got := registrationCount(t, rc); got != registrations+nJoins {
		t.Errorf("%d ClusterRegistrations after the restore, %d at T: only the %d agents that joined after T may register again", got, registrations, nJoins)
	}
	for name, before := range historyAtT {
		out, err := historyCLI(r, "machine/"+name)
		if err != nil {
			t.Fatalf("history of %s after the restore: %v\n%s", name, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(before), "\n") {
			if !strings.Contains(out, line) {
				t.Errorf("the restored history of machine %s lacks %q, recorded before the snapshot:\n%s", name, line, out)
			}
		}
	}
}
