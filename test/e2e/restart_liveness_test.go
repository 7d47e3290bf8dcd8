package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestRestartBringsNoDeadMachineBack: a server restart does not mark dead
// machines alive. A machine Unavailable because its agent is gone stays
// Unavailable (it used to go Running, AgentReturned, and back a threshold
// later); a machine whose agent died while the server was down goes
// Unavailable within a threshold of the start; a machine whose agent lives
// ends Running.
func TestRestartBringsNoDeadMachineBack(t *testing.T) {
	t.Parallel()
	const silence = 8 * time.Second
	s := startServer(t, "", "--agent-silence-threshold", silence.String())
	token := newToken(t, s)
	agents := map[string]*agentProc{}
	for _, name := range []string{"gone", "dies", "lives"} {
		agents[name] = startAgent(t, s, t.TempDir(), "--token", token, "--node-name", name)
	}
	for name, a := range agents {
		a.waitOutput("running as machine "+name, 60*time.Second)
		waitPhase(t, s, name, "Running", 60*time.Second)
	}
	agents["gone"].kill()
	waitPhase(t, s, "gone", "Unavailable", silence+30*time.Second)

	s.stop()
	agents["dies"].kill()
	s.start()

	// "dies" goes Unavailable a threshold after the start at the earliest:
	// by then anything the start alone could do to "gone" has been done.
	waitPhase(t, s, "dies", "Unavailable", silence+30*time.Second)
	waitPhase(t, s, "lives", "Running", 30*time.Second)
	got := s.mustKubectl("get", "machine", "gone", "-o", "jsonpath={.status.phase} {.status.transitions[*].event}")
	if !strings.HasPrefix(got, "Unavailable ") || strings.Contains(got, "agent-returned") {
		t.Errorf("the machine of an agent dead before the restart was brought back: %s", got)
	}
}
