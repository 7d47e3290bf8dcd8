package fsm

// The tables below are the lifecycle rules of SPEC §5. State names equal the
// phase constants of pkg/apis/muster/v1alpha1 (checked by the API tests).

// Registration: an agent's registration request.
var Registration = define("ClusterRegistration", "Pending",
	[]string{"Pending", "Approved", "Granted", "Denied", "Expired"},
	[]event{
		{"approve", []string{"Pending"}, "Approved"},
		{"grant", []string{"Approved"}, "Granted"},
		{"deny", []string{"Pending", "Approved"}, "Denied"},
		{"expire", []string{"Pending", "Approved"}, "Expired"},
	})

var machineStates = []string{
	"Pending", "Provisioning", "Registering", "Bootstrapping", "Running", "Updating",
	"Unavailable", "Failed", "Draining", "Deleting", "Deleted",
}

// Machine: one node, from registration to deletion. Once Draining, a
// machine only moves on towards Deleted: no event leads back to Running.
var Machine = define("Machine", "Pending", machineStates, []event{
	{"provision", []string{"Pending"}, "Provisioning"},
	{"register", []string{"Pending", "Provisioning"}, "Registering"},
	{"agent-checked-in", []string{"Registering"}, "Bootstrapping"},
	{"plan-applied", []string{"Bootstrapping", "Updating"}, "Running"},
	{"plan-changed", []string{"Running"}, "Updating"},
	// A failed machine takes a new plan like a running one does: Updating,
	// then Running once it is applied.
	{"plan-fixed", []string{"Failed"}, "Updating"},
	{"agent-silent", []string{"Bootstrapping", "Running", "Updating"}, "Unavailable"},
	{"agent-returned", []string{"Unavailable"}, "Running"},
	{"plan-failed", except(machineStates, "Failed", "Draining", "Deleting", "Deleted"), "Failed"},
	{"drain", except(machineStates, "Draining", "Deleting", "Deleted"), "Draining"},
	{"drained", []string{"Draining"}, "Deleting"},
	{"finalized", []string{"Deleting"}, "Deleted"},
})

// Cluster: a group of machines; its phase follows theirs.
var Cluster = define("Cluster", "Pending",
	[]string{"Pending", "WaitCheckIn", "Active", "Degraded", "Deleting"},
	[]event{
		{"await-check-in", []string{"Pending"}, "WaitCheckIn"},
		{"agent-checked-in", []string{"WaitCheckIn"}, "Active"},
		{"machine-unhealthy", []string{"Active"}, "Degraded"},
		{"machines-healthy", []string{"Degraded"}, "Active"},
		{"delete", []string{"Pending", "WaitCheckIn", "Active", "Degraded"}, "Deleting"},
	})

// Token: a join token.
var Token = define("ClusterRegistrationToken", "Active",
	[]string{"Active", "Expired", "Revoked"},
	[]event{
		{"expire", []string{"Active"}, "Expired"},
		{"revoke", []string{"Active"}, "Revoked"},
	})

// All lists every definition, for tests and documentation.
var All = []*Definition{Registration, Machine, Cluster, Token}
