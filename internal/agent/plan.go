package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/muster-io/muster/internal/atomicfile"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
	musterclient "github.com/muster-io/muster/pkg/client/clientset/versioned/typed/muster/v1alpha1"
	listers "github.com/muster-io/muster/pkg/client/listers/muster/v1alpha1"
)

const (
	defaultInstructionTimeout = 300 * time.Second
	defaultProbeTimeout       = 5 * time.Second
	maxOutput                 = 4 << 10
)

// Executor carries out plans: Host on a real machine; `muster-agent
// simulate` supplies one that runs nothing, so that a simulated fleet
// speaks the agent's protocol through this very code.
type Executor interface {
	// Apply writes the plan's files and runs its instructions; the outputs
	// go into the plan's status, and say why when the plan failed.
	Apply(ctx context.Context, spec *api.MachinePlanSpec) ([]api.InstructionOutput, error)
	// Prober makes the probe that checks an applied plan, run again and again.
	Prober(p api.PlanProbe) Prober
}

// Prober runs one probe of an applied plan.
type Prober interface {
	Probe(ctx context.Context) error
	// Close releases what the probe holds (a kept-alive connection).
	Close()
}

// Host is the real agent's executor: files written and commands run on
// this machine.
type Host struct{}

// Apply writes the files, then runs the instructions.
func (Host) Apply(ctx context.Context, spec *api.MachinePlanSpec) ([]api.InstructionOutput, error) {
	return runPlan(ctx, spec)
}

// Prober makes an HTTP or exec probe.
func (Host) Prober(p api.PlanProbe) Prober { return newProber(p) }

// PlanOptions says how RunPlans carries out and tells of plans.
type PlanOptions struct {
	Executor Executor
	// Say receives the account of each plan; nil discards it.
	Say func(format string, args ...interface{})
	// Applied, if set, is told of each plan reported succeeded.
	Applied func(checksum string)
	// Upgrade, if set, carries out a plan's agentUpgrade before its files
	// and instructions (upgrade.go); it returns only if the agent was not
	// replaced. Nil ignores agentUpgrade (a simulated fleet).
	// The note it returns, if any, goes into the plan's output.
	Upgrade func(ctx context.Context, plan *api.MachinePlan) (note string, err error)
	// Refuse, if set, is why no plan that does anything (Acts) is carried
	// out here: such a plan is reported failed for good with Refuse as its
	// output, and nothing of it runs. An empty plan still succeeds, so the
	// machine reports in like any other.
	Refuse string
	// AppliedFile, if set, is where the agent keeps the checksum of the
	// plan it last applied on this machine. When the server's record says
	// another plan is applied (its datastore was restored from a snapshot
	// older than that plan), the agent applies the server's plan again:
	// the server's record wins. Empty keeps no record (a simulated fleet,
	// which changes nothing on a machine).
	AppliedFile string
	// Reconnected, if set, says the server answers again after it was
	// lost: the plan is read from the server at once, rather than at the
	// next minute's check, since a server back from a restore may hold an
	// older datastore than the one the watch last saw.
	Reconnected <-chan struct{}
}

// refusedOutput names the status entry of a plan this agent refused.
const refusedOutput = "refused"

// Acts says whether a plan would run or write anything on its machine:
// files, instructions, probes (an exec probe runs a command, an HTTP probe
// reaches the machine's network) or an agent upgrade.
func Acts(spec *api.MachinePlanSpec) bool {
	return spec.ChangesMachine() || len(spec.Probes) > 0
}

// planRunner applies the machine's MachinePlan with Rancher's protocol: it
// writes in-progress with the plan's checksum BEFORE doing anything, so a
// crash mid-plan is seen on restart and the plan runs again; then
// succeeded or failed with the output and the failure count.
type planRunner struct {
	opts    PlanOptions
	client  musterclient.MusterV1alpha1Interface
	machine string
	kick    chan struct{}
	// check asks for the plan to be read from the server (read).
	check chan struct{}
	// stopProbes ends the probe loop of the plan applied last.
	stopProbes context.CancelFunc
}

