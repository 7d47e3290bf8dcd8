// Package loadbalancer is the agent's client-side load balancer: a local
// TCP listener the agent's clients dial, forwarding each connection to one
// muster-server. TLS stays end to end between the client and the server.
//
// One active server carries every connection. The load balancer is seeded
// with the --server address, learns the other servers from ServerEndpoints
// (SetServers), health-checks each every second, and persists the learned
// list in the agent's data dir. When the active server fails it picks the
// best other server and closes the connections to the failed one, so that
// clients (long-lived watches above all) redial through it. The seed is only
// the last resort once other servers are known.
//
// Agents spread over the servers: with a Key (the agent's clientID), the
// learned servers are ranked by rendezvous hashing of the key and each
// address, so each agent prefers its own server, and when that one fails
// its agents move to their own next-ranked servers rather than all to the
// same one. The load balancer moves to a better-ranked server once it has
// passed several health checks in a row (a server that flaps does not pull
// connections back and forth). Without a Key, the list order decides and a
// recovered server does not take the active role back.
package loadbalancer

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/muster-io/muster/internal/atomicfile"
)

// Defaults for Config's durations.
const (
	DefaultCheckInterval = time.Second
	DefaultCheckTimeout  = 3 * time.Second
	DefaultDialTimeout   = 3 * time.Second
)

// Config configures a LoadBalancer.
type Config struct {
	// Seed is the --server address, host:port: the first server, and the last resort.
	Seed string
	// ListenAddress is where the agent's clients connect; default 127.0.0.1:0.
	ListenAddress string
	// StateFile keeps the learned servers across restarts; empty keeps nothing.
	StateFile string
	// HealthCheck tells whether a server can serve; nil counts every server healthy.
	HealthCheck func(ctx context.Context, address string) error
	// CheckInterval, CheckTimeout and DialTimeout default to the Default* values.
	CheckInterval, CheckTimeout, DialTimeout time.Duration
	// Dial opens the connection to a server (host:port); nil dials
	// directly. The agent passes its proxy-aware dialer: the load balancer
	// picks the server, the dial to it goes through the proxy.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Log receives a line for each change of active server, and when a
	// server stops answering (with why) or answers again; nil discards.
	Log func(format string, args ...interface{})
	// Key ranks the learned servers for this load balancer (Rank); empty
	// keeps the list order. Agents pass their clientID.
	Key string
}

// preferAfter is how many health checks in a row a better-ranked server
// must pass before the active role moves to it.
const preferAfter = 3

