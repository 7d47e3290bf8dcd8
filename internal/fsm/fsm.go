// Package fsm defines every lifecycle state machine of Muster once, with
// github.com/looplab/fsm: Registration, Machine, Cluster and Token. The API
// strategies use it to refuse illegal status.phase writes (a 422 naming the
// states and the allowed events), and controllers use it to move an object
// on, so no write path can take a transition the machine does not have.
//
// States and events are plain strings: the API package declares its typed
// phase constants with the same values, and this package stays free of API
// types so that both sides can import it.
//
// looplab/fsm keeps its state in memory and has no persistence, while our
// state lives in the stored object. So every decision builds a fresh FSM at
// the stored state, asks it, and throws it away; the caller persists the
// result with a compare-and-swap on resourceVersion, which is what makes two
// servers unable to both win. Nothing is shared between calls, so every
// function here is safe for concurrent use. No callbacks are registered:
// looplab deadlocks when a callback calls back into its own FSM, and with
// no callbacks there is nothing that could.
//
// Unknown states are refused everywhere, the empty string included: a phase
// nobody set is a bug to surface, not a state. The one place where an empty
// phase legitimately means "the initial state" (an object being created)
// says so explicitly with Normalize.
package fsm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	looplab "github.com/looplab/fsm"
)

// Definition is one kind's state machine. It is immutable after package
// init, which is why it can be shared by every goroutine without locks.
type Definition struct {
	kind    string
	initial string
	states  []string
	table   []transition
	events  []looplab.EventDesc
	isState map[string]bool
	isEvent map[string]bool
}

// transition is one row of a definition table: event takes any of src to dst.
type transition struct {
	event string
	src   []string
	dst   string
}

// eventName keeps event names readable in a transition history and in a 422.
var eventName = regexp.MustCompile(`^[a-z]+(-[a-z]+)*$`)

// define builds a Definition and refuses, at package init, any table that
// looplab would accept but silently misread: looplab keys transitions by
// (event, src), so a second row for the same pair would overwrite the first
// without a word, and it accepts states it was never told about.
func define(kind, initial string, states []string, table []transition) *Definition {
	d := &Definition{kind: kind, initial: initial, states: states, table: table,
		isState: map[string]bool{}, isEvent: map[string]bool{}}
	for _, s := range states {
		if s == "" || d.isState[s] {
			panic(fmt.Sprintf("fsm: %s: state %q is empty or listed twice", kind, s))
		}
		d.isState[s] = true
	}
	if !d.isState[initial] {
		panic(fmt.Sprintf("fsm: %s: initial state %q is not one of %v", kind, initial, states))
	}
	dst := map[[2]string]string{}
	for _, t := range table {
		if !eventName.MatchString(t.event) {
			panic(fmt.Sprintf("fsm: %s: event %q is not kebab-case", kind, t.event))
		}
		if len(t.src) == 0 {
			panic(fmt.Sprintf("fsm: %s: event %q has no source state", kind, t.event))
		}
		for _, s := range append([]string{t.dst}, t.src...) {
			if !d.isState[s] {
				panic(fmt.Sprintf("fsm: %s: event %q names unknown state %q", kind, t.event, s))
			}
		}
		for _, s := range t.src {
			key := [2]string{t.event, s}
			if prev, dup := dst[key]; dup {
				panic(fmt.Sprintf("fsm: %s: event %q from %q leads both to %q and %q", kind, t.event, s, prev, t.dst))
			}
			dst[key] = t.dst
		}
		d.isEvent[t.event] = true
		d.events = append(d.events, looplab.EventDesc{Name: t.event, Src: t.src, Dst: t.dst})
	}
	return d
}

// except returns every state of states but the excluded ones: the "* →"
// rows of the spec, spelled out at init so that the table stays the whole
// truth and a state added later is not silently left out of them.
func except(states []string, excluded ...string) []string {
	var out []string
	for _, s := range states {
		if !slices.Contains(excluded, s) {
			out = append(out, s)
		}
	}
	return out
}

// Name is the API kind the machine belongs to, e.g. "Machine"; errors use
// it so that a 422 names the kind the user edited.
func (d *Definition) Name() string { return d.kind }

// Initial is the state a new object starts in.
func (d *Definition) Initial() string { return d.initial }

// States lists every state, in lifecycle order. The slice is a copy.
func (d *Definition) States() []string { return slices.Clone(d.states) }

// Events lists every event name once, in table order. The slice is a copy.
func (d *Definition) Events() []string {
	var out []string
	for _, t := range d.table {
		if !slices.Contains(out, t.event) {
			out = append(out, t.event)
		}
	}
	return out
}

// IsState reports whether s is one of the machine's states (exact case).
func (d *Definition) IsState(s string) bool { return d.isState[s] }

// Normalize maps the empty phase of an object being created (or written
// before it had a lifecycle) to the initial state, and returns every other
// value unchanged, known or not. It is deliberately not applied inside Fire
// or EventFor: only a caller knows whether an empty phase is "not set yet"
// or a client that dropped the field, which must be refused.
func (d *Definition) Normalize(state string) string {
	if state == "" {
		return d.initial
	}
	return state
}

// at builds a throwaway FSM standing at state; see the package comment.
func (d *Definition) at(state string) *looplab.FSM {
	return looplab.NewFSM(state, d.events, nil)
}

