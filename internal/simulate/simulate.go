// Package simulate runs many muster agents in one process, for load tests
// of a real deployment (`muster-agent simulate`) and for `make bench`.
//
// Each simulated agent runs the real agent's protocol code (internal/agent:
// CA pinning, registration, check-in, heartbeats, the MachinePlan watch
// and reports) with its own credentials: its own node password and
// clientID, its own ECDSA key and CSR, the certificate it is granted, and
// from then on its own TLS connection. Only the executor differs: plans
// are "applied" without running anything, so the agent reports
// in-progress, then succeeded with the plan's checksum, exactly the writes
// the real agent makes.
package simulate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/muster-io/muster/internal/agent"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/nodepassword"
	"github.com/muster-io/muster/internal/tunnel"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// Config says what to simulate against which server.
type Config struct {
	// Server is the server URL, e.g. https://10.0.0.1:9443.
	Server string
	// Token is a join token from 'muster-server token create'.
	Token string
	// Count is how many agents to simulate.
	Count int
	// Concurrency bounds how many join at the same moment.
	Concurrency int
	// Prefix names the simulated nodes: <prefix>-<n>.
	Prefix string
	// HeartbeatInterval is how often each agent shows it is alive; default 5s like the real agent.
	HeartbeatInterval time.Duration
	// PlanUpdates is how many plan changes a second Run makes once the
	// fleet has joined (round robin over its machines); zero for none.
	PlanUpdates float64
	// Kubeconfig is an admin kubeconfig to change plans with; needed only
	// with PlanUpdates.
	Kubeconfig string
	// NoTunnels leaves out the agents' tunnels (a real agent always holds
	// one), to measure what the tunnels cost.
	NoTunnels bool
}

// Fleet is the simulated agents.
type Fleet struct {
	cfg    Config
	token  jointoken.Token
	ca     []byte
	agents []*Agent

	connected atomic.Int64
	applied   atomic.Int64
	rejoined  atomic.Int64
	changes   changes
	health    health
}

// Agent is one simulated agent.
type Agent struct {
	Name     string
	clientID string
	password string

	keyPEM, certPEM []byte
	machine         string
	// JoinLatency is from its first request to holding its certificate.
	JoinLatency time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	// parent is the context Start was given, for the session a rejoin
	// starts again.
	parent context.Context
	// Rejoins counts the times it joined again after the server's
	// datastore lost its Machine.
	Rejoins int
}

// New verifies the server against the token's CA hash and prepares Count
// agents with fresh identities.
func New(ctx context.Context, cfg Config) (*Fleet, error) {
	if cfg.Count <= 0 {
		return nil, fmt.Errorf("--count must be at least 1")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "sim"
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 5 * time.Second
	}
	tok, err := jointoken.Parse(cfg.Token)
	if err != nil {
		return nil, err
	}
	ca, err := agent.PinCA(ctx, cfg.Server, tok, false, nil, quiet)
	if err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, token: tok, ca: ca}
	for i := 0; i < cfg.Count; i++ {
		pw, err := nodepassword.Generate()
		if err != nil {
			return nil, err
		}
		f.agents = append(f.agents, &Agent{Name: fmt.Sprintf("%s-%d", cfg.Prefix, i), clientID: randomHex(16), password: pw})
	}
	return f, nil
}

// Health is what the fleet saw of the server so far: errors by kind and
// the outages it rode through.
func (f *Fleet) Health() Health { return f.health.snapshot() }

// Agents are the simulated agents, in order.
func (f *Fleet) Agents() []*Agent { return f.agents }

// Connected is how many agents have a live session (checked in, watching).
func (f *Fleet) Connected() int { return int(f.connected.Load()) }

// Rejoined is how many times agents joined again by themselves after the
// server's datastore lost their Machines (a restore from an older snapshot).
func (f *Fleet) Rejoined() int { return int(f.rejoined.Load()) }

// Applied is how many plan results the agents have reported.
func (f *Fleet) Applied() int { return int(f.applied.Load()) }

