package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// spec is SPEC §5 (plus the choices documented in machines.go) written out
// edge by edge, independently of the tables: a table edit that changes the
// lifecycle has to change this list too, on purpose.
var spec = map[*Definition]struct {
	edges    []string // "From -event-> To"
	terminal []string
}{
	Registration: {
		edges: []string{
			"Pending -approve-> Approved",
			"Approved -grant-> Granted",
			"Pending -deny-> Denied", "Approved -deny-> Denied",
			"Pending -expire-> Expired", "Approved -expire-> Expired",
		},
		terminal: []string{"Granted", "Denied", "Expired"},
	},
	Machine: {
		edges: []string{
			"Pending -provision-> Provisioning",
			"Pending -register-> Registering", "Provisioning -register-> Registering",
			"Registering -agent-checked-in-> Bootstrapping",
			"Bootstrapping -plan-applied-> Running", "Updating -plan-applied-> Running",
			"Running -plan-changed-> Updating", "Updating -plan-changed-> Updating",
			"Failed -plan-fixed-> Updating",
			"Bootstrapping -agent-silent-> Unavailable", "Running -agent-silent-> Unavailable",
			"Updating -agent-silent-> Unavailable",
			"Unavailable -agent-returned-> Running",
			"Unavailable -agent-returned-mid-plan-> Updating",
			"Pending -provision-failed-> Failed", "Provisioning -provision-failed-> Failed",
			"Registering -plan-failed-> Failed", "Bootstrapping -plan-failed-> Failed",
			"Running -plan-failed-> Failed", "Updating -plan-failed-> Failed",
			"Unavailable -plan-failed-> Failed",
			"Pending -drain-> Draining", "Provisioning -drain-> Draining",
			"Registering -drain-> Draining", "Bootstrapping -drain-> Draining",
			"Running -drain-> Draining", "Updating -drain-> Draining",
			"Unavailable -drain-> Draining", "Failed -drain-> Draining",
			"Draining -drained-> Deleting",
			"Deleting -finalized-> Deleted",
		},
		terminal: []string{"Deleted"},
	},
	Cluster: {
		edges: []string{
			"Pending -await-check-in-> WaitCheckIn",
			"WaitCheckIn -agent-checked-in-> Active",
			"Active -machine-unhealthy-> Degraded",
			"Degraded -machines-healthy-> Active",
			"Active -machines-gone-> WaitCheckIn", "Degraded -machines-gone-> WaitCheckIn",
			"Pending -delete-> Deleting", "WaitCheckIn -delete-> Deleting",
			"Active -delete-> Deleting", "Degraded -delete-> Deleting",
		},
		terminal: []string{"Deleting"},
	},
	Token: {
		edges:    []string{"Active -expire-> Expired", "Active -revoke-> Revoked"},
		terminal: []string{"Expired", "Revoked"},
	},
	// The planner's stages: any stage may follow any other (the planner
	// decides from what it sees), Pending is never re-entered, and each
	// move is named for where it goes.
	KubernetesPlan: {edges: everyOtherTo(map[string]string{
		"Invalid": "refuse-roles", "BootstrappingEtcd": "bootstrap-etcd", "JoiningEtcd": "join-etcd",
		"StartingControlPlane": "start-control-plane", "JoiningWorkers": "join-workers", "Ready": "kubernetes-ready",
		"RemovingEtcd": "remove-etcd", "Upgrading": "upgrade",
	}, "Pending")},
}

// everyOtherTo spells out the edges of a machine where event[to] takes
// every state but to itself to to.
func everyOtherTo(event map[string]string, initial string) []string {
	states := []string{initial}
	for to := range event {
		states = append(states, to)
	}
	var out []string
	for to, ev := range event {
		for _, from := range states {
			if from != to {
				out = append(out, from+" -"+ev+"-> "+to)
			}
		}
	}
	return out
}

type edge struct{ from, event, to string }