// Rank orders servers by rendezvous (highest random weight) hashing of key
// and each address: every key gets its own order, the same on every
// restart, and removing a server moves only the keys that ranked it first.
func Rank(key string, servers []string) []string {
	out := slices.Clone(servers)
	score := func(a string) uint64 {
		sum := sha256.Sum256([]byte(key + "\x00" + a))
		return binary.BigEndian.Uint64(sum[:8])
	}
	slices.SortFunc(out, func(a, b string) int {
		sa, sb := score(a), score(b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

type server struct {
	address string
	state   state
	// passes and fails count consecutive health check results.
	passes, fails int
	// failing is set once a failure was logged, until a success is: the
	// log says when a server stops and starts answering, not every try.
	failing bool
	conns   map[*conn]struct{}
}

// LoadBalancer forwards local connections to the active server.
type LoadBalancer struct {
	cfg      Config
	listener net.Listener
	done     chan struct{}

	mu      sync.Mutex
	servers map[string]*server
	learned []string // SetServers order, sorted; the seed is kept apart
	ranked  []string // learned, in this load balancer's order of preference
	active  *server
}

// New starts listening; Run does the work until its context ends.
func New(cfg Config) (*LoadBalancer, error) {
	if _, _, err := net.SplitHostPort(cfg.Seed); err != nil {
		return nil, fmt.Errorf("load balancer: the server address %q is not host:port: %w", cfg.Seed, err)
	}
	if cfg.ListenAddress == "" {
		cfg.ListenAddress = "127.0.0.1:0"
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.CheckTimeout == 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...interface{}) {}
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	l, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("load balancer: listening on %s: %w", cfg.ListenAddress, err)
	}
	lb := &LoadBalancer{cfg: cfg, listener: l, servers: map[string]*server{}, done: make(chan struct{})}
	lb.servers[cfg.Seed] = &server{address: cfg.Seed, state: stateUnchecked, conns: map[*conn]struct{}{}}
	if saved := lb.load(); len(saved) > 0 {
		lb.setServers(saved, false)
	}
	lb.pickLocked()
	return lb, nil
}

// Address is where the agent's clients connect: 127.0.0.1:port.
func (lb *LoadBalancer) Address() string { return lb.listener.Addr().String() }

// Run accepts and forwards connections and checks servers until ctx ends,
// then closes every connection. Done is closed when it has returned.
func (lb *LoadBalancer) Run(ctx context.Context) {
	defer close(lb.done)
	go func() {
		<-ctx.Done()
		_ = lb.listener.Close()
	}()
	go lb.checkLoop(ctx)
	for {
		c, err := lb.listener.Accept()
		if err != nil {
			lb.mu.Lock()
			for _, s := range lb.servers {
				closeAll(s)
			}
			lb.mu.Unlock()
			return
		}
		go lb.forward(ctx, c)
	}
}

// Done is closed once Run has returned.
func (lb *LoadBalancer) Done() <-chan struct{} { return lb.done }

// Active is the address of the server new connections go to.
func (lb *LoadBalancer) Active() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.active == nil {
		return ""
	}
	return lb.active.address
}

// Servers lists the learned servers, or the seed alone while none are.
func (lb *LoadBalancer) Servers() []string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if len(lb.learned) == 0 {
		return []string{lb.cfg.Seed}
	}
	return slices.Clone(lb.learned)
}

// SetServers replaces the learned servers (host:port each) and persists
// them. An empty list keeps the current one: a server that cannot list
// its peers is no reason to forget them.
func (lb *LoadBalancer) SetServers(addresses []string) {
	lb.setServers(addresses, true)
}

func (lb *LoadBalancer) setServers(addresses []string, persist bool) {
	var list []string
	for _, a := range addresses {
		if _, _, err := net.SplitHostPort(a); err == nil && !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return
	}
	slices.Sort(list)
	lb.mu.Lock()
	if slices.Equal(list, lb.learned) {
		lb.mu.Unlock()
		return
	}
	lb.learned = list
	lb.ranked = list
	if lb.cfg.Key != "" {
		lb.ranked = Rank(lb.cfg.Key, list)
	}
	for _, a := range list {
		if lb.servers[a] == nil {
			lb.servers[a] = &server{address: a, state: stateUnchecked, conns: map[*conn]struct{}{}}
		}
	}
	for a, s := range lb.servers {
		if a != lb.cfg.Seed && !slices.Contains(list, a) {
			closeAll(s)
			delete(lb.servers, a)
			if lb.active == s {
				lb.active = nil
			}
		}
	}
	lb.pickLocked()
	lb.mu.Unlock()
	if persist {
		lb.save(list)
	}
}

// pickLocked keeps the active server while it is active, else chooses the
// best candidate and closes the connections to the one it replaces.
func (lb *LoadBalancer) pickLocked() {
	cur := lb.active
	best := lb.bestLocked(map[*server]bool{cur: true})
	switch {
	case best == nil:
		return
	case cur == nil:
	case cur.state == stateActive && !lb.lastResort(cur):
		better := lb.preferredLocked(cur)
		if better == nil {
			return
		}
		best = better
	case cur.state == stateActive:
		// The seed is kept only as the last resort: a healthy learned
		// server takes over from it.
		if best.state < stateHealthy {
			return
		}
	default:
		// The active server failed. Replace it only with one better than
		// failed; if all are down, moving connections around helps nobody.
		if best.state <= cur.state {
			return
		}
	}
	old := lb.active
	if old != nil {
		old.state = next(old.state, replaced, 1)
		closeAll(old)
	}
	best.state = next(best.state, chosen, 1)
	lb.active = best
	if old != nil {
		lb.cfg.Log("load balancer: active server %s (was %s)", best.address, old.address)
	} else {
		lb.cfg.Log("load balancer: active server %s", best.address)
	}
}

// preferredLocked is the server ranked above cur that has stayed healthy
// for preferAfter checks, the best-ranked such one; nil without a Key.
func (lb *LoadBalancer) preferredLocked(cur *server) *server {
	if lb.cfg.Key == "" {
		return nil
	}
	for _, a := range lb.ranked {
		s := lb.servers[a]
		if s == cur {
			return nil
		}
		if s != nil && s.state == stateHealthy && s.passes >= preferAfter {
			return s
		}
	}
	return nil
}

// lastResort reports whether s is the seed and not a learned server.
func (lb *LoadBalancer) lastResort(s *server) bool {
	return s.address == lb.cfg.Seed && len(lb.learned) > 0 && !slices.Contains(lb.learned, lb.cfg.Seed)
}

// bestLocked is the candidate in the highest state, in list order, the
// seed last unless it is also a learned server; skip is left out.
func (lb *LoadBalancer) bestLocked(skip map[*server]bool) *server {
	var best *server
	for _, a := range lb.order() {
		s := lb.servers[a]
		if s == nil || skip[s] {
			continue
		}
		if best == nil || s.state > best.state || s.state == best.state && lb.lastResort(best) {
			best = s
		}
	}
	return best
}

// order is the learned servers in order of preference, then the seed if it
// is not among them.
func (lb *LoadBalancer) order() []string {
	if slices.Contains(lb.ranked, lb.cfg.Seed) {
		return lb.ranked
	}
	return append(slices.Clone(lb.ranked), lb.cfg.Seed)
}

// forward dials the active server, failing over through the others, and
// copies bytes both ways until either side closes.
func (lb *LoadBalancer) forward(ctx context.Context, client net.Conn) {
	tried := map[*server]bool{}
	for {
		lb.mu.Lock()
		target := lb.active
		if target == nil || tried[target] {
			target = lb.bestLocked(tried)
		}
		lb.mu.Unlock()
		if target == nil {
			_ = client.Close()
			return
		}
		tried[target] = true
		dctx, cancel := context.WithTimeout(ctx, lb.cfg.DialTimeout)
		upstream, err := lb.cfg.Dial(dctx, "tcp", target.address)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				_ = client.Close()
				return
			}
			lb.mu.Lock()
			lb.noteLocked(target, err)
			target.state = next(target.state, dialFailed, 1)
			target.passes = 0
			lb.pickLocked()
			lb.mu.Unlock()
			continue
		}
		c := &conn{client: client, upstream: upstream}
		lb.mu.Lock()
		if lb.active != target && target.state > stateFailed && (lb.active == nil || lb.active.state == stateFailed) {
			// The active server is down and this one answered: it takes over.
			old := lb.active
			if old != nil {
				closeAll(old)
				lb.cfg.Log("load balancer: active server %s (was %s)", target.address, old.address)
			}
			target.state = next(target.state, chosen, 1)
			lb.active = target
		}
		if lb.servers[target.address] != target {
			// Removed while dialing.
			lb.mu.Unlock()
			c.close()
			return
		}
		target.conns[c] = struct{}{}
		lb.mu.Unlock()
		c.pipe()
		lb.mu.Lock()
		delete(target.conns, c)
		lb.mu.Unlock()
		return
	}
}

