// Package registry is the REST storage of every muster.io kind: one generic
// strategy (spec/status split, generation, lifecycle state machines, field
// selectors, printer columns) and one file per kind that says only what is
// particular to that kind: its columns and its hooks, among them the
// kind's validation, which lives in pkg/apis/muster/validation.
//
// Every kind's status.phase is guarded here, on the only write path there is:
// a status update whose phase change is not a legal event of the kind's state
// machine (internal/fsm) is refused with a 422 naming the current state and
// the events allowed from it, and each legal change appends a record to
// status.transitions. Because the apiserver re-runs the strategy on every
// compare-and-swap retry against the freshly read object, the check always
// judges the state actually stored: two writers cannot both move one object
// out of the same phase.
package registry
