// Package caller names the callers muster-server recognises besides
// administrators: bootstrap callers (an agent holding a join token) and
// machines (an agent holding the client certificate it was granted). The
// authenticator makes these identities, the authorizer and the registry
// read them; keeping the spelling here keeps the three in agreement.
package caller

import (
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
)

const (
	// BootstrappersGroup holds every caller authenticated by an active join token.
	BootstrappersGroup = "muster:bootstrappers"
	// InactiveBootstrappersGroup holds callers whose join token is valid but
	// expired or revoked: authenticated so that the refusal can say why.
	InactiveBootstrappersGroup = "muster:bootstrappers:inactive"
	// MachinesGroup holds every agent that authenticates with its machine certificate.
	MachinesGroup = "muster:machines"
	// ServersGroup holds muster-servers calling each other with the peer
	// certificate each issues itself from the shared CA.
	ServersGroup = "muster:servers"

	bootstrapPrefix  = "muster:bootstrap:"
	machinePrefix    = "muster:machine:"
	machineUIDPrefix = "muster:machine-uid:"
	// machineClusterPrefix names, in a machine certificate, the cluster
	// its Machine was granted in: after a restore that lost the Machine,
	// the CA's word for where it rejoins.
	machineClusterPrefix = "muster:machine-cluster:"
	serverPrefix         = "muster:server:"
	// ReasonExtra carries, for an inactive token, why it is inactive.
	ReasonExtra = "muster.io/token-inactive-reason"
	// IssuedExtra carries, for a machine certificate, when the CA issued
	// it (RFC 3339), read from the certificate by the authenticator.
	IssuedExtra = "muster.io/certificate-issued"
)

// BootstrapUser is the user name of a caller holding join token id.
func BootstrapUser(tokenID string) string { return bootstrapPrefix + tokenID }

// TokenID returns the join-token id of a bootstrap caller.
func TokenID(u user.Info) (string, bool) {
	if u == nil || !strings.HasPrefix(u.GetName(), bootstrapPrefix) {
		return "", false
	}
	return strings.TrimPrefix(u.GetName(), bootstrapPrefix), true
}

// IsBootstrapper reports whether u holds an active join token.
func IsBootstrapper(u user.Info) bool { return inGroup(u, BootstrappersGroup) }

// MachineSubject is the certificate subject granted to a machine: the CN
// names the Machine, and the groups bind the certificate to that Machine's
// UID, so a certificate outlives neither the Machine nor its deletion and
// re-creation under the same name, and name the Machine's cluster.
func MachineSubject(name, uid, cluster string) (cn string, groups []string) {
	return machinePrefix + name, []string{MachinesGroup, machineUIDPrefix + uid, machineClusterPrefix + cluster}
}

// MachineCertificate returns what a machine caller's certificate says
// besides its Machine: the cluster it was granted in ("" for a
// certificate issued before certificates named it) and when it was
// issued (zero when the caller did not authenticate with a certificate).
func MachineCertificate(u user.Info) (cluster string, issued time.Time) {
	if u == nil {
		return "", time.Time{}
	}
	for _, g := range u.GetGroups() {
		if strings.HasPrefix(g, machineClusterPrefix) {
			cluster = strings.TrimPrefix(g, machineClusterPrefix)
		}
	}
	if v := u.GetExtra()[IssuedExtra]; len(v) == 1 {
		issued, _ = time.Parse(time.RFC3339, v[0])
	}
	return cluster, issued
}

// Machine returns the Machine name and UID of a machine caller.
func Machine(u user.Info) (name, uid string, ok bool) {
	if u == nil || !strings.HasPrefix(u.GetName(), machinePrefix) || !inGroup(u, MachinesGroup) {
		return "", "", false
	}
	for _, g := range u.GetGroups() {
		if strings.HasPrefix(g, machineUIDPrefix) {
			uid = strings.TrimPrefix(g, machineUIDPrefix)
		}
	}
	return strings.TrimPrefix(u.GetName(), machinePrefix), uid, uid != ""
}

// ServerSubject is the certificate subject of server name's peer certificate.
func ServerSubject(name string) (cn string, groups []string) {
	return serverPrefix + name, []string{ServersGroup}
}

// IsServer reports whether u is a muster-server calling a peer.
func IsServer(u user.Info) bool {
	return u != nil && strings.HasPrefix(u.GetName(), serverPrefix) && inGroup(u, ServersGroup)
}

func inGroup(u user.Info, group string) bool {
	if u == nil {
		return false
	}
	for _, g := range u.GetGroups() {
		if g == group {
			return true
		}
	}
	return false
}

// ClaimsMachine reports whether a certificate's common name claims to be a
// machine's. It reads an unverified name: use it only to decide how long
// to wait before judging, never to allow anything.
func ClaimsMachine(commonName string) bool { return strings.HasPrefix(commonName, machinePrefix) }
