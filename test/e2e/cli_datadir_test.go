package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestClientCommandsFollowKubeconfig: after the README's
// `export KUBECONFIG=$PWD/muster-data/admin.kubeconfig`, every client
// command finds that server without --data-dir: those that go through the
// API (token list) and those that read its data dir directly (history,
// datastore snapshot), even as root, whose default data dir is elsewhere.
func TestClientCommandsFollowKubeconfig(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	j := newJoiner("follow-1")
	if _, err := j.register(context.Background(), tokenClient(s, newToken(t, s)), metav1.CreateOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir() // not the server's data dir, nor its parent
	run := func(args ...string) (string, error) {
		cmd := exec.Command(serverBin, args...)
		cmd.Dir = elsewhere
		cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG", "MUSTER_DATASTORE_ENDPOINT"), "KUBECONFIG="+s.kubeconfig())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("token", "list"); err != nil || !strings.Contains(out, "ID") {
		t.Errorf("token list with $KUBECONFIG: %v\n%s", err, out)
	}
	if out, err := run("history", "machine/follow-1"); err != nil || !strings.Contains(out, "Registering") {
		t.Errorf("history with only $KUBECONFIG did not read that server's datastore: %v\n%s", err, out)
	}
	snap := filepath.Join(t.TempDir(), "snap")
	if out, err := run("datastore", "snapshot", snap); err != nil {
		t.Errorf("datastore snapshot with only $KUBECONFIG: %v\n%s", err, out)
	} else if _, err := os.Stat(snap); err != nil {
		t.Errorf("no snapshot written: %v\n%s", err, out)
	}
}
