package e2e

import (
	"container/heap"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/muster-io/muster/internal/planset"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
)

// planSetMachines is how many simulated machines the plan-set rollout runs
// on: MUSTER_PLANSET_MACHINES if set, else the 1,000 with
// MUSTER_DATASTORE_SCALE=full, else def.
func planSetMachines(t testing.TB, def int) int {
	if v := os.Getenv("MUSTER_PLANSET_MACHINES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("MUSTER_PLANSET_MACHINES=%q: want a number of at least 10", v)
		}
		return n
	}
	if os.Getenv("MUSTER_DATASTORE_SCALE") == "full" {
		return 1000
	}
	return def
}

// TestPlanSetRollout1000: a template change to a set selecting every
// machine of a simulated fleet, at maxUnavailable 10%, completes, and a
// watcher that follows every machine's phase and every set plan never sees
// more than 10% of the fleet unavailable. 100 machines in `make test`, the
// issue's 1,000 with MUSTER_DATASTORE_SCALE=full.
func TestPlanSetRollout1000(t *testing.T) {
	// Not parallel: measures figures, so it runs alone.
	n := planSetMachines(t, 100)
	forEachBackend(t, func(t *testing.T, endpoint string) {
		r := rolloutPlanSet(t, endpoint, n)
		t.Logf("%d machines: rollout %s, plan write → applied p50 %s p99 %s, at most %d unavailable (budget %d), %d machines seen Updating, %.1f datastore writes per machine",
			n, r.total.Round(time.Millisecond), r.p(50), r.p(99), r.maxUnavailable, n/10, r.sawUpdating, r.writesPerMachine())
	})
}

// BenchmarkPlanSetRollout: one template change rolled out to 1,000
// simulated machines (MUSTER_PLANSET_MACHINES to change) at maxUnavailable
// 10%, on each backend: the whole rollout, each machine's plan write →
// applied, and the datastore writes it cost per machine.
func BenchmarkPlanSetRollout(b *testing.B) {
	n := planSetMachines(b, 1000)
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := rolloutPlanSet(b, be.endpoint(b), n)
				b.ReportMetric(r.total.Seconds(), "s-rollout")
				b.ReportMetric(float64(r.p(50).Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(r.p(99).Microseconds())/1000, "p99-ms")
				b.ReportMetric(r.writesPerMachine(), "writes/machine")
				b.ReportMetric(float64(r.objectWrites)/float64(n), "machine+plan-writes/machine")
				b.ReportMetric(float64(r.maxUnavailable), "max-unavailable")
				b.ReportMetric(r.serverCPU*1000/float64(n), "server-CPU-ms/machine")
				b.Logf("%s, %d machines: rollout %s; plan write → applied p50 %s, p99 %s; %d datastore writes (%.1f per machine, %.1f to Machines and MachinePlans); at most %d unavailable of budget %d; %d machines seen Updating; server CPU %.1f s",
					be.name, n, r.total.Round(time.Millisecond), r.p(50), r.p(99), r.revisions, r.writesPerMachine(),
					float64(r.objectWrites)/float64(n), r.maxUnavailable, n/10, r.sawUpdating, r.serverCPU)
			}
		})
	}
}

// rollout is what one template change cost.
type rollout struct {
	n     int
	total time.Duration
	// latencies are, per machine, its plan's write of the new revision
	// → the plan applied, as the watcher received them.
	latencies []time.Duration
	// revisions is how far the datastore's revision moved during the
	// rollout: every write, whoever made it.
	revisions int64
	// objectWrites are the writes to Machines and MachinePlans among them.
	objectWrites   int
	maxUnavailable int
	sawUpdating    int
	// serverCPU is the CPU time the server spent on the rollout.
	serverCPU float64
}

func (r rollout) p(pc int) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, len(r.latencies)*pc/100)].Round(time.Millisecond)
}

func (r rollout) writesPerMachine() float64 { return float64(r.revisions) / float64(r.n) }

