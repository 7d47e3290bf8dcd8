package planset

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestViewLaggingCache: until the cache shows a write of the controller,
// the plan is taken as written, so a reconcile on the stale cache neither
// writes it again nor counts the machine as available.
func TestViewLaggingCache(t *testing.T) {
	plan := func(set, rev string, applied bool) *api.MachinePlan {
		p := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "m", Labels: map[string]string{api.PlanSetLabel: set, api.PlanSetRevisionLabel: rev}}}
		p.Spec.Files = []api.PlanFile{{Path: "/etc/x"}}
		p.Status.Checksum = "c"
		if applied {
			p.Status.State, p.Status.AppliedChecksum = api.PlanStateSucceeded, "c"
		}
		return p
	}
	placeholder := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
	tests := []struct {
		name    string
		expect  *expectation
		cached  *api.MachinePlan
		want    *planView
		dropped bool // the expectation is gone afterwards
	}{
		{"no expectation: the cache", nil, plan("s", "r1", true), &planView{set: "s", revision: "r1", applied: true}, true},
		{"the join's empty plan is no plan", nil, placeholder, nil, true},
		{"a write the cache has not shown", &expectation{set: "s", revision: "r2", at: time.Now()}, plan("s", "r1", true), &planView{set: "s", revision: "r2"}, false},
		{"a create the cache has not shown", &expectation{set: "s", revision: "r2", at: time.Now()}, nil, &planView{set: "s", revision: "r2"}, false},
		{"a write the cache shows", &expectation{set: "s", revision: "r2", at: time.Now()}, plan("s", "r2", false), &planView{set: "s", revision: "r2"}, true},
		{"a delete the cache has not shown", &expectation{set: "s", deleted: true, at: time.Now()}, plan("s", "r1", true), nil, false},
		{"an expectation timed out", &expectation{set: "s", revision: "r2", at: time.Now().Add(-time.Hour)}, plan("s", "r1", true), &planView{set: "s", revision: "r1", applied: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Controller{expect: map[string]expectation{}}
			if tt.expect != nil {
				c.expect["m"] = *tt.expect
			}
			got := c.view("m", tt.cached)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("view = %+v, want %+v", got, tt.want)
			}
			if _, kept := c.expect["m"]; kept == tt.dropped {
				t.Errorf("expectation kept = %v, want %v", kept, !tt.dropped)
			}
		})
	}
}
