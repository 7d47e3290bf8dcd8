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

// PlanRestoredOutput names the entry of a plan's status.output with which
// an agent says it applied the plan again although the server's record
// said it was applied: the machine had applied a plan the server does not
// hold (its datastore was restored from an older snapshot), and the
// server's record wins. The server makes it an Event (PlanRestored) on the
// Machine.
const PlanRestoredOutput = "planRestored"

// RestoredNote returns the text of the plan's PlanRestoredOutput entry, or
// "" when it has none.
func (p *MachinePlan) RestoredNote() string {
	for _, o := range p.Status.Output {
		if o.Name == PlanRestoredOutput {
			return o.Output
		}
	}
	return ""
}
