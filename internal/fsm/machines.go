package fsm

// The tables below are the lifecycle rules of SPEC §5, and the only copy of
// them: state names equal the phase constants of pkg/apis/muster/v1alpha1,
// event names are what a transition history records. Renaming an event
// rewrites how old histories read, so add events rather than rename them.

// Event names, one constant each, so that callers firing an event and tests
// reading a history cannot misspell one: a misspelt string would only fail
// at run time, as an illegal transition. The values are what histories
// record, so they never change (see above).
const (
	// Registration, and Token for EventExpire.
	EventApprove = "approve"
	EventGrant   = "grant"
	EventDeny    = "deny"
	EventExpire  = "expire"

	// Machine, and Cluster for EventAgentCheckedIn.
	EventProvision            = "provision"
	EventProvisionFailed      = "provision-failed"
	EventRegister             = "register"
	EventAgentCheckedIn       = "agent-checked-in"
	EventPlanApplied          = "plan-applied"
	EventPlanChanged          = "plan-changed"
	EventPlanFixed            = "plan-fixed"
	EventAgentSilent          = "agent-silent"
	EventAgentReturned        = "agent-returned"
	EventAgentReturnedMidPlan = "agent-returned-mid-plan"
	EventPlanFailed           = "plan-failed"
	EventDrain                = "drain"
	EventDrained              = "drained"
	EventFinalized            = "finalized"

	// Cluster.
	EventAwaitCheckIn     = "await-check-in"
	EventMachineUnhealthy = "machine-unhealthy"
	EventMachinesHealthy  = "machines-healthy"
	EventMachinesGone     = "machines-gone"
	EventDelete           = "delete"

	// Token.
	EventRevoke = "revoke"

	// KubernetesPlan: each names the stage the planner moves the cluster
	// to (see KubernetesPlan).
	EventRefuseRoles       = "refuse-roles"
	EventBootstrapEtcd     = "bootstrap-etcd"
	EventJoinEtcd          = "join-etcd"
	EventStartControlPlane = "start-control-plane"
	EventJoinWorkers       = "join-workers"
	EventKubernetesReady   = "kubernetes-ready"
	EventRemoveEtcd        = "remove-etcd"
	EventUpgrade           = "upgrade"
)

// Registration is an agent's request to join: a person or policy approves
// or denies it, the server grants it (issues the credentials), or it times
// out. Granted, Denied and Expired are final.
var Registration = define("ClusterRegistration", "Pending",
	[]string{"Pending", "Approved", "Granted", "Denied", "Expired"},
	[]transition{
		{EventApprove, []string{"Pending"}, "Approved"},
		{EventGrant, []string{"Approved"}, "Granted"},
		{EventDeny, []string{"Pending", "Approved"}, "Denied"},
		{EventExpire, []string{"Pending", "Approved"}, "Expired"},
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
	{EventProvision, []string{"Pending"}, "Provisioning"},
	{EventRegister, []string{"Pending", "Provisioning"}, "Registering"},
	{EventAgentCheckedIn, []string{"Registering"}, "Bootstrapping"},
	{EventPlanApplied, []string{"Bootstrapping", "Updating"}, "Running"},
	{EventPlanChanged, []string{"Running", "Updating"}, "Updating"},
	{EventPlanFixed, []string{"Failed"}, "Updating"},
	{EventAgentSilent, []string{"Bootstrapping", "Running", "Updating"}, "Unavailable"},
	{EventAgentReturned, []string{"Unavailable"}, "Running"},
	{EventAgentReturnedMidPlan, []string{"Unavailable"}, "Updating"},
	// A host that never came up did not fail a plan: its driver could not
	// make it (a pool machine), and its history says so.
	{EventProvisionFailed, []string{"Pending", "Provisioning"}, "Failed"},
	{EventPlanFailed, except(machineStates, "Pending", "Provisioning", "Failed", "Draining", "Deleting", "Deleted"), "Failed"},
	{EventDrain, except(machineStates, "Draining", "Deleting", "Deleted"), "Draining"},
	{EventDrained, []string{"Draining"}, "Deleting"},
	{EventFinalized, []string{"Deleting"}, "Deleted"},
})

// Cluster is a group of machines; its phase follows theirs. Deleting is
// final: the object is removed from there, it never comes back.
//
// "machines-gone" takes an Active or Degraded cluster none of whose machines
// has checked in (all deleted, or still registering) back to WaitCheckIn:
// a phase must not claim machines the cluster does not have, whoever wrote it.
var Cluster = define("Cluster", "Pending",
	[]string{"Pending", "WaitCheckIn", "Active", "Degraded", "Deleting"},
	[]transition{
		{EventAwaitCheckIn, []string{"Pending"}, "WaitCheckIn"},
		{EventAgentCheckedIn, []string{"WaitCheckIn"}, "Active"},
		{EventMachineUnhealthy, []string{"Active"}, "Degraded"},
		{EventMachinesHealthy, []string{"Degraded"}, "Active"},
		{EventMachinesGone, []string{"Active", "Degraded"}, "WaitCheckIn"},
		{EventDelete, []string{"Pending", "WaitCheckIn", "Active", "Degraded"}, "Deleting"},
	})

// Token is a ClusterRegistrationToken: a join secret that stops working
// when it expires or is revoked, for good.
var Token = define("ClusterRegistrationToken", "Active",
	[]string{"Active", "Expired", "Revoked"},
	[]transition{
		{EventExpire, []string{"Active"}, "Expired"},
		{EventRevoke, []string{"Active"}, "Revoked"},
	})

var kubernetesStates = []string{
	"Pending", "Invalid", "BootstrappingEtcd", "JoiningEtcd", "RemovingEtcd", "StartingControlPlane", "JoiningWorkers", "Ready",
	"Upgrading",
}

// KubernetesPlan is where the planner (internal/planner) is in bringing a
// cluster's Kubernetes up: a Cluster's status.kubernetes.phase. The
// stages follow the machines' roles in order (the first etcd member, the
// others one at a time, the control plane, the workers), and the planner
// decides each pass from what it observes, so any stage may follow any
// other: a Ready cluster given a new etcd machine goes back to
// JoiningEtcd, one whose machines lose their roles to Invalid. What the
// table fixes is the name of each move, which the cluster's history
// records, and that Pending is never re-entered: once planned, a
// cluster's Kubernetes has had a plan.
var KubernetesPlan = define("KubernetesPlan", "Pending", kubernetesStates, []transition{
	{EventRefuseRoles, except(kubernetesStates, "Invalid"), "Invalid"},
	{EventBootstrapEtcd, except(kubernetesStates, "BootstrappingEtcd"), "BootstrappingEtcd"},
	{EventJoinEtcd, except(kubernetesStates, "JoiningEtcd"), "JoiningEtcd"},
	{EventStartControlPlane, except(kubernetesStates, "StartingControlPlane"), "StartingControlPlane"},
	{EventJoinWorkers, except(kubernetesStates, "JoiningWorkers"), "JoiningWorkers"},
	{EventKubernetesReady, except(kubernetesStates, "Ready"), "Ready"},
	{EventRemoveEtcd, except(kubernetesStates, "RemovingEtcd"), "RemovingEtcd"},
	{EventUpgrade, except(kubernetesStates, "Upgrading"), "Upgrading"},
})

// All lists every definition, for tests and documentation.
var All = []*Definition{Registration, Machine, Cluster, Token, KubernetesPlan}
