package e2e

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestHADatastoreOutage: PostgreSQL stops for 10 s under two servers with
// agents connected. The servers stay up, report not-ready and refuse
// writes with 503; when PostgreSQL returns they recover by themselves,
// and nothing written before is lost.
func TestHADatastoreOutage(t *testing.T) {
	t.Parallel()
	pg := startOwnPostgres(t)
	dsn := pg.dsn

	servers := startHA(t, dsn, 2)
	token := newToken(t, servers[0])
	var agents []*agentProc
	for i, name := range []string{"outage-a", "outage-b"} {
		a := startAgent(t, servers[i], t.TempDir(), "--token", token, "--node-name", name)
		agents = append(agents, a)
	}
	for _, a := range agents {
		a.waitOutput("waiting for work", 60*time.Second)
	}
	c := clientVia(t, servers[0], servers[0])
	ctx := context.Background()
	waitFor(t, 60*time.Second, "both machines Running", func() bool {
		return allRunning(c, "outage-a", "outage-b")
	})

	pg.run("stop")
	stopped := time.Now()
	for _, s := range servers {
		waitFor(t, 30*time.Second, s.host+" to report not-ready", func() bool {
			code, _, err := s.get("/readyz")
			return err == nil && code >= 500
		})
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err := clientVia(t, servers[0], servers[1]).MusterV1alpha1().Clusters().Create(wctx, &api.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "during-outage"},
	}, metav1.CreateOptions{})
	cancel()
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) || status.Status().Code != http.StatusServiceUnavailable {
		t.Errorf("a write during the outage: got %v, want a 503", err)
	}
	time.Sleep(time.Until(stopped.Add(10 * time.Second)))
	for _, s := range servers {
		select {
		case <-s.exited:
			t.Fatalf("server %s exited during the outage:\n%s", s.host, s.log.String())
		default:
		}
	}

	pg.run("start")
	back := time.Now()
	for _, s := range servers {
		waitFor(t, 60*time.Second, s.host+" to be ready again", func() bool {
			code, _, err := s.get("/readyz")
			return err == nil && code == http.StatusOK
		})
	}
	t.Logf("servers ready again %s after PostgreSQL returned", time.Since(back).Round(100*time.Millisecond))
	// Nothing lost, and the control plane works again end to end: a new
	// plan reaches both agents.
	for _, name := range []string{"outage-a", "outage-b"} {
		setPlan(t, c, name, "echo after-outage")
	}
	waitFor(t, 60*time.Second, "both machines Running the new plan", func() bool {
		return allRunning(c, "outage-a", "outage-b") && planApplied(c, "outage-a") && planApplied(c, "outage-b")
	})
}