// Allowed returns the sorted events legal from state (nil for an unknown
// state). Sorted because looplab answers in map order and the list ends up
// in error messages and tests that must not flicker.
func (d *Definition) Allowed(state string) []string {
	if !d.isState[state] {
		return nil
	}
	out := d.at(state).AvailableTransitions()
	slices.Sort(out)
	return out
}

// IsTerminal reports whether state is known and no event leaves it. A state
// whose only events loop back to itself would count as terminal too; no
// table has one.
func (d *Definition) IsTerminal(state string) bool {
	if !d.isState[state] {
		return false
	}
	for _, t := range d.table {
		if t.dst != state && slices.Contains(t.src, state) {
			return false
		}
	}
	return true
}

// Fire applies event to an object in state from and returns the new state,
// for a controller to persist (with a compare-and-swap) and record.
//
// An event the table lists as a self-transition (e.g. "plan-changed" on an
// Updating machine) returns (from, nil): it is legal, the caller has nothing
// to persist and, like EventFor(x, x), nothing to record. looplab reports
// that case as NoTransitionError, which is therefore not surfaced. An event
// the table does not list from `from` is refused even if it would not
// change the state (e.g. "drain" on a Draining machine): a controller that
// fires it decided on a stale view and must re-read, not carry on.
func (d *Definition) Fire(from, event string) (string, error) {
	if !d.isState[from] {
		return "", d.unknownState(from, "", event, from)
	}
	f := d.at(from)
	err := f.Event(context.Background(), event)
	var (
		noTransition looplab.NoTransitionError
		invalid      looplab.InvalidEventError
		unknown      looplab.UnknownEventError
	)
	switch {
	case err == nil:
		return f.Current(), nil
	case errors.As(err, &noTransition):
		return from, nil
	case errors.As(err, &unknown):
		return "", &IllegalTransitionError{Kind: d.kind, From: from, Event: event,
			Allowed: d.Allowed(from), UnknownEvent: event, Events: d.Events()}
	case errors.As(err, &invalid):
		return "", &IllegalTransitionError{Kind: d.kind, From: from, Event: event, Allowed: d.Allowed(from)}
	default:
		// Only callbacks or cancellation produce other errors, and we use
		// neither; if looplab ever does, say so rather than call it illegal.
		return "", fmt.Errorf("fsm: %s %q by event %q: %w", d.kind, from, event, err)
	}
}

// EventFor returns the event that takes an object from one state to
// another: what a status strategy checks and records when a writer sets a
// new phase directly (kubectl edit, a controller's UpdateStatus).
//
// from == to is not a transition: ("", nil), nothing to record, even for
// states with no self-transition in the table, because rewriting the same
// phase with other status fields is an ordinary status update. When several
// events lead from one state to the same other state, the first in table
// order wins, so the recorded event is stable across servers and releases.
func (d *Definition) EventFor(from, to string) (string, error) {
	if !d.isState[from] {
		return "", d.unknownState(from, to, "", from)
	}
	if !d.isState[to] {
		return "", d.unknownState(from, to, "", to)
	}
	if from == to {
		return "", nil
	}
	for _, t := range d.table {
		if t.dst == to && slices.Contains(t.src, from) {
			return t.event, nil
		}
	}
	return "", &IllegalTransitionError{Kind: d.kind, From: from, To: to, Allowed: d.Allowed(from)}
}

func (d *Definition) unknownState(from, to, event, bad string) error {
	return &IllegalTransitionError{Kind: d.kind, From: from, To: to, Event: event,
		Allowed: d.Allowed(from), UnknownState: bad, States: d.States()}
}

// IllegalTransitionError says which transition was refused and what would
// have been allowed, so that the 422 an operator sees tells them what to do
// next rather than only that they were wrong.
type IllegalTransitionError struct {
	Kind string // API kind, e.g. "Machine"
	From string
	To   string // set when the caller asked for a destination (EventFor)
	// Event is set when the caller fired an event (Fire).
	Event string
	// Allowed are the events legal from From, sorted; nil if From is unknown.
	Allowed []string
	// UnknownState is the value of From or To that is no state of Kind at
	// all (possibly ""); States then lists the states there are.
	UnknownState string
	States       []string
	// UnknownEvent is set when Event is no event of Kind at all; Events then
	// lists the events there are.
	UnknownEvent string
	Events       []string
}

func (e *IllegalTransitionError) Error() string {
	switch {
	case e.States != nil:
		return fmt.Sprintf("%s has no state %q: its states are %v", e.Kind, e.UnknownState, e.States)
	case e.Events != nil:
		return fmt.Sprintf("%s has no event %q (its events are %v): %s", e.Kind, e.UnknownEvent, e.Events, e.allowed())
	}
	target := fmt.Sprintf("to %q", e.To)
	if e.To == "" {
		target = fmt.Sprintf("by event %q", e.Event)
	}
	return fmt.Sprintf("%s cannot go from %q %s: %s", e.Kind, e.From, target, e.allowed())
}

func (e *IllegalTransitionError) allowed() string {
	if len(e.Allowed) == 0 {
		return fmt.Sprintf("%q is final, no event leaves it", e.From)
	}
	return fmt.Sprintf("events allowed from %q are %v", e.From, e.Allowed)
}
