package planner

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// CondUpgrade is the condition that says where a version change is:
// True (UpToDate) when every machine runs the version the cluster runs;
// False while one rolls (Installing, Upgrading, Reverting), once one was
// reverted (Reverted), or when the version asked for is not available
// (VersionUnavailable).
const CondUpgrade = "KubernetesUpgrade"

// Reasons of CondUpgrade.
const (
	ReasonInstalling         = "Installing"
	ReasonUpToDate           = "UpToDate"
	ReasonUpgrading          = "Upgrading"
	ReasonReverting          = "Reverting"
	ReasonReverted           = "Reverted"
	ReasonVersionUnavailable = "VersionUnavailable"
)

// notRetried ends the reason a version was reverted for, in CondUpgrade's
// message: what comes before it is that reason, read back on later passes.
const notRetried = "it is not tried again until spec.kubernetes.version changes"

// failedReason is the reason a version was reverted for, out of a
// Reverting or Reverted CondUpgrade message.
func failedReason(msg string) string {
	if i := strings.Index(msg, notRetried); i >= 0 {
		return msg[:i+len(notRetried)]
	}
	return msg
}

// rollInput is what a version change is decided from: the cluster's spec
// and status, its upgrade strategy, and the time.
type rollInput struct {
	spec    string // spec.kubernetes.version
	running string // status.kubernetes.version: what every machine last ran healthy
	failed  string // status.kubernetes.failedVersion
	// failedWhy is CondUpgrade's message while failed is set: why it was
	// reverted, kept while the cluster stays on running.
	failedWhy string
	// reverting: CondUpgrade said Reverting on the last pass, so a
	// machine rolled back but not healthy yet is still the revert's.
	reverting bool
	// unavailable says why spec's version cannot be planned (no binaries
	// of it for the machines), "" when it can.
	unavailable string
	// cpConcurrency and workerConcurrency: machines taken down at once.
	cpConcurrency, workerConcurrency int
	timeout                          time.Duration
	now                              time.Time
	// drain: workers are drained before their plan is rewritten at
	// another version (upgradeStrategy.drainWorkers.enabled).
	drain bool
	// drains and uncordons are the workers the drainer's plan drains or
	// uncordons (its annotations), whoever's plan that was; drained and
	// uncordoned those among them whose instruction ran to the end with
	// success; drainFailed, by worker, why its drain did not.
	drains, uncordons   map[string]bool
	drained, uncordoned map[string]bool
	drainFailed         map[string]string
}

// rollout is what the planner does about versions in one pass.
type rollout struct {
	// versions is the version each planned machine's plan is rendered at.
	versions map[string]string
	// running and failed are status.kubernetes.version and failedVersion.
	running, failed string
	// cond is CondUpgrade.
	cond tier
	// drain and uncordon are the workers the drainer's plan drains and
	// uncordons on this pass (sorted).
	drain, uncordon []string
}

