package join

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestJoinEvents(t *testing.T) {
	reg := func(token, machineUID string, phase api.RegistrationPhase, reason string) *api.ClusterRegistration {
		r := &api.ClusterRegistration{Spec: api.ClusterRegistrationSpec{NodeName: "n1", TokenID: token, MachineUID: machineUID}}
		r.Name, r.Status.Phase, r.Status.Reason = "c-1", phase, reason
		return r
	}
	got := &grant{cluster: "c1", machine: "n1", uid: "u1"}
	used := refuse(403, "TokenUsedUp", "join token abc has been used: create a new one")
	tests := []struct {
		name string
		do   func(g *Granter)
		want string
	}{
		{"a grant through a token", func(g *Granter) { g.recordGrant(reg("abc", "", "", ""), got) },
			"Normal Registered registration c-1 of node n1 granted, through join token abc, in cluster c1"},
		{"a renewal", func(g *Granter) { g.recordGrant(reg("", "u1", "", ""), got) },
			"Normal CertificateRenewed registration c-1 of node n1 granted, through the machine's own request, in cluster c1"},
		{"a refusal in the request", func(g *Granter) { g.recordRefusal(reg("abc", "", "", ""), used) },
			"Warning TokenUsedUp registration of node n1 (join token abc) refused: join token abc has been used: create a new one"},
		{"a denial by the controller", func(g *Granter) { g.recordRefusal(reg("abc", "", api.RegistrationPhaseDenied, "TokenUsedUp"), used) },
			"Warning TokenUsedUp registration of node n1 (join token abc) refused: join token abc has been used: create a new one"},
		{"a registration decided otherwise meanwhile", func(g *Granter) {
			g.recordRefusal(reg("abc", "", api.RegistrationPhaseGranted, "Granted"), used)
		}, ""},
		{"an operator's denial, as it is made", func(g *Granter) {
			r := reg("abc", "", api.RegistrationPhaseDenied, "DeniedByOperator")
			r.Status.Message = "unknown hardware"
			r.Status.Transitions = []api.Transition{{To: "Denied", Time: metav1.Now()}}
			g.recordOperatorDenial(r)
		}, "Warning DeniedByOperator registration of node n1 denied by an operator: unknown hardware"},
		{"an operator's denial found after a restart", func(g *Granter) {
			r := reg("abc", "", api.RegistrationPhaseDenied, "DeniedByOperator")
			r.Status.Transitions = []api.Transition{{To: "Denied", Time: metav1.NewTime(time.Now().Add(-time.Hour))}}
			g.recordOperatorDenial(r)
		}, ""},
		{"a denial by the controller is not an operator's", func(g *Granter) {
			r := reg("abc", "", api.RegistrationPhaseDenied, "TokenUsedUp")
			r.Status.Transitions = []api.Transition{{To: "Denied", Time: metav1.Now()}}
			g.recordOperatorDenial(r)
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(4)
			tt.do(&Granter{events: rec})
			close(rec.Events)
			var events []string
			for e := range rec.Events {
				events = append(events, e)
			}
			if (tt.want == "" && len(events) != 0) || (tt.want != "" && (len(events) != 1 || events[0] != tt.want)) {
				t.Errorf("recorded %q, want %q", events, tt.want)
			}
		})
	}
	// Without a recorder (a server that has not started it) nothing happens.
	(&Granter{}).recordGrant(reg("abc", "", "", ""), got)
}
