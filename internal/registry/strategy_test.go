package registry

import (
	"context"
	"strings"
	"testing"
	"time"

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
		NotificationSubscription.erase(),
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

func TestTableHasNameKindColumnsAgeAndWideColumns(t *testing.T) {
	c := tableConvertor{kind: Machine.erase()}
	list := &api.MachineList{Items: []api.Machine{{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: api.MachineSpec{Cluster: "c"}}}}
	table, err := c.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table.ColumnDefinitions) != 9 || len(table.Rows) != 1 || len(table.Rows[0].Cells) != 9 {
		t.Fatalf("table shape: %d columns, %d rows", len(table.ColumnDefinitions), len(table.Rows))
	}
	// kubectl shows priority-1 columns with -o wide only.
	for i, col := range table.ColumnDefinitions {
		wide := col.Name == "Addresses" || col.Name == "Agent-Version"
		if (col.Priority == 1) != wide {
			t.Errorf("column %d %q has priority %d", i, col.Name, col.Priority)
		}
	}
	var _ runtime.Object = table
}

// LAST-SEEN is the later of the servers' in-memory hearing and the
// persisted lastSeen, which is written only coarsely.
func TestMachineLastSeenColumn(t *testing.T) {
	now := time.Now()
	persisted := metav1.NewTime(now.Add(-20 * time.Minute))
	tests := []struct {
		name      string
		lastSeen  *metav1.Time
		lastHeard func(string) time.Time
		want      string
	}{
		{"never heard, nothing persisted", nil, nil, "<never>"},
		{"persisted only (no liveness hook)", &persisted, nil, "20m ago"},
		{"heard in memory after the persisted time", &persisted, func(string) time.Time { return now.Add(-3 * time.Second) }, "3s ago"},
		{"heard in memory, nothing persisted yet", nil, func(string) time.Time { return now.Add(-3 * time.Second) }, "3s ago"},
		{"the server forgot (restart): persisted wins", &persisted, func(string) time.Time { return time.Time{} }, "20m ago"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tableConvertor{kind: Machine.erase(), lastHeard: tt.lastHeard}
			m := &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: api.MachineStatus{LastSeen: tt.lastSeen,
				AgentVersion: "v1.2.3", Addresses: []api.MachineAddress{{Type: api.MachineInternalIP, Address: "10.0.0.1"}, {Type: api.MachineHostName, Address: "a"}}}}
			table, err := c.ConvertToTable(context.Background(), m, nil)
			if err != nil {
				t.Fatal(err)
			}
			cells := table.Rows[0].Cells
			if got := cells[5]; got != tt.want {
				t.Errorf("LAST-SEEN = %v, want %q", got, tt.want)
			}
			if cells[7] != "10.0.0.1,a" || cells[8] != "v1.2.3" {
				t.Errorf("wide cells = %v %v", cells[7], cells[8])
			}
		})
	}
}

// TestRoleLabels: a Machine's role labels are its spec.roles, whatever a
// writer sent: added, kept, and a stale or hand-written one dropped.
func TestRoleLabels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		roles  []string
		labels map[string]string
		want   map[string]string
	}{
		{"none", nil, nil, nil},
		{"added", []string{"etcd", "worker"}, map[string]string{"site": "17"},
			map[string]string{"site": "17", "role.muster.io/etcd": "true", "role.muster.io/worker": "true"}},
		{"a role no longer held is dropped", []string{"worker"}, map[string]string{"role.muster.io/etcd": "true", "role.muster.io/worker": "false"},
			map[string]string{"role.muster.io/worker": "true"}},
		{"other labels stay", nil, map[string]string{"role": "worker"}, map[string]string{"role": "worker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &api.Machine{ObjectMeta: metav1.ObjectMeta{Labels: tc.labels}, Spec: api.MachineSpec{Roles: tc.roles}}
			Machine.Prepare(m, nil)
			if len(m.Labels) != len(tc.want) {
				t.Fatalf("labels %v, want %v", m.Labels, tc.want)
			}
			for k, v := range tc.want {
				if m.Labels[k] != v {
					t.Errorf("labels %v, want %v", m.Labels, tc.want)
				}
			}
		})
	}
}
