package planset

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestDecide(t *testing.T) {
	const set, rev, old = "web", "r2", "r1"
	ready := func(name, r string) machineView {
		return machineView{name: name, running: true, plan: &planView{set: set, revision: r, applied: true}}
	}
	bare := func(name string) machineView { return machineView{name: name, running: true} }
	count := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// in puts a machine in partition p (0 is the first).
	in := func(m machineView, p int) machineView { m.partition = p; return m }
	written := func(r string, applied, healthy bool, at time.Duration) *planView {
		return &planView{set: set, revision: r, applied: applied, healthy: healthy, writtenAt: t0.Add(at)}
	}
	cpw := []string{"control-plane", "worker"}
	tests := []struct {
		name           string
		selected       []machineView
		owned          []string
		maxUnavailable *intstr.IntOrString
		paused         bool
		// partitions, failedRevision, revertTo and deadline are the rest
		// of the strategy; now is t0 plus elapsed.
		partitions            []string
		failedRevision        string
		revertTo              string
		deadline, elapsed     time.Duration
		create, update, prune []string
		revert                []string
		conflicts             int
		waiting               int
		halted                bool
		partition             string
	}{
		{
			name:     "default budget 1 starts one machine of three",
			selected: []machineView{ready("a", old), ready("b", old), ready("c", old)},
			owned:    []string{"a", "b", "c"},
			update:   []string{"a"}, waiting: 2,
		},
		{
			name:     "a machine still applying uses up the budget",
			selected: []machineView{{name: "a", running: true, plan: &planView{set: set, revision: rev}}, ready("b", old)},
			owned:    []string{"a", "b"},
			waiting:  1,
		},
		{
			name:           "a machine not Running uses up the budget",
			selected:       []machineView{{name: "a", plan: &planView{set: set, revision: rev, applied: true}}, ready("b", old), ready("c", old)},
			owned:          []string{"a", "b", "c"},
			maxUnavailable: count(2),
			update:         []string{"b"}, waiting: 1,
		},
		{
			name:           "an unavailable machine is updated first and for free",
			selected:       []machineView{ready("a", old), {name: "b", plan: &planView{set: set, revision: old, applied: true}}},
			owned:          []string{"a", "b"},
			maxUnavailable: count(1),
			update:         []string{"b"}, waiting: 1,
		},
		{
			name:           "a percent rounds down but never below one",
			selected:       []machineView{ready("a", old), ready("b", old), ready("c", old)},
			owned:          []string{"a", "b", "c"},
			maxUnavailable: pct("50%"),
			update:         []string{"a"}, waiting: 2,
		},
		{
			name:           "100% updates everything at once",
			selected:       []machineView{ready("a", old), ready("b", old), bare("c")},
			owned:          []string{"a", "b"},
			maxUnavailable: pct("100%"),
			create:         []string{"c"}, update: []string{"a", "b"},
		},
		{
			name:     "paused starts nothing",
			selected: []machineView{ready("a", old), bare("b")},
			owned:    []string{"a"},
			paused:   true,
			waiting:  2,
		},
		{
			name:           "a machine failed on the current revision stops the rollout",
			selected:       []machineView{{name: "a", running: true, plan: &planView{set: set, revision: rev, failed: true}}, ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(5),
			waiting:        1, halted: true,
		},
		{
			name:           "a hand-written plan is a conflict and never written",
			selected:       []machineView{{name: "a", running: true, plan: &planView{applied: true}}, bare("b")},
			maxUnavailable: count(5),
			create:         []string{"b"}, conflicts: 1,
		},
		{
			name:           "a machine two sets select keeps its plan",
			selected:       []machineView{{name: "a", running: true, plan: &planView{set: set, revision: old, applied: true}, otherSets: []string{"db"}}, {name: "b", running: true, otherSets: []string{"db"}}},
			owned:          []string{"a"},
			maxUnavailable: count(5),
			conflicts:      2,
		},
		{
			name:           "another set's plan is a conflict",
			selected:       []machineView{{name: "a", running: true, plan: &planView{set: "db", revision: "x", applied: true}}},
			maxUnavailable: count(5),
			conflicts:      1,
		},
		{
			name:     "a machine no longer selected has its plan pruned",
			selected: []machineView{ready("a", rev)},
			owned:    []string{"a", "gone", "relabelled"},
			prune:    []string{"gone", "relabelled"},
		},
		{
			name:     "pruning does not wait for the budget",
			selected: []machineView{{name: "a", plan: &planView{set: set, revision: rev}}},
			owned:    []string{"a", "b"},
			paused:   true,
			prune:    []string{"b"},
		},
		{
			name:           "partitions: workers wait for the control plane to apply",
			selected:       []machineView{in(ready("cp", old), 0), in(ready("w1", old), 1), in(ready("w2", old), 1)},
			owned:          []string{"cp", "w1", "w2"},
			maxUnavailable: count(5), partitions: cpw,
			update: []string{"cp"}, waiting: 2, partition: "control-plane",
		},
		{
			name:           "partitions: the control plane updating still holds the workers",
			selected:       []machineView{in(machineView{name: "cp", running: true, plan: &planView{set: set, revision: rev}}, 0), in(ready("w1", old), 1)},
			owned:          []string{"cp", "w1"},
			maxUnavailable: count(5), partitions: cpw,
			waiting: 1, partition: "control-plane",
		},
		{
			name:           "partitions: once the control plane applied, workers go within maxUnavailable",
			selected:       []machineView{in(ready("cp", rev), 0), in(ready("w1", old), 1), in(ready("w2", old), 1), in(ready("w3", old), 1)},
			owned:          []string{"cp", "w1", "w2", "w3"},
			maxUnavailable: count(2), partitions: cpw,
			update: []string{"w1", "w2"}, waiting: 1, partition: "worker",
		},
		{
			name:           "partitions: machines no partition selects go last",
			selected:       []machineView{in(ready("cp", rev), 0), in(ready("w1", old), 1), in(ready("x", old), 2)},
			owned:          []string{"cp", "w1", "x"},
			maxUnavailable: count(5), partitions: cpw,
			update: []string{"w1"}, waiting: 1, partition: "worker",
		},
		{
			name:           "partitions: the implicit last partition is named",
			selected:       []machineView{in(ready("cp", rev), 0), in(ready("x", old), 2)},
			owned:          []string{"cp", "x"},
			maxUnavailable: count(5), partitions: cpw,
			update: []string{"x"}, partition: "(rest)",
		},
		{
			name:           "partitions: an empty partition is skipped",
			selected:       []machineView{in(ready("w1", old), 1)},
			owned:          []string{"w1"},
			maxUnavailable: count(5), partitions: cpw,
			update: []string{"w1"}, partition: "worker",
		},
		{
			name:           "partitions: a machine joining an earlier partition gets the revision first",
			selected:       []machineView{in(bare("cp2"), 0), in(ready("cp", rev), 0), in(ready("w1", old), 1)},
			owned:          []string{"cp", "w1"},
			maxUnavailable: count(5), partitions: cpw,
			create: []string{"cp2"}, waiting: 1, partition: "control-plane",
		},
		{
			name:       "partitions: complete reports no partition",
			selected:   []machineView{in(ready("cp", rev), 0), in(ready("w1", rev), 1)},
			owned:      []string{"cp", "w1"},
			partitions: cpw,
		},
		{
			name:           "autoRevert: the failed batch goes back once the failure is remembered",
			selected:       []machineView{{name: "a", plan: &planView{set: set, revision: rev, failed: true}}, {name: "b", running: true, plan: &planView{set: set, revision: rev, applied: true}}, ready("c", old)},
			owned:          []string{"a", "b", "c"},
			maxUnavailable: count(2), failedRevision: rev, revertTo: old,
			revert: []string{"a", "b"}, waiting: 1, halted: true,
		},
		{
			name:           "autoRevert: nothing is reverted before the failure is remembered",
			selected:       []machineView{{name: "a", failed: true, plan: &planView{set: set, revision: rev}}, ready("c", old)},
			owned:          []string{"a", "c"},
			maxUnavailable: count(2),
			waiting:        1, halted: true,
		},
		{
			name:           "autoRevert: a remembered failed revision is not rolled again after the revert",
			selected:       []machineView{ready("a", old), ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(2), failedRevision: rev, revertTo: old,
			waiting: 2, halted: true,
		},
		{
			name:           "autoRevert: a failure of an older revision does not hold a new one",
			selected:       []machineView{ready("a", old), ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(2), failedRevision: "r0",
			update: []string{"a", "b"},
		},
		{
			name:           "deadline: a plan not applied past the deadline fails the revision",
			selected:       []machineView{{name: "a", running: true, plan: written(rev, false, true, 0)}, ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(2), deadline: time.Minute, elapsed: 2 * time.Minute,
			waiting: 1, halted: true,
		},
		{
			name:           "deadline: probes unhealthy past the deadline fail the revision",
			selected:       []machineView{{name: "a", running: true, plan: written(rev, true, false, 0)}, ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(2), deadline: time.Minute, elapsed: 2 * time.Minute,
			waiting: 1, halted: true,
		},
		{
			name:           "deadline: within it the rollout goes on",
			selected:       []machineView{{name: "a", running: true, plan: written(rev, false, false, 0)}, ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(2), deadline: time.Minute, elapsed: 30 * time.Second,
			update: []string{"b"},
		},
		{
			name:           "deadline: an applied, healthy plan never expires",
			selected:       []machineView{{name: "a", running: true, plan: written(rev, true, true, 0)}, ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(2), deadline: time.Minute, elapsed: time.Hour,
			update: []string{"b"},
		},
		{
			name:           "deadline: a plan of unknown age never expires",
			selected:       []machineView{{name: "a", running: true, plan: &planView{set: set, revision: rev}}, ready("b", old)},
			owned:          []string{"a", "b"},
			maxUnavailable: count(2), deadline: time.Minute, elapsed: time.Hour,
			update: []string{"b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(set, rev, tt.selected, tt.owned, strategy{
				maxUnavailable: tt.maxUnavailable, paused: tt.paused, partitions: tt.partitions,
				failedRevision: tt.failedRevision, revertTo: tt.revertTo, deadline: tt.deadline, now: t0.Add(tt.elapsed),
			})
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"create", d.create, tt.create}, {"update", d.update, tt.update}, {"prune", d.prune, tt.prune}, {"revert", d.revert, tt.revert}} {
				if !slices.Equal(c.got, c.want) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
			if len(d.conflicts) != tt.conflicts {
				t.Errorf("conflicts = %v, want %d", d.conflicts, tt.conflicts)
			}
			if d.waiting != tt.waiting {
				t.Errorf("waiting = %d, want %d", d.waiting, tt.waiting)
			}
			if d.halted != tt.halted {
				t.Errorf("halted = %v, want %v", d.halted, tt.halted)
			}
			if got := partitionName(tt.partitions, d.partition); got != tt.partition {
				t.Errorf("partition = %q, want %q", got, tt.partition)
			}
			if d.unavailable > max(d.budget, countUnavailable(tt.selected)) {
				t.Errorf("unavailable %d exceeds maxUnavailable %d", d.unavailable, d.budget)
			}
		})
	}
}

// countUnavailable is how many machines were unavailable before the
// decision: a rollout never adds to them beyond the budget.
func countUnavailable(ms []machineView) int {
	n := 0
	for _, m := range ms {
		if !m.running || (m.plan != nil && m.plan.set != "" && !m.plan.applied) {
			n++
		}
	}
	return n
}
