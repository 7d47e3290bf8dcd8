package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/agent/loadbalancer"
	"github.com/muster-io/muster/internal/testenv/pgtest"
)

// TestHAAgentsSpread: twelve agents all given the first server, as `make ha`
// does, end up spread over the three servers: each on the server its
// clientID ranks first, every server carrying some; when the busiest server
// dies, each of its agents moves to the survivor its clientID ranks first,
// not all to the same one. Which server carries an agent is measured from
// the servers' side: the one that hears its heartbeats.
func TestHAAgentsSpread(t *testing.T) {
	t.Parallel()
	const agents = 12
	servers := startHA(t, pgtest.DSN(t), 3)
	admin := servers[0]
	addrs := make([]string, len(servers))
	byAddr := map[string]*server{}
	for i, s := range servers {
		addrs[i] = fmt.Sprintf("%s:%d", s.host, s.port)
		byAddr[addrs[i]] = s
	}
	// The clientIDs are random, drawn again in the rare case (3·(2/3)^12,
	// about 2%) that they would leave a server without an agent: the test
	// is of the spreading, not of the dice.
	var ids []string
	for {
		ids = ids[:0]
		count := map[string]int{}
		for i := 0; i < agents; i++ {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			ids = append(ids, hex.EncodeToString(b))
			count[loadbalancer.Rank(ids[i], addrs)[0]]++
		}
		if len(count) == len(servers) {
			break
		}
	}

	token := newToken(t, admin)
	want := map[string]*server{}
	var names []string
	for i, id := range ids {
		name := fmt.Sprintf("sp-%02d", i)
		names = append(names, name)
		want[name] = byAddr[loadbalancer.Rank(id, addrs)[0]]
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "client-id"), []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		startAgent(t, admin, dir, "--token", token, "--node-name", name)
	}
	c := clientVia(t, admin, admin)
	waitFor(t, 120*time.Second, "12 machines Running", func() bool { return allRunning(c, names...) })

	carried := waitCarried(t, admin, servers, names, want)
	for _, s := range servers {
		if len(carried[s]) == 0 {
			t.Errorf("server %s carries no agent", s.host)
		}
	}
	if t.Failed() {
		return
	}

	// The server carrying most agents dies: each of its agents moves to
	// its own next-ranked server, not all to the same one.
	victim := servers[0]
	for _, s := range servers {
		if len(carried[s]) > len(carried[victim]) {
			victim = s
		}
	}
	var survivors []*server
	for i, s := range servers {
		if s != victim {
			survivors = append(survivors, s)
			continue
		}
		for j, n := range names {
			if want[n] == victim {
				want[n] = byAddr[loadbalancer.Rank(ids[j], slices.Delete(slices.Clone(addrs), i, i+1))[0]]
			}
		}
	}
	victim.kill9()
	t.Logf("killed %s with %d agents", victim.host, len(carried[victim]))
	waitCarried(t, admin, survivors, names, want)
}

// waitCarried (admin's kubeconfig, kept after a kill) waits until each agent is heard by the server want names, and
// by no other, and returns which server carries which agents. A server
// carries an agent when it heard its last heartbeat (every 5 s) less than
// 6 s ago; an agent that has just moved is still heard by its old server for
// a few seconds.
func waitCarried(t *testing.T, admin *server, servers []*server, names []string, want map[string]*server) map[*server][]string {
	t.Helper()
	var carried map[*server][]string
	deadline := time.Now().Add(90 * time.Second)
	for {
		carried = map[*server][]string{}
		settled := true
		for _, s := range servers {
			heard, err := heardBy(clientVia(t, admin, s))
			if err != nil {
				settled = false
				continue
			}
			for _, n := range names {
				if age, ok := heard[n]; ok && age < 6*time.Second {
					carried[s] = append(carried[s], n)
					if want[n] != s {
						settled = false
					}
				} else if want[n] == s {
					settled = false
				}
			}
		}
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	var report []string
	for _, s := range servers {
		report = append(report, fmt.Sprintf("%s: %d", s.host, len(carried[s])))
	}
	t.Logf("agents per server: %s", strings.Join(report, ", "))
	for _, n := range names {
		var on []string
		for _, s := range servers {
			if slices.Contains(carried[s], n) {
				on = append(on, s.host)
			}
		}
		if len(on) != 1 || on[0] != want[n].host {
			t.Errorf("agent %s is heard by %v, want only %s (the live server its clientID ranks first)", n, on, want[n].host)
		}
	}
	return carried
}
