package e2e

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestReadyzFollowsDatastore: with PostgreSQL stopped the server reports
// not-ready (and does not crash); when PostgreSQL returns, it recovers by
// itself with nothing lost. The PostgreSQL here is the test's own, so that
// stopping it disturbs no other test.
func TestReadyzFollowsDatastore(t *testing.T) {
	t.Parallel()
	pg := startOwnPostgres(t)
	dsn := pg.dsn

	s := startServer(t, dsn)
	s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))

	pg.run("stop")
	waitFor(t, 60*time.Second, "readyz to fail while PostgreSQL is down", func() bool {
		code, _, err := s.get("/readyz")
		return err == nil && code != http.StatusOK
	})
	// What an operator's alert (deploy/prometheus/alerts.yml,
	// MusterDatastoreUnreachable) watches counts the failures.
	waitFor(t, 60*time.Second, "muster_datastore_errors_total to count the outage", func() bool {
		out, err := s.kubectl("get", "--raw", "/metrics")
		return err == nil && metricSum(out, "muster_datastore_errors_total") > 0
	})
	if out, err := s.kubectl("get", "clusters", "--request-timeout=10s"); err == nil {
		t.Logf("a read during the outage was served (from the watch cache): %s", out)
	}
	select {
	case <-s.exited:
		t.Fatalf("muster-server exited during the datastore outage:\n%s", s.log.String())
	default:
	}

	pg.run("start")
	waitFor(t, 90*time.Second, "readyz to recover after PostgreSQL returned", func() bool {
		code, _, err := s.get("/readyz")
		return err == nil && code == http.StatusOK
	})
	s.mustKubectl("get", "cluster", "edge-east")
	s.mustKubectl("apply", "--server-side", "-f", testdata("manifests", "machine.yaml"))
}

// ownPostgres is a PostgreSQL server of the test's own, which it may stop
// and start without disturbing other tests.
type ownPostgres struct {
	t   *testing.T
	dir string
	dsn string
}

func postgresScript() string { return filepath.Join("..", "..", "hack", "postgres.sh") }

// run runs hack/postgres.sh start|stop on the test's server.
func (pg *ownPostgres) run(verb string) string {
	pg.t.Helper()
	out, err := exec.Command(postgresScript(), verb, pg.dir).CombinedOutput()
	if err != nil {
		pg.t.Fatalf("hack/postgres.sh %s: %v\n%s", verb, err, out)
	}
	return string(out)
}
