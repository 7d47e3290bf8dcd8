package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// copyAgentDir copies an agent's data dir (its certificate, key, node
// password, clientID, CA) as someone who took a copy of the disk would,
// without the running agent's lock.
func copyAgentDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "agent.lock" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// TestRestoreRejoinRefusals (issue 30): the rejoin after a restore, judged
// as an attacker would try it. A machine rejoins by itself only when the
// restore lost its Machine; never when an operator deleted it (before the
// snapshot, or after the rejoin), never twice with one certificate, and
// never into a name another machine holds now. Each refused agent stops
// with what to do, no Machine is made for it, and no registration is
// stored. SQLite only: the rule reads the restore's record and the
// certificate, not the backend, which TestRestoreOlderThanFleet covers on
// both.
func TestRestoreRejoinRefusals(t *testing.T) {
	t.Parallel()
	src := startServer(t, "")
	tokenFile := writeTokenFile(t, newToken(t, src))
	ctx := context.Background()

	// Revoked before the snapshot: an operator deleted its Machine, and
	// someone kept a copy of its data dir.
	revokedDir := t.TempDir()
	revoked := startAgent(t, src, revokedDir, "--token-file", tokenFile, "--node-name", "revoked")
	waitPhase(t, src, "revoked", "Running", 60*time.Second)
	revokedCopy := copyAgentDir(t, revokedDir)
	src.mustKubectl("delete", "machine", "revoked", "--wait=true", "--timeout=60s")
	revoked.waitExit(60 * time.Second)

	file := filepath.Join(t.TempDir(), "muster.snapshot")
	if out, err := datastoreCLI(src, []string{"MUSTER_DATASTORE_ENDPOINT="}, "datastore", "snapshot", file); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, out)
	}

	// Joined after the snapshot: "late" keeps running through the
	// restore; "taken" is stopped, and its name goes to another machine
	// before it comes back.
	lateDir, takenDir := t.TempDir(), t.TempDir()
	late := startAgent(t, src, lateDir, "--token-file", tokenFile, "--node-name", "late")
	taken := startAgent(t, src, takenDir, "--token-file", tokenFile, "--node-name", "taken")
	waitPhase(t, src, "late", "Running", 60*time.Second)
	waitPhase(t, src, "taken", "Running", 60*time.Second)
	lateCopy := copyAgentDir(t, lateDir)
	taken.kill()
	src.stop()

	r := newServer(t, src.host, "", "--token-file", writeSecretFile(t, serverToken(t, src)))
	r.port = src.port
	if out, err := datastoreCLI(r, nil, "datastore", "restore", file); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	r.start()
	rc := adminClient(t, r)

	// The one the restore lost rejoins by itself.
	late.waitOutput("rejoined as machine late", 60*time.Second)
	waitPhase(t, r, "late", "Running", 60*time.Second)

	// Another machine joins as "taken" (a join token of the restored
	// datastore) before the original comes back: the name is its now.
	newcomer := startAgent(t, r, t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, r)), "--node-name", "taken")
	waitPhase(t, r, "taken", "Running", 60*time.Second)
	holder, err := rc.MusterV1alpha1().Machines().Get(ctx, "taken", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	registrations := registrationCount(t, rc)

	// Deleting the rejoined Machine revokes it: its agent stops, and the
	// copy of its data dir made before the restore (the certificate that
	// rejoined once) cannot bring it back.
	r.mustKubectl("delete", "machine", "late", "--wait=true", "--timeout=60s")
	lateOut, _ := late.waitExit(60 * time.Second)
	if n := strings.Count(lateOut, "rejoined as machine"); n != 1 {
		t.Errorf("the agent rejoined %d times; want once, after the restore, and not after its Machine was deleted:\n%s", n, lateOut)
	}

	for _, tc := range []struct {
		name, node, dir, why string
	}{
		{"deleted before the snapshot", "revoked", revokedCopy, "no longer exists"},
		{"rejoined once, then deleted", "late", lateCopy, "no longer exists"},
		{"its name another machine's now", "taken", takenDir, "no longer exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgent(t, r, tc.dir, "--node-name", tc.node)
			out, code := a.waitExit(60 * time.Second)
			if code == 0 || !strings.Contains(out, tc.why) || !strings.Contains(out, "token create") || strings.Contains(out, "rejoined as machine") {
				t.Errorf("agent %s (exit %d) was not refused with what to do:\n%s", tc.node, code, out)
			}
		})
	}
	if _, err := rc.MusterV1alpha1().Machines().Get(ctx, "revoked", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("machine revoked, deleted before the snapshot, is back: %v", err)
	}
	if _, err := rc.MusterV1alpha1().Machines().Get(ctx, "late", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("machine late, deleted after its rejoin, is back: %v", err)
	}
	if now, err := rc.MusterV1alpha1().Machines().Get(ctx, "taken", metav1.GetOptions{}); err != nil || now.UID != holder.UID {
		t.Errorf("machine taken is no longer the newcomer's (uid %s): %v", holder.UID, err)
	}
	select {
	case <-newcomer.exited:
		t.Errorf("the machine that holds the name taken lost it:\n%s", newcomer.log.String())
	default:
	}
	if got := registrationCount(t, rc); got != registrations {
		t.Errorf("%d ClusterRegistrations after the refused rejoins, %d before: a refusal stores nothing", got, registrations)
	}
}
