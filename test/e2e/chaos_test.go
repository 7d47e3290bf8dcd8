package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestChaosServerKilledWhileFleetJoins kills the server with -9 at random
// moments while hundreds of simulated agents join and plans change, and a
// real agent process joins during one of the outages. Afterwards every
// agent has exactly one Machine, all Running; no registration is left
// waiting; every recorded transition is legal; and the simulator rode
// through the outages and says so instead of dying.
func TestChaosServerKilledWhileFleetJoins(t *testing.T) {
	// Not parallel: a joining fleet keeps a core busy.
	const agents, kills = 200, 4
	s := startServer(t, "")
	ctx := context.Background()
	c := adminClient(t, s)
	if _, err := c.MusterV1alpha1().Clusters().Create(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "chaos"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := newToken(t, s, "--cluster", "chaos")
	sim := runAgentBinary(t, "simulate", "--server", s.url(), "--token", token, "--count", fmt.Sprint(agents), "--concurrency", "50",
		"--plan-updates", "10", "--kubeconfig", s.kubeconfig())

	var real *agentProc
	for i := 0; i < kills; i++ {
		time.Sleep(time.Duration(500+rand.IntN(2500)) * time.Millisecond)
		s.kill9()
		if i == 1 {
			// A real agent starts while the server is down: it must wait
			// for it, not give up.
			real = startAgent(t, s, t.TempDir(), "--token", token, "--node-name", "chaos-real")
		}
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
		s.start()
	}
	select {
	case <-sim.exited:
		t.Fatalf("the simulator died during the outages:\n%s", sim.log.String())
	default:
	}
	real.waitOutput("running as machine chaos-real", 90*time.Second)

	waitFor(t, 180*time.Second, "every agent's Machine to be Running", func() bool {
		ms, err := c.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, m := range ms.Items {
			if m.Status.Phase == api.MachinePhaseRunning {
				running++
			}
		}
		t.Logf("%d machines, %d running", len(ms.Items), running)
		return len(ms.Items) == agents+1 && running == agents+1
	})
	ms, err := c.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Items {
		if m.Name != "chaos-real" && !strings.HasPrefix(m.Name, "sim-") {
			t.Errorf("unexpected machine %s", m.Name)
		}
		for _, tr := range m.Status.Transitions {
			if ev, err := fsm.Machine.EventFor(tr.From, tr.To); err != nil || ev != tr.Event {
				t.Errorf("machine %s recorded an illegal transition %+v (%v)", m.Name, tr, err)
			}
		}
	}
	waitFor(t, 60*time.Second, "no registration left waiting", func() bool {
		regs, err := c.MusterV1alpha1().ClusterRegistrations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, r := range regs.Items {
			if r.Status.Phase == api.RegistrationPhasePending || r.Status.Phase == api.RegistrationPhaseApproved {
				return false
			}
			for _, tr := range r.Status.Transitions {
				if ev, err := fsm.Registration.EventFor(tr.From, tr.To); err != nil || ev != tr.Event {
					t.Errorf("registration %s recorded an illegal transition %+v", r.Name, tr)
				}
			}
		}
		return true
	})
	select {
	case <-sim.exited:
		t.Fatalf("the simulator died:\n%s", sim.log.String())
	default:
	}
	out := sim.log.String()
	for _, want := range []string{fmt.Sprintf("joined %d/%d", agents, agents), "lost the server", "the server answers again after"} {
		if !strings.Contains(out, want) {
			t.Errorf("the simulator did not report %q:\n%s", want, out)
		}
	}
}