// edges parses the spec of d; a malformed line panics, failing every test.
func edges(d *Definition) []edge {
	var out []edge
	for _, line := range spec[d].edges {
		f := strings.Fields(line)
		if len(f) != 3 || !strings.HasPrefix(f[1], "-") || !strings.HasSuffix(f[1], "->") {
			panic("bad spec edge " + line)
		}
		out = append(out, edge{f[0], strings.TrimSuffix(strings.TrimPrefix(f[1], "-"), "->"), f[2]})
	}
	return out
}

// specDst is where the spec says event takes from, if anywhere.
func specDst(d *Definition, from, event string) (string, bool) {
	for _, e := range edges(d) {
		if e.from == from && e.event == event {
			return e.to, true
		}
	}
	return "", false
}

func TestEveryDefinitionIsSpecified(t *testing.T) {
	if len(spec) != len(All) {
		t.Fatalf("spec covers %d definitions, All has %d", len(spec), len(All))
	}
	for _, d := range All {
		if _, ok := spec[d]; !ok {
			t.Errorf("%s has no spec in the test", d.Name())
		}
		// Every table row is in the spec (the other direction is checked
		// state by state below).
		for _, row := range d.table {
			for _, src := range row.src {
				if to, ok := specDst(d, src, row.event); !ok || to != row.dst {
					t.Errorf("%s table has %s -%s-> %s, spec does not", d.Name(), src, row.event, row.dst)
				}
			}
		}
		if !d.IsState(d.Initial()) {
			t.Errorf("%s initial %q is no state", d.Name(), d.Initial())
		}
	}
}

// Every state × every event (and one event nobody has): legal ones reach
// the spec's destination, illegal ones are refused with an error naming the
// current state and the events allowed from it.
func TestFireEveryStateEveryEvent(t *testing.T) {
	for _, d := range All {
		for _, from := range d.States() {
			var wantAllowed []string
			for _, ev := range append(d.Events(), "bogus-event") {
				t.Run(d.Name()+"/"+from+"/"+ev, func(t *testing.T) {
					want, legal := specDst(d, from, ev)
					got, err := d.Fire(from, ev)
					if legal {
						wantAllowed = append(wantAllowed, ev)
						if err != nil || got != want {
							t.Fatalf("Fire = %q, %v; want %q", got, err, want)
						}
						return
					}
					var illegal *IllegalTransitionError
					if !errors.As(err, &illegal) {
						t.Fatalf("Fire = %q, %v; want an *IllegalTransitionError", got, err)
					}
					if got != "" {
						t.Errorf("refused Fire still returned state %q", got)
					}
					if illegal.Kind != d.Name() || illegal.From != from || illegal.Event != ev {
						t.Errorf("error fields %+v", illegal)
					}
					msg := err.Error()
					if !strings.Contains(msg, d.Name()) || !strings.Contains(msg, `"`+from+`"`) {
						t.Errorf("error %q does not name the kind and the current state", msg)
					}
					if len(illegal.Allowed) == 0 && !strings.Contains(msg, "final") {
						t.Errorf("error %q from a final state does not say so", msg)
					}
					for _, a := range illegal.Allowed {
						if !strings.Contains(msg, a) {
							t.Errorf("error %q does not list allowed event %q", msg, a)
						}
					}
					if ev == "bogus-event" && (illegal.UnknownEvent != ev || !strings.Contains(msg, "has no event")) {
						t.Errorf("unknown event not reported as such: %q", msg)
					}
				})
			}
			slices.Sort(wantAllowed)
			if got := d.Allowed(from); !slices.Equal(got, wantAllowed) {
				t.Errorf("%s Allowed(%q) = %v, want %v", d.Name(), from, got, wantAllowed)
			}
		}
	}
}