func (a *agent) runPlans(ctx context.Context, client musterclient.MusterV1alpha1Interface, machine string) {
	RunPlans(ctx, client, machine, PlanOptions{Executor: Host{}, Say: a.say, Upgrade: a.upgradeForPlan, Refuse: a.cfg.RefusePlans,
		AppliedFile: a.dir.path(appliedPlanFile), Reconnected: a.reconnected})
}

// RunPlans watches the machine's own MachinePlan with its certificate's
// client and applies each new plan with opts.Executor, until ctx ends.
func RunPlans(ctx context.Context, client musterclient.MusterV1alpha1Interface, machine string, opts PlanOptions) {
	if opts.Say == nil {
		opts.Say = func(string, ...interface{}) {}
	}
	r := &planRunner{opts: opts, client: client, machine: machine, kick: make(chan struct{}, 1), check: make(chan struct{}, 1)}
	plans, stopWatch := r.watch(ctx)
	defer func() { stopWatch() }()
	retry := time.Duration(0)
	for {
		check := false
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-opts.Reconnected:
			check = true
		case <-r.check:
			check = true
		case <-time.After(max(retry, time.Minute)):
			check = true
		}
		plan, err := plans.Get(machine)
		if check {
			// A watch can stall without an error (a connection that died
			// quietly, a datastore restored from an older snapshot); once a
			// minute, whenever the watch resumes and whenever the server
			// answers again after it was lost, the plan is read from the
			// server as well, so a missed change costs a minute at most,
			// not the 10-minute resync.
			var cached *api.MachinePlan
			if err == nil {
				cached = plan
			}
			fresh, restored := r.read(ctx, cached)
			if restored {
				// The watch resumes from a revision the datastore has not
				// reached: start it again from what the datastore holds.
				stopWatch()
				plans, stopWatch = r.watch(ctx)
			}
			if fresh != nil {
				plan, err = fresh, nil
			}
		}
		if err != nil {
			continue
		}
		again, err := r.apply(ctx, plan.DeepCopy())
		if err != nil {
			r.opts.Say("plan: %v", err)
		}
		retry = 0
		if again {
			// A failed attempt under the limit is retried after a pause
			// that grows with the failures.
			retry = time.Duration(plan.Status.FailureCount+1) * time.Second
			go func() {
				time.Sleep(retry)
				r.poke()
			}()
		}
	}
}

// watch starts an informer on the machine's own plan; stop ends it.
func (r *planRunner) watch(ctx context.Context) (plans listers.MachinePlanLister, stop func()) {
	client, machine := r.client, r.machine
	// Only its own plan: the server authorizes nothing else. A bare
	// informer, not the generated factory: the factory's clientset would
	// link every Kubernetes API group into the agent.
	own := fields.OneTermEqualSelector("metadata.name", machine).String()
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = own
			return client.MachinePlans().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = own
			w, err := client.MachinePlans().Watch(ctx, o)
			if err == nil && o.ResourceVersion != "" && o.ResourceVersion != "0" {
				// A watch resumed from a revision (after the connection
				// broke, or every few minutes): the server may be one back
				// from a restore of an older datastore, whose watch cache
				// accepts the old revision and sends nothing. The plan is
				// read from the server to make sure (read).
				select {
				case r.check <- struct{}{}:
				default:
				}
			}
			return w, err
		},
	}, &api.MachinePlan{}, 10*time.Minute, cache.Indexers{})
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { r.poke() },
		UpdateFunc: func(_, _ interface{}) { r.poke() },
	})
	ictx, cancel := context.WithCancel(ctx)
	go informer.RunWithContext(ictx)
	return listers.NewMachinePlanLister(informer.GetIndexer()), cancel
}

