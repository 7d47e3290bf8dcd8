package validation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestValidatePlanSet(t *testing.T) {
	good := func() *api.MachinePlanSet {
		return &api.MachinePlanSet{Spec: api.MachinePlanSetSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}},
			Template: api.MachinePlanSpec{Files: []api.PlanFile{{Path: "/etc/muster/x", Content: "x"}}},
		}}
	}
	count := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	drain := func(path string, timeout *metav1.Duration) *api.MachinePlanSetDrain {
		return &api.MachinePlanSetDrain{Template: api.MachinePlanSpec{Files: []api.PlanFile{{Path: path, Content: "x"}}}, Timeout: timeout}
	}
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	part := func(name, role string) api.PlanSetPartition {
		return api.PlanSetPartition{Name: name, Selector: metav1.LabelSelector{MatchLabels: map[string]string{"role": role}}}
	}
	deadline := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	tests := []struct {
		name   string
		change func(s *api.MachinePlanSet)
		want   string // a substring of the error; "" for valid
	}{
		{"valid", func(*api.MachinePlanSet) {}, ""},
		{"matchAll with an empty selector", func(s *api.MachinePlanSet) { s.Spec.Selector = metav1.LabelSelector{}; s.Spec.MatchAll = true }, ""},
		{"percent", func(s *api.MachinePlanSet) { s.Spec.Strategy.MaxUnavailable = pct("25%") }, ""},
		{"empty selector", func(s *api.MachinePlanSet) { s.Spec.Selector = metav1.LabelSelector{} }, "spec.matchAll: true"},
		{"matchAll and a selector", func(s *api.MachinePlanSet) { s.Spec.MatchAll = true }, "cannot be combined"},
		{"maxUnavailable 0", func(s *api.MachinePlanSet) { s.Spec.Strategy.MaxUnavailable = count(0) }, "at least 1"},
		{"percent over 100", func(s *api.MachinePlanSet) { s.Spec.Strategy.MaxUnavailable = pct("150%") }, "1% to 100%"},
		{"not a percent", func(s *api.MachinePlanSet) { s.Spec.Strategy.MaxUnavailable = pct("half") }, "a percent such as"},
		{"bad label key", func(s *api.MachinePlanSet) { s.Spec.Selector.MatchLabels = map[string]string{"bad key!": "x"} }, "spec.selector.matchLabels"},
		{"bad cluster", func(s *api.MachinePlanSet) { s.Spec.Cluster = "Not_A_Name" }, "spec.cluster"},
		{"partitions", func(s *api.MachinePlanSet) {
			s.Spec.Strategy.Partitions = []api.PlanSetPartition{part("control-plane", "control-plane"), part("worker", "worker")}
		}, ""},
		{"duplicate partition", func(s *api.MachinePlanSet) {
			s.Spec.Strategy.Partitions = []api.PlanSetPartition{part("a", "x"), part("a", "y")}
		}, "Duplicate value"},
		{"bad partition name", func(s *api.MachinePlanSet) {
			s.Spec.Strategy.Partitions = []api.PlanSetPartition{part("Bad_Name", "x")}
		}, "spec.strategy.partitions[0].name"},
		{"empty partition selector", func(s *api.MachinePlanSet) {
			s.Spec.Strategy.Partitions = []api.PlanSetPartition{{Name: "all"}}
		}, "leaves the later ones empty"},
		{"bad partition selector", func(s *api.MachinePlanSet) {
			s.Spec.Strategy.Partitions = []api.PlanSetPartition{part("a", "bad value!")}
		}, "spec.strategy.partitions[0].selector"},
		{"too many partitions", func(s *api.MachinePlanSet) {
			for i := 0; i <= api.MaxPlanSetPartitions; i++ {
				s.Spec.Strategy.Partitions = append(s.Spec.Strategy.Partitions, part(fmt.Sprintf("p%d", i), "x"))
			}
		}, "Too many"},
		{"progressDeadline", func(s *api.MachinePlanSet) { s.Spec.Strategy.ProgressDeadline = deadline(time.Minute) }, ""},
		{"progressDeadline too short", func(s *api.MachinePlanSet) { s.Spec.Strategy.ProgressDeadline = deadline(time.Second) }, "10s to 24h"},
		{"progressDeadline too long", func(s *api.MachinePlanSet) { s.Spec.Strategy.ProgressDeadline = deadline(48 * time.Hour) }, "10s to 24h"},
		{"bad template", func(s *api.MachinePlanSet) { s.Spec.Template.Files[0].Path = "relative" }, "spec.template.files[0].path"},
		{"drain", func(s *api.MachinePlanSet) { s.Spec.Drain = drain("/etc/muster/drain", nil) }, ""},
		{"drain with a timeout", func(s *api.MachinePlanSet) { s.Spec.Drain = drain("/etc/muster/drain", dur(time.Minute)) }, ""},
		{"bad drain template", func(s *api.MachinePlanSet) { s.Spec.Drain = drain("relative", nil) }, "spec.drain.template.files[0].path"},
		{"drain timeout 0", func(s *api.MachinePlanSet) { s.Spec.Drain = drain("/etc/muster/drain", dur(0)) }, "spec.drain.timeout"},
		{"drain timeout negative", func(s *api.MachinePlanSet) { s.Spec.Drain = drain("/etc/muster/drain", dur(-time.Minute)) }, "must be 1s to 24h0m0s"},
		{"drain timeout over a day", func(s *api.MachinePlanSet) { s.Spec.Drain = drain("/etc/muster/drain", dur(25*time.Hour)) }, "must be 1s to 24h0m0s"},
		{"onUnmatch Keep", func(s *api.MachinePlanSet) { s.Spec.OnUnmatch = api.OnUnmatchKeep }, ""},
		{"onUnmatch RemoveFiles", func(s *api.MachinePlanSet) { s.Spec.OnUnmatch = api.OnUnmatchRemoveFiles }, ""},
		{"onUnmatch unknown", func(s *api.MachinePlanSet) { s.Spec.OnUnmatch = "Shred" }, "spec.onUnmatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.change(s)
			errs := ValidateMachinePlanSet(s)
			switch {
			case tt.want == "" && len(errs) > 0:
				t.Fatalf("refused: %v", errs)
			case tt.want != "" && !strings.Contains(errs.ToAggregate().Error(), tt.want):
				t.Fatalf("errors %v do not say %q", errs, tt.want)
			}
		})
	}
}
