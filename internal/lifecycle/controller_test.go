package lifecycle

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

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
		{"a failed machine whose plan was deleted leaves Failed", func() *api.Machine {
			m := machine(api.MachinePhaseFailed, api.PlanStateFailed, &recently)
			m.Status.Reason = "PlanFailed"
			return m
		}(), nil, true,
			"plan-fixed", api.MachinePhaseUpdating, api.PlanStateFailed, true},
		{"an updating machine whose plan was deleted is Running", machine(api.MachinePhaseUpdating, api.PlanStatePending, &recently), nil, true,
			"plan-applied", api.MachinePhaseRunning, api.PlanStatePending, true},
		{"a new machine waits for its plan", machine(api.MachinePhaseBootstrapping, api.PlanStatePending, &recently), nil, true,
			"", api.MachinePhaseBootstrapping, api.PlanStatePending, false},
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

// A failed plan's reason reaches the Machine as its PlanFailed condition,
// written when the plan fails and cleared once one succeeds, and never on
// the steps in between (each would cost a write per machine).
func TestPlanFailedCondition(t *testing.T) {
	failedPlan := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: api.MachinePlanSpec{MaxFailures: 3},
		Status: api.MachinePlanStatus{Checksum: "new", State: api.PlanStateFailed, FailureCount: 1, Output: []api.InstructionOutput{
			{Name: "prepare", ExitCode: 0, Output: "ok"},
			{Name: "files", ExitCode: -1, Output: "muster-agent: writing plan files\nwriting /etc/muster/nr.conf: permission denied"},
		}}}
	withState := func(s api.PlanState) *api.MachinePlan {
		p := failedPlan.DeepCopy()
		p.Status.State, p.Status.Output = s, nil
		return p
	}
	failing := metav1.Condition{Type: ConditionPlanFailed, Status: metav1.ConditionTrue, Reason: "PlanFailed", Message: "old"}
	tests := []struct {
		name        string
		conditions  []metav1.Condition
		plan        *api.MachinePlan
		wantChanged bool
		wantStatus  metav1.ConditionStatus // "" when there should be no condition
		wantIn      string
	}{
		{"no plan, no condition", nil, nil, false, "", ""},
		{"a failed plan sets it with the failing instruction's last line", nil, failedPlan, true, metav1.ConditionTrue,
			"files (exit code -1): writing /etc/muster/nr.conf: permission denied"},
		{"the same failure again changes nothing", nil, failedPlan, true, metav1.ConditionTrue, "kubectl get machineplan m"},
		{"a plan in progress after a failure leaves it", []metav1.Condition{failing}, withState(api.PlanStateInProgress), false, metav1.ConditionTrue, "old"},
		{"a succeeded plan clears it", []metav1.Condition{failing}, withState(api.PlanStateSucceeded), true, metav1.ConditionFalse, "applied"},
		{"a succeeded plan without a past failure writes nothing", nil, withState(api.PlanStateSucceeded), false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &api.Machine{Status: api.MachineStatus{Conditions: tt.conditions}}
			if got := setPlanFailed(m, tt.plan); got != tt.wantChanged {
				t.Errorf("changed = %v, want %v", got, tt.wantChanged)
			}
			if tt.name == "the same failure again changes nothing" {
				if setPlanFailed(m, tt.plan) {
					t.Error("setting the same failure twice changed the machine again")
				}
			}
			c := meta.FindStatusCondition(m.Status.Conditions, ConditionPlanFailed)
			switch {
			case tt.wantStatus == "" && c != nil:
				t.Errorf("unexpected condition %+v", c)
			case tt.wantStatus != "" && (c == nil || c.Status != tt.wantStatus || !strings.Contains(c.Message, tt.wantIn)):
				t.Errorf("condition %+v, want status %s with %q", c, tt.wantStatus, tt.wantIn)
			}
		})
	}
}

