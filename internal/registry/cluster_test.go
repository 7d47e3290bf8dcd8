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
