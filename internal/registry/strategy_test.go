package registry

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// Every kind must have the shape the reflective strategy relies on; a new
// kind without it fails here rather than at the first request.
func TestKindsHaveTheConventionalShape(t *testing.T) {
	kinds := []kindInfo{
		Cluster.erase(), ClusterRegistrationToken.erase(), ClusterRegistration.erase(),
		Machine.erase(), MachinePlan.erase(), NodePassword.erase(), ServerEndpoint.erase(), ControllerLease.erase(),
	}
	for _, k := range kinds {
		t.Run(k.resource, func(t *testing.T) {
			obj := k.newFunc()
			field_(obj, "Spec")
			field_(obj, "Status")
			if k.lifecycle != nil {
				setPhase(obj, k.lifecycle.Initial())
				if phase(obj) != k.lifecycle.Initial() {
					t.Errorf("phase round trip failed")
				}
				_ = reason(obj)
				_ = getTransitions(obj)
			}
			if len(k.fields(obj)) == 0 || k.fields(obj)["metadata.name"] != "" {
				t.Errorf("fields must include metadata.name")
			}
		})
	}
}

func TestStatusStrategyGuardsPhase(t *testing.T) {
	s := statusStrategy{strategy{kind: Machine.erase()}}
	ctx := context.Background()
	mk := func(phase api.MachinePhase) *api.Machine {
		return &api.Machine{
			ObjectMeta: metav1.ObjectMeta{Name: "m", ResourceVersion: "1"},
			Spec:       api.MachineSpec{Cluster: "c"},
			Status:     api.MachineStatus{Phase: phase},
		}
	}
	tests := []struct {
		name        string
		from, to    api.MachinePhase
		wantErr     string
		wantRecords int
	}{
		{"legal", api.MachinePhasePending, api.MachinePhaseRegistering, "", 1},
		{"no change records nothing", api.MachinePhaseRunning, api.MachinePhaseRunning, "", 0},
		{"illegal", api.MachinePhaseRegistering, api.MachinePhaseRunning, `cannot go from "Registering" to "Running"`, 0},
		{"never back from deleting", api.MachinePhaseDeleting, api.MachinePhaseRunning, "Deleting", 0},
		{"unknown phase", api.MachinePhaseRunning, "Bogus", "Bogus", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, obj := mk(tc.from), mk(tc.to)
			obj.Status.Reason = "Because"
			obj.Status.Transitions = []api.Transition{{From: "forged"}}
			s.PrepareForUpdate(ctx, obj, old)
			errs := s.ValidateUpdate(ctx, obj, old)
			if tc.wantErr == "" && len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
			if tc.wantErr != "" {
				if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr) {
					t.Fatalf("errors %v, want one containing %q", errs, tc.wantErr)
				}
				if !strings.Contains(errs.ToAggregate().Error(), "status.phase") {
					t.Errorf("error does not name status.phase: %v", errs)
				}
			}
			if len(obj.Status.Transitions) != tc.wantRecords {
				t.Fatalf("transitions = %+v, want %d records (the forged one dropped)", obj.Status.Transitions, tc.wantRecords)
			}
			if tc.wantRecords == 1 {
				rec := obj.Status.Transitions[0]
				if rec.From != string(tc.from) || rec.To != string(tc.to) || rec.Event == "" || rec.Reason != "Because" || rec.Time.IsZero() {
					t.Errorf("record %+v is incomplete", rec)
				}
			}
		})
	}
}

func TestTransitionsAreBounded(t *testing.T) {
	var list []api.Transition
	for i := 0; i < api.MaxTransitions+5; i++ {
		list = appendTransition(list, api.Transition{Event: string(rune('a' + i))})
	}
	if len(list) != api.MaxTransitions || list[len(list)-1].Event != string(rune('a'+api.MaxTransitions+4)) {
		t.Fatalf("got %d records ending %q", len(list), list[len(list)-1].Event)
	}
}

func TestCreateResetsStatusToInitialPhase(t *testing.T) {
	s := strategy{kind: ClusterRegistration.erase()}
	r := &api.ClusterRegistration{Status: api.ClusterRegistrationStatus{Phase: api.RegistrationPhaseGranted, Certificate: []byte("forged")}}
	s.PrepareForCreate(context.Background(), r)
	if r.Status.Phase != api.RegistrationPhase(fsm.Registration.Initial()) || r.Status.Certificate != nil || r.Generation != 1 {
		t.Fatalf("status after create = %+v (generation %d)", r.Status, r.Generation)
	}
}

func TestMainStrategyKeepsStatusAndBumpsGeneration(t *testing.T) {
	s := strategy{kind: MachinePlan.erase()}
	old := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	s.PrepareForCreate(context.Background(), old)
	old.Status.State = api.PlanStateSucceeded
	old.Status.AppliedChecksum = old.Status.Checksum

	same := old.DeepCopy()
	same.Status = api.MachinePlanStatus{State: api.PlanStateFailed}
	s.PrepareForUpdate(context.Background(), same, old)
	if same.Status.State != api.PlanStateSucceeded || same.Generation != 1 {
		t.Errorf("unchanged spec: status %q generation %d", same.Status.State, same.Generation)
	}

	changed := old.DeepCopy()
	changed.Spec.Files = []api.PlanFile{{Path: "/etc/x", Content: "y"}}
	s.PrepareForUpdate(context.Background(), changed, old)
	if changed.Generation != 2 || changed.Status.State != api.PlanStatePending || changed.Status.Checksum == old.Status.Checksum {
		t.Errorf("changed spec: generation %d state %q checksum changed %v", changed.Generation, changed.Status.State, changed.Status.Checksum != old.Status.Checksum)
	}
}

func TestTableHasNameKindColumnsAndAge(t *testing.T) {
	c := tableConvertor{Machine.erase()}
	list := &api.MachineList{Items: []api.Machine{{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: api.MachineSpec{Cluster: "c"}}}}
	table, err := c.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table.ColumnDefinitions) != 7 || len(table.Rows) != 1 || len(table.Rows[0].Cells) != 7 {
		t.Fatalf("table shape: %d columns, %d rows", len(table.ColumnDefinitions), len(table.Rows))
	}
	var _ runtime.Object = table
}
