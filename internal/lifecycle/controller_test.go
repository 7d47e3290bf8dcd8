package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// advance is every rule of the lifecycle table in docs/architecture.md, and
// the rules for what is persisted beside the phase (lastSeen, planState).
func TestAdvance(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	recently := metav1.NewTime(now.Add(-time.Minute))
	longAgo := metav1.NewTime(now.Add(-time.Hour))
	plan := func(state api.PlanState, applied bool, failures int32) *api.MachinePlan {
		p := &api.MachinePlan{Spec: api.MachinePlanSpec{MaxFailures: 3}, Status: api.MachinePlanStatus{Checksum: "new", State: state, FailureCount: failures}}
		if applied {
			p.Status.AppliedChecksum = "new"
		} else {
			p.Status.AppliedChecksum = "old"
		}
		return p
	}
	machine := func(phase api.MachinePhase, planState api.PlanState, lastSeen *metav1.Time) *api.Machine {
		return &api.Machine{Status: api.MachineStatus{Phase: phase, AgentVersion: "v1", PlanState: planState, LastSeen: lastSeen}}
	}
	tests := []struct {
		name          string
		machine       *api.Machine
		plan          *api.MachinePlan
		live          bool
		wantEvent     string
		wantPhase     api.MachinePhase
		wantPlanState api.PlanState
		wantChanged   bool
	}{
		{"a registered agent that is heard checks in", machine(api.MachinePhaseRegistering, "", nil), plan(api.PlanStatePending, false, 0), true,
			"agent-checked-in", api.MachinePhaseBootstrapping, api.PlanStatePending, true},
		{"a registered agent not heard yet waits", machine(api.MachinePhaseRegistering, "", nil), plan(api.PlanStatePending, false, 0), false,
			"", api.MachinePhaseRegistering, "", false},
		{"a plan step alone is not written", machine(api.MachinePhaseBootstrapping, api.PlanStatePending, &recently), plan(api.PlanStateInProgress, false, 0), true,
			"", api.MachinePhaseBootstrapping, api.PlanStatePending, false},
		{"the first plan applied makes it Running", machine(api.MachinePhaseBootstrapping, api.PlanStatePending, &recently), plan(api.PlanStateSucceeded, true, 0), true,
			"plan-applied", api.MachinePhaseRunning, api.PlanStateSucceeded, true},
		{"a new plan makes it Updating", machine(api.MachinePhaseRunning, api.PlanStateSucceeded, &recently), plan(api.PlanStatePending, false, 0), true,
			"plan-changed", api.MachinePhaseUpdating, api.PlanStatePending, true},
		{"a failed attempt under the limit is shown", machine(api.MachinePhaseUpdating, api.PlanStatePending, &recently), plan(api.PlanStateFailed, false, 1), true,
			"", api.MachinePhaseUpdating, api.PlanStateFailed, true},
		{"a plan failed for good fails the machine", machine(api.MachinePhaseUpdating, api.PlanStateFailed, &recently), plan(api.PlanStateFailed, false, 3), true,
			"plan-failed", api.MachinePhaseFailed, api.PlanStateFailed, true},
		{"a new plan leaves Failed", machine(api.MachinePhaseFailed, api.PlanStateFailed, &recently), plan(api.PlanStatePending, false, 0), true,
			"plan-fixed", api.MachinePhaseUpdating, api.PlanStatePending, true},
		{"a silent agent makes it Unavailable", machine(api.MachinePhaseRunning, api.PlanStateSucceeded, &recently), plan(api.PlanStateSucceeded, true, 0), false,
			"agent-silent", api.MachinePhaseUnavailable, api.PlanStateSucceeded, true},
		{"an agent back with its plan applied is Running", machine(api.MachinePhaseUnavailable, api.PlanStateSucceeded, &longAgo), plan(api.PlanStateSucceeded, true, 0), true,
			"agent-returned", api.MachinePhaseRunning, api.PlanStateSucceeded, true},
		{"an agent back mid-plan is Updating", machine(api.MachinePhaseUnavailable, api.PlanStateSucceeded, &longAgo), plan(api.PlanStateInProgress, false, 0), true,
			"agent-returned-mid-plan", api.MachinePhaseUpdating, api.PlanStateInProgress, true},
		{"a live machine's lastSeen is refreshed only after the persist interval", machine(api.MachinePhaseRunning, api.PlanStateSucceeded, &longAgo), plan(api.PlanStateSucceeded, true, 0), true,
			"", api.MachinePhaseRunning, api.PlanStateSucceeded, true},
		{"a live machine seen recently is left alone", machine(api.MachinePhaseRunning, api.PlanStateSucceeded, &recently), plan(api.PlanStateSucceeded, true, 0), true,
			"", api.MachinePhaseRunning, api.PlanStateSucceeded, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.machine.DeepCopy()
			event, changed := advance(m, facts{plan: tt.plan, live: tt.live, heard: tt.live, seen: now.Add(-time.Second), now: now})
			if event != tt.wantEvent || changed != tt.wantChanged || m.Status.Phase != tt.wantPhase || m.Status.PlanState != tt.wantPlanState {
				t.Errorf("advance = event %q changed %v, phase %s, planState %q; want event %q changed %v, phase %s, planState %q",
					event, changed, m.Status.Phase, m.Status.PlanState, tt.wantEvent, tt.wantChanged, tt.wantPhase, tt.wantPlanState)
			}
			if event != "" {
				if _, err := fsm.Machine.EventFor(string(tt.machine.Status.Phase), string(m.Status.Phase)); err != nil {
					t.Errorf("the move is not one the state machine has: %v", err)
				}
			}
		})
	}
}

// Just after a server starts (or a leader takes over), no agent has been
// heard yet: machines keep their phase for one silence threshold, and none
// comes back to Running, or checks in, on the strength of the start alone.
func TestAdvanceAfterStart(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	longAgo := metav1.NewTime(now.Add(-time.Hour))
	applied := &api.MachinePlan{Spec: api.MachinePlanSpec{MaxFailures: 3}, Status: api.MachinePlanStatus{Checksum: "c", AppliedChecksum: "c", State: api.PlanStateSucceeded}}
	machine := func(phase api.MachinePhase) *api.Machine {
		return &api.Machine{Status: api.MachineStatus{Phase: phase, AgentVersion: "v1", PlanState: api.PlanStateSucceeded, LastSeen: &longAgo}}
	}
	tests := []struct {
		name        string
		phase       api.MachinePhase
		live, heard bool
		wantEvent   string
	}{
		{"an Unavailable machine not heard since the start stays Unavailable", api.MachinePhaseUnavailable, true, false, ""},
		{"an Unavailable machine heard since the start returns", api.MachinePhaseUnavailable, true, true, "agent-returned"},
		{"a Running machine not heard yet keeps Running within the threshold", api.MachinePhaseRunning, true, false, ""},
		{"a Running machine not heard for a threshold after the start is Unavailable", api.MachinePhaseRunning, false, false, "agent-silent"},
		{"a Registering machine does not check in on the start alone", api.MachinePhaseRegistering, true, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := machine(tt.phase)
			event, changed := advance(m, facts{plan: applied, live: tt.live, heard: tt.heard, now: now})
			if event != tt.wantEvent {
				t.Errorf("advance = %q, want %q", event, tt.wantEvent)
			}
			if !tt.heard && !m.Status.LastSeen.Equal(&longAgo) {
				t.Errorf("lastSeen moved to %v although the agent was not heard", m.Status.LastSeen)
			}
			if event == "" && changed {
				t.Errorf("status changed without a transition: %+v", m.Status)
			}
		})
	}
}