// read reads the plan from the server and returns it when it is to be
// applied in place of cached (the watch's copy, nil if none): when it is
// newer, or when the datastore went back. restored says the latter.
//
// A plan older than the watch's copy is either a read from a server whose
// watch cache lags (HA), which must never take the agent back to an older
// plan, or the datastore restored from a snapshot older than what the
// agent saw. A consistent read (resourceVersion "") tells them apart: only
// a datastore that went back answers it with an older plan.
func (r *planRunner) read(ctx context.Context, cached *api.MachinePlan) (fresh *api.MachinePlan, restored bool) {
	plans := r.client.MachinePlans()
	fresh, err := plans.Get(ctx, r.machine, metav1.GetOptions{ResourceVersion: "0"})
	if err == nil && cached != nil && newer(cached.ResourceVersion, fresh.ResourceVersion) {
		fresh, err = plans.Get(ctx, r.machine, metav1.GetOptions{})
		if err == nil && newer(cached.ResourceVersion, fresh.ResourceVersion) {
			r.opts.Say("the server's plan %s is at resource version %s, older than the %s this agent last saw: "+
				"the server's datastore was restored from an older snapshot; watching the plan again from what it holds",
				r.machine, fresh.ResourceVersion, cached.ResourceVersion)
			return fresh, true
		}
	}
	switch {
	case err != nil:
		r.opts.Say("reading plan %s: %v; the watch carries on", r.machine, err)
		return nil, false
	case cached == nil || newer(fresh.ResourceVersion, cached.ResourceVersion):
		return fresh, false
	}
	return nil, false
}

// newer reports whether resource version a is past b. Muster's are
// datastore revisions; a lagging read must never take an agent back to
// an older plan.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// lastApplied is the checksum of the plan this machine last applied, from
// opts.AppliedFile; "" when the agent keeps no record or has none yet.
func (r *planRunner) lastApplied() string {
	if r.opts.AppliedFile == "" {
		return ""
	}
	b, err := os.ReadFile(r.opts.AppliedFile)
	if err != nil {
		if !os.IsNotExist(err) {
			r.opts.Say("reading the record of the plan last applied: %v", err)
		}
		return ""
	}
	return strings.TrimSpace(string(b))
}

// remember records checksum as the plan this machine last applied.
func (r *planRunner) remember(checksum string) {
	if r.opts.AppliedFile == "" || checksum == "" {
		return
	}
	if err := atomicfile.Write(r.opts.AppliedFile, []byte(checksum+"\n"), 0o600); err != nil {
		r.opts.Say("recording the plan last applied: %v (after a restore of the server's datastore from an older snapshot this machine may keep a newer plan)", err)
	}
}

