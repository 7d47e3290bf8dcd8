package agent

import (
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestNewerResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"10", "9", true},
		{"9", "10", false},
		{"10", "10", false},
		{"", "10", false},
		{"10", "", false},
		{"x", "1", false},
	} {
		if got := newer(tc.a, tc.b); got != tc.want {
			t.Errorf("newer(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// The plans an agent that refuses plans (the one inside muster-server)
// refuses: any that would write or run anything, or reach the network; an
// empty plan is its report, not an action.
func TestActs(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec api.MachinePlanSpec
		want bool
	}{
		{"empty", api.MachinePlanSpec{MaxFailures: 3}, false},
		{"a file", api.MachinePlanSpec{Files: []api.PlanFile{{Path: "/etc/x", Content: "x"}}}, true},
		{"a file deleted", api.MachinePlanSpec{Files: []api.PlanFile{{Path: "/etc/x", Delete: true}}}, true},
		{"an instruction", api.MachinePlanSpec{Instructions: []api.PlanInstruction{{Name: "i", Command: "/bin/true"}}}, true},
		{"an exec probe", api.MachinePlanSpec{Probes: []api.PlanProbe{{Name: "p", Exec: &api.ExecProbe{Command: "/bin/true"}}}}, true},
		{"an HTTP probe", api.MachinePlanSpec{Probes: []api.PlanProbe{{Name: "p", HTTPGet: &api.HTTPGetProbe{URL: "http://127.0.0.1:9443/"}}}}, true},
		{"an agent upgrade", api.MachinePlanSpec{AgentUpgrade: &api.AgentUpgrade{Version: "v1"}}, true},
	} {
		if got := Acts(&tc.spec); got != tc.want {
			t.Errorf("%s: Acts = %v, want %v", tc.name, got, tc.want)
		}
	}
}
