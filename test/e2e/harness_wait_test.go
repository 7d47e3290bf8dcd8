package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func countPhase(ms map[string]string, phase string) int {
	n := 0
	for _, p := range ms {
		if p == phase {
			n++
		}
	}
	return n
}

// waitSetCondition waits until the set's status describes its current
// spec and cond has status want: a status of an older generation, still
// Complete from the last revision, does not count.
func waitSetCondition(t *testing.T, s *server, set, cond, want string) {
	t.Helper()
	waitFor(t, 90*time.Second, fmt.Sprintf("plan set %s %s=%s", set, cond, want), func() bool {
		f := strings.Fields(setCondition(s, set, cond))
		return len(f) >= 3 && f[0] == f[1] && f[2] == want
	})
}

func allRunning(c clientset.Interface, names ...string) bool {
	for _, n := range names {
		m, err := c.MusterV1alpha1().Machines().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil || m.Status.Phase != api.MachinePhaseRunning {
			return false
		}
	}
	return true
}

// planApplied reports whether machine's agent applied its current plan.
func planApplied(c clientset.Interface, machine string) bool {
	p, err := c.MusterV1alpha1().MachinePlans().Get(context.Background(), machine, metav1.GetOptions{})
	return err == nil && p.Status.State == api.PlanStateSucceeded && p.Status.Checksum != "" && p.Status.AppliedChecksum == p.Status.Checksum
}

func waitForEvent(t *testing.T, s *server, what string, match func(row string) bool, args ...string) string {
	t.Helper()
	var found string
	waitFor(t, 30*time.Second, what, func() bool {
		for _, r := range eventRows(t, s, args...) {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

func waitPhase(t *testing.T, s *server, machine, phase string, timeout time.Duration) {
	t.Helper()
	// kubectl wait gives up at once on a Machine that does not exist yet:
	// an agent started a moment ago may not have registered.
	start := time.Now()
	waitFor(t, timeout, "machine "+machine+" to exist", func() bool {
		_, err := s.kubectl("get", "machine", machine, "-o", "name")
		return err == nil
	})
	timeout = max(timeout-time.Since(start), time.Second)
	out, err := s.kubectl("wait", "machine/"+machine, "--for=jsonpath={.status.phase}="+phase, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds())))
	if err != nil {
		got := s.mustKubectl("get", "machine", machine, "-o", "jsonpath={.status.phase} {.status.transitions[*].event}")
		t.Fatalf("machine %s did not reach %s: %v\n%s\nnow: %s", machine, phase, err, out, got)
	}
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}

type deleted struct {
	name   string
	stream int
}
