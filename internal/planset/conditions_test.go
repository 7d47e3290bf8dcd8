package planset

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestPausedIsNotProgressing: whatever pauses a rollout (a failure, an
// earlier failed revision, the spec), Paused and Progressing are never both
// True; a rollout that runs is Progressing and not Paused.
func TestPausedIsNotProgressing(t *testing.T) {
	for _, tc := range []struct {
		name        string
		specPaused  bool
		d           decision
		paused      metav1.ConditionStatus
		progressing metav1.ConditionStatus
	}{
		{"a machine failed", false, decision{matched: 2, ready: 1, failures: []failure{{machine: "m1"}}, halted: true}, metav1.ConditionTrue, metav1.ConditionFalse},
		{"past the progress deadline", false, decision{matched: 2, ready: 1, failures: []failure{{machine: "m1", deadline: true}}, halted: true}, metav1.ConditionTrue, metav1.ConditionFalse},
		{"failed before", false, decision{matched: 2, ready: 1, halted: true}, metav1.ConditionTrue, metav1.ConditionFalse},
		{"paused by spec", true, decision{matched: 2, ready: 1}, metav1.ConditionTrue, metav1.ConditionFalse},
		{"rolling out", false, decision{matched: 2, ready: 1}, metav1.ConditionFalse, metav1.ConditionTrue},
		{"rolled out", false, decision{matched: 2, ready: 2}, metav1.ConditionFalse, metav1.ConditionFalse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &api.MachinePlanSet{}
			s.Spec.Strategy.Paused = tc.specPaused
			out := conditions(s, "r1", strategy{partitions: nil}, tc.d)
			for typ, want := range map[string]metav1.ConditionStatus{api.PlanSetPaused: tc.paused, api.PlanSetProgressing: tc.progressing} {
				c := meta.FindStatusCondition(out, typ)
				if c == nil || c.Status != want {
					t.Errorf("%s = %+v, want %s", typ, c, want)
				}
			}
		})
	}
}
