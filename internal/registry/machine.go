package registry

import (
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/apis/muster/validation"
)

// Machine is the storage description of machines.
var Machine = Kind[*api.Machine]{
	Resource:   "machines",
	Singular:   "machine",
	ShortNames: []string{"ma", "mach"},
	New:        func() *api.Machine { return &api.Machine{} },
	NewList:    func() runtime.Object { return &api.MachineList{} },
	Fields:     api.MachineFields,
	Lifecycle:  fsm.Machine,
	Prepare: func(m, old *api.Machine) {
		// From the start, so that no Machine can be deleted before the
		// server has drained it, and no controller pass is spent adding it.
		if old == nil && !slices.Contains(m.Finalizers, api.MachineLifecycleFinalizer) {
			m.Finalizers = append(m.Finalizers, api.MachineLifecycleFinalizer)
		}
		syncRoleLabels(m)
	},
	Validate:       validation.ValidateMachine,
	ValidateUpdate: validation.ValidateMachineUpdate,
	ValidateStatus: validation.ValidateMachineStatusUpdate,
	AgentStatus:    machineAgentStatus,
	// What a pool's driver made and the config it made it with: the
	// host's removal acts on them, so an operator who could write them
	// could aim an uninstall at another host.
	ServerAnnotations: []string{api.DriverStateAnnotation, api.DriverConfigAnnotation, api.PoolCreatedAtAnnotation},
	Columns: []metav1.TableColumnDefinition{
		{Name: "Cluster", Type: "string", Description: "Cluster the machine belongs to."},
		{Name: "Phase", Type: "string", Description: "Lifecycle state of the machine."},
		{Name: "Plan", Type: "string", Description: "State of the machine's plan."},
		{Name: "Roles", Type: "string", Description: "Roles of the machine."},
		{Name: "Last-Seen", Type: "string", Description: "When the agent was last heard by any server: the servers' in-memory liveness, or the persisted status.lastSeen if later."},
	},
	HeardCells: func(m *api.Machine, heard time.Time) []interface{} {
		roles := strings.Join(m.Spec.Roles, ",")
		if roles == "" {
			roles = "<none>"
		}
		seen := m.Status.LastSeen
		if !heard.IsZero() && (seen == nil || heard.After(seen.Time)) {
			t := metav1.NewTime(heard)
			seen = &t
		}
		return []interface{}{m.Spec.Cluster, string(m.Status.Phase), string(m.Status.PlanState), roles, since(seen)}
	},
	WideColumns: []metav1.TableColumnDefinition{
		{Name: "Addresses", Type: "string", Priority: 1, Description: "The machine's addresses, as its agent reported them."},
		{Name: "Agent-Version", Type: "string", Priority: 1, Description: "Version of the muster-agent on the machine."},
	},
	WideCells: func(m *api.Machine) []interface{} {
		addrs := make([]string, 0, len(m.Status.Addresses))
		for _, a := range m.Status.Addresses {
			addrs = append(addrs, a.Address)
		}
		return []interface{}{orNone(strings.Join(addrs, ",")), orNone(m.Status.AgentVersion)}
	},
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// syncRoleLabels makes a Machine's role labels (api.RoleLabelPrefix) say
// exactly its spec.roles, so that "role" has one meaning and selectors can
// select on it: the one place that decides them.
func syncRoleLabels(m *api.Machine) {
	for k := range m.Labels {
		if strings.HasPrefix(k, api.RoleLabelPrefix) {
			delete(m.Labels, k)
		}
	}
	for _, r := range m.Spec.Roles {
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[api.RoleLabel(r)] = "true"
	}
}
