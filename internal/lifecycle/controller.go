// Package lifecycle drives every Machine through its state machine from what
// its agent reports (check-in, plan results, heartbeats) and every Cluster
// from its machines, and finalizes deleted Machines. When an agent was
// last heard it learns from internal/liveness.
package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/muster-io/muster/internal/reconcile"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/fsm"
	"github.com/muster-io/muster/internal/jointoken"
	"github.com/muster-io/muster/internal/liveness"
	"github.com/muster-io/muster/internal/metrics"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

const (
	// Finalizer holds a deleted Machine until it has gone through
	// Draining and Deleting and its plan and node password are gone.
	Finalizer = api.MachineLifecycleFinalizer
	// LastSeenPersistInterval bounds how stale the stored lastSeen of a
	// live machine may get: at most one write per machine per interval.
	LastSeenPersistInterval = 10 * time.Minute
	// DefaultSilenceThreshold: an agent not heard from for this long is Unavailable.
	DefaultSilenceThreshold = 40 * time.Second
	// clusterStatusDelay is how long a Cluster's counts may lag its machines.
	clusterStatusDelay = time.Second
)

// Store is where the controller writes machine status: the server's own
// objects, in process (internal/registry's Objects). A machine's status is
// written once or twice per join and per plan change, for every machine of
// a fleet; in process it costs the datastore write and no HTTP round trip.
type Store interface {
	// UpdateMachineStatus applies change to the stored Machine and writes
	// it unless change returns false.
	UpdateMachineStatus(ctx context.Context, name string, change func(*api.Machine) bool) (*api.Machine, error)
}

// Controller is the lifecycle controller.
type Controller struct {
	client   versioned.Interface
	store    Store
	machines listers.MachineLister
	// byCluster indexes the machine cache by spec.cluster: a cluster's
	// count reads its own machines, not the whole fleet (with a cluster
	// per agent, listing every machine per cluster was quadratic: 5,000
	// agents kept the server at 1.4 cores for minutes after they joined).
	byCluster cache.Indexer
	plans     listers.MachinePlanLister
	clusters  listers.ClusterLister
	sets      listers.MachinePlanSetLister
	tracker   *liveness.Tracker
	// returns are the machines the tracker hears of afresh, looked at at
	// once while this controller runs (nil: only at the passes).
	returns  *Returns
	silence  time.Duration
	queue    workqueue.TypedRateLimitingInterface[string]
	clusterQ workqueue.TypedRateLimitingInterface[string]
	synced   []cache.InformerSynced
	now      func() time.Time
	// events records transitions and plan failures on the Machine.
	events record.EventRecorder
	// running: Run is running, for this server's term as the leader. The
	// informers' handlers outlive a term; what they record, only the
	// leader records, once.
	running atomic.Bool
}

// machinesByCluster indexes Machines by the cluster they belong to.
const machinesByCluster = "spec.cluster"

// indexMachinesByCluster adds the index once (informers are shared).
func indexMachinesByCluster(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[machinesByCluster]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{machinesByCluster: func(obj interface{}) ([]string, error) {
		if m, ok := obj.(*api.Machine); ok {
			return []string{m.Spec.Cluster}, nil
		}
		return nil, nil
	}})
}

