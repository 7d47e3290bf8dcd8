package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJoin: token create, agent join, pivot, restart without re-registering,
// and no secret stored or logged — on SQLite and PostgreSQL.
func TestJoin(t *testing.T) {
	t.Parallel()
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
		// Its role selects it, as plan sets and partitions select.
		if out := s.mustKubectl("get", "machines", "-l", "role.muster.io/worker=true", "-o", "name"); strings.TrimSpace(out) != "machine.muster.io/edge-1" {
			t.Errorf("kubectl get machines -l role.muster.io/worker=true: %q, want edge-1", out)
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
