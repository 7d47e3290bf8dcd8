package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServerSaysItWaitsForTheDatastore: a server whose PostgreSQL is not
// there says what it waits for every few seconds, without the password,
// instead of saying nothing until it gives up.
func TestServerSaysItWaitsForTheDatastore(t *testing.T) {
	port := freePort(t) // nothing listens there
	s := newServer(t, "127.0.0.1", fmt.Sprintf("postgres://muster:hunter2secret@127.0.0.1:%d/muster", port))
	s.launch()
	waitFor(t, 15*time.Second, "the server to say it still waits for the datastore", func() bool {
		return strings.Contains(s.log.String(), "still waiting for the datastore at postgres://muster:xxxxx@127.0.0.1:")
	})
	if log := s.log.String(); strings.Contains(log, "hunter2secret") || !strings.Contains(log, fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("the waiting line leaks the password or omits the address:\n%s", log)
	}
}

// TestAgentStopsCleanly: SIGTERM and SIGINT stop the agent with exit 0 and
// a last line, while it runs and while it is still joining.
func TestAgentStopsCleanly(t *testing.T) {
	s := startServer(t, "")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		a := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", strings.ToLower("stop-"+sig.String()[:3]+fmt.Sprint(int(sig))))
		a.waitOutput("running as machine", 30*time.Second)
		_ = a.cmd.Process.Signal(sig)
		out, code := a.waitExit(30 * time.Second)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || !strings.Contains(lines[len(lines)-1], "stopped") {
			t.Errorf("running agent after %v: exit %d, want 0 and a last line saying it stopped\n%s", sig, code, out)
		}

		// Still joining: waiting for a manual approval.
		w := startAgent(t, s, t.TempDir(), "--token", newToken(t, s, "--manual-approval"), "--node-name", fmt.Sprintf("waiting-%d", int(sig)))
		w.waitOutput("to be approved", 30*time.Second)
		_ = w.cmd.Process.Signal(sig)
		out, code = w.waitExit(30 * time.Second)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || !strings.Contains(lines[len(lines)-1], "stopped") {
			t.Errorf("joining agent after %v: exit %d, want 0 and a last line saying it stopped\n%s", sig, code, out)
		}
	}
}