const rolloutSet = "fleet"

// rolloutPlanSet joins n simulated machines (their own process), rolls a
// set's revision 1 out to them, then measures the rollout of revision 2
// while checking maxUnavailable at every datastore revision.
func rolloutPlanSet(t testing.TB, endpoint string, n int) rollout {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startServer(t, endpoint)
	c := adminClient(t, s)
	if _, err := c.MusterV1alpha1().Clusters().Create(ctx, &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "rollout"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(mustRunTB(t, serverBin, "token", "create", "--cluster", "rollout", "--data-dir", s.dataDir))
	sim := runAgentBinary(t, "simulate", "--server", s.url(), "--token", token, "--count", strconv.Itoa(n), "--concurrency", "50")
	sim.waitOutput(fmt.Sprintf("simulate: joined %d/%d", n, n), 5*time.Minute)
	waitAllRunning(t, c, n)

	budget := intstr.FromString("10%")
	set := &api.MachinePlanSet{
		ObjectMeta: metav1.ObjectMeta{Name: rolloutSet},
		Spec: api.MachinePlanSetSpec{
			Cluster:  "rollout",
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"muster.io/simulated": "true"}},
			Template: api.MachinePlanSpec{MaxFailures: 1, Files: []api.PlanFile{{Path: "/etc/muster/rollout", Content: "revision 1\n", Mode: 0o644}}},
			Strategy: api.MachinePlanSetStrategy{MaxUnavailable: &budget},
		},
	}
	if _, err := c.MusterV1alpha1().MachinePlanSets().Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSetComplete(t, s, c, 1, 5*time.Minute)

	w := newRolloutWatcher(n)
	rv0 := listRevision(t, c)
	if err := w.start(ctx, c); err != nil {
		t.Fatal(err)
	}
	cur, err := c.MusterV1alpha1().MachinePlanSets().Get(ctx, rolloutSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Template.Files[0].Content = "revision 2\n"
	// The watcher must know the new revision before any plan of it can
	// arrive: the hash of the template as the server stores it (defaults
	// included) is the one the controller labels plans with.
	next := cur.DeepCopy()
	w.begin(planset.Revision(next.Spec.Template))
	cpu0 := cpuSeconds(s.cmd.Process.Pid)
	start := time.Now()
	// The controller writes the set's status meanwhile, which moves its
	// resourceVersion: retry the same change on a conflict, as kubectl
	// edit would have the user do.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest, err := c.MusterV1alpha1().MachinePlanSets().Get(ctx, rolloutSet, metav1.GetOptions{})
		if err != nil {
			return err
		}
		latest.Spec.Template = next.Spec.Template
		cur, err = c.MusterV1alpha1().MachinePlanSets().Update(ctx, latest, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if rev := planset.Revision(cur.Spec.Template); rev != w.newRev {
		t.Fatalf("the server changed the template on update: revision %s, computed %s", rev, w.newRev)
	}
	waitSetComplete(t, s, c, cur.Generation, 10*time.Minute)
	total := time.Since(start)
	// Complete counts applied plans; the last machines' phases may still
	// be on their way back to Running, and those writes are the rollout's.
	waitAllRunning(t, c, n)
	rv1 := listRevision(t, c)
	// An annotation on one Machine and one MachinePlan puts an event past
	// rv1 on each watch, so the watcher knows it has every event up to
	// rv1 without waiting for a bookmark; neither changes what the agent
	// or the controllers do.
	for _, touch := range []func() error{
		func() error {
			_, err := c.MusterV1alpha1().Machines().Patch(ctx, "sim-0", types.MergePatchType, []byte(`{"metadata":{"annotations":{"muster.test/rollout-end":"true"}}}`), metav1.PatchOptions{})
			return err
		},
		func() error {
			_, err := c.MusterV1alpha1().MachinePlans().Patch(ctx, "sim-0", types.MergePatchType, []byte(`{"metadata":{"annotations":{"muster.test/rollout-end":"true"}}}`), metav1.PatchOptions{})
			return err
		},
	} {
		if err := touch(); err != nil {
			t.Fatalf("marking the end of the rollout: %v", err)
		}
	}
	w.finish(t, rv1)
	r := w.result()
	r.total, r.revisions, r.serverCPU = total, rv1-rv0, cpuSeconds(s.cmd.Process.Pid)-cpu0
	if r.maxUnavailable > n/10 {
		t.Errorf("%d of %d machines unavailable at once (revision %d), over maxUnavailable 10%% (%d)", r.maxUnavailable, n, w.maxAt, n/10)
	}
	if len(r.latencies) != n {
		t.Errorf("%d of %d machines were seen getting and applying the new revision", len(r.latencies), n)
	}
	return r
}

// waitSetComplete waits until the set's status describes generation gen
// (a status still Complete from the revision before does not count), then
// lets kubectl wait for Complete, as an operator would.
func waitSetComplete(t testing.TB, s *server, c clientset.Interface, gen int64, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("plan set %s to observe generation %d", rolloutSet, gen), func() bool {
		ps, err := c.MusterV1alpha1().MachinePlanSets().Get(context.Background(), rolloutSet, metav1.GetOptions{})
		return err == nil && ps.Status.ObservedGeneration >= gen
	})
	if out, err := s.kubectl("wait", "--for=condition=Complete", "machineplanset/"+rolloutSet, fmt.Sprintf("--timeout=%ds", int(timeout.Seconds()))); err != nil {
		t.Fatalf("kubectl wait --for=condition=Complete: %v\n%s", err, out)
	}
}

