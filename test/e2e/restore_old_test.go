package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// restoreRounds is how many plan changes each agent applies after the
// snapshot: every change is several datastore writes (the plan, its
// in-progress and succeeded reports, the Machine's Updating and Running),
// so the agents end up hundreds of revisions past the snapshot, far past
// what the restored server writes while it starts.
const restoreRounds = 20

// TestRestoreOlderThanFleet (issue 30, "Restore older than the fleet"): a
// snapshot is restored after the agents have gone on to revisions and plans
// the snapshot does not hold. With no agent restarted by hand, every agent
// the snapshot knows is Running again, with the snapshot's plan applied on
// its machine (the server's record wins) and an Event that says so, and
// with a watch that works: a plan set after the restore is applied. No
// agent registers again but the one that joined after the snapshot, which
// rejoins by itself with its certificate and node password (internal/rejoin).
func TestRestoreOlderThanFleet(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testRestoreOlderThanFleet(t, b) })
	}
}

// restoreAgent is one agent of the test and the file its plans write.
type restoreAgent struct {
	name  string
	proc  *agentProc
	state string
}

func (a restoreAgent) wrote() string {
	b, _ := os.ReadFile(a.state)
	return string(b)
}

// setStatePlans gives every agent a plan that writes value into its state
// file, and waits until each has applied it and the file says so.
func setStatePlans(t *testing.T, c clientset.Interface, agents []restoreAgent, value string) {
	t.Helper()
	for _, a := range agents {
		setPlan(t, c, a.name, fmt.Sprintf("printf %%s %s > %s", value, a.state))
	}
	for _, a := range agents {
		waitFor(t, 60*time.Second, a.name+" to apply the plan writing "+value, func() bool {
			return planApplied(c, a.name) && a.wrote() == value
		})
	}
}

func registrationCount(t *testing.T, c clientset.Interface) int {
	t.Helper()
	regs, err := c.MusterV1alpha1().ClusterRegistrations().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(regs.Items)
}

