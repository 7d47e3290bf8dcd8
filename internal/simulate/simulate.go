// Package simulate runs many muster agents in one process, for load tests
// of a real deployment (`muster-agent simulate`) and for `make bench`.
//
// Each simulated agent speaks the real protocol with its own credentials:
// its own node password and clientID, its own ECDSA key and CSR, a
// ClusterRegistration made with the join token, the certificate it is
// granted, and from then on its own TLS connection carrying its check-in,
// its heartbeats and its own MachinePlan watch. Plans are "applied" without
// running anything: the agent reports in-progress, then succeeded with the
// plan's checksum, exactly the writes the real agent makes.
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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/nodepassword"
	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/version"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
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
}

// Fleet is the simulated agents.
type Fleet struct {
	cfg    Config
	token  jointoken.Token
	ca     []byte
	agents []*Agent

	connected atomic.Int64
	applied   atomic.Int64
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
	ca, err := jointoken.FetchCA(ctx, cfg.Server)
	if err != nil {
		return nil, err
	}
	if !tok.PinsCA(ca) {
		return nil, fmt.Errorf("the server's CA does not match the token's CA hash (K10<hash>): refusing to send credentials; use a token from this server")
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

// Applied is how many plan results the agents have reported.
func (f *Fleet) Applied() int { return int(f.applied.Load()) }

// Join registers every agent that has no certificate yet, Concurrency at a
// time, and starts each one's session as soon as it holds its certificate.
// progress, if set, is called after each join.
func (f *Fleet) Join(ctx context.Context, progress func(joined int)) error {
	bootstrap, err := versioned.NewForConfig(&rest.Config{
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

func (f *Fleet) join(ctx context.Context, c versioned.Interface, a *Agent) error {
	start := time.Now()
	key, keyPEM, err := pki.NewPrivateKey()
	if err != nil {
		return err
	}
	csr, err := pki.NewCSR(a.Name, key)
	if err != nil {
		return err
	}
	random := randomHex(16)
	reg := &api.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: api.RegistrationName(a.clientID, random)},
		Spec: api.ClusterRegistrationSpec{
			ClientID: a.clientID, ClientRandom: random, NodeName: a.Name, CSR: csr, NodePassword: a.password,
			Labels:       map[string]string{"muster.io/simulated": "true"},
			AgentVersion: version.Version, Addresses: a.addresses(),
		},
	}
	regs := c.MusterV1alpha1().ClusterRegistrations()
	var got *api.ClusterRegistration
	// Like the real agent, a join rides through a server that is down or
	// restarting: only the server's refusal ends it.
	for attempt := 0; ; attempt++ {
		got, err = regs.Create(ctx, reg, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			f.health.ok()
			break
		}
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsInvalid(err) || ctx.Err() != nil {
			return fmt.Errorf("registering: %w", err)
		}
		f.health.failed(err)
		wait := min(time.Duration(attempt+1)*200*time.Millisecond, 5*time.Second)
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		sleep(ctx, wait)
	}
	// Like the real agent: take a grant from the create's answer, or poll
	// briskly, then back off.
	interval := 100 * time.Millisecond
	for first := err == nil; ; first = false {
		if !first {
			got, err = regs.Get(ctx, reg.Name, metav1.GetOptions{ResourceVersion: "0"})
			f.health.observe(err)
		}
		switch {
		case err != nil && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)):
			return fmt.Errorf("the server refused the registration: %w", err)
		case err != nil && ctx.Err() != nil:
			return err
		case err == nil && got.Status.Phase == api.RegistrationPhaseGranted:
			a.mu.Lock()
			a.keyPEM, a.certPEM, a.machine = keyPEM, got.Status.Certificate, got.Status.Machine
			a.JoinLatency = time.Since(start)
			a.mu.Unlock()
			return nil
		case err == nil && (got.Status.Phase == api.RegistrationPhaseDenied || got.Status.Phase == api.RegistrationPhaseExpired):
			return fmt.Errorf("the registration was %s: %s", got.Status.Phase, got.Status.Message)
		}
		sleep(ctx, interval)
		interval = min(interval*2, 2*time.Second)
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
	a.cancel, a.done = cancel, make(chan struct{})
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
	c, err := versioned.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return
	}
	for !f.checkIn(ctx, c, a, machine) {
		// A server that is down: wait for it, as the real agent does.
		if !sleep(ctx, time.Second) {
			return
		}
	}
	f.connected.Add(1)
	defer f.connected.Add(-1)
	go f.heartbeat(ctx, c, machine)
	f.watchPlan(ctx, c, machine)
}

// checkIn makes sure the Machine shows the agent's version and addresses,
// as the real agent does: a read from the watch cache, and a write only
// when they differ (never, for a machine that registered with them).
func (f *Fleet) checkIn(ctx context.Context, c versioned.Interface, a *Agent, machine string) bool {
	machines := c.MusterV1alpha1().Machines()
	read := metav1.GetOptions{ResourceVersion: "0"}
	for attempt := 0; attempt < 5; attempt++ {
		m, err := machines.Get(ctx, machine, read)
		f.health.observe(err)
		if err != nil {
			return false
		}
		if m.Status.AgentVersion == version.Version && slices.Equal(m.Status.Addresses, a.addresses()) {
			return true
		}
		m.Status.AgentVersion, m.Status.Addresses = version.Version, a.addresses()
		_, err = machines.UpdateStatus(ctx, m, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err == nil
		}
		read.ResourceVersion = "" // the cache lagged: read the stored object
	}
	return false
}

// addresses are what the simulated machine reports about itself.
func (a *Agent) addresses() []api.MachineAddress {
	return []api.MachineAddress{{Type: api.MachineHostName, Address: a.Name}}
}

func (f *Fleet) heartbeat(ctx context.Context, c versioned.Interface, machine string) {
	// Spread the fleet's heartbeats over the interval.
	if !sleep(ctx, time.Duration(randUint64()%uint64(f.cfg.HeartbeatInterval))) {
		return
	}
	t := time.NewTicker(f.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		f.health.observe(c.MusterV1alpha1().RESTClient().Get().AbsPath(api.HeartbeatPath).Do(ctx).Error())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchPlan lists and watches the agent's own plan, and reports each new
// plan applied.
func (f *Fleet) watchPlan(ctx context.Context, c versioned.Interface, machine string) {
	plans := c.MusterV1alpha1().MachinePlans()
	selector := fields.OneTermEqualSelector("metadata.name", machine).String()
	for ctx.Err() == nil {
		list, err := plans.List(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: "0"})
		f.health.observe(err)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for i := range list.Items {
			f.apply(ctx, c, &list.Items[i])
		}
		w, err := plans.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		f.health.observe(err)
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*api.MachinePlan); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				f.apply(ctx, c, p)
			}
		}
		w.Stop()
	}
}

