package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

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
	plans    listers.MachinePlanLister
	clusters listers.ClusterLister
	tracker  *Tracker
	silence  time.Duration
	queue    workqueue.TypedRateLimitingInterface[string]
	clusterQ workqueue.TypedRateLimitingInterface[string]
	synced   []cache.InformerSynced
	now      func() time.Time
	// events records transitions and plan failures on the Machine.
	events record.EventRecorder
}

// NewController wires the controller to its informers.
// events may be nil (nothing is recorded).
func NewController(client versioned.Interface, store Store, factory informers.SharedInformerFactory, tracker *Tracker, silence time.Duration, events record.EventRecorder) *Controller {
	v := factory.Muster().V1alpha1()
	if events == nil {
		events = &record.FakeRecorder{}
	}
	c := &Controller{
		client: client, store: store, machines: v.Machines().Lister(), plans: v.MachinePlans().Lister(), clusters: v.Clusters().Lister(),
		tracker: tracker, silence: silence, now: time.Now, events: events,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		clusterQ: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		synced:   []cache.InformerSynced{v.Machines().Informer().HasSynced, v.MachinePlans().Informer().HasSynced, v.Clusters().Informer().HasSynced},
	}
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
	// A plan is named after its machine.
	_, _ = v.MachinePlans().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: byName, UpdateFunc: func(_, o interface{}) { byName(o) },
	})
	_, _ = v.Clusters().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o interface{}) { c.clusterQ.Add(o.(*api.Cluster).Name) },
	})
	tracker.onReturn = func(name string) { c.queue.Add(name) }
	return c
}

// Run reconciles until ctx ends. A periodic pass over every machine notices
// agents that fell silent (silence produces no event).
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	defer c.clusterQ.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { process(ctx, c.queue, c.syncMachine) }, time.Second)
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) { process(ctx, c.clusterQ, c.syncCluster) }, time.Second)
	wait.UntilWithContext(ctx, func(context.Context) {
		ms, _ := c.machines.List(labels.Everything())
		for _, m := range ms {
			c.queue.Add(m.Name)
		}
	}, c.silence/4)
}

func process(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		if err := sync(ctx, key); err != nil {
			if !apierrors.IsConflict(err) {
				klog.ErrorS(err, "Lifecycle sync failed; will retry", "key", key)
			}
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// syncMachine takes at most one transition per call; the resulting update
// brings the machine back through the queue for the next one.
func (c *Controller) syncMachine(ctx context.Context, name string) error {
	m, err := c.machines.Get(name)
	if apierrors.IsNotFound(err) {
		c.tracker.forget(name)
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
	case "plan-applied":
		outcome = metrics.PlanApplied
	case "plan-failed":
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
// the failing instruction's output as its message: what the agent printed
// reaches `kubectl describe machine` without a trip to the agent's host.
// It is written when a plan fails and when one succeeds after a failure,
// not on every step of a plan (each would cost a write per machine).
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
// failing entry of the plan's output.
func failureMessage(plan *api.MachinePlan) string {
	msg := fmt.Sprintf("the plan failed %d time(s) (the machine fails at %d)", plan.Status.FailureCount, plan.Spec.MaxFailures)
	for i := len(plan.Status.Output) - 1; i >= 0; i-- {
		out := plan.Status.Output[i]
		if out.ExitCode == 0 {
			continue
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

// decide returns the event a machine should take now, if any, and why.
// A phase says what the server knows: a machine leaves Registering or
// Unavailable only when its agent was heard, and is declared silent only
// when it was not heard for a whole threshold (live is false).
func decide(m *api.Machine, plan *api.MachinePlan, live, heard bool) (event, reason string) {
	applied := plan != nil && plan.Status.Checksum != "" && plan.Status.State == api.PlanStateSucceeded &&
		plan.Status.AppliedChecksum == plan.Status.Checksum && probesHealthy(plan)
	failedForGood := plan != nil && plan.Status.State == api.PlanStateFailed && plan.Status.FailureCount >= plan.Spec.MaxFailures
	newPlan := plan != nil && plan.Status.Checksum != plan.Status.AppliedChecksum && !failedForGood && plan.Status.FailureCount == 0

	switch m.Status.Phase {
	case api.MachinePhaseRegistering:
		if heard && m.Status.AgentVersion != "" {
			return "agent-checked-in", "AgentCheckedIn"
		}
	case api.MachinePhaseBootstrapping, api.MachinePhaseUpdating:
		switch {
		case failedForGood:
			return "plan-failed", "PlanFailed"
		case applied:
			return "plan-applied", "PlanApplied"
		case !live:
			return "agent-silent", "AgentSilent"
		}
	case api.MachinePhaseRunning:
		switch {
		case !live:
			return "agent-silent", "AgentSilent"
		case newPlan:
			return "plan-changed", "PlanChanged"
		case failedForGood:
			return "plan-failed", "PlanFailed"
		}
	case api.MachinePhaseUnavailable:
		// The state machine cannot remember where the machine went silent
		// from, so the plan says where it comes back to.
		switch {
		case heard && applied:
			return "agent-returned", "AgentReturned"
		case heard:
			return "agent-returned-mid-plan", "AgentReturned"
		}
	case api.MachinePhaseFailed:
		if newPlan {
			return "plan-fixed", "NewPlan"
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
			c.events.Eventf(m, corev1.EventTypeNormal, reason, "%s -> %s", m.Status.Phase, to)
		}
		return err
	}
	switch m.Status.Phase {
	case api.MachinePhaseDraining:
		// A custom machine has nothing to drain; a driver would cordon and
		// evict here.
		return step("drained", "Drained")
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
		return step("finalized", "Finalized")
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
		return step("drain", "DeletionRequested")
	}
}

// syncCluster keeps a cluster's counts and phase in step with its machines.
func (c *Controller) syncCluster(ctx context.Context, name string) error {
	cl, err := c.clusters.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ms, err := c.machines.List(labels.Everything())
	if err != nil {
		return err
	}
	var total, ready int32
	checkedIn, degraded := false, false
	for _, m := range ms {
		if m.Spec.Cluster != name {
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
	var event, reason string
	switch cl.Status.Phase {
	case api.ClusterPhasePending:
		event, reason = "await-check-in", "WaitingForAgents"
	case api.ClusterPhaseWaitCheckIn:
		if checkedIn {
			event, reason = "agent-checked-in", "AgentCheckedIn"
		}
	case api.ClusterPhaseActive:
		if degraded {
			event, reason = "machine-unhealthy", "MachineUnhealthy"
		}
	case api.ClusterPhaseDegraded:
		if !degraded {
			event, reason = "machines-healthy", "MachinesHealthy"
		}
	}
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
		// One transition per pass; the next may follow at once.
		c.clusterQ.Add(name)
	}
	return err
}
