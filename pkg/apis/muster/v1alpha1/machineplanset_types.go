package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PlanSetLabel marks every MachinePlan a MachinePlanSet wrote with the set's
// name, so that `kubectl get machineplans -l muster.io/plan-set=NAME` lists
// them. A plan without it was written by hand and no set ever touches it.
const PlanSetLabel = "muster.io/plan-set"

// PlanDrainLabel marks a MachinePlan the server replaced with its set's
// drain template when the Machine entered Draining (value "true"): the
// agent runs it, and the Machine stays Draining until it succeeded or the
// set's drain timeout passed.
const PlanDrainLabel = "muster.io/plan-drain"

// PlanDrainByAnnotation, on a MachinePlan, names the controller that
// writes the machine's drain plan itself when the Machine is deleted (the
// planner, for an etcd member: it leaves etcd's member list before its
// host goes). The Machine waits in Draining for that plan (a plan with
// PlanDrainLabel) up to DefaultDrainTimeout from its deletion, then for
// the plan as for any drain plan.
const PlanDrainByAnnotation = "muster.io/plan-drain-by"

// PlanDrainDeadlineAnnotation records, on a drain plan, when the server
// stops waiting for it (RFC 3339): the set's drain timeout from the moment
// the drain plan was written.
const PlanDrainDeadlineAnnotation = "muster.io/plan-drain-deadline"

// DefaultDrainTimeout is how long a Machine waits for its drain plan when
// spec.drain.timeout is not set; MaxDrainTimeout bounds what may be set.
const (
	DefaultDrainTimeout = 5 * time.Minute
	MaxDrainTimeout     = 24 * time.Hour
)

// PlanSetRevisionLabel records the set's template revision a MachinePlan
// was written from.
const PlanSetRevisionLabel = "muster.io/plan-set-revision"

// Condition types of a MachinePlanSet.
const (
	// PlanSetProgressing is True while some matched machine's plan is not
	// yet the current revision, or not yet applied.
	PlanSetProgressing = "Progressing"
	// PlanSetPaused is True when no new machine is started on the current
	// revision: spec.strategy.paused, or a machine that failed on it.
	PlanSetPaused = "Paused"
	// PlanSetComplete is True once every matched machine the set owns has
	// applied the current revision; `kubectl wait --for=condition=Complete` waits for it.
	PlanSetComplete = "Complete"
	// PlanSetConflict is True when a matched machine has a plan the set
	// must not take over: a hand-written one, or another set's.
	PlanSetConflict = "Conflict"
)

// MaxPlanSetRevisions bounds status.revisions.
const MaxPlanSetRevisions = 10

// MaxPlanSetPartitions bounds spec.strategy.partitions: a rollout waits on
// each in turn, so more than a handful is a slow rollout, not a plan.
const MaxPlanSetPartitions = 10

// PlanSetWrittenAtAnnotation is when the set last wrote a plan (RFC 3339):
// spec.strategy.progressDeadline counts from it, and it survives a server
// restart, which an in-memory clock would not.
const PlanSetWrittenAtAnnotation = "muster.io/plan-set-written-at"

// DefaultPlanSetProgressDeadline is spec.strategy.progressDeadline's default.
const DefaultPlanSetProgressDeadline = 10 * time.Minute

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachinePlanSet gives every Machine it selects the same MachinePlan, like
// a DaemonSet does pods: the server writes each selected machine's plan
// (named after the machine, labelled muster.io/plan-set=NAME), rolls a
// template change out a few machines at a time, and removes the plan of a
// machine that stops matching. A plan written by hand, or by another set,
// is never overwritten: the machine is reported in the Conflict condition.
type MachinePlanSet struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the operator wants of the set.
	// +optional
	Spec MachinePlanSetSpec `json:"spec,omitempty"`
	// Status is what the server observed; written only through the status subresource.
	// +optional
	Status MachinePlanSetStatus `json:"status,omitempty"`
}

