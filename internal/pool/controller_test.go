package pool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func TestVictims(t *testing.T) {
	at := func(min int) metav1.Time {
		return metav1.NewTime(time.Unix(0, 0).Add(time.Duration(min) * time.Minute))
	}
	m := func(name string, phase api.MachinePhase, created int) *api.Machine {
		return &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)}, Status: api.MachineStatus{Phase: phase}}
	}
	// Made in the same second, apart by milliseconds.
	ms := func(name string, millis int) *api.Machine {
		x := m(name, "Running", 1)
		x.Annotations = map[string]string{createdAtAnnotation: at(1).Add(time.Duration(millis) * time.Millisecond).Format(time.RFC3339Nano)}
		return x
	}
	cases := []struct {
		name   string
		ms     []*api.Machine
		n      int
		policy string
		want   []string
	}{
		{"newest Running first", []*api.Machine{m("a", "Running", 1), m("b", "Running", 3), m("c", "Running", 2)}, 1, "", []string{"b"}},
		{"oldest first with Oldest", []*api.Machine{m("a", "Running", 1), m("b", "Running", 3), m("c", "Running", 2)}, 2, "Oldest", []string{"a", "c"}},
		{"not Running before Running", []*api.Machine{m("a", "Running", 1), m("b", "Running", 3), m("c", "Unavailable", 0)}, 2, "", []string{"c", "b"}},
		{"ties by name", []*api.Machine{m("a", "Failed", 1), m("b", "Failed", 1)}, 1, "", []string{"b"}},
		{"within one second, Newest", []*api.Machine{ms("z", 100), ms("a", 900), ms("m", 500)}, 2, "Newest", []string{"a", "m"}},
		{"within one second, Oldest", []*api.Machine{ms("z", 100), ms("a", 900), ms("m", 500)}, 2, "Oldest", []string{"z", "m"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := victims(tc.ms, tc.n, tc.policy)
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

func TestExpectations(t *testing.T) {
	machine := func(name string, uid types.UID, deleting bool) *api.Machine {
		m := &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
		if deleting {
			now := metav1.Now()
			m.DeletionTimestamp = &now
		}
		return m
	}
	tests := []struct {
		name    string
		created []string
		deleted []types.UID
		listed  []*api.Machine
		want    bool
	}{
		{"nothing expected", nil, nil, nil, false},
		{"a create the cache has not shown", []string{"p-a"}, nil, nil, true},
		{"a create the cache shows", []string{"p-a"}, nil, []*api.Machine{machine("p-a", "1", false)}, false},
		{"a delete the cache still shows live", nil, []types.UID{"1"}, []*api.Machine{machine("p-a", "1", false)}, true},
		{"a delete the cache shows deleting", nil, []types.UID{"1"}, []*api.Machine{machine("p-a", "1", true)}, false},
		{"a delete the cache shows gone", nil, []types.UID{"1"}, nil, false},
		{"a machine recreated under the name of a deleted one", nil, []types.UID{"1"}, []*api.Machine{machine("p-a", "2", false)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e expectations
			for _, n := range tt.created {
				e.create("p", n)
			}
			for _, u := range tt.deleted {
				e.delete("p", u)
			}
			if got := e.pending("p", tt.listed); got != tt.want {
				t.Errorf("pending = %v, want %v", got, tt.want)
			}
			if got := e.pending("other", nil); got {
				t.Errorf("another pool waits on this pool's expectations")
			}
			// Once shown, an expectation is dropped for good.
			if !tt.want && e.pending("p", nil) && len(tt.created) > 0 {
				t.Errorf("a satisfied create is still expected")
			}
		})
	}

	// An event lost for good stalls a pool for expectationTimeout at most.
	var e expectations
	e.create("p", "p-lost")
	e.created["p"]["p-lost"] = time.Now().Add(-expectationTimeout - time.Second)
	if e.pending("p", nil) {
		t.Errorf("an expectation past its timeout still holds the pool")
	}
}

func TestUnhealthy(t *testing.T) {
	now := time.Unix(10000, 0)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	m := func(name string, phase api.MachinePhase, created, since time.Duration) *api.Machine {
		x := &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: ago(created)}, Status: api.MachineStatus{Phase: phase}}
		if since > 0 {
			x.Status.Transitions = []api.Transition{{To: string(phase), Time: ago(since)}}
		}
		return x
	}
	d := func(v time.Duration) *metav1.Duration { return &metav1.Duration{Duration: v} }
	tests := []struct {
		name   string
		health api.MachinePoolHealth
		ms     []*api.Machine
		want   []string
	}{
		{"Unavailable past the timeout", api.MachinePoolHealth{UnhealthyTimeout: d(time.Minute)}, []*api.Machine{m("a", "Unavailable", time.Hour, 2*time.Minute), m("b", "Unavailable", time.Hour, 30*time.Second)}, []string{"a"}},
		{"Running is never unhealthy", api.MachinePoolHealth{UnhealthyTimeout: d(time.Second)}, []*api.Machine{m("a", "Running", time.Hour, time.Hour)}, nil},
		{"0s never replaces", api.MachinePoolHealth{UnhealthyTimeout: d(0)}, []*api.Machine{m("a", "Failed", time.Hour, time.Hour)}, nil},
		{"default 5m", api.MachinePoolHealth{}, []*api.Machine{m("a", "Failed", time.Hour, 6*time.Minute), m("b", "Failed", time.Hour, 4*time.Minute)}, []string{"a"}},
		{"stuck Registering past startupTimeout", api.MachinePoolHealth{StartupTimeout: d(time.Minute)}, []*api.Machine{m("a", "Registering", 2*time.Minute, 0), m("b", "Registering", 30*time.Second, 0)}, []string{"a"}},
		{"startup default 10m", api.MachinePoolHealth{}, []*api.Machine{m("a", "Provisioning", 11*time.Minute, 0), m("b", "Pending", 9*time.Minute, 0)}, []string{"a"}},
		{"startup 0s never replaces", api.MachinePoolHealth{StartupTimeout: d(0)}, []*api.Machine{m("a", "Pending", time.Hour, 0)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, b := range unhealthy(tt.ms, tt.health, now) {
				got = append(got, b.Name)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("unhealthy = %v, want %v", got, tt.want)
			}
		})
	}
}
