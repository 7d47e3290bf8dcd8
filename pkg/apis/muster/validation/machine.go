package validation

import (
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

var planStates = map[api.PlanState]bool{
	"": true, api.PlanStatePending: true, api.PlanStateInProgress: true, api.PlanStateSucceeded: true, api.PlanStateFailed: true,
}

// maxVersionLen bounds an agent's version string.
const maxVersionLen = 128

// ValidateMachine checks a Machine's spec.
func ValidateMachine(m *api.Machine) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateDNSSubdomain(m.Spec.Cluster, spec.Child("cluster"), true)
	errs = append(errs, validateDNSSubdomain(m.Spec.NodeName, spec.Child("nodeName"), false)...)
	errs = append(errs, validateRoles(m.Spec.Roles, spec.Child("roles"))...)
	if m.Spec.ClientID != "" {
		errs = append(errs, validateIdentifier(m.Spec.ClientID, spec.Child("clientID"))...)
	}
	errs = append(errs, validateMaxLen(m.Spec.Driver, 63, spec.Child("driver"))...)
	if m.Spec.JoinToken != "" && !tokenIDPattern.MatchString(m.Spec.JoinToken) {
		errs = append(errs, field.Invalid(spec.Child("joinToken"), m.Spec.JoinToken, "must be a join token ID: 6 to 32 lowercase letters and digits"))
	}
	return errs
}

// ValidateMachineUpdate refuses a change of what a Machine is: its
// cluster, node name, join token and driver.
func ValidateMachineUpdate(m, old *api.Machine) field.ErrorList {
	spec := field.NewPath("spec")
	errs := validateImmutable(m.Spec.Cluster, old.Spec.Cluster, spec.Child("cluster"))
	errs = append(errs, validateImmutable(m.Spec.NodeName, old.Spec.NodeName, spec.Child("nodeName"))...)
	errs = append(errs, validateImmutable(m.Spec.JoinToken, old.Spec.JoinToken, spec.Child("joinToken"))...)
	return append(errs, validateImmutable(m.Spec.Driver, old.Spec.Driver, spec.Child("driver"))...)
}

// ValidateMachineStatusUpdate bounds every field an agent may write to its
// Machine's status (which fields it may write is the strategy's business).
// A field the write leaves as stored is not checked again: a status stored
// before these checks (forged by an agent) must not keep the server from
// draining its Machine, and carrying a value over adds nothing.
func ValidateMachineStatusUpdate(m, old *api.Machine) field.ErrorList {
	status := field.NewPath("status")
	cur, prev := &m.Status, &old.Status
	reasonChanged := cur.Reason != prev.Reason
	// Conditions and reason had no bound before; the other fields did.
	unchangedBulk := apiequality.Semantic.DeepEqual(cur.Conditions, prev.Conditions) &&
		(!reasonChanged || len(cur.Reason) <= maxReasonBytes)
	if errs := validateStatusSize(cur, unchangedBulk, status); len(errs) > 0 {
		return errs
	}
	var errs field.ErrorList
	if !planStates[cur.PlanState] {
		errs = append(errs, field.NotSupported(status.Child("planState"), cur.PlanState,
			[]string{"pending", "in-progress", "succeeded", "failed"}))
	}
	if !apiequality.Semantic.DeepEqual(cur.Addresses, prev.Addresses) {
		errs = append(errs, validateAddresses(cur.Addresses, status.Child("addresses"))...)
	}
	if cur.AgentVersion != prev.AgentVersion {
		if len(cur.AgentVersion) > maxVersionLen {
			errs = append(errs, field.TooLong(status.Child("agentVersion"), "", maxVersionLen))
		} else if hasControl(cur.AgentVersion) {
			errs = append(errs, field.Invalid(status.Child("agentVersion"), cur.AgentVersion, "must not contain control characters"))
		}
	}
	if reasonChanged {
		errs = append(errs, validateMaxLen(cur.Reason, maxReasonBytes, status.Child("reason"))...)
	}
	if cur.Message != prev.Message {
		errs = append(errs, validateMaxLen(cur.Message, maxMessageBytes, status.Child("message"))...)
	}
	return append(errs, validateConditions(cur.Conditions, prev.Conditions, status.Child("conditions"))...)
}