func waitAllRunning(t testing.TB, c clientset.Interface, n int) {
	t.Helper()
	waitFor(t, 2*time.Minute, fmt.Sprintf("all %d simulated machines Running", n), func() bool {
		l, err := c.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		running := 0
		for _, m := range l.Items {
			if m.Status.Phase == api.MachinePhaseRunning {
				running++
			}
		}
		return running == n
	})
}

func listRevision(t testing.TB, c clientset.Interface) int64 {
	t.Helper()
	l, err := c.MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("list resourceVersion %q: %v", l.ResourceVersion, err)
	}
	return rv
}

func mustRunTB(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return string(out)
}

// rolloutWatcher follows Machines and MachinePlans from one revision on
// and replays their events in datastore revision order, so that the count
// of unavailable machines is the fleet's state at each revision: two
// watches deliver independently, and counting in arrival order would mix
// a machine's later state with another's earlier one.
type rolloutWatcher struct {
	n  int
	mu sync.Mutex
	// pending events, by revision, not yet known to be in order.
	pending eventHeap
	// seen is the last revision each watch delivered.
	seen [2]int64
	// The replayed state.
	running  map[string]bool
	planBusy map[string]bool // the set's plan not applied
	busy     int
	updating map[string]bool

	began          bool
	newRev         string
	written        map[string]time.Time
	latencies      []time.Duration
	objectWrites   int
	maxUnavailable int
	maxAt          int64
	errs           chan error
}

type watchEvent struct {
	rv     int64
	stream int
	at     time.Time
	obj    any
}

