// Package fsm defines every lifecycle state machine of Muster once, with
// github.com/looplab/fsm: Registration, Machine, Cluster and Token. The API
// strategies use it to refuse illegal status.phase writes, and controllers
// use it to decide the next phase, so no write path can take a transition
// the machine does not have.
//
// looplab/fsm keeps its state in memory and has no persistence, while our
// state lives in the stored object. So every decision builds a fresh FSM at
// the stored state, asks it, and throws it away; the caller persists the
// result with a compare-and-swap on resourceVersion. No callbacks are
// registered: calling back into an FSM from its own callbacks deadlocks, and
// with none there is nothing that could.
package fsm

import (
	"context"
	"errors"
	"fmt"
	"sort"

	looplab "github.com/looplab/fsm"
)

// Definition is one kind's state machine.
type Definition struct {
	kind    string
	initial string
	states  []string
	events  []looplab.EventDesc
	byState map[string]bool
}

// event is one row of a definition table.
type event struct {
	name string
	src  []string
	dst  string
}

func define(kind, initial string, states []string, table []event) *Definition {
	d := &Definition{kind: kind, initial: initial, states: states, byState: map[string]bool{}}
	for _, s := range states {
		d.byState[s] = true
	}
	for _, e := range table {
		for _, s := range append(e.src, e.dst) {
			if !d.byState[s] {
				panic(fmt.Sprintf("fsm: %s event %q names unknown state %q", kind, e.name, s))
			}
		}
		d.events = append(d.events, looplab.EventDesc{Name: e.name, Src: e.src, Dst: e.dst})
	}
	return d
}

// except returns every state of states but the excluded ones: the "* →"
// rows of the spec, spelled out so that the table stays the whole truth.
func except(states []string, excluded ...string) []string {
	skip := map[string]bool{}
	for _, s := range excluded {
		skip[s] = true
	}
	var out []string
	for _, s := range states {
		if !skip[s] {
			out = append(out, s)
		}
	}
	return out
}

// Name is the kind the machine belongs to, e.g. "Machine".
func (d *Definition) Name() string { return d.kind }

// Initial is the state a new object starts in.
func (d *Definition) Initial() string { return d.initial }

// States lists every state, in lifecycle order.
func (d *Definition) States() []string { return append([]string(nil), d.states...) }

// Events lists every event name, in table order.
func (d *Definition) Events() []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range d.events {
		if !seen[e.Name] {
			seen[e.Name] = true
			out = append(out, e.Name)
		}
	}
	return out
}

// IsState reports whether s is one of the machine's states.
func (d *Definition) IsState(s string) bool { return d.byState[s] }

// Normalize maps the empty phase of an object that predates its lifecycle
// to the initial state; every other value is returned as is.
func (d *Definition) Normalize(state string) string {
	if state == "" {
		return d.initial
	}
	return state
}

func (d *Definition) at(state string) *looplab.FSM {
	return looplab.NewFSM(state, d.events, nil)
}

// Allowed returns the sorted events legal from state.
func (d *Definition) Allowed(state string) []string {
	if !d.byState[state] {
		return nil
	}
	out := d.at(state).AvailableTransitions()
	sort.Strings(out)
	return out
}

// IsTerminal reports whether no event leaves state.
func (d *Definition) IsTerminal(state string) bool {
	return d.byState[state] && len(d.Allowed(state)) == 0
}

// Fire applies event to an object in state from and returns the new state.
// An event whose destination is the current state (e.g. "plan-changed" on
// an Updating machine) returns from unchanged and no error: the caller has
// nothing to persist and nothing to record.
func (d *Definition) Fire(from, event string) (string, error) {
	if !d.byState[from] {
		return "", d.unknown(from, "", event)
	}
	f := d.at(from)
	err := f.Event(context.Background(), event)
	var noTransition looplab.NoTransitionError
	switch {
	case err == nil:
		return f.Current(), nil
	case errors.As(err, &noTransition):
		return from, nil
	default:
		return "", &IllegalTransitionError{Kind: d.kind, From: from, Event: event, Allowed: d.Allowed(from)}
	}
}

// EventFor returns the event that takes an object from one state to
// another: what the status strategy records when a writer sets a new phase.
// From and to equal is not a transition: ("", nil). When several events
// lead from one state to the same other state the first in table order is
// returned, so the choice is stable.
func (d *Definition) EventFor(from, to string) (string, error) {
	from = d.Normalize(from)
	if !d.byState[from] || !d.byState[to] {
		return "", d.unknown(from, to, "")
	}
	if from == to {
		return "", nil
	}
	for _, e := range d.events {
		if e.Dst != to {
			continue
		}
		for _, s := range e.Src {
			if s == from {
				return e.Name, nil
			}
		}
	}
	return "", &IllegalTransitionError{Kind: d.kind, From: from, To: to, Allowed: d.Allowed(from)}
}

func (d *Definition) unknown(from, to, event string) error {
	bad := from
	if d.byState[from] {
		bad = to
	}
	return &IllegalTransitionError{Kind: d.kind, From: from, To: to, Event: event, Unknown: bad, States: d.States(), Allowed: d.Allowed(from)}
}

// IllegalTransitionError says which transition was refused and what would
// have been allowed, so that the 422 an operator sees tells them what to do.
type IllegalTransitionError struct {
	Kind, From, To, Event string
	// Allowed are the events legal from From.
	Allowed []string
	// Unknown is the value given for From or To that is no state of the machine at all.
	Unknown string
	// States lists the machine's states when Unknown is set.
	States []string
}

func (e *IllegalTransitionError) Error() string {
	if e.States != nil {
		return fmt.Sprintf("%s has no state %q: its states are %v", e.Kind, e.Unknown, e.States)
	}
	target := fmt.Sprintf("to %q", e.To)
	if e.Event != "" {
		target = fmt.Sprintf("by event %q", e.Event)
	}
	if len(e.Allowed) == 0 {
		return fmt.Sprintf("%s cannot go from %q %s: %q is final, no event leaves it", e.Kind, e.From, target, e.From)
	}
	return fmt.Sprintf("%s cannot go from %q %s: events allowed from %q are %v", e.Kind, e.From, target, e.From, e.Allowed)
}
