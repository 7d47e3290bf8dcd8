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
	t.Parallel()
	s := startServer(t, "")
	manual := newToken(t, s, "--manual-approval")

	a := startAgent(t, s, t.TempDir(), "--token", manual, "--node-name", "approved-1")
	a.waitOutput("to be approved: muster-server registration approve", 30*time.Second)
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
	d.waitOutput("to be approved: muster-server registration approve", 30*time.Second)
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

// TestRegistrationByNodeName: an operator approves a node by the name it
// knows, sees what waits with 'registration list', and the waiting agent
// names its registration and the command that approves it.
func TestRegistrationByNodeName(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	manual := newToken(t, s, "--manual-approval")
	first := startAgent(t, s, t.TempDir(), "--token", manual, "--node-name", "by-node")
	first.waitOutput("of node by-node to be approved: muster-server registration approve by-node", 30*time.Second)
	if !strings.Contains(first.log.String(), "waiting for the registration c-") {
		t.Errorf("the waiting agent does not name its registration:\n%s", first.log.String())
	}
	time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
	second := startAgent(t, s, t.TempDir(), "--token", manual, "--node-name", "by-node")
	second.waitOutput("to be approved", 30*time.Second)
	newest := strings.TrimSpace(s.mustKubectl("get", "clusterregistrations", "--sort-by", ".metadata.creationTimestamp", "-o", "jsonpath={.items[-1:].metadata.name}"))
	if !strings.Contains(second.log.String(), newest) {
		t.Fatalf("the newest registration %s is not the second agent's:\n%s", newest, second.log.String())
	}

	out := s.muster(t, "registration", "approve", "by-node")
	if !strings.Contains(out, "2 pending registrations") || !strings.Contains(out, "registration "+newest+": approved") {
		t.Errorf("approve by node name with two pending:\n%s", out)
	}
	second.waitOutput("running as machine by-node", 30*time.Second)

	list := strings.Split(strings.TrimSpace(s.muster(t, "registration", "list")), "\n")
	if len(list) != 3 || !strings.HasPrefix(list[0], "NAME") || !strings.Contains(list[0], "NODE") || !strings.Contains(list[0], "TOKEN") ||
		!strings.Contains(list[1], "Pending") || !strings.Contains(list[2], newest) || !strings.Contains(list[2], "Granted") || !strings.Contains(list[1], "by-node") {
		t.Errorf("registration list, pending first:\n%s", strings.Join(list, "\n"))
	}
	if js := s.muster(t, "registration", "list", "-o", "json"); !strings.Contains(js, `"kind": "ClusterRegistration"`) || !strings.Contains(js, newest) {
		t.Errorf("registration list -o json:\n%s", js)
	}

	s.muster(t, "registration", "deny", "by-node", "--message", "duplicate")
	if out, code := first.waitExit(30 * time.Second); code == 0 || !strings.Contains(out, "duplicate") {
		t.Errorf("the denied older agent: exit %d\n%s", code, out)
	}
	out, err := s.musterErr("registration", "approve", "by-node")
	if err == nil || !strings.Contains(out, "no pending registration") || !strings.Contains(out, "Granted") || !strings.Contains(out, "muster-server registration list") {
		t.Errorf("approve a node with nothing pending: %v\n%s", err, out)
	}
	out, err = s.musterErr("registration", "approve", "nosuch")
	if err == nil || !strings.Contains(out, "muster-server registration list") {
		t.Errorf("approve an unknown node: %v\n%s", err, out)
	}
}
