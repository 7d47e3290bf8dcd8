package liveness

import (
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/muster-io/muster/internal/caller"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func machineUser(name string) user.Info {
	cn, groups := caller.MachineSubject(name, "uid-"+name, "c1")
	return &user.DefaultInfo{Name: cn, Groups: groups}
}

// The leader judges liveness from its own hearings, the other servers'
// reports and the start of its term; a report carries ages, so the
// servers' clocks need not agree.
func TestTrackerLiveness(t *testing.T) {
	const silence = 40 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// steps run in order on a tracker whose clock starts at t0
		steps     func(tr *Tracker, c *clock)
		machine   string
		wantLive  bool
		wantHeard bool
		wantSeen  time.Duration // since t0; -1 for never
	}{
		{
			name:    "never heard, no term",
			steps:   func(*Tracker, *clock) {},
			machine: "m", wantLive: false, wantSeen: -1,
		},
		{
			name:    "heard here recently",
			steps:   func(tr *Tracker, c *clock) { tr.Observe(machineUser("m")); c.t = c.t.Add(30 * time.Second) },
			machine: "m", wantLive: true, wantHeard: true, wantSeen: 0,
		},
		{
			name:    "heard here too long ago",
			steps:   func(tr *Tracker, c *clock) { tr.Observe(machineUser("m")); c.t = c.t.Add(41 * time.Second) },
			machine: "m", wantLive: false, wantSeen: 0,
		},
		{
			name: "heard by another server",
			steps: func(tr *Tracker, c *clock) {
				c.t = c.t.Add(50 * time.Second)
				tr.Merge(Report{AgesMillis: map[string]int64{"m": 5000}})
			},
			machine: "m", wantLive: true, wantHeard: true, wantSeen: 45 * time.Second,
		},
		{
			name: "an older report does not move the hearing back",
			steps: func(tr *Tracker, c *clock) {
				tr.Merge(Report{AgesMillis: map[string]int64{"m": 0}})
				tr.Merge(Report{AgesMillis: map[string]int64{"m": 20000}})
			},
			machine: "m", wantLive: true, wantHeard: true, wantSeen: 0,
		},
		{
			name: "a new term keeps a machine live, but is not a hearing",
			steps: func(tr *Tracker, c *clock) {
				c.t = c.t.Add(time.Hour)
				tr.Begin()
				c.t = c.t.Add(39 * time.Second)
			},
			machine: "m", wantLive: true, wantSeen: -1,
		},
		{
			name: "heard after a new term",
			steps: func(tr *Tracker, c *clock) {
				tr.Begin()
				c.t = c.t.Add(10 * time.Second)
				tr.Observe(machineUser("m"))
			},
			machine: "m", wantLive: true, wantHeard: true, wantSeen: 10 * time.Second,
		},
		{
			name: "silent for a whole term",
			steps: func(tr *Tracker, c *clock) {
				tr.Begin()
				c.t = c.t.Add(40 * time.Second)
			},
			machine: "m", wantLive: false, wantSeen: -1,
		},
		{
			name: "administrators are not machines",
			steps: func(tr *Tracker, c *clock) {
				tr.Observe(&user.DefaultInfo{Name: "muster-admin", Groups: []string{"system:masters"}})
			},
			machine: "muster-admin", wantLive: false, wantSeen: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			tr := New(Options{Now: c.now})
			tt.steps(tr, c)
			if got := tr.Live(tt.machine, silence); got != tt.wantLive {
				t.Errorf("Live = %v, want %v", got, tt.wantLive)
			}
			if got := tr.Heard(tt.machine, silence); got != tt.wantHeard {
				t.Errorf("Heard = %v, want %v", got, tt.wantHeard)
			}
			seen := tr.LastSeen(tt.machine)
			switch {
			case tt.wantSeen < 0 && !seen.IsZero():
				t.Errorf("LastSeen = %s, want never", seen)
			case tt.wantSeen >= 0 && !seen.Equal(t0.Add(tt.wantSeen)):
				t.Errorf("LastSeen = %s, want t0+%s", seen, tt.wantSeen)
			}
		})
	}
}

// What one server reports is what another merges; the leader is told of
// machines it had not heard of, so it looks at them at once.
func TestTrackerReportRoundTrip(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	peer := New(Options{Now: c.now})
	peer.Observe(machineUser("a"))
	c.t = c.t.Add(3 * time.Second)
	peer.Observe(machineUser("b"))
	c.t = c.t.Add(reportWindow)
	peer.Observe(machineUser("c"))
	r := peer.Report()
	if len(r.AgesMillis) != 1 || r.AgesMillis["c"] != 0 {
		t.Fatalf("report %v, want only c (a and b are older than the window)", r.AgesMillis)
	}

	c.t = c.t.Add(-reportWindow)
	r = Report{AgesMillis: map[string]int64{"a": 3000, "b": 0}}
	var told []string
	leader := New(Options{Now: c.now, OnReturn: func(m string) { told = append(told, m) }})
	leader.Observe(machineUser("a"))
	leader.Merge(r)
	if len(told) != 2 || told[0] != "a" || told[1] != "b" {
		// "a" was heard locally first (told then), "b" first by the peer.
		t.Fatalf("told of %v, want a (own hearing) then b (peer report)", told)
	}
	leader.Merge(r)
	if len(told) != 2 {
		t.Fatalf("told again of machines already known: %v", told)
	}
}

// Each server's report lists the tunnels it holds; the others find the
// holder from it while the report is fresh, and not after; of two servers
// listing a machine (its agent moved), the newer tunnel wins.
func TestTrackerTunnelHolder(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	peer := New(Options{Now: c.now, ReportTunnels: func() map[string]time.Time {
		return map[string]time.Time{"m1": c.t.Add(-time.Minute), "moved": c.t.Add(-time.Hour)}
	}})
	other := New(Options{Now: c.now, ReportTunnels: func() map[string]time.Time { return map[string]time.Time{"moved": c.t.Add(-time.Second)} }})
	self := New(Options{Now: c.now})
	self.mergeTunnels("10.0.0.2:9443", peer.Report().TunnelAgesMillis)
	self.mergeTunnels("10.0.0.3:9443", other.Report().TunnelAgesMillis)
	if _, opened, _ := self.TunnelHolder("moved"); !opened.Equal(c.t.Add(-time.Second)) {
		t.Errorf("the moved tunnel opened at %s, want a second ago (%s)", opened, c.t.Add(-time.Second))
	}
	for _, tc := range []struct {
		machine, want string
		after         time.Duration
	}{
		{"m1", "10.0.0.2:9443", 0},
		{"moved", "10.0.0.3:9443", 0},
		{"m2", "", 0},
		{"m1", "", tunnelFreshness},
	} {
		c.t = c.t.Add(tc.after)
		if got, _, ok := self.TunnelHolder(tc.machine); got != tc.want || ok != (tc.want != "") {
			t.Errorf("TunnelHolder(%s) after %s = %q, %v; want %q", tc.machine, tc.after, got, ok, tc.want)
		}
	}
}
