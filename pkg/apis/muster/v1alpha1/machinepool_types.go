package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PoolLabel marks every Machine a MachinePool made with the pool's name, so
// that `kubectl get machines -l muster.io/pool=NAME` lists them.
const PoolLabel = "muster.io/pool"

// RoleLabelPrefix prefixes the label a Machine carries for each of its
// spec.roles, value "true" (role.muster.io/worker: "true"), as a
// Kubernetes node carries node-role.kubernetes.io/<role>: selectors (a
// plan set's, a partition's, kubectl -l) select machines by role with it.
// The server keeps these labels equal to spec.roles on every write; one
// written by hand that spec.roles does not name is dropped.
const RoleLabelPrefix = "role.muster.io/"

// RoleLabel is the label a Machine with role carries.
func RoleLabel(role string) string { return RoleLabelPrefix + role }

// PoolRevisionLabel records the template revision a pool's Machine was made from.
const PoolRevisionLabel = "muster.io/pool-revision"

// DriverStateAnnotation holds, on a pool's Machine, what its driver returned
// when it created the machine's infrastructure (instance id, addresses,
// process id), for the driver's later `remove` and `status` calls. Never a
// secret: drivers are told so, and the server refuses nothing it cannot read.
// Only the server's pool controller writes it: an API client's create or
// update that sets or changes it is refused.
const DriverStateAnnotation = "muster.io/driver-state"

// DriverConfigAnnotation holds, on a pool's Machine, the driver config it
// was made with: its host is removed with that config, not with a later
// template's, so a template change never points a removal at another host.
// Only the server's pool controller writes it.
const DriverConfigAnnotation = "muster.io/driver-config"

// PoolCreatedAtAnnotation records when the pool controller made a Machine,
// to the nanosecond, for the delete policy. Only the controller writes it.
const PoolCreatedAtAnnotation = "muster.io/pool-created-at"

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachinePool is a set of machines the server provisions itself through a
// driver, like a Rancher machine pool or a Cluster API MachineDeployment:
// the server creates each Machine, mints a one-time join token bound to it,
// has the driver start a host that runs the agent with that token, and
// keeps `replicas` of them.
type MachinePool struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the operator wants of the pool.
	// +optional
	Spec MachinePoolSpec `json:"spec,omitempty"`
	// Status is what the server observed; written only through the status subresource.
	// +optional
	Status MachinePoolStatus `json:"status,omitempty"`
}

// MachinePoolSpec is the desired state of a MachinePool.
type MachinePoolSpec struct {
	// Cluster is the Cluster the pool's machines join. Immutable.
	Cluster string `json:"cluster"`
	// Replicas is how many machines the pool keeps, 0 to 1000.
	Replicas int32 `json:"replicas"`
	// Template is what each machine is made from. Changing it rolls the
	// pool's machines onto the new revision within Strategy.
	Template MachineTemplate `json:"template"`
	// Strategy bounds a rolling replacement after a template change.
	// +optional
	Strategy MachinePoolStrategy `json:"strategy,omitempty"`
	// DeletePolicy chooses which Running machines a scale-down removes
	// (machines not Running always go first): Newest (the default),
	// Oldest or Random.
	// +optional
	DeletePolicy string `json:"deletePolicy,omitempty"`
	// Health says when an unhealthy machine is replaced.
	// +optional
	Health MachinePoolHealth `json:"health,omitempty"`
}

// MachinePoolStrategy bounds a rolling replacement, as a Cluster API
// MachineDeployment's does. Their sum must be at least 1.
type MachinePoolStrategy struct {
	// MaxSurge is how many machines above replicas a rollout may make
	// (default 1).
	// +optional
	MaxSurge *int32 `json:"maxSurge,omitempty"`
	// MaxUnavailable is how many machines below replicas may be not
	// Running during a rollout (default 0: a new machine is Running
	// before an old one goes).
	// +optional
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
}

// MachinePoolHealth is the pool's remediation, like a Cluster API
// MachineHealthCheck.
type MachinePoolHealth struct {
	// UnhealthyTimeout is how long a machine may be Unavailable or Failed
	// before it is replaced (default 5m; 0s never replaces).
	// +optional
	UnhealthyTimeout *metav1.Duration `json:"unhealthyTimeout,omitempty"`
	// StartupTimeout is how long a new machine may take from its creation
	// to its agent's first check-in (Pending, Provisioning, Registering)
	// before it is replaced: a host that never came up, or an agent that
	// gave up joining (default 10m; 0s never replaces).
	// +optional
	StartupTimeout *metav1.Duration `json:"startupTimeout,omitempty"`
	// MaxUnhealthy stops remediation while more machines than this are
	// unhealthy at once: then the fault is likely not theirs (a network or
	// the server), and replacing them all would make it worse. Unset: no
	// limit.
	// +optional
	MaxUnhealthy *int32 `json:"maxUnhealthy,omitempty"`
}

// MachineTemplate is what a pool's machines are made from.
type MachineTemplate struct {
	// Driver names the driver that creates and removes the machines' hosts:
	// a built-in one ("process") or an executable muster-driver-NAME in the
	// server's --drivers-dir.
	Driver string `json:"driver"`
	// DriverConfig is handed to the driver as is (at most 64 entries, 4 KiB
	// each); it must not hold secrets, which would be stored in plaintext.
	// +optional
	DriverConfig map[string]string `json:"driverConfig,omitempty"`
	// Labels are put on every Machine of the pool.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Roles are put on every Machine of the pool as its spec.roles (for
	// example "etcd", "controlplane", "worker"), as an agent's --role puts
	// them on a custom machine: at most 16, each a DNS label, no repeats.
	// +optional
	// +listType=set
	Roles []string `json:"roles,omitempty"`
}

// MachinePoolStatus is the observed state of a MachinePool.
type MachinePoolStatus struct {
	// Replicas is how many Machines the pool has, whatever their phase.
	// +optional
	Replicas int32 `json:"replicas"`
	// ReadyReplicas is how many of them are Running.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// UpdatedReplicas is how many of them were made from the current
	// template (status.revision); during a rolling replacement the rest
	// are the old revision's.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// Revision is the content hash of the current template; a pool's
	// Machines carry the revision they were made from in the
	// muster.io/pool-revision label.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Message says what the pool controller last could not do, and why.
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachinePoolList is a list of MachinePools.
type MachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the pools.
	Items []MachinePool `json:"items"`
}