// MachinePlanSetSpec is the desired state of a MachinePlanSet.
type MachinePlanSetSpec struct {
	// Selector chooses the Machines by their labels (roles are labels). An
	// empty selector is refused unless MatchAll is set, so that a
	// forgotten selector never puts a plan on the whole fleet.
	// +optional
	Selector metav1.LabelSelector `json:"selector,omitempty"`
	// MatchAll, with an empty selector, selects every Machine (of Cluster,
	// if set): the explicit opt-in to a fleet-wide plan.
	// +optional
	MatchAll bool `json:"matchAll,omitempty"`
	// Cluster, if set, restricts the set to the Machines of that Cluster.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Template is the plan every selected machine gets. Each distinct
	// template is a revision (status.revision); changing it rolls the
	// machines onto the new one within Strategy. Its values that may hold
	// a secret are read as a MachinePlan's are: whole only by callers
	// allowed machineplansets/secrets (SecretsSubresource), others read
	// "<redacted>" (Redacted). The same holds for spec.drain.template and
	// status.lastCompleteTemplate.
	Template MachinePlanSpec `json:"template"`
	// Strategy bounds a rollout.
	// +optional
	Strategy MachinePlanSetStrategy `json:"strategy,omitempty"`
	// Drain, if set, is the plan a selected machine runs when it is deleted
	// (enters Draining), before the server deletes it: stop services, hand
	// work over. Without it a machine is deleted at once.
	// +optional
	Drain *MachinePlanSetDrain `json:"drain,omitempty"`
	// OnUnmatch is what happens on a machine that stops matching (relabelled
	// out, or the selector narrowed): "Keep" (the default) removes the
	// set's plan and leaves the files it wrote in place, as a package
	// manager leaves configuration; "RemoveFiles" first has the agent
	// delete the files the template wrote, then removes the plan. A
	// deleted set's plans are removed without either.
	// +optional
	OnUnmatch PlanSetOnUnmatch `json:"onUnmatch,omitempty"`
}

// PlanSetOnUnmatch is what a set does on a machine that stops matching.
type PlanSetOnUnmatch string

const (
	// OnUnmatchKeep removes the set's plan; its files stay.
	OnUnmatchKeep PlanSetOnUnmatch = "Keep"
	// OnUnmatchRemoveFiles deletes the template's files on the machine,
	// then removes the plan.
	OnUnmatchRemoveFiles PlanSetOnUnmatch = "RemoveFiles"
)

// PlanSetCleanupAnnotation marks the plan a set wrote to delete its files
// from a machine that stopped matching (onUnmatch: RemoveFiles); the set
// removes the plan once the agent ran it.
const PlanSetCleanupAnnotation = "muster.io/plan-set-cleanup"

