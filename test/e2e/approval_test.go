package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestManualApprovalDenialAndRejoin: manual-approval tokens wait for an
// operator; a denial stops the agent with the reason; deleting a Machine
// voids its certificate and frees its node name for a fresh join.
func TestManualApprovalDenialAndRejoin(t *testing.T) {
	s := startServer(t, "")
	manual := newToken(t, s, "--manual-approval")

	a := startAgent(t, s, t.TempDir(), "--token", manual, "--node-name", "approved-1")
	a.waitOutput("waiting for the registration to be granted", 30*time.Second)
	time.Sleep(2 * time.Second)
	name := strings.TrimSpace(s.mustKubectl("get", "clusterregistrations", "--field-selector", "spec.nodeName=approved-1", "-o", "jsonpath={.items[0].metadata.name}"))
	if phase := s.mustKubectl("get", "clusterregistration", name, "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Fatalf("a manual-approval registration is %q before approval", phase)
	}
	if out := s.mustKubectl("get", "machines", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("a machine exists before approval: %s", out)
	}
	s.muster(t, "registration", "approve", name)
	a.waitOutput("running as machine approved-1", 30*time.Second)
	events := s.mustKubectl("get", "clusterregistration", name, "-o", "jsonpath={.status.transitions[*].event}")
	if events != "approve grant" {
		t.Errorf("transition history %q, want approve then grant", events)
	}
	// A decided registration cannot be decided again.
	if out, err := s.musterErr("registration", "deny", name); err == nil || !strings.Contains(out, "Granted") {
		t.Errorf("denying a granted registration: %v\n%s", err, out)
	}

	d := startAgent(t, s, t.TempDir(), "--token", manual, "--node-name", "denied-1")
	d.waitOutput("waiting for the registration to be granted", 30*time.Second)
	denied := strings.TrimSpace(s.mustKubectl("get", "clusterregistrations", "--field-selector", "spec.nodeName=denied-1", "-o", "jsonpath={.items[0].metadata.name}"))
	s.muster(t, "registration", "deny", denied, "--message", "unknown hardware")
	if out, code := d.waitExit(30 * time.Second); code == 0 || !strings.Contains(out, "denied") || !strings.Contains(out, "unknown hardware") {
		t.Errorf("denied agent: exit %d\n%s", code, out)
	}

	// Delete the machine: its password goes, its certificate is void, and
	// the node can join again, but only with a token.
	auto := newToken(t, s)
	dir := t.TempDir()
	m := startAgent(t, s, dir, "--token", auto, "--node-name", "rejoin-1")
	m.waitOutput("running as machine rejoin-1", 30*time.Second)
	m.kill()
	s.mustKubectl("delete", "machine", "rejoin-1")
	waitFor(t, 30*time.Second, "the NodePassword to go with its Machine", func() bool {
		out, err := s.kubectl("get", "nodepassword", "rejoin-1")
		return err != nil && strings.Contains(out, "NotFound")
	})
	noToken := startAgent(t, s, dir, "--node-name", "rejoin-1")
	if out, code := noToken.waitExit(30 * time.Second); code == 0 || !strings.Contains(out, "no longer valid") || !strings.Contains(out, "--token") {
		t.Errorf("agent with a void certificate and no token: exit %d\n%s", code, out)
	}
	again := startAgent(t, s, dir, "--token", newToken(t, s), "--node-name", "rejoin-1")
	again.waitOutput("running as machine rejoin-1", 30*time.Second)
	// Even another machine (another password) may now take a freed name.
	s.mustKubectl("delete", "machine", "rejoin-1")
	again.kill()
	waitFor(t, 30*time.Second, "the NodePassword to go again", func() bool {
		_, err := s.kubectl("get", "nodepassword", "rejoin-1")
		return err != nil
	})
	other := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "rejoin-1")
	other.waitOutput("running as machine rejoin-1", 30*time.Second)
}
