package fsm

import (
	"slices"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestAPIPhasesAreStates ties the API's typed phase constants to the state
// machines: a phase added to the API without a state (or the reverse) would
// be refused by every status write, or never reachable.
func TestAPIPhasesAreStates(t *testing.T) {
	for _, tc := range []struct {
		def    *Definition
		phases []string
	}{
		{Registration, strs(api.RegistrationPhasePending, api.RegistrationPhaseApproved, api.RegistrationPhaseGranted,
			api.RegistrationPhaseDenied, api.RegistrationPhaseExpired)},
		{Machine, strs(api.MachinePhasePending, api.MachinePhaseProvisioning, api.MachinePhaseRegistering,
			api.MachinePhaseBootstrapping, api.MachinePhaseRunning, api.MachinePhaseUpdating, api.MachinePhaseUnavailable,
			api.MachinePhaseFailed, api.MachinePhaseDraining, api.MachinePhaseDeleting, api.MachinePhaseDeleted)},
		{Cluster, strs(api.ClusterPhasePending, api.ClusterPhaseWaitCheckIn, api.ClusterPhaseActive,
			api.ClusterPhaseDegraded, api.ClusterPhaseDeleting)},
		{Token, strs(api.TokenPhaseActive, api.TokenPhaseExpired, api.TokenPhaseRevoked)},
		{KubernetesPlan, []string{api.KubernetesPhasePending, api.KubernetesPhaseInvalid, api.KubernetesPhaseBootstrappingEtcd,
			api.KubernetesPhaseJoiningEtcd, api.KubernetesPhaseRemovingEtcd, api.KubernetesPhaseStartingControlPlane, api.KubernetesPhaseJoiningWorkers, api.KubernetesPhaseReady, api.KubernetesPhaseUpgrading}},
	} {
		t.Run(tc.def.Name(), func(t *testing.T) {
			for _, p := range tc.phases {
				if !tc.def.IsState(p) {
					t.Errorf("API phase %q is not a state of %s (states: %v)", p, tc.def.Name(), tc.def.States())
				}
			}
			for _, s := range tc.def.States() {
				if !slices.Contains(tc.phases, s) {
					t.Errorf("state %q of %s has no API phase constant", s, tc.def.Name())
				}
			}
		})
	}
	if len(All) != 5 {
		t.Errorf("fsm.All has %d definitions; tie the API phases of the new one here", len(All))
	}
}

// TestEventConstants: every event of every table has its exported constant,
// and every constant is an event of some table.
func TestEventConstants(t *testing.T) {
	constants := []string{
		EventApprove, EventGrant, EventDeny, EventExpire,
		EventProvision, EventProvisionFailed, EventRegister, EventAgentCheckedIn, EventPlanApplied, EventPlanChanged, EventPlanFixed,
		EventAgentSilent, EventAgentReturned, EventAgentReturnedMidPlan, EventPlanFailed, EventDrain, EventDrained,
		EventFinalized,
		EventAwaitCheckIn, EventMachineUnhealthy, EventMachinesHealthy, EventMachinesGone, EventDelete,
		EventRevoke,
		EventRefuseRoles, EventBootstrapEtcd, EventJoinEtcd, EventStartControlPlane, EventJoinWorkers, EventKubernetesReady, EventRemoveEtcd, EventUpgrade,
	}
	used := map[string]bool{}
	for _, d := range All {
		for _, e := range d.Events() {
			used[e] = true
			if !slices.Contains(constants, e) {
				t.Errorf("event %q of %s has no exported constant", e, d.Name())
			}
		}
	}
	for _, c := range constants {
		if !used[c] {
			t.Errorf("constant %q is an event of no state machine", c)
		}
	}
}

func strs[T ~string](vs ...T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
