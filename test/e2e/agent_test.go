package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// agentProc is one muster-agent process.
type agentProc struct {
	t       testing.TB
	dataDir string
	cmd     *exec.Cmd
	log     *syncBuffer
	exited  chan struct{}
}

// startAgent runs muster-agent against s with the given flags.
func startAgent(t testing.TB, s *server, dataDir string, args ...string) *agentProc {
	t.Helper()
	a := runAgentBinary(t, append([]string{"--server", s.url(), "--data-dir", dataDir}, args...)...)
	a.dataDir = dataDir
	return a
}

// runAgentBinary runs the muster-agent binary with args, killed at the end of the test.
func runAgentBinary(t testing.TB, args ...string) *agentProc {
	t.Helper()
	return runAgentBinaryEnv(t, nil, args...)
}

func (a *agentProc) kill() {
	select {
	case <-a.exited:
	default:
		_ = a.cmd.Process.Signal(syscall.SIGKILL)
		<-a.exited
	}
}

// waitFor waits until the agent's output contains want.
func (a *agentProc) waitOutput(want string, timeout time.Duration) {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(a.log.String(), want) {
			return
		}
		select {
		case <-a.exited:
			if strings.Contains(a.log.String(), want) {
				return
			}
			a.t.Fatalf("muster-agent exited (%v) before %q:\n%s", a.cmd.ProcessState, want, a.log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	a.t.Fatalf("muster-agent did not say %q within %s:\n%s", want, timeout, a.log.String())
}

// waitExit waits for the agent to give up and returns its output.
func (a *agentProc) waitExit(timeout time.Duration) (string, int) {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.log.String(), a.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		a.t.Fatalf("muster-agent still running after %s:\n%s", timeout, a.log.String())
		return "", 0
	}
}

func newToken(t *testing.T, s *server, args ...string) string {
	t.Helper()
	return strings.TrimSpace(s.muster(t, append([]string{"token", "create"}, args...)...))
}

// TestJoin: token create, agent join, pivot, restart without re-registering,
// and no secret stored or logged — on SQLite and PostgreSQL.
func TestJoin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		token := newToken(t, s)
		dir := t.TempDir()
		start := time.Now()
		a := startAgent(t, s, dir, "--token", token, "--node-name", "edge-1", "--role", "worker", "--label", "site=17")
		a.waitOutput("running as machine edge-1", 60*time.Second)
		t.Logf("join took %s", time.Since(start).Round(time.Millisecond))

		waitPhase(t, s, "edge-1", "Running", 30*time.Second)
		out := s.mustKubectl("get", "machine", "edge-1", "-o", "jsonpath={.spec.roles} {.metadata.labels.site} {.status.transitions[0].event}")
		if out != `["worker"] 17 register` {
			t.Errorf("machine: %q", out)
		}
		if out := s.mustKubectl("get", "clusterregistrations", "-o", "jsonpath={.items[*].status.phase}: {.items[*].status.transitions[*].event}"); out != "Granted: approve grant" {
			t.Errorf("registrations: %q, want one Granted with its history", out)
		}
		// A token without manual approval is granted in the registration's answer.
		if strings.Contains(a.log.String(), "waiting for the registration") {
			t.Errorf("the agent waited for a grant its token needs no approval for:\n%s", a.log.String())
		}
		if out := s.mustKubectl("get", "machine", "edge-1", "-o", `jsonpath={.status.agentVersion} {.status.addresses[?(@.type=="Hostname")].address}`); len(strings.Fields(out)) != 2 {
			t.Errorf("the machine does not show the agent's version and hostname: %q", out)
		}
		if _, err := os.Stat(filepath.Join(dir, "token")); !os.IsNotExist(err) {
			t.Errorf("the join token is still in the agent's data dir: %v", err)
		}
		for _, f := range []string{"node-password", "client-id", "client.key", "client.crt"} {
			if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v mode %v, want 0600", f, err, fi.Mode().Perm())
			}
		}

		// kill -9 and restart without a token: the certificate is enough.
		a.kill()
		b := startAgent(t, s, dir)
		b.waitOutput("using the stored certificate of machine edge-1", 30*time.Second)
		if out := s.mustKubectl("get", "clusterregistrations", "-o", "name"); strings.Count(out, "\n") != 1 {
			t.Errorf("a restart made another registration:\n%s", out)
		}

		// Neither the token secret nor the node password is stored or logged.
		secret := token[strings.LastIndex(token, ".")+1:]
		password, _ := os.ReadFile(filepath.Join(dir, "node-password"))
		secrets := map[string][]byte{"token secret": []byte(secret), "node password": bytes.TrimSpace(password)}
		s.stop()
		stored := storedBytes(t, s, endpoint)
		for what, v := range secrets {
			if bytes.Contains(stored, v) {
				t.Errorf("the %s is stored in plaintext in the datastore", what)
			}
			if strings.Contains(s.log.String(), string(v)) {
				t.Errorf("the %s appears in the server log", what)
			}
		}
	})
}

// storedBytes returns every byte the datastore holds for this server.
func storedBytes(t *testing.T, s *server, endpoint string) []byte {
	t.Helper()
	if endpoint == "" {
		var all []byte
		for _, f := range []string{"state.db", "state.db-wal"} {
			b, err := os.ReadFile(filepath.Join(s.dataDir, "db", f))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		if len(all) == 0 {
			t.Fatal("no SQLite data found to inspect")
		}
		return all
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT name, coalesce(value, ''::bytea), coalesce(old_value, ''::bytea) FROM kine")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var all []byte
	for rows.Next() {
		var name string
		var v, old []byte
		if err := rows.Scan(&name, &v, &old); err != nil {
			t.Fatal(err)
		}
		all = append(append(append(all, name...), v...), old...)
	}
	if len(all) == 0 {
		t.Fatal("no PostgreSQL rows found to inspect")
	}
	return all
}