type eventHeap []watchEvent

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].rv < h[j].rv }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(watchEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func newRolloutWatcher(n int) *rolloutWatcher {
	return &rolloutWatcher{
		n: n, running: map[string]bool{}, planBusy: map[string]bool{}, updating: map[string]bool{},
		written: map[string]time.Time{}, errs: make(chan error, 2),
	}
}

// start lists both kinds, before the template change, and watches each
// from its list's revision: the fleet is at rest, so the two lists are
// one state.
func (w *rolloutWatcher) start(ctx context.Context, c clientset.Interface) error {
	ms, err := c.MusterV1alpha1().Machines().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ps, err := c.MusterV1alpha1().MachinePlans().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range ms.Items {
		w.applyMachine(&ms.Items[i])
	}
	for i := range ps.Items {
		w.applyPlan(&ps.Items[i], time.Now())
	}
	for stream, l := range []struct {
		rv    string
		watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
	}{{ms.ResourceVersion, c.MusterV1alpha1().Machines().Watch}, {ps.ResourceVersion, c.MusterV1alpha1().MachinePlans().Watch}} {
		rv, err := strconv.ParseInt(l.rv, 10, 64)
		if err != nil {
			return fmt.Errorf("list resourceVersion %q: %w", l.rv, err)
		}
		w.seen[stream] = rv
		wi, err := l.watch(ctx, metav1.ListOptions{ResourceVersion: l.rv, AllowWatchBookmarks: true})
		if err != nil {
			return err
		}
		go w.follow(stream, wi)
	}
	return nil
}

func (w *rolloutWatcher) follow(stream int, wi watch.Interface) {
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		at := time.Now()
		if ev.Type == watch.Error {
			w.errs <- fmt.Errorf("watch %d: %v", stream, ev.Object)
			return
		}
		var acc metav1.Object
		switch o := ev.Object.(type) {
		case *api.Machine:
			acc = o
		case *api.MachinePlan:
			acc = o
		default:
			continue
		}
		rv, err := strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
		if err != nil {
			w.errs <- err
			return
		}
		w.mu.Lock()
		w.seen[stream] = rv
		if ev.Type != watch.Bookmark {
			var obj any = ev.Object
			if ev.Type == watch.Deleted {
				obj = deleted{acc.GetName(), stream}
			}
			heap.Push(&w.pending, watchEvent{rv: rv, stream: stream, at: at, obj: obj})
		}
		w.replay(min(w.seen[0], w.seen[1]))
		w.mu.Unlock()
	}
}

// replay applies, in revision order, every pending event at or before
// upTo: no watch can still deliver one earlier than that.
func (w *rolloutWatcher) replay(upTo int64) {
	for w.pending.Len() > 0 && w.pending[0].rv <= upTo {
		e := heap.Pop(&w.pending).(watchEvent)
		if w.began {
			w.objectWrites++
		}
		switch o := e.obj.(type) {
		case *api.Machine:
			w.applyMachine(o)
		case *api.MachinePlan:
			w.applyPlan(o, e.at)
		case deleted:
			if o.stream == 0 {
				w.update(o.name, func() { delete(w.running, o.name) })
			} else {
				w.update(o.name, func() { delete(w.planBusy, o.name) })
			}
		}
		if u := w.busy; u > w.maxUnavailable {
			w.maxUnavailable, w.maxAt = u, e.rv
		}
	}
}

// isBusy is whether a known machine is unavailable as the controller
// counts it (internal/planset): not Running, or the set's plan not applied.
func (w *rolloutWatcher) isBusy(name string) bool {
	running, known := w.running[name]
	return known && (!running || w.planBusy[name])
}

// update applies change to one machine's state and keeps the count of
// unavailable machines.
func (w *rolloutWatcher) update(name string, change func()) {
	before := w.isBusy(name)
	change()
	switch after := w.isBusy(name); {
	case after && !before:
		w.busy++
	case !after && before:
		w.busy--
	}
}

func (w *rolloutWatcher) applyMachine(m *api.Machine) {
	if w.began && m.Status.Phase == api.MachinePhaseUpdating {
		w.updating[m.Name] = true
	}
	w.update(m.Name, func() { w.running[m.Name] = m.Status.Phase == api.MachinePhaseRunning })
}

func (w *rolloutWatcher) applyPlan(p *api.MachinePlan, at time.Time) {
	mine := p.Labels[api.PlanSetLabel] == rolloutSet
	applied := p.Status.State == api.PlanStateSucceeded && p.Status.Checksum != "" && p.Status.AppliedChecksum == p.Status.Checksum
	w.update(p.Name, func() { w.planBusy[p.Name] = mine && !applied })
	if !w.began || !mine || p.Labels[api.PlanSetRevisionLabel] != w.newRev {
		return
	}
	if _, ok := w.written[p.Name]; !ok {
		w.written[p.Name] = at
	} else if applied && !w.written[p.Name].IsZero() {
		w.latencies = append(w.latencies, at.Sub(w.written[p.Name]))
		w.written[p.Name] = time.Time{}
	}
}

