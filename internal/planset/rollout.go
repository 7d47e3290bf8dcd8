package planset

import (
	"fmt"
	"sort"
	"strings"

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
	// failedMachines are owned machines that failed on the current revision.
	failedMachines []string
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
// are unavailable (not Running, or their plan not applied yet), never
// while paused, and never once a machine failed on rev.
func decide(set, rev string, selected []machineView, owned []string, maxUnavailable *intstr.IntOrString, paused bool) decision {
	d := decision{matched: len(selected), budget: resolveMaxUnavailable(maxUnavailable, len(selected))}
	sort.Slice(selected, func(i, j int) bool { return selected[i].name < selected[j].name })
	isSelected := map[string]bool{}
	var candidates []machineView
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
			if m.plan.applied {
				d.ready++
			}
			if m.plan.failed || m.failed {
				d.failedMachines = append(d.failedMachines, m.name)
			}
			continue
		}
		candidates = append(candidates, m)
	}
	for _, name := range owned {
		if !isSelected[name] {
			d.prune = append(d.prune, name)
		}
	}
	sort.Strings(d.prune)
	// Machines already unavailable go first: updating them does not take
	// one more machine out of service.
	sort.SliceStable(candidates, func(i, j int) bool { return !candidates[i].running && candidates[j].running })
	room := d.budget - d.unavailable
	for _, m := range candidates {
		alreadyOut := !m.running || (m.plan != nil && !m.plan.applied)
		if paused || len(d.failedMachines) > 0 || (!alreadyOut && room <= 0) {
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
