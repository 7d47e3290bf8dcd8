package loadbalancer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestStateMachine(t *testing.T) {
	tests := []struct {
		from   state
		ev     event
		streak int
		want   state
	}{
		{stateUnchecked, checkPassed, 1, stateHealthy},
		{stateUnchecked, checkFailed, 1, stateFailed},
		{stateFailed, checkPassed, 1, stateRecovering},
		{stateFailed, checkFailed, 5, stateFailed},
		{stateRecovering, checkPassed, 2, stateHealthy},
		{stateRecovering, checkFailed, 1, stateFailed},
		{stateHealthy, checkFailed, 1, stateHealthy},
		{stateHealthy, checkFailed, failThreshold, stateFailed},
		{stateHealthy, checkPassed, 9, stateHealthy},
		{stateHealthy, chosen, 1, stateActive},
		{stateActive, checkPassed, 3, stateActive},
		{stateActive, checkFailed, 1, stateActive},
		{stateActive, checkFailed, failThreshold, stateFailed},
		{stateActive, dialFailed, 1, stateFailed},
		{stateActive, replaced, 1, stateHealthy},
		{stateFailed, replaced, 1, stateFailed},
		{stateHealthy, dialFailed, 1, stateFailed},
	}
	for _, tt := range tests {
		if got := next(tt.from, tt.ev, tt.streak); got != tt.want {
			t.Errorf("%s --%d(streak %d)--> %s, want %s", tt.from, tt.ev, tt.streak, got, tt.want)
		}
	}
}

// fakeServer accepts connections and writes its name on each, then holds
// it open until closed by either side.
type fakeServer struct {
	name    string
	l       net.Listener
	mu      sync.Mutex
	healthy bool
}

func newFakeServer(t *testing.T, name string) *fakeServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{name: name, l: l, healthy: true}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name + "\n"))
			go func() { _, _ = bufio.NewReader(c).ReadString('\n'); c.Close() }()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return f
}

func (f *fakeServer) addr() string { return f.l.Addr().String() }

func (f *fakeServer) setHealthy(h bool) {
	f.mu.Lock()
	f.healthy = h
	f.mu.Unlock()
}

type fleet map[string]*fakeServer

func (fl fleet) check(_ context.Context, addr string) error {
	for _, f := range fl {
		if f.addr() == addr {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.healthy {
				return nil
			}
			return errors.New("unhealthy")
		}
	}
	return errors.New("unknown server")
}