// Join registers every agent that has no certificate yet, Concurrency at a
// time, and starts each one's session as soon as it holds its certificate.
// progress, if set, is called after each join.
func (f *Fleet) Join(ctx context.Context, progress func(joined int)) error {
	bootstrap, err := musterclient.NewForConfig(&rest.Config{
		Host: f.cfg.Server, BearerToken: f.token.Bearer(), QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.ca},
	})
	if err != nil {
		return err
	}
	work := make(chan *Agent)
	var joined atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for w := 0; w < f.cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				if err := f.join(ctx, bootstrap, a); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("agent %s: %w", a.Name, err) })
					continue
				}
				f.Start(ctx, a)
				n := joined.Add(1)
				if progress != nil {
					progress(int(n))
				}
			}
		}()
	}
	for _, a := range f.agents {
		if a.certPEM != nil {
			continue
		}
		select {
		case work <- a:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return firstErr
}

func (f *Fleet) join(ctx context.Context, c musterclient.MusterV1alpha1Interface, a *Agent) error {
	start := time.Now()
	reg := agent.Registration{
		NodeName: a.Name, ClientID: a.clientID, NodePassword: a.password,
		Labels: map[string]string{"muster.io/simulated": "true"}, Addresses: a.addresses(),
	}
	// Like the real agent, a join rides through a server that is down or
	// restarting: only the server's refusal ends it.
	for backoff := 200 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		got, keyPEM, err := agent.Register(ctx, c, reg, quiet)
		if err == nil {
			f.health.ok()
			a.mu.Lock()
			a.keyPEM, a.certPEM, a.machine = keyPEM, got.Status.Certificate, got.Status.Machine
			a.JoinLatency = time.Since(start)
			a.mu.Unlock()
			return nil
		}
		if !agent.Retryable(err) || ctx.Err() != nil {
			return fmt.Errorf("registering: %w", err)
		}
		f.health.failed(err)
		if !sleep(ctx, agent.RetryWait(err, backoff)) {
			return ctx.Err()
		}
	}
}

// Start begins an agent's session with its certificate: check-in, plan
// watch and heartbeats, until Stop or ctx ends.
func (f *Fleet) Start(ctx context.Context, a *Agent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil || a.certPEM == nil {
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	a.cancel, a.done, a.parent = cancel, make(chan struct{}), ctx
	go func() {
		defer close(a.done)
		f.session(sctx, a)
	}()
}

// StartAll starts the session of every agent holding a certificate, all at once.
func (f *Fleet) StartAll(ctx context.Context) {
	for _, a := range f.agents {
		f.Start(ctx, a)
	}
}

// StopAll ends every session and waits for them: a fleet-wide restart.
func (f *Fleet) StopAll() {
	for _, a := range f.agents {
		a.mu.Lock()
		cancel, done := a.cancel, a.done
		a.cancel = nil
		a.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	}
}

func (f *Fleet) session(ctx context.Context, a *Agent) {
	a.mu.Lock()
	cfg := &rest.Config{
		Host: f.cfg.Server, QPS: 50, Burst: 100,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.ca, CertData: a.certPEM, KeyData: a.keyPEM},
	}
	machine := a.machine
	a.mu.Unlock()
	// Its own transport, so its own TLS connection, as a real agent has.
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return
	}
	httpClient := &http.Client{Transport: transport}
	defer httpClient.CloseIdleConnections()
	c, err := musterclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return
	}
	for {
		err := agent.CheckIn(ctx, c, machine, a.addresses())
		f.health.observe(err)
		if err == nil {
			break
		}
		// A server that is down: wait for it, as the real agent does.
		if !sleep(ctx, time.Second) {
			return
		}
	}
	f.connected.Add(1)
	defer f.connected.Add(-1)
	go f.heartbeat(ctx, c, a)
	if !f.cfg.NoTunnels {
		// The real agent's tunnel code on the session's own connection.
		// Exec is refused: a simulated machine is this host, where a
		// relayed command must not run; the streams are what they cost.
		go agent.RunTunnel(ctx, httpClient, f.cfg.Server, tunnel.Policy{DisableExec: true}, quiet)
	}
	agent.RunPlans(ctx, c, machine, agent.PlanOptions{Executor: nothing{}, Applied: func(checksum string) {
		f.applied.Add(1)
		f.changes.applied(machine, checksum)
	}})
}