func testRestoreOlderThanFleet(t *testing.T, b backend) {
	src := startServer(t, b.endpoint(t))
	c := adminClient(t, src)
	tokenFile := writeTokenFile(t, newToken(t, src))
	states := t.TempDir()
	var agents []restoreAgent
	for i := range 3 {
		name := fmt.Sprintf("old-%d", i)
		a := restoreAgent{name: name, state: filepath.Join(states, name)}
		a.proc = startAgent(t, src, t.TempDir(), "--token-file", tokenFile, "--node-name", name)
		a.proc.waitOutput("running as machine "+name, 60*time.Second)
		agents = append(agents, a)
	}
	for _, a := range agents {
		waitPhase(t, src, a.name, "Running", 60*time.Second)
	}
	setStatePlans(t, c, agents, "snapshot")
	// The plans the snapshot holds, by checksum.
	snapshotPlan := map[string]string{}
	for _, a := range agents {
		p, err := c.MusterV1alpha1().MachinePlans().Get(context.Background(), a.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		snapshotPlan[a.name] = p.Status.Checksum
	}
	registrations := registrationCount(t, c)

	file := filepath.Join(t.TempDir(), "muster.snapshot")
	env := []string{"MUSTER_DATASTORE_ENDPOINT=" + src.endpoint}
	out, err := datastoreCLI(src, env, "datastore", "snapshot", file)
	if err != nil {
		t.Fatalf("snapshot: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))

	// The fleet moves on: plan after plan the snapshot will not know, and
	// a machine that joins after it.
	for round := 1; round <= restoreRounds; round++ {
		setStatePlans(t, c, agents, fmt.Sprintf("after-%d", round))
	}
	lateDir := t.TempDir()
	late := startAgent(t, src, lateDir, "--token-file", tokenFile, "--node-name", "late")
	late.waitOutput("running as machine late", 60*time.Second)
	waitPhase(t, src, "late", "Running", 60*time.Second)
	// Its rejoin needs no join token: the file is gone.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	seen, err := c.MusterV1alpha1().MachinePlans().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.stop()

	// The documented restore: into an empty datastore, the server started
	// on it with the deployment's server token, where the agents look.
	endpoint := b.endpoint(t)
	r := newServer(t, src.host, endpoint, "--token-file", writeSecretFile(t, serverToken(t, src)))
	r.port = src.port
	out, err = datastoreCLI(r, []string{"MUSTER_DATASTORE_ENDPOINT=" + endpoint}, "datastore", "restore", file)
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	r.start()
	started := time.Now()
	rc := adminClient(t, r)

	// Every agent the snapshot knows, without a restart: Running, its
	// machine brought back to the snapshot's plan, reported applied.
	var mu sync.Mutex
	back := map[string]time.Duration{}
	waitFor(t, 60*time.Second, "every agent the snapshot knows to be Running with the snapshot's plan applied again", func() bool {
		for _, a := range agents {
			mu.Lock()
			_, done := back[a.name]
			mu.Unlock()
			if done {
				continue
			}
			p, err := rc.MusterV1alpha1().MachinePlans().Get(context.Background(), a.name, metav1.GetOptions{})
			if err != nil || !p.Applied() || p.Status.Checksum != snapshotPlan[a.name] || a.wrote() != "snapshot" || !allRunning(rc, a.name) {
				continue
			}
			mu.Lock()
			back[a.name] = time.Since(started)
			mu.Unlock()
		}
		return len(back) == len(agents)
	})
	var slowest time.Duration
	for _, d := range back {
		slowest = max(slowest, d)
	}
	t.Logf("figure: %d agents Running with the snapshot's plan applied %s after the restored server was ready (each: %v)",
		len(agents), slowest.Round(100*time.Millisecond), back)
	// What the agents said about it, for whoever reads the test's log.
	for _, l := range strings.Split(agents[0].proc.log.String(), "\n") {
		if strings.Contains(l, "restored") || strings.Contains(l, "answers again") || strings.Contains(l, "lost the server") {
			t.Logf("%s: %s", agents[0].name, l)
		}
	}
	for _, a := range agents {
		select {
		case <-a.proc.exited:
			t.Fatalf("agent %s exited after the restore:\n%s", a.name, a.proc.log.String())
		default:
		}
		p, _ := rc.MusterV1alpha1().MachinePlans().Get(context.Background(), a.name, metav1.GetOptions{})
		if !hasOutput(p, "planRestored") {
			t.Errorf("plan %s's status does not say it was applied again after the restore: %+v", a.name, p.Status.Output)
		}
		waitForEvent(t, r, "a PlanRestored Event on machine "+a.name, func(row string) bool {
			return strings.Contains(row, "PlanRestored Machine/"+a.name+" ")
		}, "--field-selector", "reason=PlanRestored")
	}

	// Any other watcher that saw the old datastore (a controller, kubectl
	// get -w) is told to list again, rather than left on a silent watch;
	// a list at its revision is answered at once, not after a wait.
	w, err := rc.MusterV1alpha1().MachinePlans().Watch(context.Background(), metav1.ListOptions{ResourceVersion: seen.ResourceVersion})
	if err == nil {
		w.Stop()
	}
	if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "restored") {
		t.Errorf("a watch from revision %s, which the restored datastore has not reached: %v; want 410 Expired saying the datastore was restored", seen.ResourceVersion, err)
	}
	asked := time.Now()
	_, err = rc.MusterV1alpha1().MachinePlans().List(context.Background(), metav1.ListOptions{ResourceVersion: seen.ResourceVersion})
	if !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) || time.Since(asked) > 2*time.Second {
		t.Errorf("a list at revision %s: %v after %s; want Too large resource version at once", seen.ResourceVersion, err, time.Since(asked).Round(time.Millisecond))
	}

	// Their watches work: a plan set now reaches them (no agent waits for
	// a revision of the old datastore).
	setStatePlans(t, rc, agents, "after-restore")

	// The machine that joined after the snapshot is unknown to the
	// restored server: its agent, never restarted, joins again by itself
	// with its certificate and its node password (the same file), as a new
	// Machine of the same name, and is Running; the server says so.
	password, err := os.ReadFile(filepath.Join(lateDir, "node-password"))
	if err != nil {
		t.Fatal(err)
	}
	late.waitOutput("rejoined as machine late", 60*time.Second)
	waitPhase(t, r, "late", "Running", 60*time.Second)
	select {
	case <-late.exited:
		t.Fatalf("the agent of the machine the snapshot does not know exited instead of rejoining:\n%s", late.log.String())
	default:
	}
	if now, err := os.ReadFile(filepath.Join(lateDir, "node-password")); err != nil || string(now) != string(password) {
		t.Errorf("the rejoined agent's node password changed (%v): it must rejoin with the one it has", err)
	}
	waitForEvent(t, r, "a Rejoined Event on machine late", func(row string) bool {
		return strings.Contains(row, "Rejoined Machine/late ")
	}, "--field-selector", "reason=Rejoined")

	if got := registrationCount(t, rc); got != registrations+1 {
		t.Errorf("%d ClusterRegistrations after the restore, %d in the snapshot: only the machine that joined after it may register again", got, registrations)
	}
}

func hasOutput(p *api.MachinePlan, name string) bool {
	if p == nil {
		return false
	}
	for _, o := range p.Status.Output {
		if o.Name == name {
			return true
		}
	}
	return false
}