// begin marks the template change to revision rev: from here the
// watcher times that revision's plans.
func (w *rolloutWatcher) begin(rev string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.began, w.newRev = true, rev
}

// finish waits until both watches went past rv and replays up to it.
func (w *rolloutWatcher) finish(t testing.TB, rv int64) {
	t.Helper()
	waitFor(t, time.Minute, "the watches to reach the end of the rollout", func() bool {
		select {
		case err := <-w.errs:
			t.Fatalf("watching the rollout: %v", err)
		default:
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.replay(min(w.seen[0], w.seen[1]))
		return w.seen[0] > rv && w.seen[1] > rv
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.replay(rv)
}

func (w *rolloutWatcher) result() rollout {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := rollout{n: w.n, latencies: append([]time.Duration(nil), w.latencies...), objectWrites: w.objectWrites,
		maxUnavailable: w.maxUnavailable, sawUpdating: len(w.updating)}
	sort.Slice(r.latencies, func(i, j int) bool { return r.latencies[i] < r.latencies[j] })
	return r
}

// TestRolloutWatcherOrder: the watcher counts the fleet as it was at each
// revision even when the two watches deliver out of step, and still
// catches a real overlap.
func TestRolloutWatcherOrder(t *testing.T) {
	t.Parallel()
	machine := func(name string, rv int, phase api.MachinePhase) *api.Machine {
		return &api.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv)}, Status: api.MachineStatus{Phase: phase}}
	}
	plan := func(name string, rv int, applied bool) *api.MachinePlan {
		p := &api.MachinePlan{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv),
			Labels: map[string]string{api.PlanSetLabel: rolloutSet, api.PlanSetRevisionLabel: "r2"}}}
		p.Status.Checksum = "new"
		if applied {
			p.Status.State, p.Status.AppliedChecksum = api.PlanStateSucceeded, "new"
		}
		return p
	}
	for _, tc := range []struct {
		name string
		// events as (stream, object), in delivery order
		events []watchEvent
		want   int
	}{
		{"a back to Running before b's plan is written, machines delivered late", []watchEvent{
			{rv: 11, stream: 1, obj: plan("a", 11, true)},
			{rv: 13, stream: 1, obj: plan("b", 13, false)},
			{rv: 12, stream: 0, obj: machine("a", 12, api.MachinePhaseRunning)},
			{rv: 14, stream: 0, obj: machine("b", 14, api.MachinePhaseUpdating)},
		}, 1},
		{"b's plan written while a is still Updating", []watchEvent{
			{rv: 11, stream: 1, obj: plan("a", 11, true)},
			{rv: 12, stream: 1, obj: plan("b", 12, false)},
			{rv: 13, stream: 0, obj: machine("a", 13, api.MachinePhaseRunning)},
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newRolloutWatcher(2)
			w.begin("r2")
			// a is mid-update: its plan of r2 written, not applied, the machine Updating.
			w.applyMachine(machine("a", 9, api.MachinePhaseUpdating))
			w.applyMachine(machine("b", 9, api.MachinePhaseRunning))
			w.applyPlan(plan("a", 10, false), time.Now())
			w.seen = [2]int64{10, 10}
			for _, e := range tc.events {
				w.seen[e.stream] = e.rv
				heap.Push(&w.pending, e)
				w.replay(min(w.seen[0], w.seen[1]))
			}
			w.replay(1 << 62)
			if w.maxUnavailable != tc.want {
				t.Errorf("at most %d unavailable, want %d", w.maxUnavailable, tc.want)
			}
		})
	}
}