// NewController wires the controller to its informers. returns are the
// machines tracker hears of afresh (the tracker's OnReturn feeds it);
// events and returns may be nil.
func NewController(client versioned.Interface, store Store, factory informers.SharedInformerFactory, tracker *liveness.Tracker, returns *Returns, silence time.Duration, events record.EventRecorder) *Controller {
	v := factory.Muster().V1alpha1()
	if events == nil {
		events = &record.FakeRecorder{}
	}
	c := &Controller{
		client: client, store: store, machines: v.Machines().Lister(), plans: v.MachinePlans().Lister(), clusters: v.Clusters().Lister(),
		sets:    v.MachinePlanSets().Lister(),
		tracker: tracker, returns: returns, silence: silence, now: time.Now, events: events,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		clusterQ: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		synced:   []cache.InformerSynced{v.Machines().Informer().HasSynced, v.MachinePlans().Informer().HasSynced, v.Clusters().Informer().HasSynced, v.MachinePlanSets().Informer().HasSynced},
	}
	if err := indexMachinesByCluster(v.Machines().Informer()); err != nil {
		// Only an informer already started refuses an index: a wiring bug.
		panic(err)
	}
	c.byCluster = v.Machines().Informer().GetIndexer()
	byName := func(obj interface{}) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	// A cluster's health follows its machines' at once; its counts are
	// refreshed once per delay however many machines changed in it, so a
	// storm of joins costs one cluster write a second, not one per machine.
	clusterOf := func(obj interface{}) *api.Machine {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		m, _ := obj.(*api.Machine)
		return m
	}
	countLater := func(obj interface{}) {
		byName(obj)
		if m := clusterOf(obj); m != nil {
			c.clusterQ.AddAfter(m.Spec.Cluster, clusterStatusDelay)
		}
	}
	_, _ = v.Machines().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: countLater, DeleteFunc: countLater,
		UpdateFunc: func(old, obj interface{}) {
			o, m := clusterOf(old), clusterOf(obj)
			if o != nil && m != nil && unhealthy(o.Status.Phase) != unhealthy(m.Status.Phase) {
				byName(obj)
				c.clusterQ.Add(m.Spec.Cluster)
				return
			}
			countLater(obj)
		},
	})
	// A plan is named after its machine; a deleted plan leaves its
	// machine nothing to apply (decide).
	_, _ = v.MachinePlans().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: byName, DeleteFunc: byName,
		UpdateFunc: func(old, o interface{}) {
			byName(o)
			c.noteRestored(old, o)
		},
	})
	// Every update too: a delete (deletionTimestamp set) starts the
	// cascade, and a phase someone wrote is checked against the machines.
	_, _ = v.Clusters().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { c.clusterQ.Add(o.(*api.Cluster).Name) },
		UpdateFunc: func(_, o interface{}) { c.clusterQ.Add(o.(*api.Cluster).Name) },
	})
	return c
}

// Run reconciles until ctx ends. A periodic pass over every machine notices
// agents that fell silent (silence produces no event).
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	defer c.clusterQ.ShutDown()
	if c.returns != nil {
		// Stops before the queue shuts down: a return after the term is
		// the next term's.
		defer c.returns.receive(c.queue)()
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	c.running.Store(true)
	defer c.running.Store(false)
	c.noteRestoredBefore()
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { reconcile.Work(ctx, c.queue, c.syncMachine, failed) }, time.Second)
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) { reconcile.Work(ctx, c.clusterQ, c.syncCluster, failed) }, time.Second)
	wait.UntilWithContext(ctx, func(context.Context) {
		ms, _ := c.machines.List(labels.Everything())
		for _, m := range ms {
			c.queue.Add(m.Name)
		}
	}, c.silence/4)
}

// failed logs a sync that will be retried; a conflict is only a lost race
// with another writer, retried at once.
func failed(key string, err error) {
	if !apierrors.IsConflict(err) {
		klog.ErrorS(err, "Lifecycle sync failed; will retry", "key", key)
	}
}

// syncMachine takes at most one transition per call; the resulting update
// brings the machine back through the queue for the next one.
func (c *Controller) syncMachine(ctx context.Context, name string) error {
	m, err := c.machines.Get(name)
	if apierrors.IsNotFound(err) {
		c.tracker.Forget(name)
		return nil
	}
	if err != nil {
		return err
	}
	if m.DeletionTimestamp != nil {
		return c.finalize(ctx, m)
	}
	if !hasFinalizer(m) {
		m = m.DeepCopy()
		m.Finalizers = append(m.Finalizers, Finalizer)
		_, err := c.client.MusterV1alpha1().Machines().Update(ctx, m, metav1.UpdateOptions{})
		return err
	}
	plan, err := c.plans.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	facts := facts{plan: plan, live: c.tracker.Live(name, c.silence), heard: c.tracker.Heard(name, c.silence), seen: c.tracker.LastSeen(name), now: c.now()}
	// Decided on the cached Machine, so that a pass with nothing to do
	// costs no datastore access; decided again on the stored one inside
	// the compare-and-swap, so a stale cache never writes a stale status.
	if _, changed := advance(m.DeepCopy(), facts); !changed {
		return nil
	}
	var from api.MachinePhase
	var event string
	var failedBefore bool
	stored, err := c.store.UpdateMachineStatus(ctx, name, func(fresh *api.Machine) bool {
		from = fresh.Status.Phase
		failedBefore = meta.IsStatusConditionTrue(fresh.Status.Conditions, ConditionPlanFailed)
		var changed bool
		event, changed = advance(fresh, facts)
		return changed
	})
	if err != nil {
		return err
	}
	transition := event != "" && stored.Status.Phase != from
	if transition {
		klog.InfoS("Machine transition", "machine", name, "from", from, "to", stored.Status.Phase, "event", event, "reason", stored.Status.Reason)
		countPlan(stored, event, c.now())
	}
	c.record(stored, from, transition, failedBefore)
	return nil
}

