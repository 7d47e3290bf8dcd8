package notify

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// The transitions, each read from an object's old and new version (old is
// nil when the object was created). Only a move into the state counts:
// an object that stays Failed is told of once.

func id(m metav1.Object, e api.NotificationEvent) string {
	return fmt.Sprintf("%s/%s/%s", m.GetUID(), e, m.GetResourceVersion())
}

// machineTransitions: a Machine entered Failed or Unavailable.
func machineTransitions(old, m *api.Machine) []Event {
	var was api.MachinePhase
	if old != nil {
		was = old.Status.Phase
	}
	now := m.Status.Phase
	if now == was {
		return nil
	}
	var kind api.NotificationEvent
	switch now {
	case api.MachinePhaseFailed:
		kind = api.NotifyMachineFailed
	case api.MachinePhaseUnavailable:
		kind = api.NotifyMachineUnavailable
	default:
		return nil
	}
	return []Event{{Kind: kind, ID: id(m, kind), Subject: "machines/" + m.Name, Data: map[string]string{
		"machine": m.Name, "cluster": m.Spec.Cluster, "phase": string(now), "previousPhase": string(was), "reason": m.Status.Reason,
	}}}
}

// registrationTransitions: a ClusterRegistration waits for approval.
func registrationTransitions(old, r *api.ClusterRegistration) []Event {
	if r.Status.Phase != api.RegistrationPhasePending || old != nil && old.Status.Phase == api.RegistrationPhasePending {
		return nil
	}
	kind := api.NotifyRegistrationPending
	return []Event{{Kind: kind, ID: id(r, kind), Subject: "clusterregistrations/" + r.Name, Data: map[string]string{
		"registration": r.Name, "nodeName": r.Spec.NodeName, "token": r.Spec.TokenID, "reason": r.Status.Reason,
	}}}
}

// planSetTransitions: a rollout paused (condition Paused turned True) or
// reverted (status.failedRevision set).
func planSetTransitions(old, s *api.MachinePlanSet) []Event {
	var out []Event
	data := func() map[string]string {
		return map[string]string{"planSet": s.Name, "cluster": s.Spec.Cluster}
	}
	paused := meta.FindStatusCondition(s.Status.Conditions, api.PlanSetPaused)
	wasPaused := old != nil && meta.IsStatusConditionTrue(old.Status.Conditions, api.PlanSetPaused)
	if paused != nil && paused.Status == metav1.ConditionTrue && !wasPaused {
		d := data()
		d["reason"], d["message"] = paused.Reason, paused.Message
		out = append(out, Event{Kind: api.NotifyRolloutPaused, ID: id(s, api.NotifyRolloutPaused), Subject: "machineplansets/" + s.Name, Data: d})
	}
	if s.Status.FailedRevision != "" && (old == nil || old.Status.FailedRevision != s.Status.FailedRevision) {
		d := data()
		d["failedRevision"], d["revertedTo"] = s.Status.FailedRevision, s.Status.LastCompleteRevision
		out = append(out, Event{Kind: api.NotifyRolloutReverted, ID: id(s, api.NotifyRolloutReverted), Subject: "machineplansets/" + s.Name, Data: d})
	}
	return out
}

// poolTransitions: a pool that had every replica Running has fewer, its
// spec unchanged (a scale-up is short until its machines run, by design).
func poolTransitions(old, p *api.MachinePool) []Event {
	if old == nil || old.Spec.Replicas != p.Spec.Replicas {
		return nil
	}
	full := func(p *api.MachinePool) bool { return p.Status.ReadyReplicas >= p.Spec.Replicas }
	if !full(old) || full(p) {
		return nil
	}
	kind := api.NotifyPoolShort
	return []Event{{Kind: kind, ID: id(p, kind), Subject: "machinepools/" + p.Name, Data: map[string]string{
		"pool": p.Name, "cluster": p.Spec.Cluster, "replicas": strconv.Itoa(int(p.Spec.Replicas)), "readyReplicas": strconv.Itoa(int(p.Status.ReadyReplicas)),
	}}}
}
