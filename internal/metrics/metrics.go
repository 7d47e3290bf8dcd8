// Package metrics defines every metric Muster exposes on the server's
// /metrics, beside the apiserver's own: the one list an operator, the
// dashboard (deploy/grafana) and the alert rules (deploy/prometheus) read
// names from. The metrics live in component-base's legacy registry, which
// is what the apiserver serves, so one scrape carries both.
//
// Every label value is from a closed set: states and kinds from
// internal/fsm, reasons from the list below (anything else is counted as
// "Other"), and at most MaxClusterSeries cluster names. A value an agent
// or a token holder could choose never becomes a label: a registration
// storm with made-up reasons or node names must not become a series storm
// in the operator's Prometheus.
//
// Until Register runs, every metric here is a no-op (component-base's
// metrics are lazy), so packages instrument unconditionally and their
// unit tests need no registry.
package metrics

import (
	"slices"
	"sync"
	"time"

	compbase "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/muster-io/muster/internal/fsm"
)

// namespace prefixes every Muster metric.
const namespace = "muster"

// Outcomes of a registration (RegistrationsTotal's outcome label).
const (
	// OutcomeGranted: a certificate was issued.
	OutcomeGranted = "granted"
	// OutcomePending: the request was stored to wait for an operator.
	OutcomePending = "pending"
	// OutcomeRefused: refused in the agent's request; nothing was stored.
	OutcomeRefused = "refused"
	// OutcomeDenied: a stored registration was moved to Denied, by an
	// operator or by the server at grant time.
	OutcomeDenied = "denied"
)

// Reasons of granted and pending registrations, and of refusals that are
// not a grant-time Refusal; the join's Refusal reasons are listed in
// refusalReasons.
const (
	ReasonJoinToken          = "JoinToken"
	ReasonApprovedByOperator = "ApprovedByOperator"
	ReasonCertificateRenewed = "CertificateRenewed"
	ReasonAdministrator      = "Administrator"
	ReasonAwaitingApproval   = "AwaitingApproval"
	ReasonDeniedByOperator   = "DeniedByOperator"
	ReasonNodePasswordWrong  = "NodePasswordRejected"
	ReasonRateLimited        = "RateLimited"
	ReasonInvalidRequest     = "InvalidRequest"
	// ReasonOther stands for any reason not in the list.
	ReasonOther = "Other"
)

// registrationReasons is every reason label value RegistrationsTotal may
// carry. The join's refusal reasons are CamelCase constants in its code,
// but a Denied registration's reason is written through the API by
// whoever may update its status: only listed reasons become labels.
var registrationReasons = []string{
	ReasonJoinToken, ReasonApprovedByOperator, ReasonCertificateRenewed, ReasonAdministrator,
	ReasonAwaitingApproval, ReasonDeniedByOperator, ReasonNodePasswordWrong, ReasonRateLimited, ReasonInvalidRequest,
	// internal/join's Refusal reasons.
	"TokenNotFound", "TokenInactive", "TokenUsedUp", "ClusterNotFound", "ClusterDeleting",
	"NodePasswordChanged", "NoNodePassword", "MachineReserved", "ClusterMismatch", "MachineGone",
	"MachineBeingDeleted", "MachineHasNoPassword", "ClientIDMismatch", "PlanWithoutMachine", "ClientIDInUse", "InvalidCSR",
	ReasonOther,
}

// Plan application outcomes (PlanApplicationsTotal's outcome label).
const (
	// PlanApplied: the machine applied its plan and is Running.
	PlanApplied = "applied"
	// PlanFailed: the plan failed its maxFailures times; the machine is Failed.
	PlanFailed = "failed"
)

// Heartbeat results (HeartbeatsTotal's result label).
const (
	HeartbeatAccepted = "accepted"
	HeartbeatRefused  = "refused"
)

