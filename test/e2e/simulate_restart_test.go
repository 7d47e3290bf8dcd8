package e2e

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestSimulateRidesThroughServerRestart (issue 13, finding 13): with
// --plan-updates, `muster-agent simulate` keeps running while the server is
// killed and restarted, says when it lost the server and how long it took
// to come back, goes on applying plan changes afterwards, and its summary
// counts the errors by kind.
func TestSimulateRidesThroughServerRestart(t *testing.T) {
	// Not parallel: a simulated fleet keeps a core busy.
	s := startServer(t, "")
	token := newToken(t, s)
	sim := runAgentBinary(t, "simulate", "--server", s.url(), "--token", token, "--count", "5", "--concurrency", "5",
		"--plan-updates", "10", "--kubeconfig", s.kubeconfig())
	sim.waitOutput("simulate: joined 5/5", 60*time.Second)

	s.kill9()
	sim.waitOutput("simulate: lost the server", 30*time.Second)
	s.start()
	sim.waitOutput("simulate: the server answers again after", 60*time.Second)

	// Plan changes made after the restart are applied by the simulated agents.
	restarted := time.Now()
	c := adminClient(t, s)
	waitFor(t, 60*time.Second, "a plan change after the restart to be applied", func() bool {
		plans, err := c.MusterV1alpha1().MachinePlans().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range plans.Items {
			if p.Status.State == api.PlanStateSucceeded && p.Status.LastAppliedTime != nil && p.Status.LastAppliedTime.After(restarted) {
				return true
			}
		}
		return false
	})
	select {
	case <-sim.exited:
		t.Fatalf("simulate ended after the server restart:\n%s", sim.log.String())
	default:
	}
	_ = sim.cmd.Process.Signal(syscall.SIGINT)
	out, code := sim.waitExit(30 * time.Second)
	if code != 0 {
		t.Errorf("simulate exited %d after SIGINT:\n%s", code, out)
	}
	last := out[strings.LastIndex(out, "simulate: stopped"):]
	if !regexp.MustCompile(`errors: .*(connection refused|HTTP 503|connection closed|connection reset) \d+`).MatchString(last) ||
		!strings.Contains(last, "outage(s), time to recover max") {
		t.Errorf("the summary does not count the errors by kind and the time to recover:\n%s", last)
	}
	t.Log(strings.TrimSpace(last))
}
