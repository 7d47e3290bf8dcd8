// Package liveness is what a server knows of its agents' liveness, in
// memory: when each machine's agent was last heard, by this server (every
// authenticated request) or by the others (their reports, fetched by
// PollPeers), and which server holds each machine's tunnel. The lifecycle
// controller (internal/lifecycle) judges silence from it; nothing here
// writes to the datastore.
package liveness

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/muster-io/muster/internal/caller"
)

// Tracker remembers, in memory, when each machine's agent last made a
// request. Agents heartbeat with reads served from the watch cache, so
// liveness costs no datastore write; the controller persists lastSeen only
// coarsely.
//
// With several servers an agent talks to one of them, so the controller
// leader's tracker also holds what the other servers saw (Merge), fetched
// from their /liveness reports.
type Tracker struct {
	mu       sync.Mutex
	seen     map[string]time.Time
	remote   map[string]time.Time
	baseline time.Time
	now      func() time.Time
	onReturn func(machine string)
	// tunnels, if set, are the tunnels this server holds (machine → when
	// opened), for its report; peerTunnels are the other servers', by address.
	tunnels     func() map[string]time.Time
	peerTunnels map[string]peerTunnels
}

// Options are what a Tracker is told when it is made; none is required.
type Options struct {
	// OnReturn, if set, is told of a machine heard, here or in another
	// server's report, that the tracker knew nothing of: one that has just
	// joined, or come back after the tracker forgot it, or that the server
	// has not heard since it started. It is called for a request, so it
	// must not block.
	OnReturn func(machine string)
	// ReportTunnels, if set, are the tunnels this server holds (machine →
	// when it opened; internal/tunnel's Hub.Opened): its report lists them,
	// so that the other servers forward requests for those machines here.
	ReportTunnels func() map[string]time.Time
	// Now is the clock; nil for time.Now.
	Now func() time.Time
}

type peerTunnels struct {
	opened map[string]time.Time // machine → when its tunnel opened, on this clock
	at     time.Time            // when the report came
}

// tunnelFreshness is how old a peer's report may be for its tunnels to be
// believed: a few polls, so that one missed poll does not hide them.
const tunnelFreshness = 3 * PeerPollInterval

// TunnelHolder is the address of another server whose fresh report says it
// holds machine's tunnel, and when that tunnel opened. When an agent moved
// between servers, an old server may still list its dead tunnel for a
// while: the newest tunnel is the one the agent reads.
func (t *Tracker) TunnelHolder(machine string) (string, time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	best, bestOpened := "", time.Time{}
	for address, p := range t.peerTunnels {
		if opened, ok := p.opened[machine]; ok && now.Sub(p.at) < tunnelFreshness && (best == "" || opened.After(bestOpened)) {
			best, bestOpened = address, opened
		}
	}
	return best, bestOpened, best != ""
}

// mergeTunnels records the tunnels the server at address holds, from
// their ages (so the servers' clocks need not agree).
func (t *Tracker) mergeTunnels(address string, agesMillis map[string]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	opened := make(map[string]time.Time, len(agesMillis))
	for m, ms := range agesMillis {
		opened[m] = now.Add(-time.Duration(ms) * time.Millisecond)
	}
	if t.peerTunnels == nil {
		t.peerTunnels = map[string]peerTunnels{}
	}
	t.peerTunnels[address] = peerTunnels{opened: opened, at: now}
}

// New returns a tracker that has heard nothing yet.
func New(opts Options) *Tracker {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Tracker{seen: map[string]time.Time{}, remote: map[string]time.Time{}, now: now, onReturn: opts.OnReturn, tunnels: opts.ReportTunnels}
}

// Observe records a request by u, if u is a machine. It is called for every
// authenticated request, so it only takes a map write.
func (t *Tracker) Observe(u user.Info) {
	name, _, ok := caller.Machine(u)
	if !ok {
		return
	}
	t.mu.Lock()
	_, known := t.seen[name]
	_, knownRemote := t.remote[name]
	t.seen[name] = t.now()
	notify := t.onReturn
	t.mu.Unlock()
	if !known && !knownRemote && notify != nil {
		notify(name)
	}
}

