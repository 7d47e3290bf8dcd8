package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadyzFollowsDatastore: with PostgreSQL stopped the server reports
// not-ready (and does not crash); when PostgreSQL returns, it recovers by
// itself with nothing lost. The PostgreSQL here is the test's own, so that
// stopping it disturbs no other test.
func TestReadyzFollowsDatastore(t *testing.T) {
	// Not t.TempDir(): its parent is private to root, and PostgreSQL runs
	// as the postgres user.
	pgDir, err := os.MkdirTemp("", "muster-outage-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pgDir) })
	script := filepath.Join("..", "..", "hack", "postgres.sh")
	out, err := exec.Command(script, "start", pgDir).CombinedOutput()
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(script, "stop", pgDir).Run() })
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dsn := lines[len(lines)-1]

	s := startServer(t, dsn)
	s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))

	if out, err := exec.Command(script, "stop", pgDir).CombinedOutput(); err != nil {
		t.Fatalf("stopping PostgreSQL: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "readyz to fail while PostgreSQL is down", func() bool {
		code, _, err := s.get("/readyz")
		return err == nil && code != http.StatusOK
	})
	if out, err := s.kubectl("get", "clusters", "--request-timeout=10s"); err == nil {
		t.Logf("a read during the outage was served (from the watch cache): %s", out)
	}
	select {
	case <-s.exited:
		t.Fatalf("muster-server exited during the datastore outage:\n%s", s.log.String())
	default:
	}

	if out, err := exec.Command(script, "start", pgDir).CombinedOutput(); err != nil {
		t.Fatalf("restarting PostgreSQL: %v\n%s", err, out)
	}
	waitFor(t, 90*time.Second, "readyz to recover after PostgreSQL returned", func() bool {
		code, _, err := s.get("/readyz")
		return err == nil && code == http.StatusOK
	})
	s.mustKubectl("get", "cluster", "edge-east")
	s.mustKubectl("apply", "--server-side", "-f", testdata("manifests", "machine.yaml"))
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}
