package planset

import (
	"slices"
	"testing"

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
	tests := []struct {
		name                  string
		selected              []machineView
		owned                 []string
		maxUnavailable        *intstr.IntOrString
		paused                bool
		create, update, prune []string
		conflicts             int
		waiting               int
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
			waiting:        1,
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decide(set, rev, tt.selected, tt.owned, tt.maxUnavailable, tt.paused)
			for _, c := range []struct {
				what      string
				got, want []string
			}{{"create", d.create, tt.create}, {"update", d.update, tt.update}, {"prune", d.prune, tt.prune}} {
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
