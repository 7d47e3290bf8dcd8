package v1alpha1

import "testing"

func TestPlanOutcome(t *testing.T) {
	const sum, old = "aaaa", "bbbb"
	for _, tc := range []struct {
		name          string
		status        MachinePlanStatus
		maxFailures   int32
		applied, dead bool
	}{
		{"succeeded for the current checksum", MachinePlanStatus{State: PlanStateSucceeded, Checksum: sum, AppliedChecksum: sum}, 3, true, false},
		{"succeeded for an older checksum", MachinePlanStatus{State: PlanStateSucceeded, Checksum: sum, AppliedChecksum: old}, 3, false, false},
		{"not checksummed yet", MachinePlanStatus{State: PlanStateSucceeded}, 3, false, false},
		{"in progress", MachinePlanStatus{State: PlanStateInProgress, Checksum: sum, AppliedChecksum: sum}, 3, false, false},
		{"failed, retries left", MachinePlanStatus{State: PlanStateFailed, Checksum: sum, FailureCount: 2}, 3, false, false},
		{"failed as often as allowed", MachinePlanStatus{State: PlanStateFailed, Checksum: sum, FailureCount: 3}, 3, false, true},
		{"failed once, allowed once", MachinePlanStatus{State: PlanStateFailed, Checksum: sum, FailureCount: 1}, 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &MachinePlan{Spec: MachinePlanSpec{MaxFailures: tc.maxFailures}, Status: tc.status}
			if got := p.Applied(); got != tc.applied {
				t.Errorf("Applied() = %v, want %v", got, tc.applied)
			}
			if got := p.FailedForGood(); got != tc.dead {
				t.Errorf("FailedForGood() = %v, want %v", got, tc.dead)
			}
		})
	}
}
