package fsm

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// For every machine, every state × every event: legal events reach the
// table's destination, illegal ones are refused with the allowed list, and
// EventFor agrees with Fire.
func TestEveryEventFromEveryState(t *testing.T) {
	for _, d := range All {
		for _, from := range d.States() {
			for _, ev := range d.Events() {
				t.Run(d.Name()+"/"+from+"/"+ev, func(t *testing.T) {
					want, legal := tableDst(d, from, ev)
					got, err := d.Fire(from, ev)
					if legal {
						if err != nil || got != want {
							t.Fatalf("Fire = %q, %v; want %q", got, err, want)
						}
						if want != from {
							e, err := d.EventFor(from, want)
							if err != nil {
								t.Fatalf("EventFor(%q,%q) = %v after a legal Fire", from, want, err)
							}
							if to, _ := d.Fire(from, e); to != want {
								t.Fatalf("EventFor picked %q which leads to %q", e, to)
							}
						}
						return
					}
					var illegal *IllegalTransitionError
					if !errors.As(err, &illegal) {
						t.Fatalf("Fire(%q, %q) = %q, %v; want an IllegalTransitionError", from, ev, got, err)
					}
					msg := err.Error()
					if !strings.Contains(msg, `"`+from+`"`) {
						t.Errorf("error %q does not name the current state", msg)
					}
					for _, a := range d.Allowed(from) {
						if !strings.Contains(msg, a) {
							t.Errorf("error %q does not list allowed event %q", msg, a)
						}
					}
				})
			}
		}
	}
}

func tableDst(d *Definition, from, ev string) (string, bool) {
	for _, e := range d.events {
		if e.Name != ev {
			continue
		}
		for _, s := range e.Src {
			if s == from {
				return e.Dst, true
			}
		}
	}
	return "", false
}

// EventFor over every ordered pair of states agrees with the table.
func TestEventForEveryPair(t *testing.T) {
	for _, d := range All {
		for _, from := range d.States() {
			for _, to := range d.States() {
				ev, err := d.EventFor(from, to)
				if from == to {
					if ev != "" || err != nil {
						t.Errorf("%s %s→%s self-transition = %q, %v; want no event, no error", d.Name(), from, to, ev, err)
					}
					continue
				}
				reachable := false
				for _, e := range d.events {
					if e.Dst == to && containsState(e.Src, from) {
						reachable = true
					}
				}
				if reachable != (err == nil) {
					t.Errorf("%s %s→%s: EventFor = %q, %v; table says legal=%v", d.Name(), from, to, ev, err, reachable)
				}
			}
		}
	}
}

func TestUnknownStates(t *testing.T) {
	for _, d := range All {
		for _, bad := range []string{"Bogus", "running"} {
			if _, err := d.Fire(bad, d.Events()[0]); err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) {
				t.Errorf("%s Fire from %q: %v", d.Name(), bad, err)
			}
			if _, err := d.EventFor(d.Initial(), bad); err == nil || !strings.Contains(err.Error(), "its states are") {
				t.Errorf("%s EventFor to %q: %v", d.Name(), bad, err)
			}
		}
		// An object written before it had a phase is in the initial state.
		if got := d.Normalize(""); got != d.Initial() {
			t.Errorf("%s Normalize(\"\") = %q", d.Name(), got)
		}
		if _, err := d.EventFor("", d.Initial()); err != nil {
			t.Errorf("%s EventFor from empty to initial: %v", d.Name(), err)
		}
	}
}

// Every state is reachable from the initial one.
func TestEveryStateReachable(t *testing.T) {
	for _, d := range All {
		seen := reach(d, d.Initial())
		for _, s := range d.States() {
			if !seen[s] {
				t.Errorf("%s state %q is unreachable from %q", d.Name(), s, d.Initial())
			}
		}
	}
}

// A machine being deleted can never come back to Running, by any path.
func TestDeletingMachineNeverRunsAgain(t *testing.T) {
	for _, from := range []string{"Draining", "Deleting", "Deleted"} {
		if reach(Machine, from)["Running"] {
			t.Errorf("Running is reachable from %s", from)
		}
	}
	for _, terminal := range []string{"Deleted"} {
		if !Machine.IsTerminal(terminal) {
			t.Errorf("%s should be terminal", terminal)
		}
	}
	for _, d := range []*Definition{Registration, Token} {
		for _, s := range d.States()[len(d.States())-2:] {
			if !d.IsTerminal(s) {
				t.Errorf("%s %s should be terminal", d.Name(), s)
			}
		}
	}
	if _, err := Machine.Fire("Deleted", "drain"); err == nil || !strings.Contains(err.Error(), "final") {
		t.Errorf("an event from a final state should say it is final: %v", err)
	}
}

func reach(d *Definition, from string) map[string]bool {
	seen := map[string]bool{from: true}
	queue := []string{from}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, ev := range d.Allowed(s) {
			to, _ := d.Fire(s, ev)
			if !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	return seen
}

// Many goroutines asking every machine at once: no shared FSM, so no race
// and no deadlock (run with -race).
func TestConcurrentUse(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				for _, d := range All {
					for _, s := range d.States() {
						for _, ev := range d.Allowed(s) {
							if _, err := d.Fire(s, ev); err != nil {
								t.Error(err)
							}
						}
					}
				}
			}
		}()
	}
	wg.Wait()
}

func containsState(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
