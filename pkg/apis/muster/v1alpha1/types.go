package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Transition records one legal state change of an object's lifecycle state
// machine. The server appends it; clients cannot write or rewrite it.
type Transition struct {
	// From is the phase the object left.
	From string `json:"from"`
	// To is the phase the object entered.
	To string `json:"to"`
	// Event is the state-machine event that took the object from From to To,
	// for example "approve" or "plan-applied".
	Event string `json:"event"`
	// Reason is the machine-readable reason the writer gave for the change
	// (status.reason at the time of the transition), if any.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Time is when the server accepted the transition.
	Time metav1.Time `json:"time"`
	// Seq numbers the object's transitions from 1 over its whole life, so
	// that a record keeps its identity after older ones are dropped from
	// this bounded list; the full transition history (muster-server
	// history) is keyed by the object's uid and Seq.
	// +optional
	Seq int64 `json:"seq,omitempty"`
	// By is who caused the transition: the user or agent whose request
	// made it, "system:apiserver" for the server's own controllers, or
	// "muster-server" for an object the server created in that state.
	// +optional
	By string `json:"by,omitempty"`
}

// MaxTransitions bounds status.transitions: the oldest records are dropped first.
const MaxTransitions = 20

// ---------------------------------------------------------------- Cluster

// ClusterPhase is the lifecycle state of a Cluster.
type ClusterPhase string

