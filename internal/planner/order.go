// Package planner brings a cluster's Kubernetes up on its machines, by
// their roles (Rancher's Provisioning V2 planner, for upstream etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler): for a Cluster with spec.kubernetes it keeps the
// cluster's PKI, and writes each etcd, control-plane and worker machine's
// MachinePlan in order — the first etcd member bootstraps, the others are
// added one at a time (member add before the member starts), each gated
// on the previous one's /health probe; kube-apiserver starts on the
// control-plane machines one at a time once etcd is whole, each gated on
// its /readyz probe, then kube-controller-manager and kube-scheduler on
// it, gated on their /healthz, before the next machine; workers come
// last: their bootstrap credentials get a kubelet's client certificate
// (kube-controller-manager approves and signs it), with which each
// registers its Node. It writes spec.kubernetesAPI so that users reach the new
// API through the server, and says in status.kubernetes and the
// cluster's conditions where it is and which machine it waits on. It
// runs on the elected leader only.
package planner

import (
	"fmt"
	"sort"
	"strings"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// node is what the ordering needs to know of one machine of the cluster.
type node struct {
	name    string
	roles   map[string]bool
	address string // its InternalIP; "" until its agent reported one
	// planned: the machine has a plan the planner wrote; healthyStage:
	// the stage (stage.key) of that plan when it is applied with every
	// probe healthy, else ""; failed: it failed for good.
	planned, failed bool
	healthyStage    string
	// plannedStage is the stage of the plan the machine has now, applied
	// or not; etcdHealthy is its etcd probe's latest verdict.
	plannedStage string
	etcdHealthy  bool
	// deleting: the Machine was deleted; it is among the nodes only while
	// it is an etcd member, which must leave etcd before its host goes.
	deleting bool
	// foreign: the machine has a plan the planner did not write, which
	// it leaves alone.
	foreign bool
	// version is the Kubernetes version of its plan (VersionLabel), since
	// when (VersionSinceAnnotation); planFailed: that plan's last attempt
	// failed.
	version      string
	versionSince time.Time
	planFailed   bool
	// agentGone: a deleted machine whose agent is gone (it was
	// Unavailable when deleted, as a pool's replaced machine is): it
	// cannot run its own drain plan, so another member removes it.
	agentGone bool
	// removing: the member this machine's plan removes from etcd for a
	// machine whose agent is gone; removed: the same, once that plan is
	// applied (the member is out of etcd's list).
	removing, removed string
}

// stage is how far a machine's plan goes: which parts it carries.
type stage struct {
	// etcdMember is the machine's place among the etcd members (0: the
	// first, which bootstraps), or -1 for none.
	etcdMember int
	apiServer  bool
	// controllers: kube-controller-manager and kube-scheduler, which a
	// control-plane machine's plan gains once its kube-apiserver is ready.
	controllers bool
	worker      bool
	// leave: the member leaves etcd (member remove) and stops: the drain
	// plan of a deleted member's machine.
	leave bool
	// remove names a deleted member whose machine's agent is gone: this
	// machine's plan removes it from etcd (member remove through its own
	// member), since the dead machine cannot run its drain plan.
	remove string
}

// key names a stage in a plan's label (StageLabel), so that a plan
// applied for one stage is not taken as healthy for the next.
func (s stage) key() string {
	if s.leave {
		return "leave"
	}
	// The member's place is not in the key: members leaving moves the
	// places of those after them, which must not count as a new stage.
	var parts []string
	if s.etcdMember >= 0 {
		parts = append(parts, "etcd")
	}
	if s.apiServer {
		parts = append(parts, "apiserver")
	}
	if s.controllers {
		parts = append(parts, "controllers")
	}
	if s.worker {
		parts = append(parts, "worker")
	}
	return strings.Join(parts, "-")
}

// decision is one pass of the ordering: the plan stage each machine gets
// (a machine missing from stages gets no plan yet), the etcd members in
// join order, and what the planner says about where it is.
type decision struct {
	stages     map[string]stage
	members    []string
	phase      string
	waitingFor string
	message    string
	// tiers says, per role, whether it is done and if not why:
	// KubernetesEtcd, KubernetesControlPlane, KubernetesWorkers.
	tiers map[string]tier
	// warnings are the KubernetesRoles condition's: an even etcd count, a
	// plan the planner did not write. invalid is set when nothing can start.
	warnings []string
	invalid  string
	// release are deleted machines whose members need not leave first:
	// every member's machine was deleted, so etcd goes with them all.
	release []string
}

type tier struct {
	done    bool
	reason  string
	message string
}

// Condition types the planner writes on a Cluster.
const (
	CondEtcd         = "KubernetesEtcd"
	CondControlPlane = "KubernetesControlPlane"
	CondWorkers      = "KubernetesWorkers"
	CondReady        = "KubernetesReady"
	CondRoles        = "KubernetesRoles"
)

// order decides, from the cluster's machines and the etcd members it has
// already made (status.kubernetes.etcdMembers, in join order), which
// machine gets which plan now. It is a pure function of what it is given
// so that the order is tested on its own (order_test.go). elsewhere names
// machines with a role that belong to another cluster, for the message
// when this one has none.
func order(nodes []node, members []string, elsewhere []string) decision {
	d := decide(nodes, members, elsewhere)
	if d.invalid != "" {
		return d
	}
	// A machine's plan never loses a part on a later pass: a gate that
	// closes again (a member's probe flickers while its plan gains
	// kube-apiserver) holds the tiers after it, and must not rewrite the
	// plans they already have, which would restart what they run.
	for _, n := range nodes {
		if n.deleting {
			continue // its plan is its drain plan, or nothing
		}
		s, ok := d.stages[n.name]
		if !ok {
			s = stage{etcdMember: -1}
		}
		grown := s
		for _, part := range strings.Split(n.plannedStage, "-") {
			switch {
			case part == "apiserver" && n.roles[api.ControlPlaneRole]:
				grown.apiServer = true
			case part == "controllers" && n.roles[api.ControlPlaneRole]:
				grown.controllers = true
			case part == "worker" && n.roles[api.WorkerRole]:
				grown.worker = true
			}
		}
		if grown != s || (ok && grown.key() != "") {
			d.stages[n.name] = grown
		}
	}
	return d
}

func decide(nodes []node, members []string, elsewhere []string) decision {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].name < nodes[j].name })
	byName := map[string]*node{}
	var etcd, cps, workers []*node
	for i := range nodes {
		n := &nodes[i]
		byName[n.name] = n
		if n.deleting {
			continue
		}
		if n.roles[api.EtcdRole] {
			etcd = append(etcd, n)
		}
		if n.roles[api.ControlPlaneRole] {
			cps = append(cps, n)
		}
		if n.roles[api.WorkerRole] && !n.roles[api.EtcdRole] && !n.roles[api.ControlPlaneRole] {
			workers = append(workers, n)
		}
	}
	d := decision{stages: map[string]stage{}, tiers: map[string]tier{}}
	// The etcd members, in join order: a member stays one until it has
	// left etcd (a deleted machine's drain plan, or another member's plan
	// removing a dead one), or its machine is gone.
	removedBy := map[string]string{}
	removingBy := map[string]string{}
	keepRemoval := map[string]string{} // remover -> the member it removed
	for _, n := range nodes {
		if n.removed != "" {
			removedBy[n.removed] = n.name
		}
		if n.removing != "" {
			removingBy[n.removing] = n.name
		}
	}
	for _, m := range members {
		n := byName[m]
		if n == nil || !n.roles[api.EtcdRole] || (n.deleting && n.healthyStage == "leave") {
			continue
		}
		if n.deleting && removedBy[m] != "" {
			// Removed from etcd by another member's plan: its machine's
			// deletion waits no longer, and that plan keeps its removal
			// (unchanged, so nothing is applied again) while it is here.
			d.release = append(d.release, m)
			keepRemoval[removedBy[m]] = m
			continue
		}
		d.members = append(d.members, m)
	}
	// Every member's machine deleted (the pool or the cluster goes): etcd
	// goes with them, and no member leaves first, which the last could not.
	going := 0
	for _, m := range d.members {
		if byName[m].deleting {
			going++
		}
	}
	if going > 0 && going == len(d.members) {
		d.release = append(d.release, d.members...)
		d.phase, d.message = api.KubernetesPhaseRemovingEtcd, "every etcd member's machine was deleted: etcd goes with them, no member leaves first"
		d.tiers[CondEtcd] = tier{reason: "Deleted", message: d.message}
		return d
	}
	var missing []string
	if len(etcd) == 0 {
		missing = append(missing, "role etcd")
	}
	if len(cps) == 0 {
		missing = append(missing, "role controlplane")
	}
	if len(missing) > 0 {
		d.phase = api.KubernetesPhaseInvalid
		d.invalid = fmt.Sprintf("the cluster has no machine with %s, so no Kubernetes can start and nothing was started: give machines those roles (a MachinePool's spec.template.roles, or muster-agent --role)", strings.Join(missing, " and no machine with "))
		if len(elsewhere) > 0 {
			d.invalid += fmt.Sprintf("; machines of other clusters do not count: %s", strings.Join(elsewhere, ", "))
		}
		d.message = d.invalid
		return d
	}
	if len(etcd)%2 == 0 {
		d.warnings = append(d.warnings, fmt.Sprintf("%d etcd machines: an even count tolerates no more failures than one fewer (%d of %d may fail); use an odd count", len(etcd), (len(etcd)-1)/2, len(etcd)))
	}
	for _, n := range nodes {
		if n.foreign {
			d.warnings = append(d.warnings, fmt.Sprintf("machine %s has a MachinePlan the planner did not write (by hand or from a MachinePlanSet); the planner leaves it alone and waits: delete that plan to let the planner plan the machine", n.name))
		}
	}

	wait := func(phase, tierCond string, n *node, why string) decision {
		d.phase, d.waitingFor, d.message = phase, n.name, fmt.Sprintf("waiting for machine %s: %s", n.name, why)
		d.tiers[tierCond] = tier{reason: "Waiting", message: d.message}
		return d
	}
	why := func(n *node, what string) string {
		switch {
		case n.foreign:
			return "it has a MachinePlan the planner did not write"
		case n.failed:
			return "its plan failed (see its MachinePlan's status.output): " + what
		case n.planFailed:
			return "its plan failed, and its agent tries it again (see its MachinePlan's status.output): " + what
		case n.address == "":
			return "its agent has not reported an address yet"
		case !n.planned || n.healthyStage == "":
			return "its plan is being written or applied: " + what
		default:
			return "its plan is not applied and healthy yet: " + what
		}
	}
	// A deleted member's plan is never planned again, but for its leaving:
	// going back to its member's plan would add it to etcd again.
	for i, m := range d.members {
		if !byName[m].deleting {
			d.stages[m] = stage{etcdMember: i, remove: keepRemoval[m]}
		}
	}
	// A deleted machine's member leaves first, one at a time (one already
	// leaving goes on before any other starts), and only while the
	// members that stay keep a healthy quorum without it.
	leaving := append([]string(nil), d.members...)
	started := func(m string) bool { return byName[m].plannedStage == "leave" || removingBy[m] != "" }
	sort.SliceStable(leaving, func(i, j int) bool { return started(leaving[i]) && !started(leaving[j]) })
	for _, m := range leaving {
		n := byName[m]
		if !n.deleting {
			continue
		}
		stay, healthyStay := len(d.members)-1, 0
		for _, o := range d.members {
			if o != m && byName[o].etcdHealthy && !byName[o].deleting {
				healthyStay++
			}
		}
		if healthyStay < stay/2+1 {
			return wait(api.KubernetesPhaseRemovingEtcd, CondEtcd, n, fmt.Sprintf("its machine was deleted, and removing its member would leave %d healthy of %d, below quorum (%d): the member stays until more are healthy", healthyStay, stay, stay/2+1))
		}
		if n.agentGone {
			// Its agent cannot run a drain plan: the first healthy member
			// that stays removes it (the one already doing so goes on).
			r := removingBy[m]
			if r == "" || byName[r].deleting {
				r = ""
				for _, o := range d.members {
					if o != m && byName[o].etcdHealthy && !byName[o].deleting {
						r = o
						break
					}
				}
			}
			if r == "" {
				return wait(api.KubernetesPhaseRemovingEtcd, CondEtcd, n, "its machine was deleted and its agent is gone (Unavailable): no healthy member is left to remove it from etcd")
			}
			s := d.stages[r]
			s.remove = m
			d.stages[r] = s
			return wait(api.KubernetesPhaseRemovingEtcd, CondEtcd, n, fmt.Sprintf("its machine was deleted and its agent is gone (Unavailable): its member is removed from etcd through member %s's plan before its host goes", r))
		}
		d.stages[m] = stage{etcdMember: -1, leave: true}
		return wait(api.KubernetesPhaseRemovingEtcd, CondEtcd, n, "its machine was deleted: its member leaves etcd (member remove) before its host goes")
	}
	// healthy: the machine's applied, healthy plan carries every part of
	// its stage now (a control-plane member's plan carries its etcd part
	// too, which the etcd tier asks about alone).
	healthy := func(n *node) bool { return covers(n.healthyStage, d.stages[n.name].key()) }
	for i, m := range d.members {
		n := byName[m]
		// Healthy: applied with its etcd part and every probe healthy,
		// or its plan gained a later part and etcd's probe still passes.
		part := stage{etcdMember: i}.key()
		if !covers(n.healthyStage, part) && !(covers(n.plannedStage, part) && n.etcdHealthy) {
			phase := api.KubernetesPhaseJoiningEtcd
			if i == 0 {
				phase = api.KubernetesPhaseBootstrappingEtcd
			}
			return wait(phase, CondEtcd, n, why(n, "etcd /health"))
		}
	}
	// One new member at a time: the next etcd machine joins only once
	// every member is healthy.
	for _, n := range etcd {
		if contains(d.members, n.name) {
			continue
		}
		phase := api.KubernetesPhaseJoiningEtcd
		if len(d.members) == 0 {
			phase = api.KubernetesPhaseBootstrappingEtcd
		}
		if n.address == "" || n.foreign {
			return wait(phase, CondEtcd, n, why(n, "etcd member"))
		}
		d.members = append(d.members, n.name)
		d.stages[n.name] = stage{etcdMember: len(d.members) - 1}
		return wait(phase, CondEtcd, n, why(n, "etcd /health"))
	}
	d.tiers[CondEtcd] = tier{done: true, reason: "Healthy", message: fmt.Sprintf("%d etcd members healthy: %s", len(d.members), strings.Join(d.members, ", "))}

	// The control plane, one machine at a time: its kube-apiserver, then
	// (once that is ready) its kube-controller-manager and kube-scheduler,
	// which talk to it, before the next machine starts anything.
	for _, n := range cps {
		s, ok := d.stages[n.name]
		if !ok {
			s = stage{etcdMember: -1}
		}
		if n.address == "" || n.foreign {
			return wait(api.KubernetesPhaseStartingControlPlane, CondControlPlane, n, why(n, "kube-apiserver"))
		}
		s.apiServer = true
		d.stages[n.name] = s
		// A plan that has the controllers already keeps them (order()
		// never takes a part away): what it waits on then is all of it.
		if !healthy(n) && !covers(n.plannedStage, "controllers") {
			return wait(api.KubernetesPhaseStartingControlPlane, CondControlPlane, n, why(n, "kube-apiserver /readyz"))
		}
		s.controllers = true
		d.stages[n.name] = s
		if !healthy(n) {
			return wait(api.KubernetesPhaseStartingControlPlane, CondControlPlane, n, why(n, "kube-controller-manager and kube-scheduler /healthz"))
		}
	}
	d.tiers[CondControlPlane] = tier{done: true, reason: "Healthy", message: fmt.Sprintf("kube-apiserver, kube-controller-manager and kube-scheduler healthy on %d machines", len(cps))}

	// Workers last, all at once: none of them can hurt the control plane.
	var pending *node
	for _, n := range workers {
		if n.address == "" || n.foreign {
			if pending == nil {
				pending = n
			}
			continue
		}
		d.stages[n.name] = stage{etcdMember: -1, worker: true}
		if !healthy(n) && pending == nil {
			pending = n
		}
	}
	if pending != nil {
		return wait(api.KubernetesPhaseJoiningWorkers, CondWorkers, pending, why(pending, "kubelet client certificate and Node registration"))
	}
	d.tiers[CondWorkers] = tier{done: true, reason: "Joined", message: fmt.Sprintf("%d workers have their kubelet client certificates and registered their Nodes", len(workers))}
	d.phase = api.KubernetesPhaseReady
	d.message = fmt.Sprintf("Kubernetes is up: %d etcd members, %d control-plane machines, %d workers", len(d.members), len(cps), len(workers))
	return d
}

// covers reports whether a plan applied at stage key applied has every
// part of stage key want.
func covers(applied, want string) bool {
	if applied == "" || want == "" {
		return false
	}
	have := strings.Split(applied, "-")
	for _, p := range strings.Split(want, "-") {
		if !contains(have, p) {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
