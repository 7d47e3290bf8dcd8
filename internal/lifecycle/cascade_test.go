package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestClusterEvent: a cluster's phase follows its machines, and a phase
// that contradicts them (an administrator's, or a stale one) is corrected;
// every event decided is legal from its phase.
func TestClusterEvent(t *testing.T) {
	tests := []struct {
		phase               api.ClusterPhase
		checkedIn, degraded bool
		want                string
	}{
		{api.ClusterPhasePending, false, false, fsm.EventAwaitCheckIn},
		{api.ClusterPhasePending, true, false, fsm.EventAwaitCheckIn},
		{api.ClusterPhaseWaitCheckIn, false, false, ""},
		{api.ClusterPhaseWaitCheckIn, true, false, fsm.EventAgentCheckedIn},
		{api.ClusterPhaseWaitCheckIn, true, true, fsm.EventAgentCheckedIn}, // Degraded on the next pass
		{api.ClusterPhaseActive, true, false, ""},
		{api.ClusterPhaseActive, true, true, fsm.EventMachineUnhealthy},
		{api.ClusterPhaseActive, false, false, fsm.EventMachinesGone}, // set Active by hand, no machines
		{api.ClusterPhaseDegraded, true, true, ""},
		{api.ClusterPhaseDegraded, true, false, fsm.EventMachinesHealthy},
		{api.ClusterPhaseDegraded, false, false, fsm.EventMachinesGone},
		{api.ClusterPhaseDeleting, false, false, ""}, // finalizeCluster's
	}
	for _, tt := range tests {
		event, reason := clusterEvent(tt.phase, tt.checkedIn, tt.degraded)
		if event != tt.want {
			t.Errorf("%s checkedIn=%v degraded=%v: event %q, want %q", tt.phase, tt.checkedIn, tt.degraded, event, tt.want)
			continue
		}
		if event == "" {
			continue
		}
		if reason == "" {
			t.Errorf("%s: event %s without a reason", tt.phase, event)
		}
		if _, err := fsm.Cluster.Fire(string(tt.phase), event); err != nil {
			t.Errorf("%s: decided an illegal event: %v", tt.phase, err)
		}
	}
}

// TestDecideDrain: a Draining machine gets its set's drain plan, waits
// for it until its deadline, and moves on saying why.
func TestDecideDrain(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	withDrain := &api.MachinePlanSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: api.MachinePlanSetSpec{
		Drain: &api.MachinePlanSetDrain{Template: api.MachinePlanSpec{Instructions: []api.PlanInstruction{{Name: "stop", Command: "true"}}}},
	}}
	noDrain := &api.MachinePlanSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	setPlan := func() *api.MachinePlan {
		return &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "m1", Labels: map[string]string{api.PlanSetLabel: "web"}},
			Status: api.MachinePlanStatus{Checksum: "a", AppliedChecksum: "a", State: api.PlanStateSucceeded}}
	}
	drainPlan := func(state api.PlanState, applied bool, failures int32, deadline time.Time) *api.MachinePlan {
		p := setPlan()
		p.Labels[api.PlanDrainLabel] = "true"
		p.Annotations = map[string]string{api.PlanDrainDeadlineAnnotation: deadline.Format(time.RFC3339)}
		p.Spec.MaxFailures = 3
		p.Status = api.MachinePlanStatus{Checksum: "d", AppliedChecksum: "a", State: state, FailureCount: failures}
		if applied {
			p.Status.AppliedChecksum = "d"
		}
		return p
	}
	handWritten := setPlan()
	handWritten.Labels = nil
	otherSets := setPlan()
	otherSets.Labels[api.PlanSetLabel] = "db"
	later, earlier := now.Add(time.Minute), now.Add(-time.Second)
	noDeadline := drainPlan(api.PlanStateInProgress, false, 0, later)
	noDeadline.Annotations = nil
	noDeadline.CreationTimestamp = metav1.NewTime(now.Add(-api.DefaultDrainTimeout - time.Second))

	tests := []struct {
		name    string
		noAgent bool
		plan    *api.MachinePlan
		set     *api.MachinePlanSet
		want    drainAction
	}{
		{"no plan", false, nil, nil, drainAction{done: ReasonDrained}},
		{"a hand-written plan", false, handWritten, nil, drainAction{done: ReasonDrained}},
		{"a set without drain", false, setPlan(), noDrain, drainAction{done: ReasonDrained}},
		{"its set is gone", false, setPlan(), nil, drainAction{done: ReasonDrained}},
		{"another set's name", false, otherSets, withDrain, drainAction{done: ReasonDrained}},
		{"a set with drain", false, setPlan(), withDrain, drainAction{start: true}},
		{"a set with drain, no agent ever", true, setPlan(), withDrain, drainAction{done: ReasonDrained}},
		{"no agent, drain already written", true, drainPlan(api.PlanStateSucceeded, true, 0, later), withDrain, drainAction{done: ReasonDrained}},
		{"drain pending", false, drainPlan(api.PlanStatePending, false, 0, later), withDrain, drainAction{wait: time.Minute}},
		{"drain in progress", false, drainPlan(api.PlanStateInProgress, false, 0, later), withDrain, drainAction{wait: time.Minute}},
		{"the old plan's success is not the drain's", false, drainPlan(api.PlanStateSucceeded, false, 0, later), withDrain, drainAction{wait: time.Minute}},
		{"drain succeeded", false, drainPlan(api.PlanStateSucceeded, true, 0, later), withDrain, drainAction{done: ReasonDrained}},
		{"drain succeeded after its set went", false, drainPlan(api.PlanStateSucceeded, true, 0, later), nil, drainAction{done: ReasonDrained}},
		{"drain failed once, retried", false, drainPlan(api.PlanStateFailed, false, 1, later), withDrain, drainAction{wait: time.Minute}},
		{"drain failed for good", false, drainPlan(api.PlanStateFailed, false, 3, later), withDrain, drainAction{done: ReasonDrainFailed}},
		{"drain timed out", false, drainPlan(api.PlanStateInProgress, false, 0, earlier), withDrain, drainAction{done: ReasonDrainTimedOut}},
		{"drain timed out at the deadline", false, drainPlan(api.PlanStateInProgress, false, 0, now), withDrain, drainAction{done: ReasonDrainTimedOut}},
		{"success beats the deadline", false, drainPlan(api.PlanStateSucceeded, true, 0, earlier), withDrain, drainAction{done: ReasonDrained}},
		{"no deadline: the default from creation", false, noDeadline, withDrain, drainAction{done: ReasonDrainTimedOut}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideDrain(!tt.noAgent, tt.plan, tt.set, now); got != tt.want {
				t.Fatalf("decideDrain = %+v, want %+v", got, tt.want)
			}
		})
	}
}
