package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/muster-io/muster/internal/liveness"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	"github.com/muster-io/muster/pkg/client/clientset/versioned/fake"
	informers "github.com/muster-io/muster/pkg/client/informers/externalversions"
)

// A cluster's counts come from its own machines only, read through the
// cache's index, whatever the other clusters hold.
func TestSyncClusterCountsItsOwnMachines(t *testing.T) {
	var objs []runtime.Object
	for _, c := range []string{"a", "b"} {
		objs = append(objs, &api.Cluster{
			ObjectMeta: metav1.ObjectMeta{Name: c, Finalizers: []string{api.ClusterLifecycleFinalizer}},
			Status:     api.ClusterStatus{Phase: api.ClusterPhaseWaitCheckIn},
		})
	}
	machine := func(name, cluster string, phase api.MachinePhase) *api.Machine {
		return &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: api.MachineSpec{Cluster: cluster}, Status: api.MachineStatus{Phase: phase}}
	}
	for i := range 3 {
		objs = append(objs, machine(fmt.Sprintf("a-%d", i), "a", api.MachinePhaseRunning))
	}
	objs = append(objs, machine("a-new", "a", api.MachinePhaseRegistering))
	for i := range 5 {
		objs = append(objs, machine(fmt.Sprintf("b-%d", i), "b", api.MachinePhaseRegistering))
	}
	client := fake.NewSimpleClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	c := NewController(client, nil, factory, liveness.New(liveness.Options{}), nil, time.Minute, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	tests := []struct {
		cluster      string
		total, ready int32
		phase        api.ClusterPhase
	}{
		{"a", 4, 3, api.ClusterPhaseActive},
		{"b", 5, 0, api.ClusterPhaseWaitCheckIn},
	}
	for _, tt := range tests {
		t.Run(tt.cluster, func(t *testing.T) {
			if err := c.syncCluster(ctx, tt.cluster); err != nil {
				t.Fatal(err)
			}
			got, err := client.MusterV1alpha1().Clusters().Get(ctx, tt.cluster, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Machines != tt.total || got.Status.ReadyMachines != tt.ready || got.Status.Phase != tt.phase {
				t.Errorf("cluster %s: %d machines, %d ready, phase %s; want %d, %d, %s",
					tt.cluster, got.Status.Machines, got.Status.ReadyMachines, got.Status.Phase, tt.total, tt.ready, tt.phase)
			}
		})
	}
}
