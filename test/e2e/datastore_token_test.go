package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/bootstrap"
)

// TestDatastoreTokenRotate: two HA servers on PostgreSQL; `token rotate`
// re-seals the shared CA with a new server token, both servers restart
// with it, the joined agent carries on without registering again, and the
// old token no longer opens the datastore.
func TestDatastoreTokenRotate(t *testing.T) {
	t.Parallel()
	dsn := backends[1].endpoint(t)
	servers := startHA(t, dsn, 2)
	s1, s2 := servers[0], servers[1]
	oldToken := serverToken(t, s1)
	a := startAgent(t, s1, t.TempDir(), "--token", newToken(t, s1), "--node-name", "rot-1")
	a.waitOutput("running as machine rot-1", 60*time.Second)
	waitPhase(t, s1, "rot-1", "Running", 60*time.Second)

	next, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	newFile := writeSecretFile(t, next)
	env := []string{"MUSTER_DATASTORE_ENDPOINT=" + dsn}
	out, err := datastoreCLI(s1, env, "token", "rotate", "--new-token-file", newFile)
	if err != nil || !strings.Contains(out, "re-sealed") {
		t.Fatalf("rotate on server 1: %v\n%s", err, out)
	}
	out, err = datastoreCLI(s2, env, "token", "rotate", "--new-token-file", newFile)
	if err != nil || !strings.Contains(out, "already sealed") {
		t.Fatalf("rotate on server 2: %v\n%s", err, out)
	}
	for _, s := range servers {
		if got := serverToken(t, s); got != next {
			t.Fatalf("%s data dir token not rotated", s.host)
		}
		s.stop()
	}
	s2.extra = nil // it was started with --token OLD
	for _, s := range servers {
		s.start()
	}
	c := adminClient(t, s1)
	regs, err := c.MusterV1alpha1().ClusterRegistrations().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setPlan(t, c, "rot-1", "echo rotated")
	waitFor(t, 90*time.Second, "the agent to apply a plan after the rotation", func() bool { return planApplied(c, "rot-1") })
	after, err := c.MusterV1alpha1().ClusterRegistrations().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(after.Items) != len(regs.Items) {
		t.Errorf("registrations before %d, after %d (%v): the agent registered again", len(regs.Items), len(after.Items), err)
	}

	// A server given the old token is refused.
	stale := newServer(t, "127.0.0.3", dsn, "--token", oldToken)
	stale.launch()
	select {
	case <-stale.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("a server with the old token started")
	}
	if !strings.Contains(stale.log.String(), "different server token") {
		t.Errorf("the old token's refusal:\n%s", stale.log.String())
	}
}
