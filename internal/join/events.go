package join

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/muster-io/muster/internal/metrics"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// The Events of the join: a grant is recorded on the Machine it made or
// renewed (so `kubectl describe machine` starts with how it joined), a
// refusal on the registration, which may never have been stored. The
// recorder's spam filter bounds what a storm of either writes.

func (g *Granter) recordGrant(reg *api.ClusterRegistration, got *grant) {
	if g.events == nil || got == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: api.SchemeGroupVersion.String(), Kind: "Machine", Name: got.machine, UID: got.uid}
	reason, by := "Registered", "an administrator's request"
	switch {
	case got.rejoined:
		g.events.Eventf(ref, corev1.EventTypeWarning, "Rejoined",
			"machine %s joined again by itself with its certificate and node password (registration %s, cluster %s): the datastore was restored from a snapshot taken before it joined, and had lost its Machine",
			got.machine, reg.Name, got.cluster)
		return
	case reg.Spec.MachineUID != "":
		reason, by = "CertificateRenewed", "the machine's own request"
	case reg.Spec.TokenID != "":
		by = "join token " + reg.Spec.TokenID
	}
	g.events.Eventf(ref, corev1.EventTypeNormal, reason, "registration %s of node %s granted, through %s, in cluster %s", reg.Name, reg.Spec.NodeName, by, got.cluster)
}

// recordRefusal records refusal of reg: one refused in its request, or one
// the controller denied (not one another server decided meanwhile).
func (g *Granter) recordRefusal(reg *api.ClusterRegistration, refusal *Refusal) {
	if g.events == nil || refusal == nil || (reg.Status.Phase != "" && reg.Status.Reason != refusal.Reason) {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: api.SchemeGroupVersion.String(), Kind: "ClusterRegistration", Name: reg.Name, UID: reg.UID}
	by := ""
	if reg.Spec.TokenID != "" {
		by = " (join token " + reg.Spec.TokenID + ")"
	}
	g.events.Eventf(ref, corev1.EventTypeWarning, refusal.Reason, "registration of node %s%s refused: %s", reg.Spec.NodeName, by, refusal.Message)
}

// recentDecision bounds which operator denials the controller records: one
// it sees as it is made, not every past one a restarted server or a new
// leader finds in its cache.
const recentDecision = time.Minute

// recordOperatorDenial records a registration an operator denied
// ('muster-server registration deny'): the denial is written through the
// API, and the controller is the first of the server to see it.
func (g *Granter) recordOperatorDenial(reg *api.ClusterRegistration) {
	n := len(reg.Status.Transitions)
	if reg.Status.Phase != api.RegistrationPhaseDenied || reg.Status.Reason != "DeniedByOperator" || n == 0 ||
		time.Since(reg.Status.Transitions[n-1].Time.Time) > recentDecision {
		return
	}
	if g.firstSight(reg.UID) {
		metrics.Registration(metrics.OutcomeDenied, metrics.ReasonDeniedByOperator)
	}
	if g.events == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: api.SchemeGroupVersion.String(), Kind: "ClusterRegistration", Name: reg.Name, UID: reg.UID}
	why := ""
	if reg.Status.Message != "" {
		why = ": " + reg.Status.Message
	}
	g.events.Eventf(ref, corev1.EventTypeWarning, reg.Status.Reason, "registration of node %s denied by an operator%s", reg.Spec.NodeName, why)
}

// firstSight reports whether the operator denial of the registration with
// uid is seen for the first time within recentDecision: the controller of
// a new term, or an update of the registration, sees it again, and it is
// counted once. The memory is pruned of denials older than that.
func (g *Granter) firstSight(uid types.UID) bool {
	g.deniedMu.Lock()
	defer g.deniedMu.Unlock()
	now := time.Now()
	if g.denied == nil {
		g.denied = map[types.UID]time.Time{}
	}
	if _, seen := g.denied[uid]; seen {
		return false
	}
	for u, at := range g.denied {
		if now.Sub(at) > 2*recentDecision {
			delete(g.denied, u)
		}
	}
	g.denied[uid] = now
	return true
}
