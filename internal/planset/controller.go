// Package planset is the MachinePlanSet controller: it gives every Machine
// a set selects the set's MachinePlan, rolls a template change out within
// the set's maxUnavailable (partition by partition when the strategy has
// partitions), and removes the set's plan from a machine that stops
// matching. A revision that fails pauses the set; with autoRevert its
// machines go back to the last complete revision, whose template the
// status keeps, since the spec has moved on and nothing else holds it. It
// runs on the elected leader only.
//
// A plan belongs to a set by its muster.io/plan-set label (wrangler's
// desired-set idea: labels, not ownerReferences, find the children). A
// plan without that label was written by hand and is never touched; a
// machine two sets select keeps whatever plan it has, and both sets say so
// in their Conflict condition, so the plan never flips between them.
package planset

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/muster-io/muster/internal/reconcile"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

// resync reconciles every set this often besides on every change, so a
// timed-out expectation is noticed without an event.
const resync = 10 * time.Second

// expectationTimeout bounds a wait for the cache to show a write: an event
// lost for good must not stall a set.
const expectationTimeout = 30 * time.Second

// Controller reconciles MachinePlanSets.
type Controller struct {
	client   versioned.Interface
	sets     listers.MachinePlanSetLister
	machines listers.MachineLister
	plans    listers.MachinePlanLister
	loop     *reconcile.Loop
	// expect holds, by plan name, the writes this controller made that
	// its cache does not show yet. Until it does, the plan is taken to be
	// as written: a lagging cache would otherwise have the controller
	// write the plan again, or start more machines than maxUnavailable.
	// Only the Run goroutine reads it; the writes of one pass, made in
	// parallel, record theirs under expectMu.
	expect   map[string]expectation
	expectMu sync.Mutex
}

// planWriters bounds the plan writes one pass makes at once. Written one
// after another, a 1,000-machine rollout at 10% was bound by the round
// trip of each write (about 50 a second, never more than a quarter of
// the budget updating at once); a few in flight keep the budget full
// without crowding the agents' own reports out of the datastore.
const planWriters = 16

// expectation is one plan write awaiting the cache.
type expectation struct {
	set, revision string
	deleted       bool
	at            time.Time
}

// NewController registers its informers with factory.
func NewController(client versioned.Interface, factory informers.SharedInformerFactory) *Controller {
	v := factory.Muster().V1alpha1()
	c := &Controller{
		client: client, sets: v.MachinePlanSets().Lister(), machines: v.Machines().Lister(), plans: v.MachinePlans().Lister(),
		loop: reconcile.NewLoop(), expect: map[string]expectation{},
	}
	_, _ = v.MachinePlanSets().Informer().AddEventHandler(c.loop.Handler())
	_, _ = v.Machines().Informer().AddEventHandler(c.loop.Handler())
	_, _ = v.MachinePlans().Informer().AddEventHandler(c.loop.Handler())
	return c
}

// Run reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.loop.Run(ctx, resync, func(ctx context.Context) {
		if err := c.reconcileAll(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Reconciling machine plan sets")
		}
	})
}

// Revision is the revision of a set's template: its plans of another
// revision are its old ones.
func Revision(t api.MachinePlanSpec) string { return reconcile.Revision(t) }

// compiledSet is a set with its selector parsed once per pass.
type compiledSet struct {
	set *api.MachinePlanSet
	sel labels.Selector
}

func (cs compiledSet) selects(m *api.Machine) bool {
	if cs.set.Spec.Cluster != "" && m.Spec.Cluster != cs.set.Spec.Cluster {
		return false
	}
	return cs.sel.Matches(labels.Set(m.Labels))
}

