package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/muster-io/muster/internal/leader"
	"github.com/muster-io/muster/internal/testenv/pgtest"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// TestHASharedControlPlane: three servers on one PostgreSQL are one control
// plane: one CA, server 1's admin kubeconfig works on all three, an object
// written through one is read and watched through the others, each
// publishes its ServerEndpoint and withdraws it when stopped, and a server
// with the wrong token refuses to start and changes nothing.
func TestHASharedControlPlane(t *testing.T) {
	t.Parallel()
	servers := startHA(t, pgtest.DSN(t), 3)
	s1, s2, s3 := servers[0], servers[1], servers[2]

	ca1, _ := os.ReadFile(filepath.Join(s1.dataDir, "tls", "ca.crt"))
	for _, s := range servers[1:] {
		ca, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
		if string(ca) != string(ca1) {
			t.Fatalf("server %s has another CA than server 1", s.host)
		}
	}
	raw := storedBytes(t, s1, s1.endpoint)
	if !strings.Contains(string(raw), "/muster/bootstrap/ca") {
		t.Fatal("the sealed CA is not in the datastore")
	}
	if strings.Contains(string(raw), "PRIVATE KEY") {
		t.Fatal("the datastore holds a private key in the clear")
	}
	for _, s := range servers {
		// The real kubectl with server 1's kubeconfig, pointed at each server.
		s1.mustKubectl("--server", s.url(), "get", "machines")
	}

	ctx := context.Background()
	c2, c3 := clientVia(t, s1, s2), clientVia(t, s1, s3)
	w, err := c3.MusterV1alpha1().Machines().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var lags []time.Duration
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("ha-watch-%d", i)
		// Without a pause the creates would lock onto the watcher's poll
		// tick and every sample would be the worst case.
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		start := time.Now()
		if _, err := c2.MusterV1alpha1().Machines().Create(ctx, &api.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.MachineSpec{Cluster: "ha"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, w, watch.Added, name)
		lags = append(lags, time.Since(start))
	}
	slices.Sort(lags)
	t.Logf("cross-server watch lag (create via 127.0.0.2, watched via 127.0.0.3), 30 samples: p50 %s, p99 %s, max %s",
		lags[len(lags)/2].Round(time.Millisecond), lags[len(lags)*99/100].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	if _, err := clientVia(t, s1, s1).MusterV1alpha1().Machines().Get(ctx, "ha-watch-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("an object created through server 2 is not readable through server 1: %v", err)
	}

	c1 := clientVia(t, s1, s1)
	waitFor(t, 30*time.Second, "three ServerEndpoints", func() bool {
		return len(endpointAddresses(t, c1)) == 3
	})
	s3.stop()
	waitFor(t, 10*time.Second, "server 3 to withdraw its ServerEndpoint on a clean stop", func() bool {
		return !slices.Contains(endpointAddresses(t, c1), fmt.Sprintf("%s:%d", s3.host, s3.port))
	})

	bad := newServer(t, "127.0.0.4", s1.endpoint, "--token", strings.Repeat("0", 64))
	bad.launch()
	select {
	case <-bad.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("a server with the wrong token did not exit")
	}
	if bad.cmd.ProcessState.ExitCode() == 0 {
		t.Fatal("a server with the wrong token exited with status 0")
	}
	if !strings.Contains(bad.log.String(), "different server token") {
		t.Fatalf("the wrong-token error does not say what is wrong:\n%s", bad.log.String())
	}
	if _, err := os.Stat(filepath.Join(bad.dataDir, "tls", "ca.key")); err == nil {
		t.Fatal("a server with the wrong token wrote a CA into its data dir")
	}
	s2.mustKubectl("--server", s2.url(), "get", "machine", "ha-watch-0")
	if code, _, err := s2.get("/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("server 2 not ready after the wrong-token attempt: %d %v", code, err)
	}
}

func waitEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed before %s %s", typ, name)
			}
			if m, ok := ev.Object.(*api.Machine); ok && ev.Type == typ && m.Name == name {
				return
			}
		case <-timeout:
			t.Fatalf("no %s event for %s within 30s", typ, name)
		}
	}
}