// apply reports a plan the way the real agent does: in-progress first (for
// a plan that changes the machine), then succeeded with the checksum. Like
// the real agent it tries again after a failed report, with a growing
// pause; a conflict means a newer plan, which the watch brings.
func (f *Fleet) apply(ctx context.Context, c versioned.Interface, p *api.MachinePlan) {
	for pause := time.Second; ; pause = min(2*pause, 30*time.Second) {
		err := f.report(ctx, c, p)
		f.health.observe(err)
		if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) || !sleep(ctx, pause) {
			return
		}
	}
}

func (f *Fleet) report(ctx context.Context, c versioned.Interface, p *api.MachinePlan) error {
	st := p.Status
	if st.Checksum == "" || st.AppliedChecksum == st.Checksum && st.State == api.PlanStateSucceeded {
		return nil
	}
	plans := c.MusterV1alpha1().MachinePlans()
	p = p.DeepCopy()
	if p.Spec.ChangesMachine() && st.State != api.PlanStateInProgress {
		p.Status.State = api.PlanStateInProgress
		var err error
		if p, err = plans.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	now := metav1.Now()
	p.Status.State, p.Status.AppliedChecksum, p.Status.FailureCount, p.Status.LastAppliedTime = api.PlanStateSucceeded, p.Status.Checksum, 0, &now
	if _, err := plans.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return err
	}
	f.applied.Add(1)
	f.changes.applied(p.Name, p.Status.Checksum)
	return nil
}

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