// EventFor for every ordered pair of states agrees with the spec and with
// Fire: the event it names takes from to to, and when it refuses no allowed
// event does.
func TestEventForEveryPair(t *testing.T) {
	for _, d := range All {
		for _, from := range d.States() {
			for _, to := range d.States() {
				ev, err := d.EventFor(from, to)
				if from == to {
					if ev != "" || err != nil {
						t.Errorf("%s EventFor(%q, itself) = %q, %v; want no event, no error", d.Name(), from, ev, err)
					}
					continue
				}
				var firstInSpec string
				for _, e := range edges(d) {
					if e.from == from && e.to == to && firstInSpec == "" {
						firstInSpec = e.event
					}
				}
				if firstInSpec == "" {
					var illegal *IllegalTransitionError
					if !errors.As(err, &illegal) || illegal.To != to || illegal.From != from {
						t.Errorf("%s EventFor(%q, %q) = %q, %v; want refusal", d.Name(), from, to, ev, err)
						continue
					}
					want := fmt.Sprintf("%s cannot go from %q to %q", d.Name(), from, to)
					if !strings.HasPrefix(err.Error(), want) {
						t.Errorf("error %q, want prefix %q", err, want)
					}
					for _, a := range d.Allowed(from) {
						if got, _ := d.Fire(from, a); got == to {
							t.Errorf("%s EventFor(%q, %q) refused but %q leads there", d.Name(), from, to, a)
						}
					}
					continue
				}
				if err != nil || ev != firstInSpec {
					t.Errorf("%s EventFor(%q, %q) = %q, %v; want %q", d.Name(), from, to, ev, err, firstInSpec)
				}
				if got, err := d.Fire(from, ev); err != nil || got != to {
					t.Errorf("%s EventFor(%q, %q) picked %q, which Fires to %q, %v", d.Name(), from, to, ev, got, err)
				}
			}
		}
	}
}

// EventFor is deterministic when several events share an edge: the first
// row of the table wins. No shipped table has such a pair, so check it on
// a small one.
func TestEventForPicksFirstRow(t *testing.T) {
	d := define("Demo", "A", []string{"A", "B"}, []transition{
		{"second-thought", []string{"B"}, "A"},
		{"go", []string{"A"}, "B"},
		{"also-go", []string{"A"}, "B"},
	})
	for range 50 {
		if ev, err := d.EventFor("A", "B"); ev != "go" || err != nil {
			t.Fatalf("EventFor = %q, %v; want the first row, go", ev, err)
		}
	}
}

func TestSelfTransitions(t *testing.T) {
	// Declared self-transition: legal, no change, no error (looplab's
	// NoTransitionError is not surfaced).
	if got, err := Machine.Fire("Updating", "plan-changed"); got != "Updating" || err != nil {
		t.Errorf("Fire(Updating, plan-changed) = %q, %v; want Updating, nil", got, err)
	}
	if !slices.Contains(Machine.Allowed("Updating"), "plan-changed") {
		t.Errorf("plan-changed missing from Allowed(Updating)")
	}
	// An event not listed from the state is refused even though it would
	// not move the object: the caller decided on a stale view.
	for _, c := range []struct {
		d           *Definition
		from, event string
	}{
		{Machine, "Draining", "drain"},
		{Machine, "Failed", "plan-failed"},
		{Machine, "Unavailable", "agent-silent"},
		{Registration, "Expired", "expire"},
		{Token, "Revoked", "revoke"},
	} {
		var illegal *IllegalTransitionError
		if _, err := c.d.Fire(c.from, c.event); !errors.As(err, &illegal) {
			t.Errorf("%s Fire(%q, %q) = %v; want refusal", c.d.Name(), c.from, c.event, err)
		}
	}
}

func TestUnknownStates(t *testing.T) {
	for _, d := range All {
		ev := d.Events()[0]
		for _, bad := range []string{"", "Bogus", strings.ToLower(d.Initial()), " " + d.Initial()} {
			checks := map[string]error{}
			_, checks["Fire from"] = d.Fire(bad, ev)
			_, checks["EventFor from"] = d.EventFor(bad, d.Initial())
			_, checks["EventFor to"] = d.EventFor(d.Initial(), bad)
			for what, err := range checks {
				var illegal *IllegalTransitionError
				if !errors.As(err, &illegal) || illegal.UnknownState != bad {
					t.Errorf("%s %s %q: %v; want an unknown-state error", d.Name(), what, bad, err)
					continue
				}
				want := fmt.Sprintf("%s has no state %q: its states are %v", d.Name(), bad, d.States())
				if err.Error() != want {
					t.Errorf("%s %s %q: error %q, want %q", d.Name(), what, bad, err, want)
				}
			}
			if d.Allowed(bad) != nil || d.IsTerminal(bad) || d.IsState(bad) {
				t.Errorf("%s treats %q as a state", d.Name(), bad)
			}
		}
		// Normalize is the only way an empty phase becomes a state.
		if got := d.Normalize(""); got != d.Initial() {
			t.Errorf("%s Normalize(\"\") = %q", d.Name(), got)
		}
		if got := d.Normalize("Bogus"); got != "Bogus" {
			t.Errorf("%s Normalize(Bogus) = %q; unknown values must stay visible", d.Name(), got)
		}
		for _, s := range d.States() {
			if d.Normalize(s) != s {
				t.Errorf("%s Normalize(%q) changed it", d.Name(), s)
			}
		}
	}
}

