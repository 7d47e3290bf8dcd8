package v1alpha1

// A plan's outcome is decided here and nowhere else: the lifecycle
// controller, the plan-set and drain controllers and the agent all ask these
// questions, and two answers to one question would let a machine be Running
// for one of them and still rolling out for another.

// Applied reports whether the agent has applied the plan's current content:
// it reported success for the very checksum the server holds now. A plan
// the server has not checksummed yet is never applied.
func (p *MachinePlan) Applied() bool {
	st := p.Status
	return st.State == PlanStateSucceeded && st.Checksum != "" && st.AppliedChecksum == st.Checksum
}

// FailedForGood reports whether the plan has failed as many times as its
// spec allows: the agent stops retrying it and the machine fails, until a
// new plan (a new checksum) resets the count.
func (p *MachinePlan) FailedForGood() bool {
	return p.Status.State == PlanStateFailed && p.Status.FailureCount >= p.Spec.MaxFailures
}
