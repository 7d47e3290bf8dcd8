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
	started := time.Now()

	// Over a whole threshold after the start, and a little more, "gone"
	// never leaves Unavailable: nothing was heard from it.
	for time.Since(started) < silence+3*time.Second {
		if phase := s.mustKubectl("get", "machine", "gone", "-o", "jsonpath={.status.phase}"); phase != "Unavailable" {
			t.Fatalf("%s after the restart, the machine of a dead agent is %s:\n%s", time.Since(started).Round(time.Second), phase,
				s.mustKubectl("get", "machine", "gone", "-o", "jsonpath={.status.transitions}"))
		}
		time.Sleep(500 * time.Millisecond) // polling an invariant, not waiting for one
	}
	if events := s.mustKubectl("get", "machine", "gone", "-o", "jsonpath={.status.transitions[*].event}"); strings.Contains(events, "agent-returned") {
		t.Errorf("the dead agent's machine was brought back: %s", events)
	}
	waitPhase(t, s, "dies", "Unavailable", silence+30*time.Second)
	waitPhase(t, s, "lives", "Running", 30*time.Second)
}