// countPlan counts a plan the machine finished with the transition it just
// stored (the last of its history), timed from the transition before it,
// which took it into Bootstrapping or Updating.
func countPlan(m *api.Machine, event string, now time.Time) {
	outcome := ""
	switch event {
	case fsm.EventPlanApplied:
		outcome = metrics.PlanApplied
	case fsm.EventPlanFailed:
		outcome = metrics.PlanFailed
	default:
		return
	}
	took := time.Duration(-1)
	if h := m.Status.Transitions; len(h) >= 2 {
		took = now.Sub(h[len(h)-2].Time.Time)
	}
	metrics.PlanFinished(outcome, took)
}

// record makes the Event of a sync that wrote: the transition it took,
// with the plan's failure when that is news, or the failure alone.
func (c *Controller) record(m *api.Machine, from api.MachinePhase, transition, failedBefore bool) {
	failed := meta.FindStatusCondition(m.Status.Conditions, ConditionPlanFailed)
	newFailure := failed != nil && failed.Status == metav1.ConditionTrue && !failedBefore
	switch {
	case transition:
		kind, msg := corev1.EventTypeNormal, fmt.Sprintf("%s -> %s", from, m.Status.Phase)
		if warning[m.Status.Phase] {
			kind = corev1.EventTypeWarning
		}
		if newFailure || (m.Status.Phase == api.MachinePhaseFailed && failed != nil) {
			kind, msg = corev1.EventTypeWarning, msg+": "+failed.Message
		}
		c.events.Event(m, kind, m.Status.Reason, msg)
	case newFailure:
		c.events.Event(m, corev1.EventTypeWarning, failed.Reason, failed.Message)
	}
}

// warning are the phases whose arrival an operator should look at.
var warning = map[api.MachinePhase]bool{api.MachinePhaseUnavailable: true, api.MachinePhaseFailed: true}

// facts are what the controller knows of a machine besides its object.
type facts struct {
	plan *api.MachinePlan
	// live: not to be declared silent (heard, or the term is too young to tell).
	live bool
	// heard: its agent was heard within the silence threshold; what it
	// takes to move a machine to a phase that says its agent is there.
	heard bool
	seen  time.Time
	now   time.Time
}

// advance takes at most one transition on m's status and refreshes what
// is persisted beside it (lastSeen, planState); it returns the event taken
// and whether m's status changed at all.
func advance(m *api.Machine, f facts) (string, bool) {
	before := m.Status.DeepCopy()
	event, reason := decide(m, f.plan, f.live, f.heard)
	if event != "" {
		to, err := fsm.Machine.Fire(string(m.Status.Phase), event)
		if err != nil {
			// decide only names events its phase allows; a refusal is a bug.
			klog.ErrorS(err, "Lifecycle decided an illegal transition", "machine", m.Name)
			return "", false
		}
		m.Status.Phase, m.Status.Reason = api.MachinePhase(to), reason
	}
	if f.heard && (before.LastSeen == nil || event != "" || f.now.Sub(before.LastSeen.Time) > LastSeenPersistInterval) {
		t := metav1.NewTime(f.seen)
		m.Status.LastSeen = &t
	}
	// The plan's state rides along with a write made anyway, and is worth
	// a write of its own only when the plan failed: copying every step
	// (in-progress, then succeeded) would double the writes of a fan-out.
	if plan := f.plan; plan != nil && plan.Status.State != before.PlanState &&
		(event != "" || plan.Status.State == api.PlanStateFailed || !m.Status.LastSeen.Equal(before.LastSeen)) {
		m.Status.PlanState = plan.Status.State
	}
	conditionChanged := setPlanFailed(m, f.plan)
	changed := event != "" || conditionChanged || m.Status.PlanState != before.PlanState || !m.Status.LastSeen.Equal(before.LastSeen)
	return event, changed
}

// ConditionPlanFailed is True while the machine's plan has failed, with
// which instruction failed and its exit code as its message (`kubectl
// describe machine`). What an instruction printed is never quoted: it may
// echo a secret, and viewers read Machines and Events; it stays in the
// MachinePlan's status, where only who may read the plan's secrets reads
// it. The agent's own reports (a file it could not write, an agent
// upgrade that failed) name paths and versions, and are quoted.
// It is written when a plan fails and when one succeeds after a failure,
// not on every step of a plan (each would cost a write per machine).
// ReasonPlanRemoved is why a machine whose plan was deleted left Failed
// or Updating: with no plan there is nothing to apply and nothing failed.
const ReasonPlanRemoved = "PlanRemoved"

const ConditionPlanFailed = "PlanFailed"