var (
	registrations = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: namespace, Name: "registrations_total",
		Help:           "Registrations decided by this server, by outcome (granted, pending, refused in the request, denied after it was stored) and reason.",
		StabilityLevel: compbase.ALPHA,
	}, []string{"outcome", "reason"})

	joinDuration = compbase.NewHistogram(&compbase.HistogramOpts{
		Namespace: namespace, Name: "join_duration_seconds",
		Help:           "Time from receiving a registration request to storing its grant, for registrations granted in the request (join tokens without manual approval, renewals).",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		StabilityLevel: compbase.ALPHA,
	})

	transitions = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: namespace, Name: "transitions_total",
		Help:           "State-machine transitions written by this server, by kind and the states left and entered (internal/fsm names).",
		StabilityLevel: compbase.ALPHA,
	}, []string{"kind", "from", "to"})

	planApplications = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: namespace, Name: "plan_applications_total",
		Help:           "Plans that machines finished, as judged by the lifecycle controller: applied (the machine is Running) or failed (past the plan's maxFailures; the machine is Failed).",
		StabilityLevel: compbase.ALPHA,
	}, []string{"outcome"})

	planDuration = compbase.NewHistogramVec(&compbase.HistogramOpts{
		Namespace: namespace, Name: "plan_application_duration_seconds",
		Help:           "Time from a machine entering Bootstrapping or Updating to its plan being applied or failing for good, from the stored transition times (one-second resolution).",
		Buckets:        []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600},
		StabilityLevel: compbase.ALPHA,
	}, []string{"outcome"})

	heartbeats = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: namespace, Name: "heartbeats_total",
		Help:           "Agent heartbeats received by this server: accepted, or refused (no valid machine certificate).",
		StabilityLevel: compbase.ALPHA,
	}, []string{"result"})

	tokenUses = compbase.NewCounter(&compbase.CounterOpts{
		Namespace: namespace, Name: "join_token_uses_total",
		Help:           "Registrations granted with a join token by this server: each is one use of the token.",
		StabilityLevel: compbase.ALPHA,
	})

	tokenFailures = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: namespace, Name: "join_token_failures_total",
		Help:           "Requests with a join token this server refused before any handler: unknown (wrong or deleted token, 401), blocked (the client address failed too often, 429), busy (too many refusals waiting at once, 429).",
		StabilityLevel: compbase.ALPHA,
	}, []string{"result"})

	leader = compbase.NewGaugeVec(&compbase.GaugeOpts{
		Namespace: namespace, Name: "controller_leader",
		Help:           "1 while this server holds the controller lease named by the lease label (and runs its controllers), 0 otherwise.",
		StabilityLevel: compbase.ALPHA,
	}, []string{"lease"})

	datastoreErrors = compbase.NewCounterVec(&compbase.CounterOpts{
		Namespace: namespace, Name: "datastore_errors_total",
		Help:           "Datastore requests that failed because the datastore did not answer (the API answered 503), by resource and operation.",
		StabilityLevel: compbase.ALPHA,
	}, []string{"resource", "operation"})
)

var registerOnce sync.Once

// Register adds every Muster metric to the registry the apiserver serves
// on /metrics. Safe to call more than once.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(registrations, joinDuration, transitions, planApplications, planDuration,
			heartbeats, tokenUses, tokenFailures, leader, datastoreErrors, snapshotUploads, snapshotUploadFailures)
		legacyregistry.CustomMustRegister(fleet)
		// Series an alert or a dashboard compares against exist from the
		// start, at zero, rather than appearing with the first event.
		for _, o := range []string{PlanApplied, PlanFailed} {
			planApplications.WithLabelValues(o)
		}
		for _, r := range []string{HeartbeatAccepted, HeartbeatRefused} {
			heartbeats.WithLabelValues(r)
		}
		for _, r := range []string{TokenUnknown, TokenBlocked, TokenBusy} {
			tokenFailures.WithLabelValues(r)
		}
		registrations.WithLabelValues(OutcomeGranted, ReasonJoinToken)
		registrations.WithLabelValues(OutcomeDenied, ReasonDeniedByOperator)
		registrations.WithLabelValues(OutcomeRefused, ReasonNodePasswordWrong)
	})
}

