package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestPlanSetDeletedMachineRecovers: a machine a plan set's failed
// revision took to Failed is not left Failed, with no plan, when the set
// is deleted: with the set's plan gone nothing failed and nothing is left
// to apply, so it goes back to Running by itself (issue 33, item 7).
func TestPlanSetDeletedMachineRecovers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	runAgentBinaryEnv(t, []string{"PLANSET_OUT=" + t.TempDir()},
		"--server", s.url(), "--data-dir", t.TempDir(), "--token", token, "--node-name", "gone-1", "--label", "set=gone")
	waitFor(t, 60*time.Second, "machine gone-1 to register", func() bool {
		_, err := s.kubectl("get", "machine", "gone-1")
		return err == nil
	})
	waitPhase(t, s, "gone-1", "Running", 60*time.Second)

	applySet(t, s, strings.Replace(setDoc("gone", "set: gone", "v1", ""), "printf", "exit 3; printf", 1))
	waitPhase(t, s, "gone-1", "Failed", 60*time.Second)

	s.mustKubectl("delete", "machineplanset", "gone", "--wait=true")
	waitFor(t, 30*time.Second, "the set's plan to go", func() bool {
		_, err := s.kubectl("get", "machineplan", "gone-1")
		return err != nil
	})
	waitPhase(t, s, "gone-1", "Running", 30*time.Second)
	if reasons := s.mustKubectl("get", "machine", "gone-1", "-o", "jsonpath={.status.transitions[*].reason}"); !strings.Contains(reasons, "PlanRemoved") {
		t.Errorf("the way back from Failed does not say the plan was removed: %s", reasons)
	}
}
