package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTokenCommands: `muster-server token create|list|revoke` against a
// running server; the join token pins the served CA and its secret is
// stored nowhere in plaintext.
func TestTokenCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))

	out := s.muster(t, "token", "create", "--ttl", "2h", "--cluster", "edge-east", "--description", "store 17")
	joinToken := strings.TrimSpace(out)
	m := regexp.MustCompile(`^K10([0-9a-f]{64})::([a-z0-9]{6})\.([0-9a-f]{32})$`).FindStringSubmatch(joinToken)
	if m == nil {
		t.Fatalf("token create printed %q, want K10<hash>::<id>.<secret>", out)
	}
	caHash, id, secret := m[1], m[2], m[3]
	ca, err := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(ca); hex.EncodeToString(sum[:]) != caHash {
		t.Errorf("the token pins %s, but the CA's sha256 is %x", caHash, sum)
	}

	got := s.mustKubectl("get", "clusterregistrationtoken", id, "-o", "jsonpath={.status.phase} {.spec.cluster} {.status.expiresAt}")
	if !strings.HasPrefix(got, "Active edge-east 20") {
		t.Errorf("token object: %q", got)
	}
	list := s.muster(t, "token", "list")
	if !strings.Contains(list, id) || !strings.Contains(list, "Active") || !strings.Contains(list, "store 17") {
		t.Errorf("token list:\n%s", list)
	}

	// A token bound to a cluster that does not exist is refused up front.
	if out, err := s.musterErr("token", "create", "--cluster", "nowhere"); err == nil || !strings.Contains(out, "nowhere") {
		t.Errorf("token for a missing cluster: %v\n%s", err, out)
	}

	s.muster(t, "token", "revoke", id)
	if got := s.mustKubectl("get", "crt", id, "-o", "jsonpath={.status.phase}:{.status.transitions[0].event}"); got != "Revoked:revoke" {
		t.Errorf("after revoke: %q", got)
	}
	// Revoking again changes nothing and says so.
	if out := s.muster(t, "token", "revoke", id); !strings.Contains(out, "already revoked") {
		t.Errorf("second revoke: %s", out)
	}
	if got := s.mustKubectl("get", "crt", id, "-o", "jsonpath={.status.transitions[*].event}"); got != "revoke" {
		t.Errorf("a second revoke recorded another transition: %q", got)
	}
	// Unknown token: a clear error.
	if out, err := s.musterErr("token", "revoke", "zzzzzz"); err == nil || !strings.Contains(out, "not found") {
		t.Errorf("revoke of an unknown token: %v\n%s", err, out)
	}

	// The secret is nowhere in the datastore files or the server's log.
	s.stop()
	for _, f := range []string{"state.db", "state.db-wal"} {
		b, err := os.ReadFile(filepath.Join(s.dataDir, "db", f))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the token secret is stored in plaintext in %s", f)
		}
	}
	if strings.Contains(s.log.String(), secret) {
		t.Errorf("the token secret appears in the server log")
	}
}
