package registry

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestClusterFinalizer: a new Cluster carries the lifecycle finalizer once,
// so that a delete only starts the cascade (internal/lifecycle).
func TestClusterFinalizer(t *testing.T) {
	for _, given := range [][]string{nil, {"other"}, {api.ClusterLifecycleFinalizer}} {
		c := &api.Cluster{ObjectMeta: metav1.ObjectMeta{Finalizers: slices.Clone(given)}}
		Cluster.Prepare(c, nil)
		if n := strings.Count(strings.Join(c.Finalizers, " "), api.ClusterLifecycleFinalizer); n != 1 {
			t.Errorf("finalizers %v after create: %v, want the lifecycle finalizer once", given, c.Finalizers)
		}
	}
	// An update leaves them to the writer (the controller removes it).
	c := &api.Cluster{}
	Cluster.Prepare(c, &api.Cluster{})
	if len(c.Finalizers) != 0 {
		t.Errorf("an update added finalizers: %v", c.Finalizers)
	}
}

// TestClusterStatusDeleting: Deleting may be written only on a deleted
// cluster, since no event leaves it.
func TestClusterStatusDeleting(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name    string
		deleted *metav1.Time
		from    api.ClusterPhase
		to      api.ClusterPhase
		refused bool
	}{
		{"Deleting on a live cluster", nil, api.ClusterPhaseActive, api.ClusterPhaseDeleting, true},
		{"Deleting on a deleted cluster", &now, api.ClusterPhaseActive, api.ClusterPhaseDeleting, false},
		{"still Deleting", nil, api.ClusterPhaseDeleting, api.ClusterPhaseDeleting, false},
		{"Active on a live cluster", nil, api.ClusterPhaseWaitCheckIn, api.ClusterPhaseActive, false},
	}
	for _, tt := range tests {
		old := &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", DeletionTimestamp: tt.deleted}, Status: api.ClusterStatus{Phase: tt.from}}
		c := old.DeepCopy()
		c.Status.Phase = tt.to
		errs := Cluster.ValidateStatus(c, old)
		if refused := len(errs) > 0; refused != tt.refused {
			t.Errorf("%s: errors %v, want refused=%v", tt.name, errs, tt.refused)
		}
		if tt.refused && !strings.Contains(errs.ToAggregate().Error(), "kubectl delete cluster prod") {
			t.Errorf("%s: the refusal does not say what to do: %v", tt.name, errs)
		}
	}
}
