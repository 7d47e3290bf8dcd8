package planset

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// machineView is what a rollout decision needs of one selected machine.
type machineView struct {
	name string
	// running is the Machine's phase being Running; anything else
	// (Updating, Unavailable, Failed, not joined yet) uses up the budget.
	running bool
	// failed is the Machine's phase being Failed.
	failed bool
	// plan is the machine's MachinePlan, nil if it has none.
	plan *planView
	// otherSets are the other plan sets that also select the machine.
	otherSets []string
	// partition is the index of the first partition selecting it; the
	// number of partitions if none does (the implicit last one).
	partition int
}

// planView is what a rollout decision needs of one MachinePlan.
type planView struct {
	// set is the plan set that wrote it; "" for a hand-written plan.
	set string
	// revision is the set's template revision it was written from.
	revision string
	// applied: the agent ran this plan to the end and it succeeded.
	applied bool
	// failed: the plan's state is failed.
	failed bool
	// healthy: every probe of the plan is healthy (true without probes).
	healthy bool
	// writtenAt is when the set wrote the plan; zero if unknown (a plan
	// from before the annotation), which never counts against a deadline.
	writtenAt time.Time
}

// strategy is the rollout bounds and memory one decision works within.
type strategy struct {
	maxUnavailable *intstr.IntOrString
	paused         bool
	// partitions are the names of the spec's partitions, in order.
	partitions []string
	// deadline is progressDeadline; 0 disables it.
	deadline time.Duration
	now      time.Time
	// failedRevision is status.failedRevision: the revision already known
	// failed, on which nothing is started again.
	failedRevision string
	// revertTo is the revision the machines on a failed revision go back
	// to, "" when autoRevert is off or no revision completed before.
	revertTo string
}

// failure is a machine that failed on the current revision, and how.
type failure struct {
	machine string
	// deadline: its plan was not applied and healthy within the
	// progress deadline (else the plan or the machine Failed).
	deadline bool
}

// conflict is a selected machine the set leaves alone, and why.
type conflict struct {
	machine, reason string
}

// decision is what one reconcile of a set does and reports.
type decision struct {
	// create and update name the machines whose plan is written now, with
	// the current revision; prune names the set's plans to delete.
	create, update, prune []string
	conflicts             []conflict
	// Counts for the status.
	matched, updated, ready, failed, unavailable int
	// failures are owned machines that failed on the current revision.
	failures []failure
	// halted: nothing more is started on the current revision, as it
	// failed now or failed before (strategy.failedRevision).
	halted bool
	// revert names the machines put back on strategy.revertTo now.
	revert []string
	// partition is the index of the partition being rolled out, -1 when
	// there are no partitions or every machine applied the revision.
	partition int
	// waiting is how many owned machines still need the current revision
	// and were not started this time (budget, pause or failure).
	waiting int
	// budget is maxUnavailable resolved against matched.
	budget int
}

// resolveMaxUnavailable turns the strategy's count or percent into a count
// of machines: default 1, a percent rounded down but never below 1, so a
// small fleet still rolls.
func resolveMaxUnavailable(v *intstr.IntOrString, matched int) int {
	if v == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, matched, false)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// decide is the set's desired-set and rollout logic, without I/O.
// selected are the machines the set selects; owned are the names of the
// machines whose plan the set wrote, selected or not. A machine's plan is
// created or moved to rev only while fewer than budget selected machines
// are unavailable (not Running, or their plan not applied yet), only in
// the first partition not yet done, never while paused, and never once a
// machine failed on rev; then, with st.revertTo, the machines on rev go
// back to it.
func decide(set, rev string, selected []machineView, owned []string, st strategy) decision {
	d := decision{matched: len(selected), budget: resolveMaxUnavailable(st.maxUnavailable, len(selected)), partition: -1}
	sort.Slice(selected, func(i, j int) bool { return selected[i].name < selected[j].name })
	isSelected := map[string]bool{}
	var candidates, onRev []machineView
	// pending is, by partition, whether some machine of it has not
	// applied rev yet: the first such partition is the one rolled out.
	pending := map[int]bool{}
	for _, m := range selected {
		isSelected[m.name] = true
		mine := m.plan != nil && m.plan.set == set
		busy := !m.running || (mine && !m.plan.applied)
		if busy {
			d.unavailable++
		}
		switch {
		case len(m.otherSets) > 0:
			// Two sets on one machine: neither touches its plan, so it
			// never flips between them; the operator narrows a selector.
			d.conflicts = append(d.conflicts, conflict{m.name, fmt.Sprintf("also selected by plan set %s", strings.Join(m.otherSets, ", "))})
			continue
		case m.plan != nil && m.plan.set == "":
			d.conflicts = append(d.conflicts, conflict{m.name, "has a hand-written plan (no " + "muster.io/plan-set label), which a set never overwrites"})
			continue
		case m.plan != nil && !mine:
			d.conflicts = append(d.conflicts, conflict{m.name, "has the plan of plan set " + m.plan.set})
			continue
		}
		if mine && m.plan.failed {
			d.failed++
		}
		if mine && m.plan.revision == rev {
			d.updated++
			onRev = append(onRev, m)
			if m.plan.applied {
				d.ready++
			} else {
				pending[m.partition] = true
			}
			switch {
			case m.plan.failed || m.failed:
				d.failures = append(d.failures, failure{machine: m.name})
			case st.deadline > 0 && !m.plan.writtenAt.IsZero() && !(m.plan.applied && m.plan.healthy) && st.now.Sub(m.plan.writtenAt) > st.deadline:
				d.failures = append(d.failures, failure{machine: m.name, deadline: true})
			}
			continue
		}
		pending[m.partition] = true
		candidates = append(candidates, m)
	}
	for _, name := range owned {
		if !isSelected[name] {
			d.prune = append(d.prune, name)
		}
	}
	sort.Strings(d.prune)
	d.halted = len(d.failures) > 0 || (rev == st.failedRevision && rev != "")
	if d.halted && st.revertTo != "" && st.revertTo != rev {
		// The whole batch goes back, not just the failed machines: the
		// revision is bad, and the batch was within the budget already.
		for _, m := range onRev {
			d.revert = append(d.revert, m.name)
		}
	}
	if len(st.partitions) > 0 {
		for p := 0; p <= len(st.partitions); p++ {
			if pending[p] {
				d.partition = p
				break
			}
		}
	}
	// Machines already unavailable go first: updating them does not take
	// one more machine out of service.
	sort.SliceStable(candidates, func(i, j int) bool { return !candidates[i].running && candidates[j].running })
	room := d.budget - d.unavailable
	for _, m := range candidates {
		alreadyOut := !m.running || (m.plan != nil && !m.plan.applied)
		laterPartition := d.partition >= 0 && m.partition > d.partition
		if st.paused || d.halted || laterPartition || (!alreadyOut && room <= 0) {
			d.waiting++
			continue
		}
		if !alreadyOut {
			room--
			d.unavailable++
		}
		if m.plan == nil {
			d.create = append(d.create, m.name)
		} else {
			d.update = append(d.update, m.name)
		}
	}
	return d
}

// partitionName names partition p of names for the status.
func partitionName(names []string, p int) string {
	switch {
	case p < 0:
		return ""
	case p < len(names):
		return names[p]
	}
	return implicitPartition
}

// implicitPartition names the machines no partition selects.
const implicitPartition = "(rest)"