// Registration counts a registration decided with outcome for reason; a
// reason not in the closed list is counted as Other.
func Registration(outcome, reason string) {
	if !slices.Contains(registrationReasons, reason) {
		reason = ReasonOther
	}
	registrations.WithLabelValues(outcome, reason).Inc()
}

// JoinGranted records how long a registration granted in its request took
// from start.
func JoinGranted(start time.Time) {
	joinDuration.Observe(time.Since(start).Seconds())
}

// Transition counts a transition of def's kind from one state to another;
// states that are not def's are counted as Other.
func Transition(def *fsm.Definition, from, to string) {
	transitions.WithLabelValues(def.Name(), state(def, from), state(def, to)).Inc()
}

func state(def *fsm.Definition, s string) string {
	if def.IsState(s) {
		return s
	}
	return ReasonOther
}

// PlanFinished counts a plan a machine finished with outcome (PlanApplied
// or PlanFailed), took seconds after the machine started on it.
func PlanFinished(outcome string, took time.Duration) {
	planApplications.WithLabelValues(outcome).Inc()
	if took >= 0 {
		planDuration.WithLabelValues(outcome).Observe(took.Seconds())
	}
}

// Heartbeat counts a heartbeat with its result.
func Heartbeat(result string) { heartbeats.WithLabelValues(result).Inc() }

// Join-token failures (TokenFailed's result).
const (
	TokenUnknown = "unknown"
	TokenBlocked = "blocked"
	TokenBusy    = "busy"
)

// TokenFailed counts a request whose join token was refused, with why.
func TokenFailed(result string) { tokenFailures.WithLabelValues(result).Inc() }

// TokenUsed counts one registration granted with a join token.
func TokenUsed() { tokenUses.Inc() }

// Leading records whether this server holds lease.
func Leading(lease string, holds bool) {
	v := 0.0
	if holds {
		v = 1
	}
	leader.WithLabelValues(lease).Set(v)
}

// DatastoreError counts a datastore request on resource that failed
// because the datastore did not answer.
func DatastoreError(resource, operation string) {
	datastoreErrors.WithLabelValues(resource, operation).Inc()
}

// datastoreOperations are the operations DatastoreError is told of.
var datastoreOperations = []string{"create", "get", "list", "update", "delete"}

// DatastoreResource declares a resource whose datastore errors are
// counted, so that its series exist at zero before the first error (an
// alert on their rate then has something to compare).
func DatastoreResource(resource string) {
	for _, op := range datastoreOperations {
		datastoreErrors.WithLabelValues(resource, op)
	}
}

var (
	snapshotUploads = compbase.NewCounter(&compbase.CounterOpts{
		Namespace: namespace, Name: "snapshot_uploads_total",
		Help:           "Scheduled datastore snapshots this server uploaded to object storage (--snapshot-s3-bucket) and verified by the checksum the store keeps.",
		StabilityLevel: compbase.ALPHA,
	})
	snapshotUploadFailures = compbase.NewCounter(&compbase.CounterOpts{
		Namespace: namespace, Name: "snapshot_upload_failures_total",
		Help:           "Scheduled datastore snapshots this server failed to upload to object storage, to verify there, or to keep the bucket's retention for; each is also a SnapshotUploadFailed Event.",
		StabilityLevel: compbase.ALPHA,
	})
)

// SnapshotUploaded counts a scheduled snapshot uploaded and verified.
func SnapshotUploaded() { snapshotUploads.Inc() }

// SnapshotUploadFailed counts a scheduled snapshot that did not reach
// object storage.
func SnapshotUploadFailed() { snapshotUploadFailures.Inc() }