// Each sync that writes records at most one Event: the transition (a
// Warning for Unavailable and Failed, with the plan's failure when it
// failed), or the plan's failure alone.
func TestRecordedEvents(t *testing.T) {
	failed := []metav1.Condition{{Type: ConditionPlanFailed, Status: metav1.ConditionTrue, Reason: "PlanFailed", Message: "broken (exit code 3): disk full"}}
	tests := []struct {
		name         string
		phase        api.MachinePhase
		reason       string
		conditions   []metav1.Condition
		from         api.MachinePhase
		transition   bool
		failedBefore bool
		want         string
	}{
		{"a transition", api.MachinePhaseRunning, "PlanApplied", nil, api.MachinePhaseBootstrapping, true, false,
			"Normal PlanApplied Bootstrapping -> Running"},
		{"a silent agent is a warning", api.MachinePhaseUnavailable, "AgentSilent", nil, api.MachinePhaseRunning, true, false,
			"Warning AgentSilent Running -> Unavailable"},
		{"a failure without a transition", api.MachinePhaseUpdating, "PlanChanged", failed, api.MachinePhaseUpdating, false, false,
			"Warning PlanFailed broken (exit code 3): disk full"},
		{"a failure already recorded is not recorded again", api.MachinePhaseUpdating, "PlanChanged", failed, api.MachinePhaseUpdating, false, true, ""},
		{"the machine failing says why", api.MachinePhaseFailed, "PlanFailed", failed, api.MachinePhaseUpdating, true, true,
			"Warning PlanFailed Updating -> Failed: broken (exit code 3): disk full"},
		{"a write without news records nothing", api.MachinePhaseRunning, "PlanApplied", nil, api.MachinePhaseRunning, false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			c := &Controller{events: rec}
			m := &api.Machine{Status: api.MachineStatus{Phase: tt.phase, Reason: tt.reason, Conditions: tt.conditions}}
			c.record(m, tt.from, tt.transition, tt.failedBefore)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("recorded %q, want nothing", got)
			case tt.want != "" && (len(got) != 1 || got[0] != tt.want):
				t.Errorf("recorded %q, want %q", got, tt.want)
			}
		})
	}
}

// What an instruction printed may echo a secret (a password it was given):
// neither the Machine's PlanFailed condition nor its Event quotes it, since
// viewers read both. They name the instruction and its exit code; the
// output stays in the plan's status, redacted for viewers (issue 27).
func TestPlanFailedNeverQuotesInstructionOutput(t *testing.T) {
	const secret = "s3cr3t-db-password"
	plan := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Spec: api.MachinePlanSpec{MaxFailures: 1, Instructions: []api.PlanInstruction{{Name: "migrate", Command: "/bin/sh"}}},
		Status: api.MachinePlanStatus{Checksum: "new", State: api.PlanStateFailed, FailureCount: 1, Output: []api.InstructionOutput{
			{Name: "migrate", ExitCode: 2, Output: "connecting with password " + secret + "\nFATAL: authentication failed for " + secret},
		}}}
	m := &api.Machine{Status: api.MachineStatus{Phase: api.MachinePhaseFailed, Reason: "PlanFailed"}}
	if !setPlanFailed(m, plan) {
		t.Fatal("a failed plan did not set the PlanFailed condition")
	}
	c := meta.FindStatusCondition(m.Status.Conditions, ConditionPlanFailed)
	if strings.Contains(c.Message, secret) || !strings.Contains(c.Message, "instruction migrate failed (exit code 2)") {
		t.Errorf("PlanFailed message %q: want the instruction and its exit code, never its output", c.Message)
	}
	rec := record.NewFakeRecorder(10)
	(&Controller{events: rec}).record(m, api.MachinePhaseUpdating, true, false)
	if e := <-rec.Events; strings.Contains(e, secret) || !strings.Contains(e, "migrate") {
		t.Errorf("event %q quotes the instruction's output or does not name it", e)
	}
}