// maxFailureMessage keeps the condition and event short; the full output
// stays in the MachinePlan's status.
const maxFailureMessage = 512

// setPlanFailed brings m's PlanFailed condition in line with plan and
// reports whether it changed.
func setPlanFailed(m *api.Machine, plan *api.MachinePlan) bool {
	if plan == nil {
		return false
	}
	current := meta.FindStatusCondition(m.Status.Conditions, ConditionPlanFailed)
	switch {
	case plan.Status.State == api.PlanStateFailed:
		return meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
			Type: ConditionPlanFailed, Status: metav1.ConditionTrue, Reason: "PlanFailed",
			Message: failureMessage(plan), ObservedGeneration: m.Generation,
		})
	case plan.Status.State == api.PlanStateSucceeded && current != nil && current.Status != metav1.ConditionFalse:
		return meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
			Type: ConditionPlanFailed, Status: metav1.ConditionFalse, Reason: "PlanSucceeded",
			Message: "the plan was applied", ObservedGeneration: m.Generation,
		})
	}
	return false
}

// failureMessage says which instruction failed and how, from the last
// failing entry of the plan's output: its text only when the entry is the
// agent's own, not an instruction's (see ConditionPlanFailed).
func failureMessage(plan *api.MachinePlan) string {
	msg := fmt.Sprintf("the plan failed %d time(s) (the machine fails at %d)", plan.Status.FailureCount, plan.Spec.MaxFailures)
	for i := len(plan.Status.Output) - 1; i >= 0; i-- {
		out := plan.Status.Output[i]
		if out.ExitCode == 0 {
			continue
		}
		if instruction(plan, out.Name) {
			msg = fmt.Sprintf("instruction %s failed (exit code %d); %s", out.Name, out.ExitCode, msg)
			break
		}
		text := strings.TrimSpace(out.Output)
		if j := strings.LastIndexByte(text, '\n'); j >= 0 {
			text = text[j+1:] // the last line says why
		}
		msg = fmt.Sprintf("%s (exit code %d): %s; %s", out.Name, out.ExitCode, text, msg)
		break
	}
	if len(msg) > maxFailureMessage {
		// The agent wrote this text: cut it without splitting a character.
		msg = strings.ToValidUTF8(msg[:maxFailureMessage-3], "") + "..."
	}
	return msg + "; see 'kubectl get machineplan " + plan.Name + " -o yaml' for the output"
}

// instruction reports whether name is one of the plan's instructions,
// whose output is what its command printed.
func instruction(plan *api.MachinePlan, name string) bool {
	for _, in := range plan.Spec.Instructions {
		if in.Name == name {
			return true
		}
	}
	return false
}

// decide returns the event a machine should take now, if any, and why.
// A phase says what the server knows: a machine leaves Registering or
// Unavailable only when its agent was heard, and is declared silent only
// when it was not heard for a whole threshold (live is false).
func decide(m *api.Machine, plan *api.MachinePlan, live, heard bool) (event, reason string) {
	applied := plan != nil && plan.Applied() && probesHealthy(plan)
	failedForGood := plan != nil && plan.FailedForGood()
	newPlan := plan != nil && plan.Status.Checksum != plan.Status.AppliedChecksum && !failedForGood && plan.Status.FailureCount == 0

	switch m.Status.Phase {
	case api.MachinePhaseRegistering:
		if heard && m.Status.AgentVersion != "" {
			return fsm.EventAgentCheckedIn, "AgentCheckedIn"
		}
	case api.MachinePhaseBootstrapping, api.MachinePhaseUpdating:
		switch {
		case failedForGood:
			return fsm.EventPlanFailed, "PlanFailed"
		case applied:
			return fsm.EventPlanApplied, "PlanApplied"
		case !live:
			return fsm.EventAgentSilent, "AgentSilent"
		case plan == nil && m.Status.Phase == api.MachinePhaseUpdating:
			// Its plan was deleted (a plan set's, when the set went):
			// nothing is left to apply. A new machine (Bootstrapping)
			// waits for the plan its grant writes.
			return fsm.EventPlanApplied, ReasonPlanRemoved
		}
	case api.MachinePhaseRunning:
		switch {
		case !live:
			return fsm.EventAgentSilent, "AgentSilent"
		case newPlan:
			return fsm.EventPlanChanged, "PlanChanged"
		case failedForGood:
			return fsm.EventPlanFailed, "PlanFailed"
		}
	case api.MachinePhaseUnavailable:
		// The state machine cannot remember where the machine went silent
		// from, so the plan says where it comes back to.
		switch {
		case heard && applied:
			return fsm.EventAgentReturned, "AgentReturned"
		case heard:
			return fsm.EventAgentReturnedMidPlan, "AgentReturned"
		}
	case api.MachinePhaseFailed:
		switch {
		case newPlan:
			return fsm.EventPlanFixed, "NewPlan"
		case plan == nil && m.Status.Reason == "PlanFailed":
			// The plan that failed is gone (deleted by hand, or pruned
			// with its plan set): so is the failure. Updating, then
			// Running, as with a new empty plan.
			return fsm.EventPlanFixed, ReasonPlanRemoved
		}
	}
	return "", ""
}