func TestErrorMessages(t *testing.T) {
	for _, c := range []struct {
		err  func() error
		want string
	}{
		{func() error { _, err := Machine.EventFor("Deleting", "Running"); return err },
			`Machine cannot go from "Deleting" to "Running": events allowed from "Deleting" are [finalized]`},
		{func() error { _, err := Machine.Fire("Registering", "plan-applied"); return err },
			`Machine cannot go from "Registering" by event "plan-applied": events allowed from "Registering" are [agent-checked-in drain plan-failed]`},
		{func() error { _, err := Machine.Fire("Deleted", "drain"); return err },
			`Machine cannot go from "Deleted" by event "drain": "Deleted" is final, no event leaves it`},
		{func() error { _, err := Token.Fire("Active", "renew"); return err },
			`ClusterRegistrationToken has no event "renew" (its events are [expire revoke]): events allowed from "Active" are [expire revoke]`},
		{func() error { _, err := Cluster.EventFor("Active", "Bogus"); return err },
			`Cluster has no state "Bogus": its states are [Pending WaitCheckIn Active Degraded Deleting]`},
	} {
		if err := c.err(); err == nil || err.Error() != c.want {
			t.Errorf("error %v\nwant  %s", err, c.want)
		}
	}
}

func TestTerminalStates(t *testing.T) {
	for _, d := range All {
		for _, s := range d.States() {
			want := slices.Contains(spec[d].terminal, s)
			if d.IsTerminal(s) != want {
				t.Errorf("%s IsTerminal(%q) = %v, want %v", d.Name(), s, !want, want)
			}
			if want && len(d.Allowed(s)) != 0 {
				t.Errorf("%s terminal %q allows %v", d.Name(), s, d.Allowed(s))
			}
		}
		if d.IsTerminal(d.Initial()) {
			t.Errorf("%s starts final", d.Name())
		}
	}
}