func (r *planRunner) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// apply runs plan if it has not been applied; it returns whether to retry.
func (r *planRunner) apply(ctx context.Context, plan *api.MachinePlan) (bool, error) {
	st := plan.Status
	if st.Checksum == "" {
		return false, nil
	}
	last := r.lastApplied()
	if plan.Applied() && (last == "" || last == st.AppliedChecksum) {
		if last == "" {
			// An agent from before the record, or a new data dir: the
			// server's word is all there is.
			r.remember(st.AppliedChecksum)
		}
		return false, nil
	}
	// The server's record says this plan was applied, but this machine
	// last applied another one, which the server no longer holds: its
	// datastore was restored from an older snapshot. The server's record
	// wins: the machine is brought back to its plan. (Its state may be
	// in-progress or failed already: an agent that stopped while doing so.)
	restoredFrom := ""
	if last != "" && st.AppliedChecksum == st.Checksum && last != st.Checksum {
		restoredFrom = last
		if plan.Applied() {
			r.opts.Say("the server's record says plan %s is applied, but this machine last applied plan %s, which the server does not hold "+
				"(its datastore was restored from an older snapshot?): applying the server's plan again", short(st.Checksum), short(last))
		}
	}
	if plan.FailedForGood() {
		return false, nil // a new plan resets it
	}
	plans := r.client.MachinePlans()
	if r.opts.Refuse != "" && Acts(&plan.Spec) {
		return r.refuse(ctx, plan)
	}
	if plan.Spec.ChangesMachine() {
		// Recorded before anything runs: a crash from here on leaves
		// in-progress, which a restart runs again.
		plan.Status.State = api.PlanStateInProgress
		var err error
		if plan, err = plans.UpdateStatus(ctx, plan, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return false, nil // the plan changed under us; the watch brings the new one
			}
			return true, fmt.Errorf("recording in-progress: %w", err)
		}
	}
	r.opts.Say("applying plan %s", short(plan.Status.Checksum))
	var outputs []api.InstructionOutput
	var runErr error
	if plan.Spec.AgentUpgrade != nil && r.opts.Upgrade != nil {
		var note string
		if note, runErr = r.opts.Upgrade(ctx, plan); runErr != nil {
			outputs = []api.InstructionOutput{{Name: agentUpgradeOutput, ExitCode: -1, Output: truncate([]byte(runErr.Error()))}}
		} else if note != "" {
			outputs = []api.InstructionOutput{{Name: agentUpgradeOutput, Output: truncate([]byte(note))}}
		}
	}
	if runErr == nil {
		var more []api.InstructionOutput
		more, runErr = r.opts.Executor.Apply(ctx, &plan.Spec)
		outputs = append(outputs, more...)
	}
	if runErr == nil {
		// Before the report: a report that is lost leaves the plan
		// unapplied on the server, which runs it again; a record that is
		// lost after a report would run it again after every restart.
		r.remember(plan.Status.Checksum)
	}
	if restoredFrom != "" {
		outcome := "applied again"
		if runErr != nil {
			outcome = "applied again, and failed"
		}
		outputs = append([]api.InstructionOutput{{Name: api.PlanRestoredOutput, Output: fmt.Sprintf(
			"this machine had applied plan %s, which the server's datastore does not hold (it was restored from an older snapshot); "+
				"the server's plan %s was %s: the server's record wins", short(restoredFrom), short(plan.Status.Checksum), outcome)}}, outputs...)
	}
	var probers []Prober
	for _, p := range plan.Spec.Probes {
		probers = append(probers, r.opts.Executor.Prober(p))
	}
	probes, healthy := runProbes(ctx, plan.Spec.Probes, probers)

	now := metav1.Now()
	plan.Status.Output, plan.Status.Probes, plan.Status.LastAppliedTime = outputs, probes, &now
	if runErr == nil {
		plan.Status.State, plan.Status.AppliedChecksum, plan.Status.FailureCount = api.PlanStateSucceeded, plan.Status.Checksum, 0
		if !healthy {
			r.opts.Say("plan %s applied; some probes are unhealthy", short(plan.Status.Checksum))
		}
	} else {
		plan.Status.State = api.PlanStateFailed
		plan.Status.FailureCount++
		r.opts.Say("plan %s failed (%d of %d): %v", short(plan.Status.Checksum), plan.Status.FailureCount, plan.Spec.MaxFailures, runErr)
	}
	if _, err := plans.UpdateStatus(ctx, plan, metav1.UpdateOptions{}); err != nil {
		for _, p := range probers {
			p.Close()
		}
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return true, fmt.Errorf("reporting the result: %w", err)
	}
	if runErr == nil {
		r.opts.Say("plan %s succeeded", short(plan.Status.Checksum))
		if r.opts.Applied != nil {
			r.opts.Applied(plan.Status.Checksum)
		}
		r.watchProbes(ctx, plan.Spec.Probes, probers, probes)
		return false, nil
	}
	for _, p := range probers {
		p.Close()
	}
	return !plan.FailedForGood(), nil
}

// refuse reports plan failed without running any of it. The server counts
// failures one at a time, so a refused plan is reported again, like any
// failed one, until it is failed for good at its maxFailures.
func (r *planRunner) refuse(ctx context.Context, plan *api.MachinePlan) (bool, error) {
	now := metav1.Now()
	plan.Status.State = api.PlanStateFailed
	plan.Status.FailureCount++
	plan.Status.Output = []api.InstructionOutput{{Name: refusedOutput, ExitCode: -1, Output: truncate([]byte(r.opts.Refuse))}}
	plan.Status.Probes, plan.Status.LastAppliedTime = nil, &now
	r.opts.Say("refused plan %s (%d of %d): %s", short(plan.Status.Checksum), plan.Status.FailureCount, plan.Spec.MaxFailures, r.opts.Refuse)
	if _, err := r.client.MachinePlans().UpdateStatus(ctx, plan, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return true, fmt.Errorf("reporting the refused plan: %w", err)
	}
	return plan.Status.FailureCount < plan.Spec.MaxFailures, nil
}

