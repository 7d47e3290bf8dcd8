package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestSimulate: `muster-agent simulate` joins its agents with the real
// protocol (each gets its own Machine, which reaches Running), and with
// --plan-updates changes their plans through an admin kubeconfig and
// reports how long each change took to be applied.
func TestSimulate(t *testing.T) {
	// Not parallel: a simulated fleet keeps a core busy.
	s := startServer(t, "")
	c := adminClient(t, s)
	if _, err := c.MusterV1alpha1().Clusters().Create(context.Background(), &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "simulated"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := newToken(t, s, "--cluster", "simulated")
	sim := runAgentBinary(t, "simulate", "--server", s.url(), "--token", token, "--count", "5", "--concurrency", "5",
		"--plan-updates", "5", "--kubeconfig", s.kubeconfig())
	sim.waitOutput("simulate: joined 5/5", 60*time.Second)
	sim.waitOutput("simulate: join latency p50", 10*time.Second)
	sim.waitOutput("plan change → applied p50", 40*time.Second)

	machines, err := c.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(machines.Items) != 5 {
		t.Fatalf("%d Machines after simulating 5 agents", len(machines.Items))
	}
	for _, m := range machines.Items {
		if m.Spec.Cluster != "simulated" || !strings.HasPrefix(m.Name, "sim-") || m.Labels["muster.io/simulated"] != "true" {
			t.Errorf("machine %s: cluster %q, labels %v", m.Name, m.Spec.Cluster, m.Labels)
		}
	}
	waitFor(t, 30*time.Second, "every simulated machine to have applied a changed plan", func() bool {
		plans, err := c.MusterV1alpha1().MachinePlans().List(context.Background(), metav1.ListOptions{})
		if err != nil || len(plans.Items) != 5 {
			return false
		}
		for _, p := range plans.Items {
			changed := len(p.Spec.Files) == 1 && strings.HasPrefix(p.Spec.Files[0].Content, "change ")
			if !changed || p.Status.AppliedChecksum == "" {
				return false
			}
		}
		return true
	})
}
