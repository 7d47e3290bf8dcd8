package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/liveness"
	"github.com/muster-io/muster/internal/testenv/etcdtest"
	"github.com/muster-io/muster/internal/testenv/pgtest"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// heardBy returns, for server s, how long ago it heard each agent.
func heardBy(c clientset.Interface) (map[string]time.Duration, error) {
	raw, err := c.MusterV1alpha1().RESTClient().Get().AbsPath(liveness.ReportPath).DoRaw(context.Background())
	if err != nil {
		return nil, err
	}
	var r liveness.Report
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	out := map[string]time.Duration{}
	for m, ms := range r.AgesMillis {
		out[m] = time.Duration(ms) * time.Millisecond
	}
	return out, nil
}

// TestHAAgentFailover: 30 agents joined across three servers; kill -9 the
// server most of them talk to. Every agent reaches a live server again
// within 10 s through its load balancer, every machine returns to Running,
// plan updates made during the failover are applied, no machine is
// duplicated; the killed server, restarted, rejoins the set.
func TestHAAgentFailover(t *testing.T) {
	t.Parallel()
	haAgentFailover(t, startHA(t, pgtest.DSN(t), 3))
}

// TestEtcdHAAgentFailover: the same on three servers sharing a real etcd
// with TLS client certificates.
func TestEtcdHAAgentFailover(t *testing.T) {
	t.Parallel()
	e := etcdtest.Start(t)
	haAgentFailover(t, startHA(t, e.Endpoint, 3, etcdTLSArgs(e)...))
}

func haAgentFailover(t *testing.T, servers []*server) {
	const agents = 30
	admin := servers[0]
	token := newToken(t, admin)
	var names []string
	for i := 0; i < agents; i++ {
		name := fmt.Sprintf("fo-%02d", i)
		names = append(names, name)
		startAgent(t, servers[i%len(servers)], t.TempDir(), "--token", token, "--node-name", name)
	}
	c := clientVia(t, admin, admin)
	waitFor(t, 120*time.Second, "30 machines Running", func() bool { return allRunning(c, names...) })

	// Whom does each server hear? The agent's active server hears it
	// every heartbeat (5 s).
	byServer := map[*server][]string{}
	for _, s := range servers {
		heard, err := heardBy(clientVia(t, admin, s))
		if err != nil {
			t.Fatal(err)
		}
		for m, age := range heard {
			if age < 6*time.Second {
				byServer[s] = append(byServer[s], m)
			}
		}
	}
	victim := servers[0]
	for _, s := range servers {
		if len(byServer[s]) > len(byServer[victim]) {
			victim = s
		}
	}
	moved := byServer[victim]
	t.Logf("agents per server: %d/%d/%d; killing %s with %d", len(byServer[servers[0]]), len(byServer[servers[1]]), len(byServer[servers[2]]), victim.host, len(moved))
	var survivors []*server
	for _, s := range servers {
		if s != victim {
			survivors = append(survivors, s)
		}
	}
	cs := clientVia(t, admin, survivors[0])

	victim.kill9()
	killed := time.Now()
	// Plan updates made while agents are failing over must not be lost.
	// Hearings are timed by their age, so the poll below starting a moment
	// later measures the same.
	for _, n := range names {
		setPlan(t, cs, n, "echo after-failover")
	}

	back := map[string]time.Duration{}
	deadline := killed.Add(30 * time.Second)
	for len(back) < len(moved) && time.Now().Before(deadline) {
		since := time.Since(killed)
		for _, s := range survivors {
			heard, err := heardBy(clientVia(t, admin, s))
			if err != nil {
				continue
			}
			for _, m := range moved {
				if age, ok := heard[m]; ok && age < since {
					if _, done := back[m]; !done {
						back[m] = since - age
					}
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	var times []time.Duration
	for _, m := range moved {
		d, ok := back[m]
		if !ok {
			t.Errorf("agent %s was not heard by a live server within 30 s of the kill", m)
			continue
		}
		times = append(times, d)
	}
	slices.Sort(times)
	if len(times) > 0 {
		t.Logf("failover (kill -9 → agent heard by a live server), %d agents: p50 %s, p99 %s, max %s", len(times),
			times[len(times)/2].Round(10*time.Millisecond), times[len(times)*99/100].Round(10*time.Millisecond), times[len(times)-1].Round(10*time.Millisecond))
		if worst := times[len(times)-1]; worst > 10*time.Second {
			t.Errorf("the slowest agent took %s to reach a live server; the bound is 10 s", worst)
		}
	}

	waitFor(t, 90*time.Second, "every machine Running its plan from during the failover", func() bool {
		if !allRunning(cs, names...) {
			return false
		}
		for _, n := range names {
			if !planApplied(cs, n) {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		p, _ := cs.MusterV1alpha1().MachinePlans().Get(context.Background(), n, metav1.GetOptions{})
		if len(p.Spec.Instructions) == 0 || p.Spec.Instructions[0].Args[1] != "echo after-failover" {
			t.Errorf("machine %s: the plan update made during the failover is not there", n)
		}
	}
	list, err := cs.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != agents {
		t.Errorf("%d Machines after the failover, want %d: none duplicated, none lost", len(list.Items), agents)
	}

	victim.start()
	addr := fmt.Sprintf("%s:%d", victim.host, victim.port)
	waitFor(t, 30*time.Second, "the restarted server back among the ServerEndpoints", func() bool {
		return slices.Contains(endpointAddresses(t, cs), addr)
	})
}
