package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned/fake"
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

// countingExecutor runs nothing and counts the plans it was asked to apply.
type countingExecutor struct {
	applied int
	fail    bool
}

func (e *countingExecutor) Apply(context.Context, *api.MachinePlanSpec) ([]api.InstructionOutput, error) {
	e.applied++
	if e.fail {
		return []api.InstructionOutput{{Name: "run", ExitCode: 1}}, errors.New("exit status 1")
	}
	return []api.InstructionOutput{{Name: "run"}}, nil
}

func (e *countingExecutor) Prober(api.PlanProbe) Prober { return nil }

// TestApplyAfterRestore: the agent keeps the checksum of the plan it last
// applied on its machine. When the server's record says another plan is
// applied (its datastore was restored from an older snapshot), the agent
// applies the server's plan again and says so in the plan's status (the
// server's record wins); otherwise an applied plan is left alone, and an
// agent without a record takes the server's word.
func TestApplyAfterRestore(t *testing.T) {
	spec := api.MachinePlanSpec{MaxFailures: 3, Instructions: []api.PlanInstruction{{Name: "run", Command: "/bin/true"}}}
	tests := []struct {
		name       string
		record     string // the checksum in the agent's record; "" none
		status     api.MachinePlanStatus
		fail       bool
		wantRuns   int
		wantRecord string
		wantNote   string // a substring of the planRestored entry; "" none
		wantState  api.PlanState
	}{
		{name: "applied, and the record agrees", record: "aaa", wantRecord: "aaa", wantState: api.PlanStateSucceeded,
			status: api.MachinePlanStatus{Checksum: "aaa", AppliedChecksum: "aaa", State: api.PlanStateSucceeded}},
		{name: "applied, no record yet: the server's word", record: "", wantRecord: "aaa", wantState: api.PlanStateSucceeded,
			status: api.MachinePlanStatus{Checksum: "aaa", AppliedChecksum: "aaa", State: api.PlanStateSucceeded}},
		{name: "applied per the server, the machine applied a newer plan: applied again", record: "zzz", wantRuns: 1, wantRecord: "aaa",
			wantNote: "had applied plan zzz", wantState: api.PlanStateSucceeded,
			status: api.MachinePlanStatus{Checksum: "aaa", AppliedChecksum: "aaa", State: api.PlanStateSucceeded}},
		{name: "applied again, and it fails", record: "zzz", fail: true, wantRuns: 1, wantRecord: "zzz",
			wantNote: "applied again, and failed", wantState: api.PlanStateFailed,
			status: api.MachinePlanStatus{Checksum: "aaa", AppliedChecksum: "aaa", State: api.PlanStateSucceeded}},
		{name: "an agent stopped while applying it again", record: "zzz", wantRuns: 1, wantRecord: "aaa",
			wantNote: "had applied plan zzz", wantState: api.PlanStateSucceeded,
			status: api.MachinePlanStatus{Checksum: "aaa", AppliedChecksum: "aaa", State: api.PlanStateInProgress}},
		{name: "a new plan", record: "aaa", wantRuns: 1, wantRecord: "bbb", wantState: api.PlanStateSucceeded,
			status: api.MachinePlanStatus{Checksum: "bbb", AppliedChecksum: "aaa", State: api.PlanStatePending}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			record := filepath.Join(t.TempDir(), appliedPlanFile)
			if tc.record != "" {
				if err := os.WriteFile(record, []byte(tc.record+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			plan := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: spec, Status: tc.status}
			client := fake.NewSimpleClientset(plan)
			exec := &countingExecutor{fail: tc.fail}
			r := &planRunner{opts: PlanOptions{Executor: exec, Say: t.Logf, AppliedFile: record},
				client: client.MusterV1alpha1(), machine: "m", kick: make(chan struct{}, 1)}
			if _, err := r.apply(context.Background(), plan.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			if exec.applied != tc.wantRuns {
				t.Errorf("applied %d times, want %d", exec.applied, tc.wantRuns)
			}
			if got := r.lastApplied(); got != tc.wantRecord {
				t.Errorf("record %q, want %q", got, tc.wantRecord)
			}
			got, err := client.MusterV1alpha1().MachinePlans().Get(context.Background(), "m", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.State != tc.wantState {
				t.Errorf("state %q, want %q", got.Status.State, tc.wantState)
			}
			note := got.RestoredNote()
			switch {
			case tc.wantNote == "" && note != "":
				t.Errorf("a %s entry where nothing was restored: %q", api.PlanRestoredOutput, note)
			case tc.wantNote != "" && !strings.Contains(note, tc.wantNote):
				t.Errorf("%s entry %q, want it to say %q", api.PlanRestoredOutput, note, tc.wantNote)
			}
		})
	}
}
