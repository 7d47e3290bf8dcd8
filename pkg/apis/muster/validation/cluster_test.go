package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

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
		errs := ValidateClusterStatusUpdate(c, old)
		if refused := len(errs) > 0; refused != tt.refused {
			t.Errorf("%s: errors %v, want refused=%v", tt.name, errs, tt.refused)
		}
		if tt.refused && !strings.Contains(errs.ToAggregate().Error(), "kubectl delete cluster prod") {
			t.Errorf("%s: the refusal does not say what to do: %v", tt.name, errs)
		}
	}
}