func startLB(t *testing.T, fl fleet, seed, stateFile string) *LoadBalancer {
	t.Helper()
	lb, err := New(Config{Seed: seed, StateFile: stateFile, HealthCheck: fl.check, CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go lb.Run(ctx)
	t.Cleanup(func() { cancel(); <-lb.Done() })
	return lb
}

// dial connects through the load balancer and returns the connection and
// the name of the server that answered.
func dial(t *testing.T, lb *LoadBalancer) (net.Conn, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", lb.Address(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	name, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return nil, ""
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, name[:len(name)-1]
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// closedSoon reports whether c gets closed by the far side within a while.
func closedSoon(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func threeServers(t *testing.T) fleet {
	return fleet{"a": newFakeServer(t, "a"), "b": newFakeServer(t, "b"), "c": newFakeServer(t, "c")}
}

func TestFailoverOnUnhealthyActiveClosesItsConnections(t *testing.T) {
	fl := threeServers(t)
	lb := startLB(t, fl, fl["a"].addr(), "")
	lb.SetServers([]string{fl["a"].addr(), fl["b"].addr(), fl["c"].addr()})
	c, name := dial(t, lb)
	if name != "a" {
		t.Fatalf("first connection went to %q, want the seed a", name)
	}
	fl["a"].setHealthy(false)
	if !closedSoon(c) {
		t.Fatal("the connection to the failed server was not closed")
	}
	eventually(t, "a new active server", func() bool { return lb.Active() != fl["a"].addr() })
	_, name = dial(t, lb)
	if name == "a" || name == "" {
		t.Fatalf("after a failed, a connection went to %q", name)
	}

	// a recovers: the load balancer stays where it is.
	was := name
	fl["a"].setHealthy(true)
	time.Sleep(200 * time.Millisecond)
	if _, name := dial(t, lb); name != was {
		t.Fatalf("after a recovered, a connection went to %q, want %q (no flapping back)", name, was)
	}
}

func TestDialFailureFailsOverAtOnce(t *testing.T) {
	fl := threeServers(t)
	// Health checks say all is well: only the dial can tell a is gone.
	lb := startLB(t, fl, fl["a"].addr(), "")
	lb.SetServers([]string{fl["a"].addr(), fl["b"].addr(), fl["c"].addr()})
	c, _ := dial(t, lb)
	fl["a"].l.Close()
	c.Close()
	if _, name := dial(t, lb); name != "b" && name != "c" {
		t.Fatalf("with a gone, a connection went to %q", name)
	}
}

func TestSeedIsTheLastResort(t *testing.T) {
	fl := fleet{"seed": newFakeServer(t, "seed"), "b": newFakeServer(t, "b")}
	lb := startLB(t, fl, fl["seed"].addr(), "")
	if _, name := dial(t, lb); name != "seed" {
		t.Fatalf("with nothing learned, a connection went to %q, want the seed", name)
	}
	lb.SetServers([]string{fl["b"].addr()})
	eventually(t, "the learned server to take over from the seed", func() bool { return lb.Active() == fl["b"].addr() })
	if _, name := dial(t, lb); name != "b" {
		t.Fatalf("with b learned and healthy, a connection went to %q", name)
	}
	fl["b"].setHealthy(false)
	fl["b"].l.Close()
	if _, name := dial(t, lb); name != "seed" {
		t.Fatalf("with b gone, a connection went to %q, want the seed as last resort", name)
	}
}

func TestRemovingTheActiveServerMovesConnections(t *testing.T) {
	fl := threeServers(t)
	lb := startLB(t, fl, fl["a"].addr(), "")
	lb.SetServers([]string{fl["a"].addr(), fl["b"].addr()})
	eventually(t, "a checked", func() bool { return lb.Active() == fl["a"].addr() })
	// Make b the active one by failing a, then bring a back.
	fl["a"].setHealthy(false)
	eventually(t, "b active", func() bool { return lb.Active() == fl["b"].addr() })
	fl["a"].setHealthy(true)
	c, name := dial(t, lb)
	if name != "b" {
		t.Fatalf("connection went to %q, want b", name)
	}
	lb.SetServers([]string{fl["a"].addr(), fl["c"].addr()})
	if !closedSoon(c) {
		t.Fatal("the connection to the removed server was not closed")
	}
	if _, name := dial(t, lb); name != "a" && name != "c" {
		t.Fatalf("after b was removed, a connection went to %q", name)
	}
	if got := lb.Servers(); !slices.Equal(got, sorted(fl["a"].addr(), fl["c"].addr())) {
		t.Fatalf("Servers() = %v", got)
	}
}

func TestPersistedListBelongsToItsSeed(t *testing.T) {
	fl := threeServers(t)
	file := filepath.Join(t.TempDir(), "loadbalancer.json")
	lb := startLB(t, fl, fl["a"].addr(), file)
	learned := []string{fl["a"].addr(), fl["b"].addr(), fl["c"].addr()}
	lb.SetServers(learned)
	lb.SetServers(nil) // an empty answer keeps what was learned

	tests := []struct {
		name string
		seed string
		want []string
	}{
		{name: "same seed reloads the list", seed: fl["a"].addr(), want: sorted(learned...)},
		{name: "another seed starts from the seed alone", seed: fl["b"].addr(), want: []string{fl["b"].addr()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			again, err := New(Config{Seed: tt.seed, StateFile: file})
			if err != nil {
				t.Fatal(err)
			}
			defer again.listener.Close()
			if got := again.Servers(); !slices.Equal(got, tt.want) {
				t.Fatalf("Servers() = %v, want %v", got, tt.want)
			}
		})
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode: %v %v", fi, err)
	}
}

func TestManyConcurrentConnectionsDuringFailover(t *testing.T) {
	fl := threeServers(t)
	lb := startLB(t, fl, fl["a"].addr(), "")
	lb.SetServers([]string{fl["a"].addr(), fl["b"].addr(), fl["c"].addr()})
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 20 {
				fl["a"].setHealthy(false)
				fl["a"].l.Close()
			}
			c, err := net.DialTimeout("tcp", lb.Address(), time.Second)
			if err == nil {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = bufio.NewReader(c).ReadString('\n')
				c.Close()
			}
		}()
	}
	wg.Wait()
	eventually(t, "a new active server", func() bool { return lb.Active() != fl["a"].addr() })
}

func sorted(s ...string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func startKeyedLB(t *testing.T, fl fleet, seed, key string) *LoadBalancer {
	t.Helper()
	lb, err := New(Config{Seed: seed, Key: key, HealthCheck: fl.check, CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go lb.Run(ctx)
	t.Cleanup(func() { cancel(); <-lb.Done() })
	return lb
}

func TestRankIsStableAndSpreads(t *testing.T) {
	servers := []string{"127.0.0.1:9443", "127.0.0.2:9443", "127.0.0.3:9443"}
	firsts := map[string]int{}
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("client-%d", i)
		r := Rank(key, servers)
		if !slices.Equal(r, Rank(key, reversed(servers))) {
			t.Fatalf("Rank(%s) depends on the input order", key)
		}
		firsts[r[0]]++
		// Removing a server moves only the keys that ranked it first.
		without := Rank(key, servers[1:])
		if r[0] != servers[0] && without[0] != r[0] {
			t.Errorf("removing %s moved key %s from %s to %s", servers[0], key, r[0], without[0])
		}
	}
	for _, s := range servers {
		// 100 expected of 300; far outside what chance gives.
		if firsts[s] < 60 {
			t.Errorf("server %s ranked first for %d of 300 keys: %v", s, firsts[s], firsts)
		}
	}
}

// Every agent is seeded with the same --server; each moves to the server its
// key ranks first once that one has proved healthy, and when that server
// fails, to its own next-ranked one.
func TestKeyedLoadBalancersSpread(t *testing.T) {
	fl := threeServers(t)
	addrs := []string{fl["a"].addr(), fl["b"].addr(), fl["c"].addr()}
	name := map[string]string{fl["a"].addr(): "a", fl["b"].addr(): "b", fl["c"].addr(): "c"}
	// A key for each server it should rank first.
	keys := map[string]string{}
	for i := 0; len(keys) < 3; i++ {
		key := fmt.Sprintf("client-%d", i)
		if first := name[Rank(key, addrs)[0]]; keys[first] == "" {
			keys[first] = key
		}
	}
	for _, want := range []string{"a", "b", "c"} {
		t.Run(want, func(t *testing.T) {
			lb := startKeyedLB(t, fl, fl["a"].addr(), keys[want])
			c, got := dial(t, lb)
			if got != "a" {
				t.Fatalf("with nothing learned, a connection went to %q, want the seed a", got)
			}
			lb.SetServers(addrs)
			eventually(t, "the preferred server "+want, func() bool { return lb.Active() == fl[want].addr() })
			if want != "a" && !closedSoon(c) {
				t.Fatal("the connection to the seed was not closed when the preferred server took over")
			}
			if _, got := dial(t, lb); got != want {
				t.Fatalf("a connection went to %q, want %q", got, want)
			}
			second := name[Rank(keys[want], addrs)[1]]
			fl[want].setHealthy(false)
			eventually(t, "failover to the second-ranked server "+second, func() bool { return lb.Active() == fl[second].addr() })
			// The preferred server comes back and, once it has passed
			// several checks in a row, carries this agent again.
			fl[want].setHealthy(true)
			eventually(t, "the preferred server again", func() bool { return lb.Active() == fl[want].addr() })
		})
	}
}

func TestKeyedLoadBalancerStaysThroughAFlap(t *testing.T) {
	fl := threeServers(t)
	addrs := []string{fl["a"].addr(), fl["b"].addr(), fl["c"].addr()}
	key := ""
	for i := 0; ; i++ {
		if key = fmt.Sprintf("client-%d", i); Rank(key, addrs)[0] == fl["b"].addr() {
			break
		}
	}
	lb := startKeyedLB(t, fl, fl["a"].addr(), key)
	lb.SetServers(addrs)
	eventually(t, "b active", func() bool { return lb.Active() == fl["b"].addr() })
	fl["b"].setHealthy(false)
	eventually(t, "failover from b", func() bool { return lb.Active() != fl["b"].addr() })
	fallback := lb.Active()
	// b passes checks but fails again before preferAfter passes: the active
	// role stays where it is.
	lb.mu.Lock()
	b := lb.servers[fl["b"].addr()]
	for i := 0; i < 2; i++ {
		b.passes++
		b.state = next(b.state, checkPassed, b.passes)
	}
	lb.pickLocked()
	lb.mu.Unlock()
	if got := lb.Active(); got != fallback {
		t.Fatalf("after b passed %d checks (fewer than %d), the active server is %s, want %s", 2, preferAfter, got, fallback)
	}
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}