// Connected counts the machines whose agents this server itself heard
// within window: the agents connected to it, not to the other servers.
func (t *Tracker) Connected(window time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	now, n := t.now(), 0
	for _, at := range t.seen {
		if now.Sub(at) < window {
			n++
		}
	}
	return n
}

// Begin starts a term of judging liveness, when this server starts or
// becomes the controller leader. A machine not heard from since is given
// the benefit of the doubt for one silence threshold (Live), because its
// agent may be talking to a server whose report has not arrived yet;
// without it every machine would look silent for a moment after a restart
// or a leader change. The doubt only keeps a machine where it is: nothing
// comes back to life on it (Heard), or a restart would mark every dead
// machine alive until the threshold ran out.
func (t *Tracker) Begin() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.baseline = t.now()
}

// LastSeen is when the machine's agent last made a request through any
// server this tracker knows of; zero if never.
func (t *Tracker) LastSeen(machine string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return latest(t.seen[machine], t.remote[machine])
}

// Live reports whether the machine was heard from within silence, counting
// the start of the current term as a hearing: a machine judged live need
// not be declared silent.
func (t *Tracker) Live(machine string, silence time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := latest(latest(t.seen[machine], t.remote[machine]), t.baseline)
	return !last.IsZero() && t.now().Sub(last) < silence
}

// Heard reports whether the machine's agent was really heard from within
// silence, by this server or another: what it takes to call a machine
// alive that was not.
func (t *Tracker) Heard(machine string, silence time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := latest(t.seen[machine], t.remote[machine])
	return !last.IsZero() && t.now().Sub(last) < silence
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Forget drops what the tracker heard of a machine that is gone, so that a
// machine of its name joining later is one it knows nothing of (OnReturn).
func (t *Tracker) Forget(machine string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.seen, machine)
	delete(t.remote, machine)
}

// Report is what one server heard: for each machine, how many
// milliseconds ago. Ages rather than timestamps, so the servers' clocks
// need not agree.
type Report struct {
	AgesMillis map[string]int64 `json:"agesMillis"`
	// TunnelAgesMillis are the tunnels the server holds: how long ago
	// each machine's opened.
	TunnelAgesMillis map[string]int64 `json:"tunnelAgesMillis,omitempty"`
}

// reportWindow bounds a report to machines heard from recently; older
// silence is the same verdict for any threshold in use.
const reportWindow = 10 * time.Minute

// Report returns what this server heard within reportWindow.
func (t *Tracker) Report() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	r := Report{AgesMillis: make(map[string]int64, len(t.seen))}
	for name, at := range t.seen {
		if age := now.Sub(at); age < reportWindow {
			r.AgesMillis[name] = age.Milliseconds()
		}
	}
	if t.tunnels != nil {
		held := t.tunnels()
		r.TunnelAgesMillis = make(map[string]int64, len(held))
		for m, opened := range held {
			r.TunnelAgesMillis[m] = now.Sub(opened).Milliseconds()
		}
	}
	return r
}

// Merge adds another server's report, received now.
func (t *Tracker) Merge(r Report) {
	t.mu.Lock()
	now := t.now()
	var returned []string
	for name, ms := range r.AgesMillis {
		at := now.Add(-time.Duration(ms) * time.Millisecond)
		_, known := t.seen[name]
		prev, knownRemote := t.remote[name]
		if at.After(prev) {
			t.remote[name] = at
		}
		if !known && !knownRemote {
			returned = append(returned, name)
		}
	}
	notify := t.onReturn
	t.mu.Unlock()
	if notify != nil {
		for _, name := range returned {
			notify(name)
		}
	}
}

// ReportPath is where each server serves its Report to the other servers.
const ReportPath = "/liveness"

// ServeHTTP serves the Report as JSON.
func (t *Tracker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(t.Report())
}