// MachinePlanSetDrain is what a set's machines run before they are deleted.
type MachinePlanSetDrain struct {
	// Template replaces the machine's plan when the machine enters
	// Draining (the plan is labelled muster.io/plan-drain=true). The
	// machine moves on to Deleting once the agent reports it succeeded
	// (reason Drained), once it failed for good (DrainFailed), or once
	// Timeout passed (DrainTimedOut), whichever comes first.
	Template MachinePlanSpec `json:"template"`
	// Timeout is how long the server waits for the drain plan, from the
	// moment it is written: at least 1s, at most 24h. Default 5m.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// DrainTimeout is d's timeout, or the default when it is not set.
func (d *MachinePlanSetDrain) DrainTimeout() time.Duration {
	if d == nil || d.Timeout == nil {
		return DefaultDrainTimeout
	}
	return d.Timeout.Duration
}

// MachinePlanSetStrategy bounds a rollout of a template change.
type MachinePlanSetStrategy struct {
	// MaxUnavailable is how many of the selected machines may be updating
	// or not Running at once, counting a machine given the set's plan for
	// the first time as updating: a count (at least 1) or a percent of the
	// selected machines ("25%", rounded down but at least 1, at most
	// "100%"). Default 1. A machine that is not Running for another reason
	// uses up the budget too, so a rollout waits while the fleet is unwell.
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// Paused stops starting machines on the current revision; machines
	// already updating finish. A newly selected machine waits too: giving
	// it the plan changes the machine as much as an update does.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Partitions roll a new revision out group by group, in order (like
	// etcd, then control plane, then workers): no machine of a partition
	// is started until every machine of the partitions before it applied
	// the revision. A machine is in the first partition whose selector
	// matches it; machines no partition matches form an implicit last
	// one. MaxUnavailable applies within a partition. At most 10.
	// +optional
	// +listType=map
	// +listMapKey=name
	Partitions []PlanSetPartition `json:"partitions,omitempty"`
	// AutoRevert puts the machines on a revision that failed (a plan
	// failed, a machine Failed, or probes unhealthy past ProgressDeadline)
	// back on the last revision that completed (status.lastCompleteRevision).
	// The set stays Paused on the failed revision (status.failedRevision)
	// until the template changes, or status.failedRevision is cleared to
	// retry it.
	// +optional
	AutoRevert bool `json:"autoRevert,omitempty"`
	// ProgressDeadline is how long a machine may take, from the set
	// writing its plan, to apply it with every probe healthy before the
	// revision counts as failed. Default 10m; 10s to 24h.
	// +optional
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`
}

// PlanSetPartition is one group of a partitioned rollout.
type PlanSetPartition struct {
	// Name names the partition in status.currentPartition; unique in the set.
	Name string `json:"name"`
	// Selector chooses the partition's machines among the set's by label.
	Selector metav1.LabelSelector `json:"selector"`
}

// PlanSetRevision is how many machines have one revision's plan.
type PlanSetRevision struct {
	// Revision is the content hash of a template.
	Revision string `json:"revision"`
	// Machines is how many of the set's plans are of this revision.
	Machines int32 `json:"machines"`
}

// MachinePlanSetStatus is the observed state of a MachinePlanSet.
type MachinePlanSetStatus struct {
	// Revision is the content hash of the current template (secrets
	// included, like a plan's checksum: a secret in a template must not be
	// guessable); the set's
	// plans carry the revision they were written from in the
	// muster.io/plan-set-revision label.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Matched is how many Machines the selector (and cluster) select.
	// +optional
	Matched int32 `json:"matched"`
	// Updated is how many of them have the set's plan of the current revision.
	// +optional
	Updated int32 `json:"updated"`
	// Ready is how many of those updated ones applied it (the plan
	// succeeded and the agent ran it to the end).
	// +optional
	Ready int32 `json:"ready"`
	// Failed is how many of the set's plans failed (state failed).
	// +optional
	Failed int32 `json:"failed"`
	// Unavailable is how many matched machines are not Running.
	// +optional
	Unavailable int32 `json:"unavailable"`
	// Conflicting is how many matched machines have a plan the set does
	// not own (hand-written, or another set's): they are left alone.
	// +optional
	Conflicting int32 `json:"conflicting"`
	// Revisions counts the set's plans by revision, current first, at most 10.
	// +optional
	// +listType=atomic
	Revisions []PlanSetRevision `json:"revisions,omitempty"`
	// CurrentPartition is the partition being rolled out, "" when none is
	// (no partitions, or the rollout is complete). Machines no partition
	// selects are the implicit partition "(rest)".
	// +optional
	CurrentPartition string `json:"currentPartition,omitempty"`
	// FailedRevision, with spec.strategy.autoRevert, is the revision that
	// failed and was reverted: the set stays Paused and never starts a
	// machine on it again. A new template resumes; so does clearing it
	// (kubectl patch mps NAME --subresource=status --type=merge
	// -p '{"status":{"failedRevision":null}}'), which retries the revision.
	// +optional
	FailedRevision string `json:"failedRevision,omitempty"`
	// LastCompleteRevision is the last revision every machine applied.
	// +optional
	LastCompleteRevision string `json:"lastCompleteRevision,omitempty"`
	// LastCompleteTemplate is that revision's template: what autoRevert
	// puts the failed machines back on, once spec.template has moved on.
	// +optional
	LastCompleteTemplate *MachinePlanSpec `json:"lastCompleteTemplate,omitempty"`
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are Progressing, Paused, Complete and Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MachinePlanSetList is a list of MachinePlanSets.
type MachinePlanSetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the plan sets.
	Items []MachinePlanSet `json:"items"`
}