// checkLoop health-checks every server each CheckInterval.
func (lb *LoadBalancer) checkLoop(ctx context.Context) {
	t := time.NewTicker(lb.cfg.CheckInterval)
	defer t.Stop()
	for {
		lb.checkAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (lb *LoadBalancer) checkAll(ctx context.Context) {
	lb.mu.Lock()
	addresses := lb.order()
	lb.mu.Unlock()
	results := make([]error, len(addresses))
	var wg sync.WaitGroup
	for i, a := range addresses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if lb.cfg.HealthCheck == nil {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, lb.cfg.CheckTimeout)
			defer cancel()
			results[i] = lb.cfg.HealthCheck(cctx, a)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for i, a := range addresses {
		s := lb.servers[a]
		if s == nil {
			continue
		}
		lb.noteLocked(s, results[i])
		if results[i] == nil {
			s.passes, s.fails = s.passes+1, 0
			s.state = next(s.state, checkPassed, s.passes)
		} else {
			s.passes, s.fails = 0, s.fails+1
			s.state = next(s.state, checkFailed, s.fails)
		}
	}
	lb.pickLocked()
}

// noteLocked logs when s stops answering, with the reason (a refused
// dial, a proxy that refuses or is down, a failed /readyz), and when it
// answers again.
func (lb *LoadBalancer) noteLocked(s *server, err error) {
	switch {
	case err != nil && !s.failing:
		s.failing = true
		lb.cfg.Log("load balancer: server %s does not answer: %v", s.address, err)
	case err == nil && s.failing:
		s.failing = false
		lb.cfg.Log("load balancer: server %s answers again", s.address)
	}
}

// persisted is the state file: the learned list and the seed it was learned from.
type persisted struct {
	Seed    string   `json:"seed"`
	Servers []string `json:"servers"`
}

func (lb *LoadBalancer) load() []string {
	if lb.cfg.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(lb.cfg.StateFile)
	if err != nil {
		return nil
	}
	var p persisted
	// A list learned through another --server may belong to another
	// deployment: only the same seed's list is trusted.
	if json.Unmarshal(b, &p) != nil || p.Seed != lb.cfg.Seed {
		return nil
	}
	return p.Servers
}

func (lb *LoadBalancer) save(list []string) {
	if lb.cfg.StateFile == "" {
		return
	}
	b, _ := json.Marshal(persisted{Seed: lb.cfg.Seed, Servers: list})
	if err := atomicfile.Write(lb.cfg.StateFile, b, 0o600); err != nil {
		lb.cfg.Log("load balancer: cannot keep the server list in %s: %v", lb.cfg.StateFile, err)
	}
}

// conn is one forwarded connection.
type conn struct {
	client, upstream net.Conn
	once             sync.Once
}

func (c *conn) pipe() {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(c.upstream, c.client)
	go cp(c.client, c.upstream)
	<-done
	c.close()
	<-done
}

func (c *conn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.upstream.Close()
	})
}

func closeAll(s *server) {
	for c := range s.conns {
		c.close()
	}
}