// watchProbes keeps probing the applied plan every periodSeconds and
// reports a probe's status when it flips: unhealthy after failureThreshold
// failures in a row, healthy again after successThreshold successes.
func (r *planRunner) watchProbes(ctx context.Context, specs []api.PlanProbe, probers []Prober, initial []api.ProbeStatus) {
	if r.stopProbes != nil {
		r.stopProbes()
		r.stopProbes = nil
	}
	if len(probers) == 0 {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	r.stopProbes = cancel
	for i, p := range probers {
		go r.probeLoop(pctx, specs[i], p, initial[i].Healthy)
	}
}

func (r *planRunner) probeLoop(ctx context.Context, p api.PlanProbe, pr Prober, healthy bool) {
	defer pr.Close()
	period := 10 * time.Second
	if p.PeriodSeconds > 0 {
		period = time.Duration(p.PeriodSeconds) * time.Second
	}
	successes, failures := int32(0), int32(0)
	needSuccess, needFailure := max(p.SuccessThreshold, 1), p.FailureThreshold
	if needFailure == 0 {
		needFailure = 3
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		err := pr.Probe(ctx)
		if err == nil {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
		}
		flip := (!healthy && successes >= needSuccess) || (healthy && failures >= needFailure)
		if !flip {
			continue
		}
		healthy = !healthy
		st := api.ProbeStatus{Name: p.Name, Healthy: healthy}
		if err != nil {
			st.Message = truncate([]byte(err.Error()))
		}
		r.opts.Say("probe %s is now healthy=%v", p.Name, healthy)
		r.reportProbe(ctx, st)
	}
}

// reportProbe writes one probe's status into the plan's status.
func (r *planRunner) reportProbe(ctx context.Context, st api.ProbeStatus) {
	plans := r.client.MachinePlans()
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		plan, err := plans.Get(ctx, r.machine, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range plan.Status.Probes {
			if plan.Status.Probes[i].Name == st.Name {
				plan.Status.Probes[i] = st
			}
		}
		_, err = plans.UpdateStatus(ctx, plan, metav1.UpdateOptions{})
		return err
	})
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// filesOutput names the status entry that reports a file the agent could
// not write; no instruction has run when it is there.
const filesOutput = "files"

// agentUpgradeOutput names the status entry that reports a failed agent
// upgrade; no file was written and no instruction run when it is there.
const agentUpgradeOutput = "agentUpgrade"

// runPlan writes the files, then runs the instructions in order; the first
// failing instruction stops the plan. Every failure's reason is in the
// returned outputs, which go into the plan's status: an operator reads it
// with kubectl, not in the agent's log.
func runPlan(ctx context.Context, spec *api.MachinePlanSpec) ([]api.InstructionOutput, error) {
	for _, f := range spec.Files {
		if err := applyFile(f); err != nil {
			return []api.InstructionOutput{{Name: filesOutput, ExitCode: -1, Output: truncate([]byte(err.Error()))}}, err
		}
	}
	var outputs []api.InstructionOutput
	for _, in := range spec.Instructions {
		timeout := defaultInstructionTimeout
		if in.TimeoutSeconds > 0 {
			timeout = time.Duration(in.TimeoutSeconds) * time.Second
		}
		res := run(ctx, timeout, in.Command, in.Args, in.Env)
		out := api.InstructionOutput{Name: in.Name, ExitCode: int32(res.exitCode)}
		if in.SaveOutput || res.err != nil {
			out.Output = res.output
		}
		if res.err != nil && res.exitCode < 0 {
			// No exit code tells why (it did not start, timed out, was
			// killed): the reason goes last, where a reader of a long
			// output looks.
			out.Output = truncate([]byte(joinLines(out.Output, fmt.Sprintf("muster-agent: %s %v", in.Command, res.err))))
		}
		outputs = append(outputs, out)
		if res.err != nil {
			return outputs, fmt.Errorf("instruction %s: %v", in.Name, res.err)
		}
	}
	return outputs, nil
}

func joinLines(a, b string) string {
	if a == "" {
		return b
	}
	return strings.TrimRight(a, "\n") + "\n" + b
}

// applyFile writes a file atomically with its mode (or deletes it).
func applyFile(f api.PlanFile) error {
	if f.Delete {
		if err := os.Remove(f.Path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("deleting %s: %w", f.Path, err)
		}
		return nil
	}
	mode := os.FileMode(0o600)
	if f.Mode != 0 {
		mode = fileMode(f.Mode)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("creating the directory of %s: %w", f.Path, err)
	}
	return atomicfile.Write(f.Path, []byte(f.Content), mode)
}

// fileMode turns a Unix mode (0o4755) into Go's: Go keeps setuid, setgid
// and sticky in bits of its own, and would drop them from the raw number.
func fileMode(unix int32) os.FileMode {
	m := os.FileMode(unix) & os.ModePerm
	if unix&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if unix&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if unix&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

func runProbes(ctx context.Context, specs []api.PlanProbe, probers []Prober) ([]api.ProbeStatus, bool) {
	healthy := true
	var out []api.ProbeStatus
	for i, p := range probers {
		err := p.Probe(ctx)
		st := api.ProbeStatus{Name: specs[i].Name, Healthy: err == nil}
		if err != nil {
			st.Message = truncate([]byte(err.Error()))
			healthy = false
		}
		out = append(out, st)
	}
	return out, healthy
}

// prober runs one probe of the applied plan, again and again: an HTTP
// probe keeps one client, so its runs share one kept-alive connection
// instead of leaving one open per run.
type prober struct {
	spec      api.PlanProbe
	client    *http.Client
	transport *http.Transport
}

func newProber(p api.PlanProbe) *prober {
	pr := &prober{spec: p}
	if p.HTTPGet != nil {
		pr.transport = &http.Transport{
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: p.HTTPGet.InsecureSkipVerify}, //nolint:gosec // operator's choice per probe
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     90 * time.Second,
		}
		pr.client = &http.Client{Transport: pr.transport}
	}
	return pr
}

// Close drops the probe's kept-alive connection once it is no longer run.
func (p *prober) Close() {
	if p.transport != nil {
		p.transport.CloseIdleConnections()
	}
}

// Probe runs the probe once, bounded by its timeout.
func (p *prober) Probe(ctx context.Context) error {
	timeout := defaultProbeTimeout
	if p.spec.TimeoutSeconds > 0 {
		timeout = time.Duration(p.spec.TimeoutSeconds) * time.Second
	}
	switch {
	case p.spec.Exec != nil:
		res := run(ctx, timeout, p.spec.Exec.Command, p.spec.Exec.Args, nil)
		if res.err != nil {
			return fmt.Errorf("%v: %s", res.err, strings.TrimSpace(res.output))
		}
		return nil
	case p.spec.HTTPGet != nil:
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.spec.HTTPGet.URL, nil)
		if err != nil {
			return err
		}
		resp, err := p.client.Do(req)
		if err != nil {
			return err
		}
		// Read a little of the body so the connection can carry the next
		// run; a huge body is cut, and its connection closed.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode >= 400 {
			return fmt.Errorf("%s answered %s", p.spec.HTTPGet.URL, resp.Status)
		}
		return nil
	}
	return fmt.Errorf("probe %s has no type", p.spec.Name)
}

// truncate makes b fit a status field: at most maxOutput bytes of valid
// UTF-8. Invalid bytes would reach the server as U+FFFD, three bytes
// each, and push the field over its limit; a run of them becomes one "?".
func truncate(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > maxOutput {
		s = strings.ToValidUTF8(s[:maxOutput-3], "?") + "..."
	}
	return s
}