// reach returns every state reachable from `from` by firing allowed events.
func reach(d *Definition, from string) map[string]bool {
	seen := map[string]bool{from: true}
	for queue := []string{from}; len(queue) > 0; queue = queue[1:] {
		for _, ev := range d.Allowed(queue[0]) {
			if to, err := d.Fire(queue[0], ev); err == nil && !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	return seen
}

func TestEveryStateReachableFromInitial(t *testing.T) {
	for _, d := range All {
		seen := reach(d, d.Initial())
		for _, s := range d.States() {
			if !seen[s] {
				t.Errorf("%s state %q is unreachable from %q", d.Name(), s, d.Initial())
			}
		}
	}
}

// No state is a trap: from anywhere an object can still end its life.
func TestEveryStateCanReachAnEnd(t *testing.T) {
	for _, d := range All {
		if d == KubernetesPlan {
			continue // a status of a Cluster: it ends with its Cluster's Deleting
		}
		for _, s := range d.States() {
			ends := false
			for r := range reach(d, s) {
				ends = ends || d.IsTerminal(r)
			}
			if !ends {
				t.Errorf("%s from %q can never reach a final state", d.Name(), s)
			}
		}
	}
}

func TestMachineInvariants(t *testing.T) {
	deleting := []string{"Draining", "Deleting", "Deleted"}
	for _, from := range deleting {
		for s := range reach(Machine, from) {
			if !slices.Contains(deleting, s) {
				t.Errorf("a machine in %s can reach %s", from, s)
			}
		}
		if reach(Machine, from)["Running"] {
			t.Errorf("Running is reachable from %s", from)
		}
	}
	for _, s := range Machine.States() {
		if slices.Contains(deleting, s) {
			continue
		}
		// Deletion and failure are possible from every live state.
		if to, err := Machine.Fire(s, "drain"); err != nil || to != "Draining" {
			t.Errorf("drain from %s: %q, %v", s, to, err)
		}
		failure := "plan-failed"
		if s == "Pending" || s == "Provisioning" {
			failure = "provision-failed" // no agent yet: no plan to fail
		}
		if s != "Failed" {
			if to, err := Machine.Fire(s, failure); err != nil || to != "Failed" {
				t.Errorf("%s from %s: %q, %v", failure, s, to, err)
			}
		}
	}
	// Running is entered only after a plan was applied or by an agent
	// coming back to an applied plan.
	for _, s := range Machine.States() {
		if ev, err := Machine.EventFor(s, "Running"); err == nil && ev != "" && ev != "plan-applied" && ev != "agent-returned" {
			t.Errorf("%s reaches Running by %q", s, ev)
		}
	}
	// A failed machine leaves Failed only through a new plan or deletion.
	if got := Machine.Allowed("Failed"); !slices.Equal(got, []string{"drain", "plan-fixed"}) {
		t.Errorf("Allowed(Failed) = %v", got)
	}
}

func TestTablesAreCheckedAtInit(t *testing.T) {
	bad := map[string]func(){
		"unknown dst":     func() { define("X", "A", []string{"A"}, []transition{{"go", []string{"A"}, "B"}}) },
		"unknown src":     func() { define("X", "A", []string{"A"}, []transition{{"go", []string{"B"}, "A"}}) },
		"unknown initial": func() { define("X", "Z", []string{"A"}, nil) },
		"duplicate state": func() { define("X", "A", []string{"A", "A"}, nil) },
		"empty state":     func() { define("X", "A", []string{"A", ""}, nil) },
		"not kebab":       func() { define("X", "A", []string{"A", "B"}, []transition{{"Go_On", []string{"A"}, "B"}}) },
		"no source":       func() { define("X", "A", []string{"A", "B"}, []transition{{"go", nil, "B"}}) },
		"two dsts": func() {
			define("X", "A", []string{"A", "B", "C"}, []transition{
				{"go", []string{"A"}, "B"}, {"go", []string{"A"}, "C"}})
		},
	}
	for name, f := range bad {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("define accepted a broken table")
				}
			}()
			f()
		})
	}
}

func TestReturnedSlicesAreCopies(t *testing.T) {
	s, e, a := Machine.States(), Machine.Events(), Machine.Allowed("Running")
	s[0], e[0], a[0] = "X", "x", "x"
	if Machine.States()[0] != "Pending" || Machine.Events()[0] != "provision" || Machine.Allowed("Running")[0] == "x" {
		t.Fatal("a caller's edit leaked into the definition")
	}
}

// Many goroutines using every definition at once, legal and illegal calls
// alike: no shared FSM, so no race (run with -race) and no deadlock (the
// watchdog fails the test instead of hanging).
func TestConcurrentUse(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				for _, d := range All {
					for _, s := range d.States() {
						for _, ev := range d.Events() {
							to, err := d.Fire(s, ev)
							if want, legal := specDst(d, s, ev); legal != (err == nil) || to != want {
								t.Errorf("%s Fire(%q, %q) = %q, %v", d.Name(), s, ev, to, err)
								return
							}
						}
						to := d.States()[(g+i)%len(d.States())]
						if ev, err := d.EventFor(s, to); err == nil && ev != "" {
							if got, _ := d.Fire(s, ev); got != to {
								t.Errorf("%s EventFor(%q, %q) = %q leads to %q", d.Name(), s, to, ev, got)
							}
						}
						_ = d.IsTerminal(s)
						_, _ = d.Fire(d.Normalize(""), "bogus")
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("concurrent use did not finish: deadlock?")
	}
}