// leaderOf returns the server holding the controller lease.
func leaderOf(t *testing.T, c clientset.Interface, servers []*server) *server {
	t.Helper()
	ctx := context.Background()
	lease, err := c.MusterV1alpha1().ControllerLeases().Get(ctx, "muster-controllers", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	e, err := c.MusterV1alpha1().ServerEndpoints().Get(ctx, lease.Spec.HolderIdentity, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	for _, s := range servers {
		if e.Spec.Address == fmt.Sprintf("%s:%d", s.host, s.port) {
			return s
		}
	}
	return nil
}

// TestHALeaderTakeover: kill -9 the controller leader; another server takes
// the lease within ~15 s, and a registration started in the gap completes.
func TestHALeaderTakeover(t *testing.T) {
	t.Parallel()
	servers := startHA(t, pgtest.DSN(t), 3)
	c := clientVia(t, servers[0], servers[0])
	var old *server
	waitFor(t, 30*time.Second, "a controller leader", func() bool {
		old = leaderOf(t, c, servers)
		return old != nil
	})
	var survivor *server
	for _, s := range servers {
		if s != old {
			survivor = s
			break
		}
	}
	token := newToken(t, survivor)
	cs := clientVia(t, servers[0], survivor)
	before, err := cs.MusterV1alpha1().ControllerLeases().Get(context.Background(), "muster-controllers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	old.kill9()
	killed := time.Now()
	// The registration is made while no server runs the controllers.
	agent := startAgent(t, survivor, t.TempDir(), "--token", token, "--node-name", "takeover-node")
	var took time.Duration
	waitFor(t, 30*time.Second, "another server to take the controller lease", func() bool {
		l, err := cs.MusterV1alpha1().ControllerLeases().Get(context.Background(), "muster-controllers", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != before.Spec.HolderIdentity && l.Spec.HolderIdentity != "" {
			took = time.Since(killed)
			return true
		}
		return false
	})
	t.Logf("leader takeover after kill -9: %s", took.Round(100*time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("takeover took %s; the lease is %s plus a %s retry", took, 10*time.Second, 2*time.Second)
	}
	agent.waitOutput("running as machine takeover-node", 60*time.Second)
	waitFor(t, 60*time.Second, "the machine joined in the gap to be Running", func() bool {
		m, err := cs.MusterV1alpha1().Machines().Get(context.Background(), "takeover-node", metav1.GetOptions{})
		return err == nil && m.Status.Phase == api.MachinePhaseRunning
	})

	// A leader stopped cleanly hands the lease over at once, instead of
	// making the others wait out the lease.
	var current *server
	waitFor(t, 30*time.Second, "the new leader", func() bool { current = leaderOf(t, cs, servers); return current != nil })
	// Each server's /metrics says whether it is the one that leads.
	waitFor(t, 15*time.Second, "muster_controller_leader to be 1 on the leader and 0 on the other server", func() bool {
		for _, s := range servers {
			if s == old {
				continue
			}
			out, err := s.kubectl("get", "--raw", "/metrics")
			want := 0.0
			if s == current {
				want = 1
			}
			if err != nil || metricSum(out, `muster_controller_leader{lease="muster-controllers"}`) != want {
				return false
			}
		}
		return true
	})
	var other *server
	for _, s := range servers {
		if s != old && s != current {
			other = s
		}
	}
	co := clientVia(t, servers[0], other)
	stopped := time.Now()
	current.stop()
	waitFor(t, 10*time.Second, "the last server to hold the lease", func() bool { return leaderOf(t, co, servers) == other })
	t.Logf("leader handover after a clean stop: %s", time.Since(stopped).Round(100*time.Millisecond))
	if took := time.Since(stopped); took > leader.LeaseDuration {
		t.Errorf("a cleanly stopped leader's lease was taken over after %s, as if it had died", took)
	}
}
