package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NotificationEvent is a transition a NotificationSubscription may ask for.
type NotificationEvent string

// The transitions a subscription may choose. Each is sent as a CloudEvent
// whose type is "io.muster." followed by the name in lower case (e.g.
// io.muster.machinefailed).
const (
	// NotifyMachineFailed: a Machine entered phase Failed.
	NotifyMachineFailed NotificationEvent = "MachineFailed"
	// NotifyMachineUnavailable: a Machine entered phase Unavailable (its
	// agent went silent).
	NotifyMachineUnavailable NotificationEvent = "MachineUnavailable"
	// NotifyRolloutPaused: a MachinePlanSet's Paused condition turned True
	// (spec.strategy.paused, or a machine that failed on the revision).
	NotifyRolloutPaused NotificationEvent = "RolloutPaused"
	// NotifyRolloutReverted: a MachinePlanSet reverted a failed revision
	// (status.failedRevision set, spec.strategy.autoRevert).
	NotifyRolloutReverted NotificationEvent = "RolloutReverted"
	// NotifyRegistrationPending: a ClusterRegistration waits for an
	// operator's approval (a manual-approval join token).
	NotifyRegistrationPending NotificationEvent = "RegistrationPending"
	// NotifyPoolShort: a MachinePool that had all its replicas Running has
	// fewer (a change of spec.replicas alone is not one).
	NotifyPoolShort NotificationEvent = "PoolShort"
)

// NotificationEvents are every NotificationEvent, in the order the API documents them.
var NotificationEvents = []NotificationEvent{NotifyMachineFailed, NotifyMachineUnavailable, NotifyRolloutPaused, NotifyRolloutReverted, NotifyRegistrationPending, NotifyPoolShort}

// Bounds of a subscription's queue (spec.maxQueued).
const (
	DefaultNotificationQueue = 1000
	MaxNotificationQueue     = 10000
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NotificationSubscription sends the chosen transitions to an HTTPS URL as
// CloudEvents (structured JSON, spec 1.0), each signed with HMAC-SHA256 of
// the body under spec.signingKey (header X-Muster-Signature:
// "sha256=<hex>"). Events are queued per subscription (at most
// spec.maxQueued; past it the oldest is dropped, counted and recorded as
// an Event), retried with exponential backoff while the receiver fails,
// and delivered in order. Delivery runs beside the API, never in it: a
// receiver that is down slows no request. Callers not allowed
// notificationsubscriptions/secrets (viewers) read spec.signingKey as
// "<redacted>" (Redacted).
type NotificationSubscription struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is where to send which transitions.
	Spec NotificationSubscriptionSpec `json:"spec"`
	// Status is what the server observed of the deliveries.
	// +optional
	Status NotificationSubscriptionStatus `json:"status,omitempty"`
}

// NotificationSubscriptionSpec is where and what to send.
type NotificationSubscriptionSpec struct {
	// URL is the receiver's https:// URL.
	URL string `json:"url"`
	// CABundle is the PEM CA that signed the receiver's certificate; empty
	// for the host's trusted roots.
	// +optional
	CABundle string `json:"caBundle,omitempty"`
	// Events are the transitions to send.
	// +listType=set
	Events []NotificationEvent `json:"events"`
	// SigningKey is the HMAC-SHA256 key every request is signed with, at
	// least 32 characters. It is a secret: never logged, read back whole
	// only by callers allowed notificationsubscriptions/secrets.
	SigningKey string `json:"signingKey"`
	// MaxQueued bounds the events waiting for the receiver (default 1000,
	// at most 10000); past it the oldest is dropped.
	// +optional
	MaxQueued int32 `json:"maxQueued,omitempty"`
}

// NotificationSubscriptionStatus is what the server observed.
type NotificationSubscriptionStatus struct {
	// Delivered counts the events the receiver accepted (2xx) in this
	// leader's term.
	// +optional
	Delivered int64 `json:"delivered,omitempty"`
	// Dropped counts the events dropped from a full queue in this term.
	// +optional
	Dropped int64 `json:"dropped,omitempty"`
	// Queued is how many events wait for the receiver.
	// +optional
	Queued int32 `json:"queued,omitempty"`
	// LastError is why the last delivery failed; empty after a success.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// LastDelivered is when the receiver last accepted an event.
	// +optional
	LastDelivered *metav1.Time `json:"lastDelivered,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NotificationSubscriptionList is a list of NotificationSubscriptions.
type NotificationSubscriptionList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the subscriptions.
	Items []NotificationSubscription `json:"items"`
}