// Cluster phases; the legal moves between them are defined in internal/fsm.
const (
	ClusterPhasePending     ClusterPhase = "Pending"
	ClusterPhaseWaitCheckIn ClusterPhase = "WaitCheckIn"
	ClusterPhaseActive      ClusterPhase = "Active"
	ClusterPhaseDegraded    ClusterPhase = "Degraded"
	ClusterPhaseDeleting    ClusterPhase = "Deleting"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Cluster is a group of machines, like a Fleet Cluster. Operators create
// clusters up front; an agent joining with a token not bound to any cluster
// gets one created for it, named from a hash of its clientID.
type Cluster struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the operator wants of the cluster.
	// +optional
	Spec ClusterSpec `json:"spec,omitempty"`
	// Status is what the server observed; written only through the status subresource.
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterSpec is the desired state of a Cluster.
type ClusterSpec struct {
	// DisplayName is a human-friendly name shown by tools; metadata.name stays the identity.
	// +optional
	DisplayName string `json:"displayName,omitempty"`
	// ClientID is set when an agent's join created this cluster: the clientID of
	// that agent. Empty for clusters an operator created. Immutable once set.
	// +optional
	ClientID string `json:"clientID,omitempty"`
	// KubernetesAPI is how the server reaches the cluster's own
	// kube-apiserver, for users who reach it through the server at
	// /k8s/clusters/<name>/ (ClusterProxySubresource): on which port of
	// its control-plane machines (role controlplane) it listens, the CA
	// that signs its serving certificate, and the credential the server
	// impersonates users with. Unset: the cluster's API is not served.
	// Today an administrator writes it; the planner will.
	// +optional
	KubernetesAPI *ClusterKubernetesAPI `json:"kubernetesAPI,omitempty"`
	// Kubernetes, when set, has the server's planner bring a Kubernetes
	// control plane up on the cluster's machines, by their roles
	// (spec.roles, from a MachinePool's template.roles or an agent's
	// --role): etcd members on machines with role etcd, the first one
	// bootstrapping and the others added one at a time; kube-apiserver on
	// machines with role controlplane once etcd is healthy; workers last,
	// given their kubelet's bootstrap credentials. The planner writes each
	// such machine's MachinePlan, and spec.kubernetesAPI so that users
	// reach the new API through the server. Unset: the planner leaves the
	// cluster's machines alone.
	// +optional
	Kubernetes *ClusterKubernetes `json:"kubernetes,omitempty"`
}

// KubernetesDistribution names how a cluster's Kubernetes is installed.
const (
	// KubernetesDistributionUpstream runs upstream etcd and kube-apiserver
	// binaries, each as a process the machine's plan starts.
	KubernetesDistributionUpstream = "kubernetes"
)

// Machine roles the planner reads (spec.roles).
const (
	// EtcdRole is the role of the machines that run the cluster's etcd members.
	EtcdRole = "etcd"
	// WorkerRole is the role of the machines that get kubelet credentials.
	WorkerRole = "worker"
)

// ClusterKubernetes is the Kubernetes a cluster runs.
type ClusterKubernetes struct {
	// Distribution is how Kubernetes is installed. Only "kubernetes"
	// (upstream etcd and kube-apiserver) is supported.
	Distribution string `json:"distribution"`
	// Version is the Kubernetes version, e.g. "v1.37.2": each
	// control-plane machine's plan checks that its kube-apiserver is this
	// version before it starts it, and fails saying which it found.
	Version string `json:"version"`
	// APIServerPort is the port kube-apiserver listens on, on every
	// address of each control-plane machine. Default 6443.
	// +optional
	APIServerPort int32 `json:"apiServerPort,omitempty"`
	// ServiceCIDR is the range of the cluster's Service addresses.
	// Default 10.43.0.0/16.
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// Binaries pins the binaries of Version the machines' plans download
	// (etcd, kube-apiserver, kubectl, ...): each from its https URL, refused
	// unless its SHA-256 is the one given, before anything runs it. Unset:
	// the server's own (muster-server --kubernetes-assets-dir, served at
	// /assets/kubernetes/<version>/<os>-<arch>/<name>, pinned by the sums the
	// server computes), else the machines' --kubernetes-bin-dir or PATH.
	// Give the list of the new version together with a version change.
	// +optional
	// +listType=atomic
	Binaries []KubernetesBinary `json:"binaries,omitempty"`
	// UpgradeStrategy is how a change of Version rolls over the machines
	// (Rancher's upgradeStrategy): the control plane (etcd and
	// controlplane machines) first, then the workers, each machine gated
	// on its plan, its kube-apiserver's /readyz and version; a machine that
	// fails or is not healthy in time reverts every upgraded machine to
	// the version that ran (status.kubernetes.version).
	// +optional
	UpgradeStrategy *KubernetesUpgradeStrategy `json:"upgradeStrategy,omitempty"`
}

// KubernetesBinaryNames are the binaries a Kubernetes plan may download.
var KubernetesBinaryNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// KubernetesBinary is one binary a machine's plan downloads, pinned by
// its SHA-256.
type KubernetesBinary struct {
	// Name is the binary's name on the machine: etcd, kube-apiserver,
	// kube-controller-manager, kube-scheduler or kubectl.
	Name string `json:"name"`
	// URL is where the machine downloads it from: https only. A URL under
	// the server's own address is fetched trusting the server's CA; any
	// other, the machine's system roots.
	URL string `json:"url"`
	// Sha256 is the binary's SHA-256, 64 lower-case hex digits: a download
	// with another sum fails the plan and is never run.
	Sha256 string `json:"sha256"`
}

// KubernetesUpgradeStrategy bounds how many machines a version change
// takes down at once, and how long one may take to be healthy again.
type KubernetesUpgradeStrategy struct {
	// ControlPlaneConcurrency is how many etcd or controlplane machines
	// are upgraded at once. Default 1; never more than etcd tolerates
	// losing (one fewer than a majority of its members).
	// +optional
	ControlPlaneConcurrency int32 `json:"controlPlaneConcurrency,omitempty"`
	// WorkerConcurrency is how many workers are upgraded at once, once
	// the whole control plane runs the new version. Default 1.
	// +optional
	WorkerConcurrency int32 `json:"workerConcurrency,omitempty"`
	// HealthTimeoutSeconds bounds how long an upgraded machine may take
	// to apply its plan with every probe healthy (etcd /health,
	// kube-apiserver /readyz); past it, the upgrade is reverted.
	// Default 300.
	// +optional
	HealthTimeoutSeconds int32 `json:"healthTimeoutSeconds,omitempty"`
	// DrainWorkers is whether and how long each worker is drained
	// (cordoned, its pods evicted) before its plan is rewritten at the new
	// version, and uncordoned once it is healthy at it (Rancher's
	// workerDrainOptions). Unset: drained, with a 120 s timeout.
	// +optional
	DrainWorkers *WorkerDrainOptions `json:"drainWorkers,omitempty"`
}

// WorkerDrainOptions is how the workers are drained during a version
// change: `kubectl drain NODE --ignore-daemonsets --delete-emptydir-data
// --force --timeout=TIMEOUTSECONDS` run by the first control-plane
// machine against its own kube-apiserver. A drain that fails holds the
// upgrade (the worker is not rewritten) and the KubernetesUpgrade
// condition says which worker and why.
type WorkerDrainOptions struct {
	// Enabled: false upgrades workers without draining them. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// TimeoutSeconds bounds one drain (kubectl drain --timeout). Default
	// 120, between 10 and 3600.
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// DefaultWorkerDrainTimeoutSeconds is drainWorkers.timeoutSeconds when unset.
const DefaultWorkerDrainTimeoutSeconds = 120

// DefaultUpgradeHealthTimeoutSeconds is upgradeStrategy.healthTimeoutSeconds
// when unset.
const DefaultUpgradeHealthTimeoutSeconds = 300

// DefaultServiceCIDR is a cluster's Service range when
// spec.kubernetes.serviceCIDR is not set, as k3s's.
const DefaultServiceCIDR = "10.43.0.0/16"

// The planner's phases for a cluster's Kubernetes
// (status.kubernetes.phase); the legal moves are defined in internal/fsm.
const (
	KubernetesPhasePending              = "Pending"
	KubernetesPhaseInvalid              = "Invalid"
	KubernetesPhaseBootstrappingEtcd    = "BootstrappingEtcd"
	KubernetesPhaseJoiningEtcd          = "JoiningEtcd"
	KubernetesPhaseRemovingEtcd         = "RemovingEtcd"
	KubernetesPhaseStartingControlPlane = "StartingControlPlane"
	KubernetesPhaseJoiningWorkers       = "JoiningWorkers"
	KubernetesPhaseReady                = "Ready"
	KubernetesPhaseUpgrading            = "Upgrading"
)

// ClusterKubernetesStatus is where the planner is in bringing the
// cluster's Kubernetes up.
type ClusterKubernetesStatus struct {
	// Phase is the planner's state for the cluster (its legal moves are
	// defined in internal/fsm): Pending (nothing planned yet), Invalid
	// (the machines' roles cannot make a cluster: no etcd or no
	// control-plane machine; nothing is started), BootstrappingEtcd (the
	// first etcd member starts), JoiningEtcd (the other members are added
	// one at a time), RemovingEtcd (a deleted machine's member leaves etcd
	// before its host goes, one at a time), StartingControlPlane
	// (kube-apiserver, then kube-controller-manager and kube-scheduler,
	// start on one control-plane machine at a time), JoiningWorkers (workers get their kubelet
	// credentials), Upgrading (a version change rolls over the machines,
	// or is being reverted) or Ready (every machine's plan is applied and
	// healthy).
	// +optional
	Phase string `json:"phase,omitempty"`
	// WaitingFor is the machine the planner waits on, if any.
	// +optional
	WaitingFor string `json:"waitingFor,omitempty"`
	// Message says what the planner waits for, or what is wrong.
	// +optional
	Message string `json:"message,omitempty"`
	// EtcdMembers are the machines the planner has made etcd members, in
	// the order they joined: a member is added to etcd (member add) before
	// it starts, so the list is what the member list holds.
	// +optional
	// +listType=atomic
	EtcdMembers []string `json:"etcdMembers,omitempty"`
	// Version is the version every machine last ran healthy: the one an
	// upgrade starts from and a failed upgrade reverts to. Empty until
	// the cluster is first Ready.
	// +optional
	Version string `json:"version,omitempty"`
	// Binaries are the binaries spec.kubernetes.binaries pinned for
	// Version, kept for a revert to it after spec moved on. Empty when the
	// server's or the machines' own binaries ran.
	// +optional
	// +listType=atomic
	Binaries []KubernetesBinary `json:"binaries,omitempty"`
	// FailedVersion is a version that was reverted (the KubernetesUpgrade
	// condition says why): it is not tried again while
	// spec.kubernetes.version names it.
	// +optional
	FailedVersion string `json:"failedVersion,omitempty"`
}

// DefaultKubernetesAPIPort is the port a cluster's kube-apiserver listens
// on when spec.kubernetesAPI.port is not set, as kubeadm's and RKE2's do.
const DefaultKubernetesAPIPort = 6443

// ClusterProxySubresource names the permission to reach a cluster's
// Kubernetes API through the server (/k8s/clusters/<name>/...): "get" on
// clusters/proxy for a request that reads (GET, HEAD), "create", "update",
// "patch" or "delete" for one that writes (POST, PUT, PATCH, DELETE), and
// "create" for every upgraded request (exec, attach, port-forward), as
// kube-apiserver asks for pods/proxy. It is not served under /apis.
const ClusterProxySubresource = "proxy"

// ControlPlaneRole is the machine role whose machines run a cluster's
// kube-apiserver: the server reaches the cluster's API through the tunnel
// of a Running machine that has it.
const ControlPlaneRole = "controlplane"

// KubeAPIServerProbe is the name of the probe, in a control-plane
// machine's MachinePlan, on its kube-apiserver's readiness (the planner's
// plans carry it). When none of a cluster's control-plane machines is
// Running, the server reaches the cluster's API through one whose agent
// holds a tunnel and whose probe last passed: a machine applying a
// changed plan (Updating) whose kube-apiserver still answers.
const KubeAPIServerProbe = "kube-apiserver"

// ClusterKubernetesAPI is how the server reaches a cluster's kube-apiserver.
type ClusterKubernetesAPI struct {
	// Port is the kube-apiserver's port on each control-plane machine's
	// loopback (127.0.0.1), which the machine's agent dials for the
	// server; the agent reaches it only if it is the agent's own
	// --kube-apiserver-port. Default 6443.
	// +optional
	Port int32 `json:"port,omitempty"`
	// CACertificate is the PEM CA bundle that signs the kube-apiserver's
	// serving certificate: the server verifies it against this bundle
	// only, never the system's roots.
	CACertificate string `json:"caCertificate"`
	// ServerName is the name the serving certificate must be valid for.
	// Empty: the address 127.0.0.1.
	// +optional
	ServerName string `json:"serverName,omitempty"`
	// Credential is what the server authenticates to the kube-apiserver
	// with; it must be allowed to impersonate users and groups there.
	Credential ClusterAPICredential `json:"credential"`
}

// ClusterAPICredential is a client certificate and key, or a bearer
// token. The key and the token are secrets: only callers allowed "get" on
// clusters/secrets (administrators) read them whole; everyone else reads
// Redacted. They are never logged.
type ClusterAPICredential struct {
	// ClientCertificate is a PEM client certificate, with ClientKey.
	// +optional
	ClientCertificate string `json:"clientCertificate,omitempty"`
	// ClientKey is ClientCertificate's PEM private key.
	// +optional
	ClientKey string `json:"clientKey,omitempty"`
	// Token is a bearer token, instead of a client certificate.
	// +optional
	Token string `json:"token,omitempty"`
}

// ClusterStatus is the observed state of a Cluster.
type ClusterStatus struct {
	// Phase is the cluster's lifecycle state: Pending, WaitCheckIn (no agent has
	// checked in yet), Active, Degraded (a machine is Unavailable or Failed) or Deleting.
	// +optional
	Phase ClusterPhase `json:"phase,omitempty"`
	// Reason is a short CamelCase reason for the current phase, recorded with the transition into it.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable explanation of the current phase.
	// +optional
	Message string `json:"message,omitempty"`
	// Machines is the number of machines in this cluster. Counts are
	// refreshed at most about once a second, however fast machines change.
	// +optional
	Machines int32 `json:"machines,omitempty"`
	// ReadyMachines is the number of this cluster's machines that are Running.
	// +optional
	ReadyMachines int32 `json:"readyMachines,omitempty"`
	// Transitions is the bounded history of phase changes, oldest first.
	// +optional
	// +listType=atomic
	Transitions []Transition `json:"transitions,omitempty"`
	// Conditions are the latest observations of the cluster's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Kubernetes is where the planner is with spec.kubernetes; its
	// conditions (KubernetesEtcd, KubernetesControlPlane,
	// KubernetesWorkers, KubernetesReady, KubernetesRoles) are among
	// Conditions.
	// +optional
	Kubernetes *ClusterKubernetesStatus `json:"kubernetes,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterList is a list of Clusters.
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the clusters.
	Items []Cluster `json:"items"`
}

// ------------------------------------------------ ClusterRegistrationToken

// TokenPhase is the lifecycle state of a ClusterRegistrationToken.
type TokenPhase string

// Token phases; the legal moves between them are defined in internal/fsm.
const (
	TokenPhaseActive  TokenPhase = "Active"
	TokenPhaseExpired TokenPhase = "Expired"
	TokenPhaseRevoked TokenPhase = "Revoked"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterRegistrationToken is a join token. Its name is the token ID; the
// secret half is shown once when the token is created and only its hash is
// stored. The full join token is `K10<sha256 of the server CA>::<name>.<secret>`.
type ClusterRegistrationToken struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. The name is the token ID (6–32 lowercase letters and digits).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the operator wants of the token.
	// +optional
	Spec ClusterRegistrationTokenSpec `json:"spec,omitempty"`
	// Status is what the server observed; written only through the status subresource.
	// +optional
	Status ClusterRegistrationTokenStatus `json:"status,omitempty"`
}

// ClusterRegistrationTokenSpec is the desired state of a join token.
type ClusterRegistrationTokenSpec struct {
	// TTL is how long after creation the token may be used; empty means it never expires.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// Cluster binds the token to one existing Cluster: machines joining with it
	// land there. Empty means each joining agent gets a cluster of its own.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// ManualApproval makes every registration with this token wait in Pending
	// until an operator approves it.
	// +optional
	ManualApproval bool `json:"manualApproval,omitempty"`
	// SecretHash is the hash of the token's secret half, in the form
	// "<algorithm>$<hex>". The secret itself is never stored. Immutable.
	SecretHash string `json:"secretHash"`
	// Description says what the token is for.
	// +optional
	Description string `json:"description,omitempty"`
	// MaxUses is how many registrations the token may be granted for; a
	// grant past it is refused. 0 means no limit (the per-token join rate
	// still applies).
	// +optional
	MaxUses int32 `json:"maxUses,omitempty"`
}

// ClusterRegistrationTokenStatus is the observed state of a join token.
type ClusterRegistrationTokenStatus struct {
	// Phase is Active, Expired (its TTL passed) or Revoked (an operator revoked it).
	// +optional
	Phase TokenPhase `json:"phase,omitempty"`
	// Reason is a short CamelCase reason for the current phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// ExpiresAt is creation time plus TTL; empty for a token that never expires.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// Registrations counts the registrations accepted with this token.
	// +optional
	Registrations int32 `json:"registrations,omitempty"`
	// LastUsed is when the token last authenticated a registration.
	// +optional
	LastUsed *metav1.Time `json:"lastUsed,omitempty"`
	// Transitions is the bounded history of phase changes, oldest first.
	// +optional
	// +listType=atomic
	Transitions []Transition `json:"transitions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterRegistrationTokenList is a list of ClusterRegistrationTokens.
type ClusterRegistrationTokenList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the tokens.
	Items []ClusterRegistrationToken `json:"items"`
}

// ----------------------------------------------------- ClusterRegistration

// RegistrationPhase is the lifecycle state of a ClusterRegistration.
type RegistrationPhase string

// Registration phases; the legal moves between them are defined in internal/fsm.
const (
	RegistrationPhasePending  RegistrationPhase = "Pending"
	RegistrationPhaseApproved RegistrationPhase = "Approved"
	RegistrationPhaseGranted  RegistrationPhase = "Granted"
	RegistrationPhaseDenied   RegistrationPhase = "Denied"
	RegistrationPhaseExpired  RegistrationPhase = "Expired"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterRegistration is an agent's request to join, made with a join token
// (Fleet's registration request). Its name is derived from clientID and
// clientRandom, so a retried request finds the one it already made.
type ClusterRegistration struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the agent asked for. Immutable.
	// +optional
	Spec ClusterRegistrationSpec `json:"spec,omitempty"`
	// Status is the server's answer; written only through the status subresource.
	// +optional
	Status ClusterRegistrationStatus `json:"status,omitempty"`
}

// ClusterRegistrationSpec is an agent's registration request.
type ClusterRegistrationSpec struct {
	// ClientID is the agent's stable random identity, kept in its data dir.
	ClientID string `json:"clientID"`
	// ClientRandom is fresh for every registration attempt; with ClientID it names the request.
	ClientRandom string `json:"clientRandom"`
	// NodeName is the machine's node name (its hostname, lowercased, plus the
	// node-id suffix when the agent runs with --with-node-id).
	NodeName string `json:"nodeName"`
	// Labels are copied onto the Machine.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Roles are the machine's roles, for example "worker".
	// +optional
	// +listType=set
	Roles []string `json:"roles,omitempty"`
	// CSR is a PEM-encoded PKCS#10 certificate signing request for the agent's
	// client key. Only its public key is used: the server decides the identity.
	// +optional
	CSR []byte `json:"csr,omitempty"`
	// TokenID is the name of the ClusterRegistrationToken the request was made
	// with; set by the server from the authenticated credential.
	// +optional
	TokenID string `json:"tokenID,omitempty"`
	// Cluster is set by the server: the cluster of the join token the
	// request was made with, if it is bound to one, so that the request
	// belongs to that cluster's team before it is granted (an
	// AccessBinding's scope). Whatever a client sends is replaced.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// AgentVersion is the version of the registering agent; a Machine created
	// for the request starts with it, so the agent need not check in again.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// Addresses are the machine's addresses as the agent sees them; a Machine
	// created for the request starts with them.
	// +optional
	// +listType=atomic
	Addresses []MachineAddress `json:"addresses,omitempty"`
	// NodePassword is the node's password, write-only: the server checks it
	// against the NodePassword of NodeName (storing its hash on the first
	// registration of that name) and drops it before the request is stored.
	// It is never stored, returned or logged.
	// +optional
	NodePassword string `json:"nodePassword,omitempty"`
	// NodePasswordHash is set by the server: a salted hash of the node
	// password the request presented. A request that waits for approval
	// claims nothing; its grant checks this hash against the node's
	// NodePassword as it is at grant time. Whatever a client sends is replaced.
	// +optional
	NodePasswordHash string `json:"nodePasswordHash,omitempty"`
	// VerifiedNodePassword is set by the server: the UID of the NodePassword
	// that the request's password matched when it was made, if the node
	// already had one. A grant accepts that NodePassword only if it is still
	// the same object, so a password collected and claimed by another machine
	// since then is refused.
	// +optional
	VerifiedNodePassword string `json:"verifiedNodePassword,omitempty"`
	// MachineUID is set by the server when a machine renews its certificate:
	// the UID of the Machine whose certificate made the request. The grant
	// renews only that Machine, never a new one of the same name.
	// +optional
	MachineUID string `json:"machineUID,omitempty"`
}

// ClusterRegistrationStatus is the server's answer to a registration request.
type ClusterRegistrationStatus struct {
	// Phase is Pending, Approved, Granted, Denied or Expired.
	// +optional
	Phase RegistrationPhase `json:"phase,omitempty"`
	// Reason is a short CamelCase reason for the current phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable explanation, for a denied request what the operator can do.
	// +optional
	Message string `json:"message,omitempty"`
	// Cluster is the Cluster the machine joined.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Machine is the Machine created for (or found for) this agent.
	// +optional
	Machine string `json:"machine,omitempty"`
	// Certificate is the PEM-encoded client certificate granted to the agent:
	// its long-lived "request" credential, bound to Machine.
	// +optional
	Certificate []byte `json:"certificate,omitempty"`
	// Transitions is the bounded history of phase changes, oldest first.
	// +optional
	// +listType=atomic
	Transitions []Transition `json:"transitions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterRegistrationList is a list of ClusterRegistrations.
type ClusterRegistrationList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the registrations.
	Items []ClusterRegistration `json:"items"`
}

// ----------------------------------------------------------------- Machine

// MachinePhase is the lifecycle state of a Machine.
type MachinePhase string

// Machine phases; the legal moves between them are defined in internal/fsm.
const (
	MachinePhasePending       MachinePhase = "Pending"
	MachinePhaseProvisioning  MachinePhase = "Provisioning"
	MachinePhaseRegistering   MachinePhase = "Registering"
	MachinePhaseBootstrapping MachinePhase = "Bootstrapping"
	MachinePhaseRunning       MachinePhase = "Running"
	MachinePhaseUpdating      MachinePhase = "Updating"
	MachinePhaseUnavailable   MachinePhase = "Unavailable"
	MachinePhaseFailed        MachinePhase = "Failed"
	MachinePhaseDraining      MachinePhase = "Draining"
	MachinePhaseDeleting      MachinePhase = "Deleting"
	MachinePhaseDeleted       MachinePhase = "Deleted"
)

// MachineLifecycleFinalizer is on every Machine from its creation: it holds
// a deleted Machine until the server has taken it through Draining and
// Deleting and removed its MachinePlan and NodePassword.
const MachineLifecycleFinalizer = "muster.io/machine-lifecycle"

// ClusterLifecycleFinalizer is on every Cluster from its creation: it holds
// a deleted Cluster in Deleting until the server has deleted its Machines
// (each drained first) and revoked the join tokens bound to it.
const ClusterLifecycleFinalizer = "muster.io/cluster-lifecycle"

// MachineHostFinalizer is on every Machine a MachinePool's driver made: it
// holds a deleted Machine in Deleting until the driver has removed its host,
// so that a host never outlives the Machine that names it.
const MachineHostFinalizer = "muster.io/machine-host"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Machine is one node and its lifecycle. A custom machine is created when its
// agent registers; a driver-provisioned machine is created by the server first.
type Machine struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. The name is the node name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the machine is meant to be.
	// +optional
	Spec MachineSpec `json:"spec,omitempty"`
	// Status is what the server and the agent observed; written only through the status subresource.
	// +optional
	Status MachineStatus `json:"status,omitempty"`
}

// MachineSpec is the desired state of a Machine.
type MachineSpec struct {
	// Cluster is the name of the Cluster the machine belongs to. Immutable.
	Cluster string `json:"cluster"`
	// NodeName is the agent's node name; it owns the NodePassword of the same name. Immutable.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Roles are the machine's roles, for example "worker" or "etcd".
	// +optional
	// +listType=set
	Roles []string `json:"roles,omitempty"`
	// ClientID is the clientID of the agent that registered the machine; empty
	// for a machine that has not registered yet.
	// +optional
	ClientID string `json:"clientID,omitempty"`
	// Driver names the provisioning driver of a server-provisioned machine;
	// empty for a custom machine that an agent registered on its own.
	// +optional
	Driver string `json:"driver,omitempty"`
	// JoinToken reserves a Machine created before its agent joined (by an
	// operator or a machine pool) for the registrations of one join token.
	// Empty: any join token bound to the Machine's cluster may bind an agent
	// to it; a token bound to no cluster or another cluster never may. Immutable.
	// +optional
	JoinToken string `json:"joinToken,omitempty"`
}

// MachineAddressType says what kind of address a MachineAddress is.
type MachineAddressType string

// Address types, as for Kubernetes nodes.
const (
	MachineHostName   MachineAddressType = "Hostname"
	MachineInternalIP MachineAddressType = "InternalIP"
	MachineExternalIP MachineAddressType = "ExternalIP"
)

// MachineAddress is one address of a machine.
type MachineAddress struct {
	// Type is Hostname, InternalIP or ExternalIP.
	Type MachineAddressType `json:"type"`
	// Address is the address itself.
	Address string `json:"address"`
}

// MachineStatus is the observed state of a Machine.
type MachineStatus struct {
	// Phase is the machine's lifecycle state, set by the server from what its
	// agent reports; status.reason says why it is there and
	// status.transitions lists the last moves.
	//
	// Pending: created by an operator, waiting for an agent or a driver.
	//
	// Provisioning: a driver is creating the host (Pending -> Provisioning,
	// provision).
	//
	// Registering: a registration was granted; the agent has not checked in
	// yet (Pending or Provisioning -> Registering, register).
	//
	// Bootstrapping: the agent checked in and runs its first plan
	// (Registering -> Bootstrapping, agent-checked-in).
	//
	// Running: the plan is applied, its probes are healthy and the agent is
	// heard (Bootstrapping or Updating -> Running, plan-applied;
	// Unavailable -> Running, agent-returned, once its agent is heard again).
	//
	// Updating: a new plan is being applied (Running -> Updating,
	// plan-changed; Failed -> Updating, plan-fixed; Unavailable -> Updating,
	// agent-returned-mid-plan).
	//
	// Unavailable: no server heard the agent for the silence threshold
	// (Bootstrapping, Running or Updating -> Unavailable, agent-silent).
	//
	// Failed: the plan failed maxFailures times in a row; the PlanFailed
	// condition says how (any phase before Draining -> Failed, plan-failed).
	// Or its driver could not create the host after its retries; reason
	// DriverCreateFailed and the message say why (Pending or Provisioning ->
	// Failed, provision-failed).
	//
	// Draining: the Machine was deleted (any phase -> Draining, drain).
	//
	// Deleting: its plan and node password are being removed
	// (Draining -> Deleting, drained).
	//
	// Deleted: finalized; the object goes away (Deleting -> Deleted, finalized).
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`
	// Reason is a short CamelCase reason for the current phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable explanation of the current phase.
	// +optional
	Message string `json:"message,omitempty"`
	// Addresses are the machine's addresses as its agent reported them.
	// +optional
	// +listType=atomic
	Addresses []MachineAddress `json:"addresses,omitempty"`
	// AgentVersion is the version of the muster-agent running on the machine.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// Platform is the operating system and architecture the muster-agent
	// was built for, as it reports them: linux/amd64, linux/arm64, or
	// linux/arm/v7 (GOARM=7). An agentUpgrade installs the binary of the
	// platform's <os>/<arch> (muster-agent-<os>-<arch>).
	// +optional
	Platform string `json:"platform,omitempty"`
	// LastSeen is when the server last knew the agent to be connected. It is
	// persisted coarsely (not once per heartbeat), so it may lag by the documented interval;
	// the LAST-SEEN column of `kubectl get machines` shows the servers' current knowledge.
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// PlanState is the state of the machine's MachinePlan (pending,
	// in-progress, succeeded or failed) as of the machine's last transition,
	// or of the plan's last failure: it is copied when the machine changes
	// phase or the plan fails, not on every step of the plan, which would
	// cost a write per machine per step. The MachinePlan's status is current.
	// +optional
	PlanState PlanState `json:"planState,omitempty"`
	// Transitions is the bounded history of phase changes, oldest first.
	// +optional
	// +listType=atomic
	Transitions []Transition `json:"transitions,omitempty"`
	// Conditions are the latest observations of the machine's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachineList is a list of Machines.
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the machines.
	Items []Machine `json:"items"`
}

// ------------------------------------------------------------- MachinePlan

// PlanState is where an agent is with a plan (Rancher's plan protocol).
type PlanState string

// Plan states. The server writes pending for a new plan; the agent writes
// in-progress BEFORE it executes anything, so a crash mid-plan is recovered by
// running the plan again, then succeeded or failed.
const (
	PlanStatePending    PlanState = "pending"
	PlanStateInProgress PlanState = "in-progress"
	PlanStateSucceeded  PlanState = "succeeded"
	PlanStateFailed     PlanState = "failed"
)

// Redacted is what a caller who may not read a plan's secrets reads in
// place of each value that may hold one: a file's content, an
// instruction's arguments and the value of each of its environment
// variables (the name stays: "DB_PASSWORD=<redacted>"), an exec probe's
// arguments, an HTTP probe URL's user info and query, an instruction's
// saved output, a probe's message, and the
// kubectl.kubernetes.io/last-applied-configuration annotation; in a
// MachinePlan and in every template of a MachinePlanSet. It carries
// neither the value's length nor a hash of it. A write that carries it
// back in one of those fields is refused, so that a plan read redacted
// and written back cannot replace the secret with the marker.
const Redacted = "<redacted>"

// SecretsSubresource names the permission to read a plan's secrets:
// "get" on machineplans/secrets (a MachinePlan) or machineplansets/secrets
// (a MachinePlanSet). It is never served; the server asks its authorizer
// for it on every read of plans and plan sets, and redacts (Redacted)
// for a caller it does not allow. Administrators and operators hold it,
// and a machine's agent for its own MachinePlan; viewers do not. Behind a
// kube-apiserver, its RBAC grants it like any subresource.
const SecretsSubresource = "secrets"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachinePlan is what a machine's agent must do, and what it reported. Its
// name is the Machine's name; its identity is the checksum of its spec.
// The values that may hold a secret are read back whole only by callers
// allowed machineplans/secrets (SecretsSubresource); others read Redacted.
type MachinePlan struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. The name is the name of the Machine it is for.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the plan: files to write, instructions to run, probes to watch.
	// +optional
	Spec MachinePlanSpec `json:"spec,omitempty"`
	// Status is what the agent reported; written only through the status subresource.
	// +optional
	Status MachinePlanStatus `json:"status,omitempty"`
}

// MachinePlanSpec is the work a machine's agent must do.
type MachinePlanSpec struct {
	// Files are written (atomically, with their mode) or deleted before any instruction runs.
	// +optional
	// +listType=map
	// +listMapKey=path
	Files []PlanFile `json:"files,omitempty"`
	// Instructions run in order; the first failing one stops the plan.
	// +optional
	// +listType=atomic
	Instructions []PlanInstruction `json:"instructions,omitempty"`
	// Probes are checked after the instructions; the plan is healthy when every probe is.
	// +optional
	// +listType=map
	// +listMapKey=name
	Probes []PlanProbe `json:"probes,omitempty"`
	// MaxFailures is how many failed attempts the agent makes before the plan,
	// and its machine, are Failed. Defaults to 3.
	// +optional
	MaxFailures int32 `json:"maxFailures,omitempty"`
	// AgentUpgrade, when set, makes the agent replace itself with the muster-agent
	// of the given version, downloaded from its server
	// (/assets/agent/<version>/muster-agent-<os>-<arch>) and checked against
	// the given SHA-256, before the plan's files and instructions. The plan
	// succeeds once the new agent has checked in; a download, checksum or
	// self-check failure fails it and leaves the running agent in place.
	// +optional
	AgentUpgrade *AgentUpgrade `json:"agentUpgrade,omitempty"`
}

// AgentUpgrade names the muster-agent a plan installs.
type AgentUpgrade struct {
	// Version is the agent version to run, as the server's --agent-binaries-dir
	// names it (muster-agent-<version>-<os>-<arch>): letters, digits, '.', '_', '+', '-',
	// at most 64 characters. An agent already at this version does nothing.
	Version string `json:"version"`
	// Sha256 is the hex SHA-256 (64 digits) of the binary for the machine's
	// platform; the agent refuses a download with any other sum. For a fleet
	// of several architectures give Platforms instead (or as well: sha256 is
	// then the sum of the platforms Platforms does not list).
	// +optional
	Sha256 string `json:"sha256,omitempty"`
	// Platforms gives the SHA-256 of each architecture's binary: an agent
	// installs the binary of its own platform (status.platform's <os>/<arch>)
	// and checks it against that entry's sum. An agent whose platform is in
	// neither Platforms nor Sha256 fails the plan and replaces nothing.
	// +optional
	// +listType=map
	// +listMapKey=platform
	Platforms []AgentPlatformBinary `json:"platforms,omitempty"`
	// TimeoutSeconds bounds how long the new agent has to check in before it
	// puts the previous one back; 0 means the default of 120.
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// AgentPlatformBinary is the SHA-256 of the agent binary of one platform.
type AgentPlatformBinary struct {
	// Platform is <os>/<arch> as Go names them: linux/amd64, linux/arm64,
	// linux/arm (the ARMv7 build). It is the binary
	// /assets/agent/<version>/muster-agent-<os>-<arch>.
	Platform string `json:"platform"`
	// Sha256 is that binary's hex SHA-256 (64 digits).
	Sha256 string `json:"sha256"`
}

// SHA256For is the SHA-256 the plan gives for the binary of goos/goarch,
// "" if it gives none.
func (u *AgentUpgrade) SHA256For(goos, goarch string) string {
	for _, p := range u.Platforms {
		if p.Platform == goos+"/"+goarch {
			return p.Sha256
		}
	}
	return u.Sha256
}

// ChangesMachine reports whether applying the plan writes files or runs
// commands, as opposed to only checking probes. Only such a plan is
// recorded in-progress before it runs: it is the only kind a crash can
// leave half done.
func (s *MachinePlanSpec) ChangesMachine() bool {
	return len(s.Files) > 0 || len(s.Instructions) > 0 || s.AgentUpgrade != nil
}

// PlanFile is one file the agent writes or deletes.
type PlanFile struct {
	// Path is the absolute, clean path of the file on the machine.
	Path string `json:"path"`
	// Content is the file's content (text). At most 64 KiB per file. It
	// may hold a secret: callers not allowed machineplans/secrets read
	// "<redacted>" (Redacted).
	// +optional
	Content string `json:"content,omitempty"`
	// Mode is the file's permission bits, for example 0644 (420 in decimal). Defaults to 0600.
	// +optional
	Mode int32 `json:"mode,omitempty"`
	// Delete removes the file instead of writing it.
	// +optional
	Delete bool `json:"delete,omitempty"`
}

// PlanInstruction is one command the agent runs.
type PlanInstruction struct {
	// Name identifies the instruction in reported output.
	Name string `json:"name"`
	// Command is the program to run (absolute path or a name found on PATH).
	Command string `json:"command"`
	// Args are passed to Command. They may hold a secret: callers not
	// allowed machineplans/secrets read each as "<redacted>" (Redacted).
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// Env holds extra environment variables, each "NAME=value". The values
	// may hold a secret: callers not allowed machineplans/secrets read
	// "NAME=<redacted>" (Redacted).
	// +optional
	// +listType=atomic
	Env []string `json:"env,omitempty"`
	// TimeoutSeconds bounds the command's run time; 0 means the default of 300.
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// SaveOutput reports the command's combined output (truncated) in the
	// plan status, where only callers allowed machineplans/secrets read it.
	// +optional
	SaveOutput bool `json:"saveOutput,omitempty"`
}

// PlanProbe is a health check the agent runs after the plan is applied.
// Exactly one of HTTPGet and Exec is set.
type PlanProbe struct {
	// Name identifies the probe in reported statuses.
	Name string `json:"name"`
	// HTTPGet probes a URL; any 2xx or 3xx answer is healthy.
	// +optional
	HTTPGet *HTTPGetProbe `json:"httpGet,omitempty"`
	// Exec runs a command; exit code 0 is healthy.
	// +optional
	Exec *ExecProbe `json:"exec,omitempty"`
	// PeriodSeconds is how often the probe runs. Defaults to 10.
	// +optional
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// TimeoutSeconds bounds one probe run. Defaults to 5.
	// +optional
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// SuccessThreshold is how many successes in a row make the probe healthy. Defaults to 1.
	// +optional
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// FailureThreshold is how many failures in a row make the probe unhealthy. Defaults to 3.
	// +optional
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// HTTPGetProbe checks a URL.
type HTTPGetProbe struct {
	// URL is the http or https URL to get. Its user info and query may
	// hold a secret: callers not allowed machineplans/secrets read them as
	// "<redacted>" (Redacted).
	URL string `json:"url"`
	// InsecureSkipVerify skips TLS verification of an https URL.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// ExecProbe runs a command.
type ExecProbe struct {
	// Command is the program to run.
	Command string `json:"command"`
	// Args are passed to Command. They may hold a secret: callers not
	// allowed machineplans/secrets read each as "<redacted>" (Redacted).
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
}

// MachinePlanStatus is what the agent reported about its plan.
type MachinePlanStatus struct {
	// Checksum is the server-computed checksum of the current spec: the
	// plan's identity. It is the SHA-256 of the whole spec, secrets
	// included, and every reader of the plan reads it: it confirms a
	// guessed secret to whoever knows the rest of the spec, so a secret in
	// a plan must be one that cannot be guessed (a random password or key),
	// never a dictionary word or a short PIN.
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// State is pending (new plan), in-progress, succeeded or failed.
	// +optional
	State PlanState `json:"state,omitempty"`
	// AppliedChecksum is the checksum of the plan the agent last ran to the end.
	// +optional
	AppliedChecksum string `json:"appliedChecksum,omitempty"`
	// FailureCount is how many times in a row the current plan failed.
	// +optional
	FailureCount int32 `json:"failureCount,omitempty"`
	// Output holds the saved output of each instruction of the last run,
	// truncated. A failing instruction's output is kept even without
	// saveOutput.
	// +optional
	// +listType=map
	// +listMapKey=name
	Output []InstructionOutput `json:"output,omitempty"`
	// Probes holds the latest status of each probe.
	// +optional
	// +listType=map
	// +listMapKey=name
	Probes []ProbeStatus `json:"probes,omitempty"`
	// LastAppliedTime is when the agent last finished running the plan.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`
}

// InstructionOutput is what one instruction printed and how it ended.
type InstructionOutput struct {
	// Name is the instruction's name.
	Name string `json:"name"`
	// ExitCode is the command's exit code; -1 when it could not start or timed out.
	ExitCode int32 `json:"exitCode"`
	// Output is the combined stdout and stderr, truncated to 4 KiB. It
	// may echo a secret: callers not allowed machineplans/secrets read
	// "<redacted>" (Redacted).
	// +optional
	Output string `json:"output,omitempty"`
}

// ProbeStatus is the latest result of one probe.
type ProbeStatus struct {
	// Name is the probe's name.
	Name string `json:"name"`
	// Healthy is the probe's current verdict.
	Healthy bool `json:"healthy"`
	// Message explains the last failure, if any; an exec probe's carries
	// its output. Callers not allowed machineplans/secrets read
	// "<redacted>" (Redacted).
	// +optional
	Message string `json:"message,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachinePlanList is a list of MachinePlans.
type MachinePlanList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the plans.
	Items []MachinePlan `json:"items"`
}

// ------------------------------------------------------------ NodePassword

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodePassword holds the hash of one node name's password: the first agent to
// register a node name sets it, and later registrations with that name must
// present the same password. The plaintext is never stored. Owned by its
// Machine; one whose Machine never appeared is collected after a grace period.
type NodePassword struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. The name is the node name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the password hash.
	// +optional
	Spec NodePasswordSpec `json:"spec,omitempty"`
	// Status is what the server observed.
	// +optional
	Status NodePasswordStatus `json:"status,omitempty"`
}

// NodePasswordSpec holds a node password's hash.
type NodePasswordSpec struct {
	// Hash is the password's hash in the form "<algorithm>$<parameters>$<salt>$<hash>". Immutable.
	Hash string `json:"hash"`
}

// NodePasswordStatus is what the server observed about a node password.
type NodePasswordStatus struct {
	// Machine is the Machine that owns this password, once it exists.
	// +optional
	Machine string `json:"machine,omitempty"`
	// LastVerified is when a registration last presented the right password.
	// +optional
	LastVerified *metav1.Time `json:"lastVerified,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodePasswordList is a list of NodePasswords.
type NodePasswordList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the node passwords.
	Items []NodePassword `json:"items"`
}

// ---------------------------------------------------------- ServerEndpoint

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ServerEndpoint is one live muster-server's address. Each server publishes
// its own and renews it; agents' load balancers learn the servers from them.
type ServerEndpoint struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. The name identifies the server.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is where the server can be reached.
	// +optional
	Spec ServerEndpointSpec `json:"spec,omitempty"`
	// Status is the server's liveness.
	// +optional
	Status ServerEndpointStatus `json:"status,omitempty"`
}

// ServerEndpointSpec is where a server can be reached.
type ServerEndpointSpec struct {
	// Address is the server's advertised host:port.
	Address string `json:"address"`
}

// ServerEndpointStatus is a server's liveness.
type ServerEndpointStatus struct {
	// RenewTime is when the server last renewed this endpoint; one not renewed
	// within LeaseDurationSeconds is treated as dead and removed.
	// +optional
	RenewTime *metav1.Time `json:"renewTime,omitempty"`
	// LeaseDurationSeconds is how long the endpoint stays valid after RenewTime.
	// +optional
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ServerEndpointList is a list of ServerEndpoints.
type ServerEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the endpoints.
	Items []ServerEndpoint `json:"items"`
}

// --------------------------------------------------------- ControllerLease

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ControllerLease elects the one server that runs a set of controllers.
// kine has no etcd leases or elections, so the servers take turns holding
// this object: the holder renews it by compare-and-swap on its
// resourceVersion, and another server takes it over once it has seen no
// renewal for LeaseDurationSeconds. Only administrators and servers may
// read or write it.
type ControllerLease struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. The name says which controllers the lease
	// elects, e.g. "muster-controllers".
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the current holder and its term.
	// +optional
	Spec ControllerLeaseSpec `json:"spec,omitempty"`
	// Status is reserved; the lease keeps everything in its spec, like
	// coordination.k8s.io Leases, so one compare-and-swap renews it.
	// +optional
	Status ControllerLeaseStatus `json:"status,omitempty"`
}

// ControllerLeaseSpec is the holder of a ControllerLease and its term.
type ControllerLeaseSpec struct {
	// HolderIdentity names the server holding the lease (its ServerEndpoint name).
	// +optional
	HolderIdentity string `json:"holderIdentity,omitempty"`
	// LeaseDurationSeconds is how long other servers wait, after they last
	// saw the lease change, before they take it over.
	// +optional
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
	// AcquireTime is when the current holder took the lease.
	// +optional
	AcquireTime *metav1.MicroTime `json:"acquireTime,omitempty"`
	// RenewTime is when the current holder last renewed the lease.
	// +optional
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`
	// LeaseTransitions counts how often the lease changed holders.
	// +optional
	LeaseTransitions int32 `json:"leaseTransitions,omitempty"`
}

// ControllerLeaseStatus is reserved for future use.
type ControllerLeaseStatus struct{}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ControllerLeaseList is a list of ControllerLeases.
type ControllerLeaseList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the leases.
	Items []ControllerLease `json:"items"`
}