// roll decides, after the bring-up order, which version each planned
// machine's plan runs. A version change is a rolling upgrade: the etcd and
// control-plane machines first, cpConcurrency at a time (never more than
// etcd tolerates losing), each only while every other one is healthy;
// the workers once every control-plane machine runs the new version,
// workerConcurrency at a time. A machine whose plan at the new version
// fails, or is not applied with every probe healthy within the timeout,
// sends the cluster back: every upgraded machine is rolled back to the
// version that ran, the same way, and that version is not tried again
// while spec.kubernetes.version names it.
func roll(d *decision, nodes []node, in rollInput) rollout {
	r := rollout{versions: map[string]string{}, running: in.running, failed: in.failed}
	if r.failed != "" && in.spec != r.failed {
		r.failed = "" // spec moved on: the failure is history
	}
	byName := map[string]*node{}
	for i := range nodes {
		byName[nodes[i].name] = &nodes[i]
	}
	if in.running == "" {
		// The first bring-up: every machine at spec's version, and that
		// version runs once the cluster is Ready.
		for name := range d.stages {
			r.versions[name] = in.spec
		}
		switch {
		case in.unavailable != "":
			r.cond = tier{reason: ReasonVersionUnavailable, message: in.unavailable}
		case d.phase == api.KubernetesPhaseReady:
			r.running = in.spec
			r.cond = tier{done: true, reason: ReasonUpToDate, message: "every machine runs Kubernetes " + in.spec}
		default:
			r.cond = tier{reason: ReasonInstalling, message: "Kubernetes " + in.spec + " is being brought up"}
		}
		return r
	}
	target := in.spec
	if r.failed != "" || in.unavailable != "" {
		target = in.running
	}
	// A planned machine's plan is at the version its label says (one from
	// before versions were labelled runs the running one); a machine not
	// planned yet starts at the target.
	cur := func(n *node) string {
		switch {
		case !n.planned:
			return target
		case n.version == "":
			return in.running
		}
		return n.version
	}
	healthy := func(n *node) bool { return covers(n.healthyStage, d.stages[n.name].key()) }
	var names []string
	for name, s := range d.stages {
		r.versions[name] = cur(byName[name])
		if !s.leave && !byName[name].deleting {
			names = append(names, name)
		}
	}
	sort.Strings(names)

	// An upgraded machine that failed, or is not healthy in time, sends
	// the cluster back to the version that ran.
	if target != in.running {
		for _, name := range names {
			n := byName[name]
			if cur(n) != target || healthy(n) {
				continue
			}
			why := ""
			switch {
			case n.planFailed:
				why = fmt.Sprintf("machine %s's plan at %s failed (kubectl get machineplan %s -o yaml: status.output says why)", name, target, name)
			case !n.versionSince.IsZero() && in.now.Sub(n.versionSince) > in.timeout:
				why = fmt.Sprintf("machine %s's plan at %s was not applied with every probe healthy (etcd /health, kube-apiserver /readyz) within %s", name, target, in.timeout)
			}
			if why != "" {
				r.failed = target
				in.failedWhy = fmt.Sprintf("Kubernetes %s was reverted to %s: %s; %s", target, in.running, why, notRetried)
				target = in.running
				break
			}
		}
	}

	isServer := func(n *node) bool { return n.roles[api.EtcdRole] || n.roles[api.ControlPlaneRole] }
	var servers, workers []*node
	for _, name := range names {
		if n := byName[name]; isServer(n) {
			servers = append(servers, n)
		} else {
			workers = append(workers, n)
		}
	}
	// step moves up to budget more of group to target: first those down
	// already (moving them takes nothing down), then the healthy ones by
	// name, while fewer than budget are on their way and every other one
	// is healthy. It reports whether the whole group runs target, healthy.
	var waiting *node
	held := "" // why waiting cannot go on by itself (a failed drain)
	drainSet := map[string]bool{}
	// move sets n's plan to target; a worker (with drain on) is drained
	// first, and rewritten only once its drain ran to the end.
	move := func(n *node) {
		if !in.drain || isServer(n) {
			r.versions[n.name] = target
			return
		}
		switch {
		case in.drained[n.name]:
			r.versions[n.name] = target
		case in.drainFailed[n.name] != "":
			if held == "" {
				waiting, held = n, fmt.Sprintf("draining worker %s failed, so its plan is not rewritten: %s", n.name, in.drainFailed[n.name])
			}
		}
		drainSet[n.name] = true
	}
	step := func(group []*node, budget int) bool {
		inflight, othersDown := 0, 0
		for _, n := range group {
			switch {
			case cur(n) == target && !healthy(n):
				inflight++
				if waiting == nil {
					waiting = n
				}
			case cur(n) != target && !healthy(n):
				othersDown++
			}
		}
		done := true
		pending := []*node{}
		for _, n := range group {
			if cur(n) != target {
				pending = append(pending, n)
			}
			if cur(n) != target || !healthy(n) {
				done = false
			}
		}
		sort.SliceStable(pending, func(i, j int) bool { return !healthy(pending[i]) && healthy(pending[j]) })
		for _, n := range pending {
			if !healthy(n) {
				move(n)
				if waiting == nil {
					waiting = n
				}
				continue
			}
			if inflight < budget && othersDown == 0 {
				move(n)
				inflight++
				if waiting == nil {
					waiting = n
				}
			}
		}
		return done
	}
	cpBudget := max(in.cpConcurrency, 1)
	// Never more etcd members down at once than etcd tolerates losing.
	if tolerated := max((len(d.members)-1)/2, 1); cpBudget > tolerated {
		cpBudget = tolerated
	}
	// Rolling: a machine's plan is at another version than the target, or
	// the target is new and not every machine runs it healthy yet. (A
	// machine unhealthy at the version that runs is the bring-up's to
	// speak of, not an upgrade's.)
	off := false
	for _, name := range names {
		off = off || cur(byName[name]) != target
	}
	done := step(servers, cpBudget) && step(workers, max(in.workerConcurrency, 1))
	// A drained worker stays drained (its instruction stays on the
	// drainer's plan) until it is healthy at the target, then it is
	// uncordoned; the uncordon stays until it ran.
	for _, n := range workers {
		switch {
		case in.drains[n.name] && cur(n) == target && healthy(n) && r.versions[n.name] == target:
			r.uncordon = append(r.uncordon, n.name)
		case in.drains[n.name]:
			drainSet[n.name] = true
		case in.uncordons[n.name] && !in.uncordoned[n.name]:
			r.uncordon = append(r.uncordon, n.name)
		}
	}
	for _, n := range workers {
		if drainSet[n.name] {
			r.drain = append(r.drain, n.name)
		}
	}
	// Until every uncordon ran, the roll is not over.
	for _, w := range r.uncordon {
		if !in.uncordoned[w] {
			done = false
			if waiting == nil {
				waiting = byName[w]
			}
		}
	}
	if len(r.drain) > 0 {
		done = false
	}
	rolling := off || ((target != in.running || (in.reverting && r.failed != "")) && !done)
	at := 0
	for _, name := range names {
		if cur(byName[name]) == target && healthy(byName[name]) {
			at++
		}
	}
	switch {
	case rolling:
		what, reason := fmt.Sprintf("upgrading Kubernetes from %s to %s", in.running, target), ReasonUpgrading
		if r.failed != "" {
			// The reason comes first, whole: the next pass reads it back
			// from the condition (failedWhy), up to notRetried.
			what, reason = in.failedWhy+". Reverting to "+target, ReasonReverting
		}
		msg := fmt.Sprintf("%s: %d of %d machines run %s", what, at, len(names), target)
		switch {
		case held != "":
			msg = fmt.Sprintf("%s: held: %s; %d of %d machines run %s", what, held, at, len(names), target)
		case waiting != nil && slices.Contains(r.drain, waiting.name) && r.versions[waiting.name] != target:
			msg = fmt.Sprintf("%s: waiting for worker %s to be drained (kubectl drain by a control-plane machine) before its plan is rewritten; %d of %d machines run %s",
				what, waiting.name, at, len(names), target)
		case waiting != nil && slices.Contains(r.uncordon, waiting.name):
			msg = fmt.Sprintf("%s: waiting for worker %s to be uncordoned (kubectl uncordon by a control-plane machine); %d of %d machines run %s",
				what, waiting.name, at, len(names), target)
		case waiting != nil:
			msg = fmt.Sprintf("%s: waiting for machine %s (its plan at %s applied, then etcd /health, kube-apiserver /readyz and version); %d of %d machines run %s",
				what, waiting.name, target, at, len(names), target)
			if isServer(waiting) && (len(r.drain) > 0 || len(r.uncordon) > 0) {
				// The drainer's plan is applied again with the drain or
				// uncordon: that is what it waits on.
				msg += fmt.Sprintf("; the first control-plane machine's plan drains workers [%s] and uncordons [%s]", strings.Join(r.drain, " "), strings.Join(r.uncordon, " "))
			}
		}
		r.cond = tier{reason: reason, message: msg}
		if d.phase != api.KubernetesPhaseInvalid && d.phase != api.KubernetesPhaseRemovingEtcd {
			d.phase, d.message = api.KubernetesPhaseUpgrading, msg
			d.waitingFor = ""
			if waiting != nil {
				d.waitingFor = waiting.name
			}
		}
	case r.failed != "":
		r.cond = tier{reason: ReasonReverted, message: in.failedWhy}
	case in.unavailable != "":
		r.cond = tier{reason: ReasonVersionUnavailable, message: in.unavailable + fmt.Sprintf("; the cluster stays on %s", in.running)}
	case d.phase == api.KubernetesPhaseReady:
		r.running = target
		r.cond = tier{done: true, reason: ReasonUpToDate, message: "every machine runs Kubernetes " + target}
	default:
		r.cond = tier{done: true, reason: ReasonUpToDate, message: "every machine runs Kubernetes " + target}
	}
	return r
}

// platformDir is a machine's platform (status.platform, <os>/<arch>) as
// the server's Kubernetes assets name it: <os>-<arch>.
func platformDir(platform string) string {
	goos, rest, _ := strings.Cut(platform, "/")
	arch, _, _ := strings.Cut(rest, "/")
	if goos == "" || arch == "" {
		return "linux-amd64"
	}
	return goos + "-" + arch
}
