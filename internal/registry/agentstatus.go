package registry

import (
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// What a machine's agent may write in its own objects' status (SPEC §8): it
// reports what it observes — its addresses and version, its plan's state,
// applied checksum, failure count, output and probe results — and nothing
// the server decides: phases, reasons, messages, transitions, timestamps,
// conditions and checksums. A change to a server-owned field is refused
// (422) with the field named, rather than dropped, so an agent never
// believes it wrote what it did not.

// serverOwned returns a Forbidden error for each named status field that
// differs between obj's and old's status.
func serverOwned(obj, old interface{}, fields ...string) field.ErrorList {
	var errs field.ErrorList
	n, o := reflect.ValueOf(obj).Elem(), reflect.ValueOf(old).Elem()
	for _, name := range fields {
		nf, of := n.FieldByName(name), o.FieldByName(name)
		if !apiequality.Semantic.DeepEqual(nf.Interface(), of.Interface()) {
			errs = append(errs, field.Forbidden(field.NewPath("status", jsonName(n.Type(), name)),
				"is the server's to set; an agent reports only what it observes"))
		}
	}
	return errs
}

func jsonName(t reflect.Type, name string) string {
	f, _ := t.FieldByName(name)
	tag := f.Tag.Get("json")
	for i := 0; i < len(tag); i++ {
		if tag[i] == ',' {
			return tag[:i]
		}
	}
	return tag
}

// machineAgentStatus: an agent writes its addresses and agent version.
func machineAgentStatus(m, old *api.Machine) field.ErrorList {
	return serverOwned(&m.Status, &old.Status, "Phase", "Reason", "Message", "LastSeen", "PlanState", "Transitions", "Conditions")
}

// agentPlanStates are the plan states an agent reports; pending is the
// server's (a new plan).
var agentPlanStates = map[api.PlanState]bool{api.PlanStateInProgress: true, api.PlanStateSucceeded: true, api.PlanStateFailed: true}

// planAgentStatus: an agent writes its plan's state, applied checksum,
// failure count, output and probe results — of the current plan only.
func planAgentStatus(p, old *api.MachinePlan) field.ErrorList {
	status := field.NewPath("status")
	// lastAppliedTime needs no check: preparePlanStatus has already set it.
	errs := serverOwned(&p.Status, &old.Status, "Checksum")
	if p.Status.State != old.Status.State && !agentPlanStates[p.Status.State] {
		errs = append(errs, field.NotSupported(status.Child("state"), p.Status.State, []string{"in-progress", "succeeded", "failed"}))
	}
	if p.Status.AppliedChecksum != old.Status.AppliedChecksum && p.Status.AppliedChecksum != old.Status.Checksum {
		errs = append(errs, field.Invalid(status.Child("appliedChecksum"), p.Status.AppliedChecksum,
			"an agent can only have applied the current plan: must be status.checksum"))
	}
	if p.Status.FailureCount != 0 && p.Status.FailureCount != old.Status.FailureCount && p.Status.FailureCount != old.Status.FailureCount+1 {
		errs = append(errs, field.Invalid(status.Child("failureCount"), p.Status.FailureCount,
			"an agent counts one failure at a time: must be 0, the stored count, or one more"))
	}
	return errs
}

// preparePlanStatus stamps the time a plan was applied: timestamps are the
// server's, whoever reports the plan applied.
func preparePlanStatus(p, old *api.MachinePlan) {
	p.Status.LastAppliedTime = old.Status.LastAppliedTime
	applied := p.Status.State == api.PlanStateSucceeded && p.Status.AppliedChecksum != ""
	if applied && (old.Status.State != api.PlanStateSucceeded || old.Status.AppliedChecksum != p.Status.AppliedChecksum) {
		now := metav1.Time(nowFunc())
		p.Status.LastAppliedTime = &now
	}
}