func (c *Controller) reconcileAll(ctx context.Context) error {
	sets, err := c.sets.List(labels.Everything())
	if err != nil {
		return err
	}
	machines, err := c.machines.List(labels.Everything())
	if err != nil {
		return err
	}
	plans, err := c.plans.List(labels.Everything())
	if err != nil {
		return err
	}
	planOf := map[string]*api.MachinePlan{}
	for _, p := range plans {
		planOf[p.Name] = p
	}
	var compiled []compiledSet
	live := map[string]bool{}
	for _, s := range sets {
		if s.DeletionTimestamp != nil {
			continue
		}
		live[s.Name] = true
		sel, err := metav1.LabelSelectorAsSelector(&s.Spec.Selector)
		if err != nil {
			// Admission validated it; a selector that still does not
			// parse selects nothing rather than everything.
			klog.ErrorS(err, "Plan set selector", "set", s.Name)
			sel = labels.Nothing()
		}
		compiled = append(compiled, compiledSet{set: s, sel: sel})
	}
	// Which sets select each machine: two on one machine is a conflict.
	selectors := map[string][]string{}
	for _, m := range machines {
		if m.DeletionTimestamp != nil {
			continue // its plan goes with it (internal/lifecycle)
		}
		for _, cs := range compiled {
			if cs.selects(m) {
				selectors[m.Name] = append(selectors[m.Name], cs.set.Name)
			}
		}
	}
	var errs []string
	for _, cs := range compiled {
		if err := c.reconcile(ctx, cs, machines, planOf, selectors); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			errs = append(errs, fmt.Sprintf("plan set %s: %v", cs.set.Name, err))
		}
	}
	// The plans of a deleted set go with it, as a set's children do.
	for _, p := range plans {
		owner := p.Labels[api.PlanSetLabel]
		if owner == "" || live[owner] || p.DeletionTimestamp != nil {
			continue
		}
		if e, ok := c.expect[p.Name]; ok && e.deleted && time.Since(e.at) < expectationTimeout {
			continue
		}
		if err := c.deletePlan(ctx, owner, p.Name); err != nil {
			errs = append(errs, fmt.Sprintf("removing plan %s of deleted plan set %s: %v", p.Name, owner, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// view is the plan as the controller must take it: the cache's, unless a
// write of this controller has not reached the cache yet.
func (c *Controller) view(name string, p *api.MachinePlan) *planView {
	if e, ok := c.expect[name]; ok {
		shown := (e.deleted && p == nil) ||
			(!e.deleted && p != nil && p.Labels[api.PlanSetLabel] == e.set && p.Labels[api.PlanSetRevisionLabel] == e.revision)
		if shown || time.Since(e.at) > expectationTimeout {
			delete(c.expect, name)
		} else if e.deleted {
			return nil
		} else {
			return &planView{set: e.set, revision: e.revision, writtenAt: e.at}
		}
	}
	if p == nil || isPlaceholder(p) {
		return nil
	}
	pv := &planView{
		set:      p.Labels[api.PlanSetLabel],
		revision: p.Labels[api.PlanSetRevisionLabel],
		applied:  p.Applied(),
		failed:   p.Status.State == api.PlanStateFailed,
		healthy:  true,
	}
	for _, ps := range p.Status.Probes {
		pv.healthy = pv.healthy && ps.Healthy
	}
	if at, err := time.Parse(time.RFC3339, p.Annotations[api.PlanSetWrittenAtAnnotation]); err == nil {
		pv.writtenAt = at
	}
	return pv
}

func (c *Controller) reconcile(ctx context.Context, cs compiledSet, machines []*api.Machine, planOf map[string]*api.MachinePlan, selectors map[string][]string) error {
	s := cs.set
	rev := Revision(s.Spec.Template)
	st, parts := rolloutStrategy(s, rev, time.Now())
	var selected []machineView
	var owned []string
	revisions := map[string]int{}
	exists := map[string]bool{}
	for _, m := range machines {
		exists[m.Name] = true
		pv := c.view(m.Name, planOf[m.Name])
		// A Machine being deleted loses its plan with it (internal/lifecycle).
		if pv != nil && pv.set == s.Name && m.DeletionTimestamp == nil {
			owned = append(owned, m.Name)
			if pv.revision != "" { // a cleanup plan counts for no revision
				revisions[pv.revision]++
			}
		}
		if m.DeletionTimestamp != nil || !cs.selects(m) {
			continue
		}
		var others []string
		for _, name := range selectors[m.Name] {
			if name != s.Name {
				others = append(others, name)
			}
		}
		part := len(parts)
		for i, sel := range parts {
			if sel.Matches(labels.Set(m.Labels)) {
				part = i
				break
			}
		}
		selected = append(selected, machineView{
			name: m.Name, running: m.Status.Phase == api.MachinePhaseRunning, failed: m.Status.Phase == api.MachinePhaseFailed,
			plan: pv, otherSets: others, partition: part,
		})
	}
	// A plan of this set whose Machine is gone is pruned too.
	for name, p := range planOf {
		if p.Labels[api.PlanSetLabel] == s.Name && !exists[name] {
			owned = append(owned, name)
		}
	}
	d := decide(s.Name, rev, selected, owned, st)
	var writes []func() error
	for _, name := range d.prune {
		cur := planOf[name]
		if s.Spec.OnUnmatch == api.OnUnmatchRemoveFiles && exists[name] && cur != nil {
			if e, ok := c.expect[name]; ok && !e.deleted && e.revision == "" {
				continue // its cleanup plan is written; the cache has yet to show it
			}
			writes = append(writes, func() error { return c.removeFiles(ctx, s, name, cur) })
			continue
		}
		writes = append(writes, func() error { return c.deletePlan(ctx, s.Name, name) })
	}
	for _, name := range append(append([]string{}, d.create...), d.update...) {
		cur := planOf[name]
		writes = append(writes, func() error { return c.writePlan(ctx, s, rev, &s.Spec.Template, name, cur) })
	}
	for _, name := range d.revert {
		cur := planOf[name]
		writes = append(writes, func() error {
			cur, err := c.forgetApplied(ctx, cur)
			if err != nil {
				return err
			}
			return c.writePlan(ctx, s, st.revertTo, s.Status.LastCompleteTemplate, name, cur)
		})
	}
	errs := inParallel(writes, planWriters)
	if err := c.writeStatus(ctx, s, rev, st, d, revisions); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// removeFiles has the agent of a machine that stopped matching delete the
// files the set's plan wrote (onUnmatch: RemoveFiles), then removes the
// plan: a plan of the set that deletes them replaces its plan, and is
// removed once the agent ran it (or failed for good: the set does not hold
// a machine it no longer selects). The cleanup plan carries no revision,
// so the set's revision counts leave the machine out.
func (c *Controller) removeFiles(ctx context.Context, s *api.MachinePlanSet, machine string, cur *api.MachinePlan) error {
	if cur.Annotations[api.PlanSetCleanupAnnotation] == "true" {
		if cur.Applied() || cur.FailedForGood() {
			return c.deletePlan(ctx, s.Name, machine)
		}
		return nil // the agent has yet to run it
	}
	var files []api.PlanFile
	for _, f := range cur.Spec.Files {
		if !f.Delete {
			files = append(files, api.PlanFile{Path: f.Path, Delete: true})
		}
	}
	if len(files) == 0 {
		return c.deletePlan(ctx, s.Name, machine)
	}
	p := cur.DeepCopy()
	delete(p.Labels, api.PlanSetRevisionLabel)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[api.PlanSetCleanupAnnotation] = "true"
	p.Spec = api.MachinePlanSpec{Files: files, MaxFailures: 1}
	// On the cached resourceVersion: a plan taken over meanwhile is not overwritten.
	if _, err := c.client.MusterV1alpha1().MachinePlans().Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the plan that removes plan set %s's files from machine %s: %w", s.Name, machine, err)
	}
	c.expectWrite(machine, expectation{set: s.Name, at: time.Now()})
	klog.InfoS("Plan set removes its files from a machine that stopped matching", "set", s.Name, "machine", machine, "files", len(files))
	return nil
}

// rolloutStrategy is the set's strategy as decide takes it, and the
// partitions' selectors. The revert target is given only once the status
// in the cache remembers the failed revision: a revert whose memory was
// lost (a status write that failed, a kill -9) would re-roll the revision.
func rolloutStrategy(s *api.MachinePlanSet, rev string, now time.Time) (strategy, []labels.Selector) {
	sp := s.Spec.Strategy
	st := strategy{
		maxUnavailable: sp.MaxUnavailable, paused: sp.Paused, now: now,
		deadline: api.DefaultPlanSetProgressDeadline, failedRevision: s.Status.FailedRevision,
	}
	if sp.ProgressDeadline != nil {
		st.deadline = sp.ProgressDeadline.Duration
	}
	if sp.AutoRevert && s.Status.FailedRevision == rev && s.Status.LastCompleteTemplate != nil {
		st.revertTo = Revision(*s.Status.LastCompleteTemplate)
	}
	var parts []labels.Selector
	for _, p := range sp.Partitions {
		st.partitions = append(st.partitions, p.Name)
		sel, err := metav1.LabelSelectorAsSelector(&p.Selector)
		if err != nil {
			// Admission validated it; one that still does not parse
			// selects nothing, so its machines go in a later partition.
			klog.ErrorS(err, "Plan set partition selector", "set", s.Name, "partition", p.Name)
			sel = labels.Nothing()
		}
		parts = append(parts, sel)
	}
	return st, parts
}

// inParallel runs fns, at most n at once, and returns their errors.
func inParallel(fns []func() error, n int) []string {
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	slots := make(chan struct{}, n)
	for _, fn := range fns {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := fn(); err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Strings(errs)
	return errs
}

func (c *Controller) expectWrite(machine string, e expectation) {
	c.expectMu.Lock()
	defer c.expectMu.Unlock()
	c.expect[machine] = e
}

// isPlaceholder reports whether p is the empty plan the server gives every
// machine at its join (internal/join): no work, no probes, no set. A set
// may take it over; a plan with any work in it was written by hand and is
// never the set's.
func isPlaceholder(p *api.MachinePlan) bool {
	return p.Labels[api.PlanSetLabel] == "" && !p.Spec.ChangesMachine() && len(p.Spec.Probes) == 0
}

// writePlan gives machine the set's plan of rev. An update is made on the
// cached object's resourceVersion: a plan someone else changed meanwhile
// (say, took over by hand) makes it fail with a conflict, never overwrite.
func (c *Controller) writePlan(ctx context.Context, s *api.MachinePlanSet, rev string, template *api.MachinePlanSpec, machine string, cur *api.MachinePlan) error {
	plans := c.client.MusterV1alpha1().MachinePlans()
	lbl := map[string]string{api.PlanSetLabel: s.Name, api.PlanSetRevisionLabel: rev}
	now := time.Now()
	written := now.UTC().Format(time.RFC3339)
	var err error
	if cur == nil {
		p := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: machine, Labels: lbl, Annotations: map[string]string{api.PlanSetWrittenAtAnnotation: written}}, Spec: *template.DeepCopy()}
		_, err = plans.Create(ctx, p, metav1.CreateOptions{})
	} else {
		if cur.Labels[api.PlanSetLabel] != s.Name && !isPlaceholder(cur) {
			return fmt.Errorf("machine %s has a plan the set does not own; it is left alone", machine)
		}
		p := cur.DeepCopy()
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for k, v := range lbl {
			p.Labels[k] = v
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[api.PlanSetWrittenAtAnnotation] = written
		p.Spec = *template.DeepCopy()
		_, err = plans.Update(ctx, p, metav1.UpdateOptions{})
	}
	if err != nil {
		// A conflict or an existing plan means the cache is behind: the
		// next pass sees the plan as it is.
		return fmt.Errorf("writing machine %s's plan (revision %s): %w", machine, rev, err)
	}
	c.expectWrite(machine, expectation{set: s.Name, revision: rev, at: now})
	klog.InfoS("Plan set wrote a machine's plan", "set", s.Name, "machine", machine, "revision", rev)
	return nil
}

// forgetApplied clears the plan's appliedChecksum before a revert. The
// reverted spec is the one the machine applied before the failed revision,
// so its checksum would equal appliedChecksum, and internal/lifecycle
// takes a Failed machine back to Running only on a plan whose checksum
// differs from the applied one: the machine would stay Failed for good.
// The machine ran the failed plan since, so the old applied checksum no
// longer describes it anyway. Written on the cached resourceVersion: a
// plan that changed meanwhile is left for the next pass.
func (c *Controller) forgetApplied(ctx context.Context, p *api.MachinePlan) (*api.MachinePlan, error) {
	if p == nil || p.Status.AppliedChecksum == "" {
		return p, nil
	}
	p = p.DeepCopy()
	p.Status.AppliedChecksum = ""
	out, err := c.client.MusterV1alpha1().MachinePlans().UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("clearing machine %s's applied checksum before reverting its plan: %w", p.Name, err)
	}
	return out, nil
}

// deletePlan removes the plan set wrote for machine, only if it still is
// the set's: the delete is conditioned on the UID and resourceVersion read
// just before, so a plan taken over by hand in between survives.
func (c *Controller) deletePlan(ctx context.Context, set, machine string) error {
	plans := c.client.MusterV1alpha1().MachinePlans()
	p, err := plans.Get(ctx, machine, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.expectWrite(machine, expectation{set: set, deleted: true, at: time.Now()})
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading machine %s's plan before removing it: %w", machine, err)
	}
	if p.Labels[api.PlanSetLabel] != set {
		return nil // no longer the set's: not ours to remove
	}
	err = plans.Delete(ctx, machine, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID, ResourceVersion: &p.ResourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing machine %s's plan of plan set %s: %w", machine, set, err)
	}
	c.expectWrite(machine, expectation{set: set, deleted: true, at: time.Now()})
	klog.InfoS("Plan set removed a machine's plan", "set", set, "machine", machine)
	return nil
}

// maxListed bounds the machine names a condition message lists.
const maxListed = 5

func listNames(names []string) string {
	sort.Strings(names)
	if len(names) > maxListed {
		return strings.Join(names[:maxListed], ", ") + fmt.Sprintf(" and %d more", len(names)-maxListed)
	}
	return strings.Join(names, ", ")
}

// conditions derives the set's conditions from a decision.
func conditions(s *api.MachinePlanSet, rev string, st strategy, d decision) []metav1.Condition {
	gen := s.Generation
	cond := func(t string, ok bool, reason, msg string) metav1.Condition {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		return metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen}
	}
	var out []metav1.Condition
	if len(d.conflicts) > 0 {
		var parts []string
		for i, cf := range d.conflicts {
			if i == maxListed {
				parts = append(parts, fmt.Sprintf("and %d more", len(d.conflicts)-maxListed))
				break
			}
			parts = append(parts, "machine "+cf.machine+" "+cf.reason)
		}
		out = append(out, cond(api.PlanSetConflict, true, "MachinesSkipped",
			strings.Join(parts, "; ")+": their plans are left unchanged; narrow the selectors so that one set selects each machine, or delete the hand-written plan for the set to write its own"))
	} else {
		out = append(out, cond(api.PlanSetConflict, false, "NoConflict", "every selected machine's plan is the set's"))
	}
	switch {
	case len(d.failures) > 0:
		reason, why := "ProgressDeadlineExceeded", "did not apply it with every probe healthy within progressDeadline ("+st.deadline.String()+")"
		var names []string
		for _, f := range d.failures {
			names = append(names, f.machine)
			if !f.deadline {
				reason, why = "MachineFailed", "failed on it"
			}
		}
		next := "look at `kubectl get machineplan NAME -o yaml`, then fix the template (a new revision resumes) or the machine"
		switch {
		case s.Spec.Strategy.AutoRevert && s.Status.LastCompleteRevision != "" && s.Status.LastCompleteRevision != rev:
			next = fmt.Sprintf("the machines on it are put back on revision %s, the last complete one (autoRevert); fix the template (a new revision resumes)", s.Status.LastCompleteRevision)
		case s.Spec.Strategy.AutoRevert && s.Status.LastCompleteRevision == "":
			next = "no earlier revision completed, so autoRevert has nothing to go back to; " + next
		}
		out = append(out, cond(api.PlanSetPaused, true, reason,
			fmt.Sprintf("machine %s %s (revision %s), so no more machines are started: %s", listNames(names), why, rev, next)))
	case d.halted:
		// The failed machines were reverted: the condition written when
		// they failed still names them, so it stays.
		if c := meta.FindStatusCondition(s.Status.Conditions, api.PlanSetPaused); c != nil && c.Status == metav1.ConditionTrue &&
			(c.Reason == "MachineFailed" || c.Reason == "ProgressDeadlineExceeded") && strings.Contains(c.Message, rev) {
			kept := *c
			kept.ObservedGeneration = gen
			out = append(out, kept)
			break
		}
		out = append(out, cond(api.PlanSetPaused, true, "MachineFailed",
			fmt.Sprintf("revision %s failed before (status.failedRevision) and is not rolled out again: change the template to resume, or clear status.failedRevision to retry it", rev)))
	case s.Spec.Strategy.Paused:
		out = append(out, cond(api.PlanSetPaused, true, "PausedBySpec", "spec.strategy.paused is true: no more machines are started; set it to false to resume"))
	default:
		out = append(out, cond(api.PlanSetPaused, false, "NotPaused", "machines are started within maxUnavailable"))
	}
	// A paused rollout is not progressing, whatever paused it: the two
	// conditions never both say True (as a Deployment's do not).
	paused := meta.IsStatusConditionTrue(out, api.PlanSetPaused)
	owned := d.matched - len(d.conflicts)
	complete := d.ready == owned
	switch {
	case complete:
		out = append(out, cond(api.PlanSetProgressing, false, "RolledOut", fmt.Sprintf("all %d machines applied revision %s", owned, rev)))
		out = append(out, cond(api.PlanSetComplete, true, "RolledOut", fmt.Sprintf("all %d machines applied revision %s", owned, rev)))
	default:
		msg := fmt.Sprintf("%d of %d machines applied revision %s (%d updated, %d waiting; maxUnavailable %d, %d unavailable)", d.ready, owned, rev, d.updated, d.waiting, d.budget, d.unavailable)
		if p := partitionName(st.partitions, d.partition); p != "" {
			msg += fmt.Sprintf("; partition %s (%d of %d)", p, d.partition+1, len(st.partitions)+1)
		}
		if paused {
			out = append(out, cond(api.PlanSetProgressing, false, "RolloutPaused", msg+"; paused (see the Paused condition)"))
			out = append(out, cond(api.PlanSetComplete, false, "RolloutPaused", msg))
			break
		}
		out = append(out, cond(api.PlanSetProgressing, true, "RollingOut", msg))
		out = append(out, cond(api.PlanSetComplete, false, "RollingOut", msg))
	}
	return out
}

func (c *Controller) writeStatus(ctx context.Context, s *api.MachinePlanSet, rev string, rs strategy, d decision, revisions map[string]int) error {
	st := s.Status.DeepCopy()
	st.Revision = rev
	st.CurrentPartition = partitionName(rs.partitions, d.partition)
	owned := d.matched - len(d.conflicts)
	switch {
	case d.ready == owned && len(d.failures) == 0:
		st.LastCompleteRevision, st.LastCompleteTemplate = rev, s.Spec.Template.DeepCopy()
		if st.FailedRevision == rev {
			st.FailedRevision = ""
		}
	case len(d.failures) > 0 && s.Spec.Strategy.AutoRevert && st.LastCompleteTemplate != nil && rev != st.LastCompleteRevision:
		// Remembered before any machine is reverted (see rolloutStrategy):
		// once reverted, nothing else says the revision failed. Without a
		// revision to go back to nothing is reverted, so the failed
		// machines themselves keep the set paused, and fixing them resumes
		// it as it does without autoRevert.
		st.FailedRevision = rev
	}
	st.Matched, st.Updated, st.Ready = int32(d.matched), int32(d.updated), int32(d.ready)
	st.Failed, st.Unavailable, st.Conflicting = int32(d.failed), int32(d.unavailable), int32(len(d.conflicts))
	st.ObservedGeneration = s.Generation
	st.Revisions = revisionHistory(rev, s.Status.Revisions, revisions)
	for _, cd := range conditions(s, rev, rs, d) {
		meta.SetStatusCondition(&st.Conditions, cd)
	}
	if equality.Semantic.DeepEqual(st, &s.Status) {
		return nil
	}
	s = s.DeepCopy()
	s.Status = *st
	if _, err := c.client.MusterV1alpha1().MachinePlanSets().UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the status: %w", err)
	}
	return nil
}

// revisionHistory is the set's revisions, newest first, with how many of
// its plans have each now: earlier revisions stay listed (with 0) so an
// operator sees what was rolled out before, at most api.MaxPlanSetRevisions.
func revisionHistory(rev string, before []api.PlanSetRevision, counts map[string]int) []api.PlanSetRevision {
	out := []api.PlanSetRevision{{Revision: rev, Machines: int32(counts[rev])}}
	seen := map[string]bool{rev: true}
	for _, r := range before {
		if !seen[r.Revision] {
			seen[r.Revision] = true
			out = append(out, api.PlanSetRevision{Revision: r.Revision, Machines: int32(counts[r.Revision])})
		}
	}
	// Revisions the status never listed (a set's plans from before a
	// restart that lost a status write) go last, in a stable order.
	var rest []string
	for r := range counts {
		if !seen[r] {
			rest = append(rest, r)
		}
	}
	sort.Strings(rest)
	for _, r := range rest {
		out = append(out, api.PlanSetRevision{Revision: r, Machines: int32(counts[r])})
	}
	if len(out) > api.MaxPlanSetRevisions {
		out = out[:api.MaxPlanSetRevisions]
	}
	return out
}