// addresses are what the simulated machine reports about itself.
func (a *Agent) addresses() []api.MachineAddress {
	return []api.MachineAddress{{Type: api.MachineHostName, Address: a.Name}}
}

// rejoinAfter is how long the server must refuse an agent's certificate
// before it asks to be made again: the real agent's voidAfter.
const rejoinAfter = 15 * time.Second

func (f *Fleet) heartbeat(ctx context.Context, c musterclient.MusterV1alpha1Interface, a *Agent) {
	// Spread the fleet's heartbeats over the interval.
	if !sleep(ctx, time.Duration(randUint64()%uint64(f.cfg.HeartbeatInterval))) {
		return
	}
	// The real agent's cadence (internal/agent/liveness.go): every
	// interval, and after a failure agent.LostBeat's jittered wait.
	t := time.NewTimer(f.cfg.HeartbeatInterval)
	defer t.Stop()
	var refusedSince time.Time
	for {
		err := agent.Heartbeat(ctx, c)
		f.health.observe(err)
		switch {
		case ctx.Err() != nil:
		case agent.Refused(err):
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if time.Since(refusedSince) >= rejoinAfter {
				// As the real agent: ask, with the certificate and the node
				// password, to be made again (internal/rejoin).
				go f.rejoin(a)
				return
			}
		default:
			refusedSince = time.Time{}
		}
		next := f.cfg.HeartbeatInterval
		if err != nil && ctx.Err() == nil {
			next = agent.LostBeat(err)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rejoin ends a's session, asks the server with a's certificate and node
// password to make its Machine again, and starts a new session with the
// certificate granted. A refusal (its Machine was deleted) leaves it stopped.
func (f *Fleet) rejoin(a *Agent) {
	a.mu.Lock()
	cancel, done, parent := a.cancel, a.done, a.parent
	a.cancel = nil
	cfg := &rest.Config{Host: f.cfg.Server, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.ca, CertData: a.certPEM, KeyData: a.keyPEM}}
	reg := agent.Registration{NodeName: a.machine, ClientID: a.clientID, NodePassword: a.password,
		Labels: map[string]string{"muster.io/simulated": "true"}, Addresses: a.addresses()}
	a.mu.Unlock()
	if cancel == nil || parent == nil {
		return // stopped meanwhile
	}
	cancel()
	<-done
	c, err := musterclient.NewForConfig(cfg)
	if err != nil {
		return
	}
	for backoff := 200 * time.Millisecond; parent.Err() == nil; backoff = min(2*backoff, 5*time.Second) {
		got, keyPEM, err := agent.Register(parent, c, reg, quiet)
		if err == nil {
			a.mu.Lock()
			a.keyPEM, a.certPEM, a.machine = keyPEM, got.Status.Certificate, got.Status.Machine
			a.Rejoins++
			a.mu.Unlock()
			f.rejoined.Add(1)
			f.Start(parent, a)
			return
		}
		if !agent.Retryable(err) {
			return
		}
		if !sleep(parent, agent.RetryWait(err, backoff)) {
			return
		}
	}
}

// nothing is the simulated agents' executor: it runs nothing, so every
// plan is reported applied, and every probe healthy.
type nothing struct{}

func (nothing) Apply(context.Context, *api.MachinePlanSpec) ([]api.InstructionOutput, error) {
	return nil, nil
}

func (nothing) Prober(api.PlanProbe) agent.Prober { return healthy{} }

type healthy struct{}

func (healthy) Probe(context.Context) error { return nil }
func (healthy) Close()                      {}

func quiet(string, ...interface{}) {}

// JoinLatencies are the agents' join latencies, sorted.
func (f *Fleet) JoinLatencies() []time.Duration {
	var out []time.Duration
	for _, a := range f.agents {
		a.mu.Lock()
		if a.JoinLatency > 0 {
			out = append(out, a.JoinLatency)
		}
		a.mu.Unlock()
	}
	slices.Sort(out)
	return out
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}