func probesHealthy(p *api.MachinePlan) bool {
	for _, s := range p.Status.Probes {
		if !s.Healthy {
			return false
		}
	}
	return true
}

// unhealthy phases make a machine's cluster Degraded.
func unhealthy(p api.MachinePhase) bool {
	return p == api.MachinePhaseUnavailable || p == api.MachinePhaseFailed
}

func hasFinalizer(m *api.Machine) bool {
	for _, f := range m.Finalizers {
		if f == Finalizer {
			return true
		}
	}
	return false
}

// finalize takes a deleted machine through Draining and Deleting to
// Deleted, removing its plan and node password, then lets it go.
func (c *Controller) finalize(ctx context.Context, m *api.Machine) error {
	if !hasFinalizer(m) {
		return nil
	}
	machines := c.client.MusterV1alpha1().Machines()
	step := func(event, reason string) error {
		to, err := fsm.Machine.Fire(string(m.Status.Phase), event)
		if err != nil {
			return err
		}
		next := m.DeepCopy()
		next.Status.Phase, next.Status.Reason = api.MachinePhase(to), reason
		if _, err = machines.UpdateStatus(ctx, next, metav1.UpdateOptions{}); err == nil {
			kind, msg := corev1.EventTypeNormal, fmt.Sprintf("%s -> %s", m.Status.Phase, to)
			if why := drainOutcome[reason]; why != "" {
				msg += ": " + why
			}
			if reason == ReasonDrainTimedOut || reason == ReasonDrainFailed {
				kind = corev1.EventTypeWarning
			}
			c.events.Event(m, kind, reason, msg)
		}
		return err
	}
	switch m.Status.Phase {
	case api.MachinePhaseDraining:
		return c.drain(ctx, m, step)
	case api.MachinePhaseDeleting:
		if slices.Contains(m.Finalizers, api.MachineHostFinalizer) {
			// Its driver removes the host first (internal/pool); dropping
			// that finalizer is an update that brings the Machine back here.
			return nil
		}
		if err := c.client.MusterV1alpha1().MachinePlans().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err := c.client.MusterV1alpha1().NodePasswords().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		// A pool minted a one-time join token for this machine alone: it
		// goes with the machine, spent or not, however the machine went
		// (a scale-down, the pool's or the cluster's deletion).
		if m.Labels[api.PoolLabel] != "" && m.Spec.JoinToken != "" {
			if err := c.client.MusterV1alpha1().ClusterRegistrationTokens().Delete(ctx, m.Spec.JoinToken, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return step(fsm.EventFinalized, "Finalized")
	case api.MachinePhaseDeleted:
		next := m.DeepCopy()
		next.Finalizers = nil
		for _, f := range m.Finalizers {
			if f != Finalizer {
				next.Finalizers = append(next.Finalizers, f)
			}
		}
		_, err := machines.Update(ctx, next, metav1.UpdateOptions{})
		return err
	default:
		return step(fsm.EventDrain, "DeletionRequested")
	}
}

// syncCluster keeps a cluster's counts and phase in step with its
// machines, and takes a deleted cluster's machines and tokens with it.
func (c *Controller) syncCluster(ctx context.Context, name string) error {
	cl, err := c.clusters.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if cl.DeletionTimestamp != nil {
		return c.finalizeCluster(ctx, cl)
	}
	if !slices.Contains(cl.Finalizers, api.ClusterLifecycleFinalizer) {
		// A cluster created before the finalizer existed.
		next := cl.DeepCopy()
		next.Finalizers = append(next.Finalizers, api.ClusterLifecycleFinalizer)
		_, err := c.client.MusterV1alpha1().Clusters().Update(ctx, next, metav1.UpdateOptions{})
		return err
	}
	ms, err := c.byCluster.ByIndex(machinesByCluster, name)
	if err != nil {
		return err
	}
	var total, ready int32
	checkedIn, degraded := false, false
	for _, o := range ms {
		m, ok := o.(*api.Machine)
		if !ok || m.Spec.Cluster != name {
			continue
		}
		total++
		if m.Status.Phase == api.MachinePhaseRunning {
			ready++
		}
		if unhealthy(m.Status.Phase) {
			degraded = true
		}
		switch m.Status.Phase {
		case api.MachinePhaseBootstrapping, api.MachinePhaseRunning, api.MachinePhaseUpdating, api.MachinePhaseUnavailable, api.MachinePhaseFailed:
			checkedIn = true
		}
	}
	event, reason := clusterEvent(cl.Status.Phase, checkedIn, degraded)
	if event == "" && cl.Status.Machines == total && cl.Status.ReadyMachines == ready {
		return nil
	}
	next := cl.DeepCopy()
	next.Status.Machines, next.Status.ReadyMachines = total, ready
	if event != "" {
		to, err := fsm.Cluster.Fire(string(cl.Status.Phase), event)
		if err != nil {
			return err
		}
		next.Status.Phase, next.Status.Reason = api.ClusterPhase(to), reason
	}
	_, err = c.client.MusterV1alpha1().Clusters().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if err == nil && event != "" {
		c.events.Eventf(cl, corev1.EventTypeNormal, reason, "%s -> %s", cl.Status.Phase, next.Status.Phase)
		// One transition per pass; the next may follow at once.
		c.clusterQ.Add(name)
	}
	return err
}

// clusterEvent is the event a (not deleted) cluster in phase takes now,
// given whether any of its machines has checked in and whether any is
// unhealthy. It corrects a phase that contradicts the machines whoever
// wrote it: Active or Degraded with no machine checked in goes back to
// WaitCheckIn, one step at a time (Degraded → WaitCheckIn → Active).
func clusterEvent(phase api.ClusterPhase, checkedIn, degraded bool) (event, reason string) {
	switch phase {
	case api.ClusterPhasePending:
		return fsm.EventAwaitCheckIn, "WaitingForAgents"
	case api.ClusterPhaseWaitCheckIn:
		if checkedIn {
			return fsm.EventAgentCheckedIn, "AgentCheckedIn"
		}
	case api.ClusterPhaseActive:
		switch {
		case !checkedIn:
			return fsm.EventMachinesGone, "NoMachineCheckedIn"
		case degraded:
			return fsm.EventMachineUnhealthy, "MachineUnhealthy"
		}
	case api.ClusterPhaseDegraded:
		switch {
		case !checkedIn:
			return fsm.EventMachinesGone, "NoMachineCheckedIn"
		case !degraded:
			return fsm.EventMachinesHealthy, "MachinesHealthy"
		}
	}
	return "", ""
}

// finalizeCluster takes a deleted cluster to Deleting, revokes the join
// tokens bound to it, deletes its machine pools and machines (each drained
// first, see finalize), and lets it go once none of its machines or pools is left.
func (c *Controller) finalizeCluster(ctx context.Context, cl *api.Cluster) error {
	if !slices.Contains(cl.Finalizers, api.ClusterLifecycleFinalizer) {
		return nil
	}
	clusters := c.client.MusterV1alpha1().Clusters()
	if cl.Status.Phase != api.ClusterPhaseDeleting {
		to, err := fsm.Cluster.Fire(string(fsm.Cluster.Normalize(string(cl.Status.Phase))), fsm.EventDelete)
		if err != nil {
			return err
		}
		next := cl.DeepCopy()
		next.Status.Phase, next.Status.Reason = api.ClusterPhase(to), "DeletionRequested"
		next.Status.Message = "deleting the cluster's machines and revoking its join tokens"
		if _, err := clusters.UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.events.Eventf(cl, corev1.EventTypeNormal, "DeletionRequested", "%s -> %s: deleting its machines and revoking its join tokens", cl.Status.Phase, to)
		return nil // the update brings it back
	}
	// Tokens first, so that no machine joins the cluster while its
	// machines are deleted (grants refuse a Deleting cluster too).
	tokens, err := c.client.MusterV1alpha1().ClusterRegistrationTokens().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, t := range tokens.Items {
		if t.Spec.Cluster != cl.Name || t.Status.Phase != api.TokenPhaseActive {
			continue
		}
		if _, err := jointoken.RevokeFor(ctx, c.client.MusterV1alpha1(), t.Name, jointoken.ReasonClusterDeleted); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		klog.InfoS("Revoked the join token of a deleted cluster", "cluster", cl.Name, "token", t.Name)
	}
	// A pool of the cluster would make its machines again: it goes first,
	// and removes its machines' hosts as a deleted pool does (internal/pool).
	pools, err := c.client.MusterV1alpha1().MachinePools().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ownPools := 0
	for _, p := range pools.Items {
		if p.Spec.Cluster != cl.Name {
			continue
		}
		ownPools++
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := c.client.MusterV1alpha1().MachinePools().Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		klog.InfoS("Deleting a machine pool of a deleted cluster", "cluster", cl.Name, "pool", p.Name)
	}
	// Read live, not from the cache: a machine created a moment ago must
	// not be left behind in a cluster that no longer exists.
	list, err := c.client.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{FieldSelector: "spec.cluster=" + cl.Name})
	if err != nil {
		return err
	}
	for _, m := range list.Items {
		if m.DeletionTimestamp != nil {
			continue
		}
		if err := c.client.MusterV1alpha1().Machines().Delete(ctx, m.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		klog.InfoS("Deleting a machine of a deleted cluster", "cluster", cl.Name, "machine", m.Name)
	}
	if n := len(list.Items); n > 0 {
		// Each machine's deletion brings the cluster back here.
		if cl.Status.Machines != int32(n) {
			next := cl.DeepCopy()
			next.Status.Machines = int32(n)
			next.Status.Message = fmt.Sprintf("waiting for %d machine(s) to drain and be deleted", n)
			_, err := clusters.UpdateStatus(ctx, next, metav1.UpdateOptions{})
			return err
		}
		return nil
	}
	if ownPools > 0 {
		// A pool goes once it has removed its machines' hosts
		// (internal/pool); nothing of the cluster may outlive it, and a
		// pool's deletion is no event of this queue: look again shortly.
		c.clusterQ.AddAfter(cl.Name, time.Second)
		return nil
	}
	next := cl.DeepCopy()
	next.Finalizers = slices.DeleteFunc(next.Finalizers, func(f string) bool { return f == api.ClusterLifecycleFinalizer })
	if _, err := clusters.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	klog.InfoS("Cluster deleted", "cluster", cl.Name)
	return nil
}

// Reasons a Draining machine moves on to Deleting, recorded in its
// status.reason and its Event.
const (
	// ReasonDrained: the drain plan succeeded, or there was nothing to drain.
	ReasonDrained = "Drained"
	// ReasonDrainTimedOut: the drain plan did not finish within the set's timeout.
	ReasonDrainTimedOut = "DrainTimedOut"
	// ReasonDrainFailed: the drain plan failed its maxFailures times.
	ReasonDrainFailed = "DrainFailed"
)

// drainOutcome is what a reason tells the operator, in the Event.
var drainOutcome = map[string]string{
	ReasonDrainTimedOut: "the drain plan did not finish within its plan set's spec.drain.timeout; the machine is deleted anyway (see 'kubectl get machineplan -o yaml' before it goes, or the agent's log)",
	ReasonDrainFailed:   "the drain plan failed; the machine is deleted anyway (the agent's log says why)",
}

// drainAction is what to do with a Draining machine now.
type drainAction struct {
	// start: replace the machine's plan with its set's drain template.
	start bool
	// wait: the drain plan is running; look again after this long at the latest.
	wait time.Duration
	// done: move on to Deleting, for this reason.
	done string
}

// decideDrain is the one place that decides a Draining machine's fate,
// from whether an agent ever checked in for it, its plan, the set that
// owns that plan (nil if none, or gone), and the time. A machine whose
// plan is not a set's, whose set has no drain template, or that no agent
// ever ran (a host that never came up) has nothing to drain.
func decideDrain(agent bool, plan *api.MachinePlan, set *api.MachinePlanSet, now time.Time) drainAction {
	if plan == nil || plan.Labels[api.PlanDrainLabel] != "true" {
		if agent && plan != nil && set != nil && set.Spec.Drain != nil && plan.Labels[api.PlanSetLabel] == set.Name && plan.DeletionTimestamp == nil {
			return drainAction{start: true}
		}
		return drainAction{done: ReasonDrained}
	}
	switch {
	case plan.Applied():
		return drainAction{done: ReasonDrained}
	case plan.FailedForGood():
		return drainAction{done: ReasonDrainFailed}
	}
	deadline, err := time.Parse(time.RFC3339, plan.Annotations[api.PlanDrainDeadlineAnnotation])
	if err != nil {
		// Not written by this server: wait no longer than the default.
		deadline = plan.CreationTimestamp.Add(api.DefaultDrainTimeout)
	}
	if !now.Before(deadline) {
		return drainAction{done: ReasonDrainTimedOut}
	}
	return drainAction{wait: deadline.Sub(now)}
}

// drain takes a Draining machine on: it gives it its set's drain plan,
// waits for that plan, then moves it to Deleting with the reason.
func (c *Controller) drain(ctx context.Context, m *api.Machine, step func(event, reason string) error) error {
	plan, err := c.plans.Get(m.Name)
	if apierrors.IsNotFound(err) {
		plan, err = nil, nil
	}
	if err != nil {
		return err
	}
	// Another controller writes this machine's drain plan (the planner,
	// for an etcd member that must leave etcd before its host goes): wait
	// for it, as long as a drain plan may take.
	if plan != nil && plan.Labels[api.PlanDrainLabel] != "true" && plan.Annotations[api.PlanDrainByAnnotation] != "" &&
		m.Status.AgentVersion != "" && m.DeletionTimestamp != nil {
		if wait := m.DeletionTimestamp.Add(api.DefaultDrainTimeout).Sub(c.now()); wait > 0 {
			c.queue.AddAfter(m.Name, min(wait, time.Second))
			return nil
		}
	}
	var set *api.MachinePlanSet
	if plan != nil && plan.Labels[api.PlanSetLabel] != "" {
		set, err = c.sets.Get(plan.Labels[api.PlanSetLabel])
		if apierrors.IsNotFound(err) {
			set, err = nil, nil
		}
		if err != nil {
			return err
		}
	}
	now := c.now()
	a := decideDrain(m.Status.AgentVersion != "", plan, set, now)
	switch {
	case a.done != "":
		return step(fsm.EventDrained, a.done)
	case a.wait > 0:
		c.queue.AddAfter(m.Name, a.wait)
		return nil
	}
	// The update is made on the cached plan's resourceVersion: a plan
	// changed meanwhile makes it conflict and the next pass decides again.
	timeout := set.Spec.Drain.DrainTimeout()
	next := plan.DeepCopy()
	next.Spec = *set.Spec.Drain.Template.DeepCopy()
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	next.Labels[api.PlanDrainLabel] = "true"
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[api.PlanDrainDeadlineAnnotation] = now.Add(timeout).UTC().Format(time.RFC3339Nano)
	if _, err := c.client.MusterV1alpha1().MachinePlans().Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("giving machine %s the drain plan of plan set %s: %w", m.Name, set.Name, err)
	}
	c.events.Eventf(m, corev1.EventTypeNormal, "DrainStarted", "running the drain plan of plan set %s (timeout %s)", set.Name, timeout)
	klog.InfoS("Machine drain plan written", "machine", m.Name, "set", set.Name, "timeout", timeout)
	c.queue.AddAfter(m.Name, timeout)
	return nil
}

// ReasonPlanRestored is the Event of a machine brought back to the plan
// the server holds after a restore of the datastore from an older snapshot.
const ReasonPlanRestored = "PlanRestored"

// noteRestoredBefore records the Events noteRestored missed while this
// server's controllers were not running yet: a restored server's agents
// apply the snapshot's plans again within milliseconds of its start, often
// before the caches have synced. Only plans applied in the last minute:
// a note from long ago was recorded then.
func (c *Controller) noteRestoredBefore() {
	plans, err := c.plans.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range plans {
		if p.RestoredNote() == "" || p.Status.LastAppliedTime == nil || time.Since(p.Status.LastAppliedTime.Time) > time.Minute {
			continue
		}
		c.noteRestored(&api.MachinePlan{}, p)
	}
}

// noteRestored records the Event of a plan its agent applied again because
// the machine had applied a plan the server does not hold (its datastore
// was restored from an older snapshot): the agent says so in the plan's
// status (api.PlanRestoredOutput) when it reports the outcome. Checksums
// stay out of the Event: viewers read Events, and a checksum confirms a
// guessed plan secret.
func (c *Controller) noteRestored(oldObj, obj interface{}) {
	old, ok1 := oldObj.(*api.MachinePlan)
	p, ok2 := obj.(*api.MachinePlan)
	if !ok1 || !ok2 || !c.running.Load() {
		return
	}
	note := p.RestoredNote()
	if note == "" || note == old.RestoredNote() || p.Status.State == api.PlanStateInProgress {
		return
	}
	m, err := c.machines.Get(p.Name)
	if err != nil {
		return
	}
	msg := "its agent had applied a plan the server's datastore does not hold (it was restored from an older snapshot) " +
		"and applied the server's plan again: the server's record wins"
	if p.Status.State == api.PlanStateFailed {
		msg += "; applying it failed: see 'kubectl get machineplan " + p.Name + " -o yaml'"
	}
	c.events.Event(m, corev1.EventTypeWarning, ReasonPlanRestored, msg)
}
