package agent

import (
	"context"
	"net"
	"os"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// HeartbeatInterval is how often the agent shows the server it is alive.
// A heartbeat (api.HeartbeatPath) reads nothing: the server notes it in
// memory, so it costs no datastore access at all.
const HeartbeatInterval = 5 * time.Second

// learnEvery is how many heartbeats apart the agent refreshes its load
// balancer's server list: servers come and go rarely, and a fleet of
// thousands listing them every heartbeat would double the server's load.
const learnEvery = 6

// checkIn reports the agent's version and addresses; it reports whether
// the Machine now shows them.
func (a *agent) checkIn(ctx context.Context, c musterclient.MusterV1alpha1Interface, machine string) error {
	err := CheckIn(ctx, c, machine, addresses())
	if err != nil {
		a.say("checking in: %v", err)
	} else {
		a.noteCheckIn() // upgrade.go
	}
	return err
}

// voidAfter is how long the server must keep refusing the certificate
// before the agent believes its Machine is gone: long enough to ride out a
// server that answers wrongly for a moment (a restart, a failover), short
// enough that systemd hears of a deleted Machine within a minute.
const voidAfter = 15 * time.Second

// heartbeat shows the server the agent is alive, and checks in again until
// a check-in has succeeded. When the server refuses the certificate (403
// "machine ... no longer exists" once the Machine is deleted, or 401) for
// voidAfter, it tells Run the Machine is gone.
func (a *agent) heartbeat(ctx context.Context, c musterclient.MusterV1alpha1Interface, machine string) {
	checkedIn := false
	var refusedSince, lostSince time.Time
	// One timer for the agent's life, reset each beat.
	timer := time.NewTimer(HeartbeatInterval)
	defer timer.Stop()
	for beat := 0; ; beat++ {
		// A check-in that fails counts as a failed beat: a server lost
		// before the first check-in is lost all the same.
		var err error
		if !checkedIn {
			err = a.checkIn(ctx, c, machine)
			checkedIn = err == nil
		}
		next := HeartbeatInterval
		if err == nil {
			err = Heartbeat(ctx, c)
		}
		switch {
		case ctx.Err() != nil:
			return
		case refused(err):
			if refusedSince.IsZero() {
				refusedSince = time.Now()
				a.say("the server refuses this machine's certificate: %v; stopping unless that changes within %s", err, voidAfter)
			}
			if time.Since(refusedSince) >= voidAfter {
				a.machineGone(err)
				return
			}
			// Look again soon: the verdict should come within voidAfter,
			// not a heartbeat interval later.
			next = time.Second
		case err != nil:
			if lostSince.IsZero() {
				lostSince = time.Now()
				a.say("lost the server: %v; trying again about every %s (the load balancer moves to another server if one answers)", err, HeartbeatInterval)
			}
			next = LostBeat(err)
		default:
			if !lostSince.IsZero() {
				a.say("the server answers again after %s (%s)", time.Since(lostSince).Round(time.Second), a.activeServer())
				lostSince = time.Time{}
				// A server back after an outage may be one restored from
				// an older snapshot: the plan runner reads the plan now.
				select {
				case a.reconnected <- struct{}{}:
				default:
				}
			}
			if !refusedSince.IsZero() {
				a.say("the server accepts this machine's certificate again")
			}
			refusedSince = time.Time{}
		}
		if beat%learnEvery == 0 {
			a.learnServers(ctx, c)
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// LostBeat is how long an agent that lost the server waits before its
// next heartbeat: the server's Retry-After if it sent one (a server
// shedding load knows when it can take more), else the heartbeat interval
// with jitter, 2.5–7.5 s. A server's kill -9 breaks every agent's
// connection in the same instant; without jitter the fleet's retries,
// each a new TLS handshake, would keep arriving together.
func LostBeat(err error) time.Duration { return retryWait(err, HeartbeatInterval) }

// activeServer names the server the load balancer sends the agent to.
func (a *agent) activeServer() string {
	if a.lb == nil {
		return a.cfg.Server
	}
	return "through " + a.lb.Active()
}

func addresses() []api.MachineAddress {
	var out []api.MachineAddress
	if h, err := os.Hostname(); err == nil {
		out = append(out, api.MachineAddress{Type: api.MachineHostName, Address: h})
	}
	ifaces, _ := net.InterfaceAddrs()
	return append(out, internalIPs(ifaces)...)
}

// internalIPs are the machine's addresses of both families that another
// host could reach: IPv4 first, then IPv6, each in interface order;
// loopback and IPv6 link-local (fe80::/10, valid only with a zone) left out.
func internalIPs(addrs []net.Addr) []api.MachineAddress {
	var v4, v6 []api.MachineAddress
	for _, addr := range addrs {
		ipn, ok := addr.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() || ipn.IP.IsUnspecified() || ipn.IP.IsMulticast() {
			continue
		}
		a := api.MachineAddress{Type: api.MachineInternalIP, Address: ipn.IP.String()}
		if ipn.IP.To4() != nil {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	return append(v4, v6...)
}

func equalAddresses(a, b []api.MachineAddress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
