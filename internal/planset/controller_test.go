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
	now := time.Now()
	// stamped is a plan the set wrote at a known time whose probe is down:
	// the deadline counts from the annotation, which a restart keeps.
	stamped := plan("s", "r1", true)
	stamped.Annotations = map[string]string{api.PlanSetWrittenAtAnnotation: "2026-01-02T03:04:05Z"}
	stamped.Status.Probes = []api.ProbeStatus{{Healthy: true}, {Healthy: false}}
	tests := []struct {
		name    string
		expect  *expectation
		cached  *api.MachinePlan
		want    *planView
		dropped bool // the expectation is gone afterwards
	}{
		{"no expectation: the cache", nil, plan("s", "r1", true), &planView{set: "s", revision: "r1", applied: true, healthy: true}, true},
		{"a stamped plan with a probe down", nil, stamped, &planView{set: "s", revision: "r1", applied: true, writtenAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, true},
		{"the join's empty plan is no plan", nil, placeholder, nil, true},
		{"a write the cache has not shown", &expectation{set: "s", revision: "r2", at: now}, plan("s", "r1", true), &planView{set: "s", revision: "r2", writtenAt: now}, false},
		{"a create the cache has not shown", &expectation{set: "s", revision: "r2", at: now}, nil, &planView{set: "s", revision: "r2", writtenAt: now}, false},
		{"a write the cache shows", &expectation{set: "s", revision: "r2", at: now}, plan("s", "r2", false), &planView{set: "s", revision: "r2", healthy: true}, true},
		{"a delete the cache has not shown", &expectation{set: "s", deleted: true, at: time.Now()}, plan("s", "r1", true), nil, false},
		{"an expectation timed out", &expectation{set: "s", revision: "r2", at: time.Now().Add(-time.Hour)}, plan("s", "r1", true), &planView{set: "s", revision: "r1", applied: true, healthy: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Controller{expect: map[string]expectation{}}
			if tt.expect != nil {
				c.expect["m"] = *tt.expect
			}
			got := c.view("m", tt.cached)
			if (got == nil) != (tt.want == nil) || (got != nil && (got.set != tt.want.set || got.revision != tt.want.revision || got.applied != tt.want.applied ||
				got.failed != tt.want.failed || got.healthy != tt.want.healthy || !got.writtenAt.Equal(tt.want.writtenAt))) {
				t.Errorf("view = %+v, want %+v", got, tt.want)
			}
			if _, kept := c.expect["m"]; kept == tt.dropped {
				t.Errorf("expectation kept = %v, want %v", kept, !tt.dropped)
			}
		})
	}
}
