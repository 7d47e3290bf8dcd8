package simulate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
)

// planFile is the file each simulated plan change writes (on paper: the
// simulated agents run nothing).
const planFile = "/etc/muster/simulated-change"

// changes tracks plan changes from the moment the server accepted them to
// the moment their agent reported them applied.
type changes struct {
	mu      sync.Mutex
	pending map[string]change // by machine
	done    []time.Duration
}

type change struct {
	checksum string
	start    time.Time
}

// ChangePlans changes one simulated machine's plan perSecond times a second,
// round robin over the joined machines, until ctx ends, as an operator
// would with an admin credential. Each change writes a new file, so the
// agent records in-progress and then succeeded, like the real agent; its
// latency runs from the server's answer to the update to the agent's
// report of it applied (PlanLatencies).
func (f *Fleet) ChangePlans(ctx context.Context, admin musterclient.MusterV1alpha1Interface, perSecond float64) error {
	if perSecond <= 0 {
		return nil
	}
	var machines []string
	for _, a := range f.agents {
		a.mu.Lock()
		if a.machine != "" {
			machines = append(machines, a.machine)
		}
		a.mu.Unlock()
	}
	if len(machines) == 0 {
		return fmt.Errorf("no simulated machine has joined: nothing to change plans of")
	}
	plans := admin.MachinePlans()
	tick := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
	defer tick.Stop()
	changed := false
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		machine := machines[n%len(machines)]
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := plans.Get(ctx, machine, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.Files = []api.PlanFile{{Path: planFile, Content: fmt.Sprintf("change %d\n", n), Mode: 0o644}}
			p.Spec.Instructions, p.Spec.Probes = nil, nil
			updated, err := plans.Update(ctx, p, metav1.UpdateOptions{})
			if err == nil {
				f.changes.begin(machine, updated.Status.Checksum)
			}
			return err
		})
		switch {
		case ctx.Err() != nil:
		case err == nil:
			changed = true
			f.health.ok()
		case !changed && (apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)):
			// Refused before any change went through: the credential is
			// wrong, not the server down.
			return fmt.Errorf("changing the plan of %s (does --kubeconfig hold an admin credential?): %w", machine, err)
		default:
			// A server restarting or failing over: count it and go on, as
			// an operator's tooling would; the next tick tries again.
			f.health.failed(err)
		}
	}
}

// PlanLatencies are the latencies of the plan changes reported applied so
// far, sorted, and how many changes are still waiting for their report.
func (f *Fleet) PlanLatencies() (done []time.Duration, waiting int) {
	f.changes.mu.Lock()
	defer f.changes.mu.Unlock()
	done = slices.Clone(f.changes.done)
	slices.Sort(done)
	return done, len(f.changes.pending)
}

func (c *changes) begin(machine, checksum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[string]change{}
	}
	c.pending[machine] = change{checksum: checksum, start: time.Now()}
}

// applied is told of every plan an agent reported applied.
func (c *changes) applied(machine, checksum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.pending[machine]; ok && ch.checksum == checksum {
		c.done = append(c.done, time.Since(ch.start))
		delete(c.pending, machine)
	}
}
