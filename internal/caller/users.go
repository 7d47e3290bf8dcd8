package caller

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
)

// The built-in roles of standalone mode. A person holds one through the
// group in the client certificate `muster-server kubeconfig --user NAME
// --group G` mints. Behind a kube-apiserver, its RBAC decides instead.
const (
	// ViewersGroup reads everything but secrets: never join tokens (their
	// secret hashes) nor node passwords (their hashes).
	ViewersGroup = "muster:viewers"
	// OperatorsGroup runs the fleet day to day: join tokens, approving and
	// denying registrations, plans, plan sets, pools, machine labels and
	// deleting machines. It never changes what the servers own: server
	// endpoints, controller leases, node passwords, or any status but a
	// registration's decision.
	OperatorsGroup = "muster:operators"
	// MetricsReadersGroup may GET /metrics and nothing else, so Prometheus
	// needs no administrator's certificate.
	MetricsReadersGroup = "muster:metrics-readers"
)

// UserGroups are the groups a minted user certificate may carry: the
// administrators' and the built-in roles'. Any other group would grant
// nothing in standalone mode, so a typo is refused rather than minted.
var UserGroups = []string{user.SystemPrivilegedGroup, OperatorsGroup, ViewersGroup, MetricsReadersGroup}

// CheckUser refuses a user name or group set that a minted certificate must
// not carry: a name that claims to be an agent, a bootstrap caller or a
// server (the authorizer would treat it as one), or a group of Muster's or
// Kubernetes' own that is not a built-in role.
func CheckUser(name string, groups []string) error {
	if strings.TrimSpace(name) == "" || len(name) > 64 {
		return fmt.Errorf("user name %q: give a name of 1 to 64 characters that says who holds the certificate", name)
	}
	for _, reserved := range []string{bootstrapPrefix, machinePrefix, machineUIDPrefix, machineClusterPrefix, serverPrefix, "system:"} {
		if strings.HasPrefix(name, reserved) {
			return fmt.Errorf("user name %q: names starting with %q belong to agents, servers or Kubernetes itself; choose a person's or a tool's name", name, reserved)
		}
	}
	if len(groups) == 0 {
		return fmt.Errorf("no group: give --group with one of %s", strings.Join(UserGroups, ", "))
	}
	for _, g := range groups {
		// Muster's and Kubernetes' own groups are the built-in roles or
		// belong to agents and servers; any other group (a team's) is
		// what AccessBindings grant to, so it is the binding that decides.
		if !slices.Contains(UserGroups, g) && (strings.HasPrefix(g, "muster:") || strings.HasPrefix(g, "system:")) {
			return fmt.Errorf("group %q grants nothing here: give one of %s, or a team's group that an AccessBinding names", g, strings.Join(UserGroups, ", "))
		}
	}
	return nil
}

// Reserved says whether u claims an identity only Muster itself issues (an
// agent's, a bootstrap caller's, a server's). Identities another
// authenticator vouches for (a kube-apiserver in aggregated mode) must not:
// Muster would grant them what it grants its own agents.
func Reserved(u user.Info) bool {
	for _, p := range []string{bootstrapPrefix, machinePrefix, machineUIDPrefix, serverPrefix} {
		if strings.HasPrefix(u.GetName(), p) {
			return true
		}
	}
	for _, g := range u.GetGroups() {
		switch {
		case g == BootstrappersGroup, g == InactiveBootstrappersGroup, g == MachinesGroup, g == ServersGroup,
			strings.HasPrefix(g, machineUIDPrefix), strings.HasPrefix(g, machineClusterPrefix):
			return true
		}
	}
	return false
}

// CheckExternal refuses an identity an identity provider's ID token maps
// to when it would pass for an agent, a bootstrap caller or a server
// (Reserved), or for Kubernetes itself (a "system:" name or group).
// Administrators (system:masters) and the built-in roles may come from a
// provider, as its groups decide; any other group grants nothing unless
// something binds it.
func CheckExternal(u user.Info) error {
	if Reserved(u) {
		return fmt.Errorf("user %q with groups %v claims an identity only muster issues (an agent's, a bootstrap caller's or a server's)", u.GetName(), u.GetGroups())
	}
	if strings.HasPrefix(u.GetName(), "system:") {
		return fmt.Errorf("user name %q starts with \"system:\", which belongs to Kubernetes itself", u.GetName())
	}
	for _, g := range u.GetGroups() {
		if strings.HasPrefix(g, "system:") && g != user.SystemPrivilegedGroup {
			return fmt.Errorf("group %q belongs to Kubernetes itself", g)
		}
	}
	return nil
}
