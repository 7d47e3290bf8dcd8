// Package lifecycle drives every Machine through its state machine from what
// its agent reports (check-in, plan results, heartbeats) and every Cluster
// from its machines, and finalizes deleted Machines.
package lifecycle

import (
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/muster-io/muster/internal/identity"
)

// Tracker remembers, in memory, when each machine's agent last made a
// request. Agents heartbeat with reads served from the watch cache, so
// liveness costs no datastore write; the controller persists lastSeen only
// coarsely.
type Tracker struct {
	mu       sync.Mutex
	seen     map[string]time.Time
	now      func() time.Time
	onReturn func(machine string)
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{seen: map[string]time.Time{}, now: time.Now}
}

// Observe records a request by u, if u is a machine. It is called for every
// authenticated request, so it only takes a map write.
func (t *Tracker) Observe(u user.Info) {
	name, _, ok := identity.Machine(u)
	if !ok {
		return
	}
	t.mu.Lock()
	_, known := t.seen[name]
	t.seen[name] = t.now()
	notify := t.onReturn
	t.mu.Unlock()
	if !known && notify != nil {
		notify(name)
	}
}

// LastSeen is when the machine's agent last made a request through this server.
func (t *Tracker) LastSeen(machine string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen[machine]
}

func (t *Tracker) forget(machine string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.seen, machine)
}
