package watchcache

import (
	"testing"
	"time"
)

// TestTrimPoint: snapshots go once older than keep, measured from when the
// trimmer saw the newest event's revision, and the newest event's
// snapshot is never trimmed, however idle the resource.
func TestTrimPoint(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	keep := 60 * time.Second
	type step struct {
		after  time.Duration // since t0
		newest uint64        // newest event's revision then
		want   uint64        // trim below; 0 = nothing
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing before keep has passed", []step{{0, 10, 0}, {10 * time.Second, 20, 0}, {50 * time.Second, 30, 0}}},
		{"trims to the newest revision as of keep ago", []step{{0, 10, 0}, {30 * time.Second, 20, 0}, {60 * time.Second, 25, 10}, {90 * time.Second, 30, 20}}},
		{"an idle resource keeps its newest snapshot", []step{{0, 10, 0}, {60 * time.Second, 10, 10}, {120 * time.Second, 10, 0}, {600 * time.Second, 10, 0}}},
		{"a resource without events is never trimmed", []step{{0, 0, 0}, {60 * time.Second, 0, 0}, {120 * time.Second, 0, 0}}},
		{"a long gap between trims", []step{{0, 5, 0}, {10 * time.Second, 7, 0}, {500 * time.Second, 9, 7}, {510 * time.Second, 11, 0}, {560 * time.Second, 11, 9}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := &resourceCache{}
			for i, s := range tc.steps {
				rc.newest = s.newest
				if got := rc.trimPoint(t0.Add(s.after), keep); got != s.want {
					t.Fatalf("step %d (at %v, newest %d): trim below %d, want %d", i, s.after, s.newest, got, s.want)
				}
				if s.want > s.newest {
					t.Fatalf("step %d: trimming below %d would drop the newest snapshot (%d)", i, s.want, s.newest)
				}
			}
			if len(rc.samples) > 8 {
				t.Errorf("%d samples kept; old ones should be dropped", len(rc.samples))
			}
		})
	}
}
