package registry

import (
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/muster-io/muster/internal/fsm"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

var planStates = map[api.PlanState]bool{
	"": true, api.PlanStatePending: true, api.PlanStateInProgress: true, api.PlanStateSucceeded: true, api.PlanStateFailed: true,
}

// maxVersionLen bounds an agent's version string.
const maxVersionLen = 128

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
	Validate: func(m *api.Machine) field.ErrorList {
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
	},
	ValidateUpdate: func(m, old *api.Machine) field.ErrorList {
		spec := field.NewPath("spec")
		errs := validateImmutable(m.Spec.Cluster, old.Spec.Cluster, spec.Child("cluster"))
		errs = append(errs, validateImmutable(m.Spec.NodeName, old.Spec.NodeName, spec.Child("nodeName"))...)
		errs = append(errs, validateImmutable(m.Spec.JoinToken, old.Spec.JoinToken, spec.Child("joinToken"))...)
		return append(errs, validateImmutable(m.Spec.Driver, old.Spec.Driver, spec.Child("driver"))...)
	},
	ValidateStatus: validateMachineStatus,
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

// validateMachineStatus bounds every field an agent may write to its
// Machine's status (which fields it may write is the strategy's business).
// A field the write leaves as stored is not checked again: a status stored
// before these checks (forged by an agent) must not keep the server from
// draining its Machine, and carrying a value over adds nothing.
func validateMachineStatus(m, old *api.Machine) field.ErrorList {
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
