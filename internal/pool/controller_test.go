package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestVictims(t *testing.T) {
	at := func(min int) metav1.Time {
		return metav1.NewTime(time.Unix(0, 0).Add(time.Duration(min) * time.Minute))
	}
	m := func(name string, phase api.MachinePhase, created int) *api.Machine {
		return &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)}, Status: api.MachineStatus{Phase: phase}}
	}
	cases := []struct {
		name string
		ms   []*api.Machine
		n    int
		want []string
	}{
		{"newest Running first", []*api.Machine{m("a", "Running", 1), m("b", "Running", 3), m("c", "Running", 2)}, 1, []string{"b"}},
		{"not Running before Running", []*api.Machine{m("a", "Running", 1), m("b", "Running", 3), m("c", "Unavailable", 0)}, 2, []string{"c", "b"}},
		{"ties by name", []*api.Machine{m("a", "Failed", 1), m("b", "Failed", 1)}, 1, []string{"b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := victims(tc.ms, tc.n, "")
			var names []string
			for _, v := range got {
				names = append(names, v.Name)
			}
			if len(names) != len(tc.want) {
				t.Fatalf("victims = %v, want %v", names, tc.want)
			}
			for i := range names {
				if names[i] != tc.want[i] {
					t.Fatalf("victims = %v, want %v", names, tc.want)
				}
			}
		})
	}
}

func TestRevisionFollowsTemplate(t *testing.T) {
	a := api.MachineTemplate{Driver: "process", Labels: map[string]string{"role": "worker"}}
	b := api.MachineTemplate{Driver: "process", Labels: map[string]string{"role": "worker"}}
	if Revision(a) != Revision(b) {
		t.Fatal("equal templates have different revisions")
	}
	b.Labels["role"] = "edge"
	if Revision(a) == Revision(b) {
		t.Fatal("a changed template keeps its revision")
	}
}
