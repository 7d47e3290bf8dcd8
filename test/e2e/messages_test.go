package e2e

import (
	"encoding/json"
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
	t.Parallel()
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
	t.Parallel()
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
		w.waitOutput("waiting for the registration", 30*time.Second)
		_ = w.cmd.Process.Signal(sig)
		out, code = w.waitExit(30 * time.Second)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || !strings.Contains(lines[len(lines)-1], "stopped") {
			t.Errorf("joining agent after %v: exit %d, want 0 and a last line saying it stopped\n%s", sig, code, out)
		}
	}
}

// TestAgentServerURLMessages: a --server the agent could only retry forever
// is refused at once with the URL to use; one without a port says, after a
// few tries, that it dials 443.
func TestAgentServerURLMessages(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	tok := newToken(t, s)
	hostPort := strings.TrimPrefix(s.url(), "https://")
	for _, tc := range []struct{ server, want string }{
		{hostPort, "use --server https://" + hostPort},
		{"http://" + hostPort, "uses http: muster-server serves only HTTPS, use --server https://" + hostPort},
	} {
		a := runAgentBinaryEnv(t, []string{"MUSTER_TOKEN=" + tok}, "--server", tc.server, "--data-dir", t.TempDir(), "--node-name", "url-test")
		if out, code := a.waitExit(10 * time.Second); code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("--server %s: exit %d, want non-zero and %q\n%s", tc.server, code, tc.want, out)
		}
	}
	// Port 443 of a loopback address nothing listens on: refused at once,
	// as a firewall's silence would be after a timeout.
	a := runAgentBinaryEnv(t, []string{"MUSTER_TOKEN=" + tok}, "--server", "https://127.0.0.7", "--data-dir", t.TempDir(), "--node-name", "url-test")
	a.waitOutput("has no port, so the agent dials port 443", 20*time.Second)
	if !strings.Contains(a.log.String(), "try --server https://127.0.0.7:9443") {
		t.Errorf("the port hint does not say what to try:\n%s", a.log.String())
	}
}

// TestWrongJoinTokenMessages: an unknown token id or a wrong secret tells
// the agent what to do; the server's log names the token id and the
// client's address, never the secret.
func TestWrongJoinTokenMessages(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	tok := newToken(t, s)
	prefix, secret, _ := strings.Cut(tok, ".")
	wrongSecret := prefix + "." + strings.Repeat("0", len(secret))
	casHash, _, _ := strings.Cut(tok, "::")
	unknownID := casHash + "::nosuch1." + secret
	for _, bad := range []string{wrongSecret, unknownID} {
		a := runAgentBinaryEnv(t, []string{"MUSTER_TOKEN=" + bad}, "--server", s.url(), "--data-dir", t.TempDir(), "--node-name", "bad-token")
		out, code := a.waitExit(30 * time.Second)
		if code == 0 || !strings.Contains(out, "the server does not know this join token") || !strings.Contains(out, "muster-server token create") {
			t.Errorf("agent with a bad token: exit %d\n%s", code, out)
		}
	}
	waitFor(t, 10*time.Second, "the server to log the refusal", func() bool {
		return strings.Contains(s.log.String(), "Refused join tokens that are not known")
	})
	id := strings.TrimPrefix(prefix, casHash+"::")
	log := s.log.String()
	if !strings.Contains(log, `lastTokenID="`+id+`"`) || !strings.Contains(log, `lastClient="127.0.0.1"`) || strings.Contains(log, secret) || strings.Contains(log, strings.Repeat("0", len(secret))) {
		t.Errorf("the server's log of the refusal should name token id %s and the client, never the secret:\n%s", id, log)
	}
}

// TestLogFormat: each binary writes one format: kine's lines come through
// klog (no logrus lines in the text log), and with --log-format json every
// line of either binary is a JSON object.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	text := startServer(t, "")
	if log := text.log.String(); strings.Contains(log, "level=info msg=") || !strings.Contains(log, `component="kine"`) {
		t.Errorf("kine's lines should come through klog, as every other line does:\n%s", log)
	}

	s := startServer(t, "", "--log-format", "json")
	a := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "json-1", "--log-format", "json")
	a.waitOutput("running as machine json-1", 30*time.Second)
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	agentLog, code := a.waitExit(30 * time.Second)
	if code != 0 {
		t.Errorf("agent exit %d after SIGTERM", code)
	}
	s.stop()
	for name, log := range map[string]string{"muster-server": s.log.String(), "muster-agent": agentLog} {
		kine := false
		for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
			var obj map[string]interface{}
			if err := json.Unmarshal([]byte(line), &obj); err != nil || obj["msg"] == nil || obj["ts"] == nil {
				t.Errorf("%s --log-format json wrote a line that is not a JSON log object (%v): %s", name, err, line)
				continue
			}
			kine = kine || obj["component"] == "kine"
		}
		if name == "muster-server" && !kine {
			t.Errorf("no kine line in the server's JSON log:\n%s", log)
		}
	}
	if bad := runAgentBinary(t, "--server", s.url(), "--log-format", "xml"); true {
		if out, code := bad.waitExit(10 * time.Second); code == 0 || !strings.Contains(out, "give text or json") {
			t.Errorf("--log-format xml: exit %d\n%s", code, out)
		}
	}
}
