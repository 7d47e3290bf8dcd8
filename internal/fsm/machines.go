package fsm

// The tables below are the lifecycle rules of SPEC §5, and the only copy of
// them: state names equal the phase constants of pkg/apis/muster/v1alpha1,
// event names are what a transition history records. Renaming an event
// rewrites how old histories read, so add events rather than rename them.

// Registration is an agent's request to join: a person or policy approves
// or denies it, the server grants it (issues the credentials), or it times
// out. Granted, Denied and Expired are final.
var Registration = define("ClusterRegistration", "Pending",
	[]string{"Pending", "Approved", "Granted", "Denied", "Expired"},
	[]transition{
		{"approve", []string{"Pending"}, "Approved"},
		{"grant", []string{"Approved"}, "Granted"},
		{"deny", []string{"Pending", "Approved"}, "Denied"},
		{"expire", []string{"Pending", "Approved"}, "Expired"},
	})

var machineStates = []string{
	"Pending", "Provisioning", "Registering", "Bootstrapping", "Running", "Updating",
	"Unavailable", "Failed", "Draining", "Deleting", "Deleted",
}

// Machine is one node, from creation to deletion.
//
// Choices the spec leaves open, and why:
//   - Bootstrapping → Unavailable is allowed: an agent that dies during its
//     first plan must show up as silent, not sit in Bootstrapping forever.
//   - A returning agent goes back to Running ("agent-returned") only if its
//     plan is applied; otherwise to Updating ("agent-returned-mid-plan").
//     The table cannot remember where the machine was before, and Updating
//     has exactly the exits an unfinished Bootstrapping needs (plan-applied,
//     plan-failed, agent-silent), so a controller never has to call a
//     machine Running before its plan is applied.
//   - A new plan takes a Failed machine to Updating ("plan-fixed"), not to
//     Bootstrapping: Bootstrapping means "first plan since check-in", while a
//     failed machine may have run for months; both reach Running the same way.
//   - "plan-changed" on an Updating machine is a self-transition: a newer
//     plan arriving mid-update keeps it Updating, Fire accepts it and there
//     is nothing to record.
//   - Once Draining, a machine only moves on towards Deleted: no event leaves
//     Draining, Deleting or Deleted for any other state, so a machine being
//     deleted can never run again (not even by plan-failed or plan-fixed).
var Machine = define("Machine", "Pending", machineStates, []transition{
	{"provision", []string{"Pending"}, "Provisioning"},
	{"register", []string{"Pending", "Provisioning"}, "Registering"},
	{"agent-checked-in", []string{"Registering"}, "Bootstrapping"},
	{"plan-applied", []string{"Bootstrapping", "Updating"}, "Running"},
	{"plan-changed", []string{"Running", "Updating"}, "Updating"},
	{"plan-fixed", []string{"Failed"}, "Updating"},
	{"agent-silent", []string{"Bootstrapping", "Running", "Updating"}, "Unavailable"},
	{"agent-returned", []string{"Unavailable"}, "Running"},
	{"agent-returned-mid-plan", []string{"Unavailable"}, "Updating"},
	{"plan-failed", except(machineStates, "Failed", "Draining", "Deleting", "Deleted"), "Failed"},
	{"drain", except(machineStates, "Draining", "Deleting", "Deleted"), "Draining"},
	{"drained", []string{"Draining"}, "Deleting"},
	{"finalized", []string{"Deleting"}, "Deleted"},
})

// Cluster is a group of machines; its phase follows theirs. Deleting is
// final: the object is removed from there, it never comes back.
var Cluster = define("Cluster", "Pending",
	[]string{"Pending", "WaitCheckIn", "Active", "Degraded", "Deleting"},
	[]transition{
		{"await-check-in", []string{"Pending"}, "WaitCheckIn"},
		{"agent-checked-in", []string{"WaitCheckIn"}, "Active"},
		{"machine-unhealthy", []string{"Active"}, "Degraded"},
		{"machines-healthy", []string{"Degraded"}, "Active"},
		{"delete", []string{"Pending", "WaitCheckIn", "Active", "Degraded"}, "Deleting"},
	})

// Token is a ClusterRegistrationToken: a join secret that stops working
// when it expires or is revoked, for good.
var Token = define("ClusterRegistrationToken", "Active",
	[]string{"Active", "Expired", "Revoked"},
	[]transition{
		{"expire", []string{"Active"}, "Expired"},
		{"revoke", []string{"Active"}, "Revoked"},
	})

// All lists every definition, for tests and documentation.
var All = []*Definition{Registration, Machine, Cluster, Token}
