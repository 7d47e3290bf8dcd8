package planner

import (
	"reflect"
	"strings"
	"testing"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestRollDrain: with drainWorkers on, a worker is drained (by the first
// control-plane machine's plan) before its plan is rewritten at the new
// version, stays drained until it is healthy at it, then is uncordoned;
// the roll is over only once every uncordon ran. A drain that failed holds
// the upgrade: the worker is not rewritten, and the condition says which
// worker and why.
func TestRollDrain(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	long := now.Add(-10 * time.Minute)
	const old, next = "v1.36.3", "v1.37.2"
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, x := range names {
			m[x] = true
		}
		return m
	}
	// cp done at next; w1 and w2 at the versions given, healthy unless "!".
	nodes := func(w1, w2 string) []node {
		mk := func(name, v string) node {
			x := at(n(name, "worker", "worker"), strings.TrimSuffix(v, "!"), long)
			if strings.HasSuffix(v, "!") {
				x = unhealthy(at(x, x.version, now.Add(-10*time.Second)))
			}
			return x
		}
		return []node{at(n("m1", "etcd,controlplane", "etcd-apiserver-controllers"), next, long), mk("w1", w1), mk("w2", w2)}
	}
	base := func(mod func(*rollInput)) rollInput {
		in := rollInput{spec: next, running: old, workerConcurrency: 1, timeout: time.Minute, now: now, drain: true,
			drains: set(), uncordons: set(), drained: set(), uncordoned: set(), drainFailed: map[string]string{}}
		if mod != nil {
			mod(&in)
		}
		return in
	}
	for _, tc := range []struct {
		name                   string
		nodes                  []node
		in                     rollInput
		want                   map[string]string // machine -> version its plan is rendered at
		wantDrain, wantUncord  []string
		wantPhase, wantRunning string
		wantReason, wantInMsg  string
	}{
		{"the control plane done: the first worker is drained, not rewritten",
			nodes(old, old), base(nil),
			map[string]string{"m1": next, "w1": old, "w2": old}, []string{"w1"}, nil,
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for worker w1 to be drained"},
		{"its drain asked for, not run yet: still not rewritten",
			nodes(old, old), base(func(in *rollInput) { in.drains = set("w1") }),
			map[string]string{"m1": next, "w1": old, "w2": old}, []string{"w1"}, nil,
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for worker w1 to be drained"},
		{"the drainer's plan applied again with the drain: the condition says what it waits on",
			func() []node { x := nodes(old, old); x[0] = unhealthy(x[0]); x[0].versionSince = now; return x }(), base(func(in *rollInput) { in.drains = set("w1") }),
			map[string]string{"m1": next, "w1": old, "w2": old}, []string{"w1"}, nil,
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for machine m1 (its plan at v1.37.2 applied, then etcd /health, kube-apiserver /readyz and version); 0 of 3 machines run v1.37.2; the first control-plane machine's plan drains workers [w1] and uncordons []"},
		{"drained: its plan is rewritten at the new version, and it stays drained",
			nodes(old, old), base(func(in *rollInput) { in.drains, in.drained = set("w1"), set("w1") }),
			map[string]string{"m1": next, "w1": next, "w2": old}, []string{"w1"}, nil,
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for machine w1"},
		{"rewritten, not healthy yet: stays drained, the next waits",
			nodes(next+"!", old), base(func(in *rollInput) { in.drains, in.drained = set("w1"), set("w1") }),
			map[string]string{"m1": next, "w1": next, "w2": old}, []string{"w1"}, nil,
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for machine w1"},
		{"healthy at the new version: uncordoned, and the next worker is drained",
			nodes(next, old), base(func(in *rollInput) { in.drains, in.drained = set("w1"), set("w1") }),
			map[string]string{"m1": next, "w1": next, "w2": old}, []string{"w2"}, []string{"w1"},
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for worker w2 to be drained"},
		{"a drain that failed holds the upgrade: the worker is not rewritten, the condition says why",
			nodes(old, old), base(func(in *rollInput) {
				in.drains, in.drainFailed = set("w1"), map[string]string{"w1": "machine m1's plan ran kubectl drain w1: \"error: timed out\""}
			}),
			map[string]string{"m1": next, "w1": old, "w2": old}, []string{"w1"}, nil,
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "held: draining worker w1 failed, so its plan is not rewritten: machine m1's plan ran kubectl drain w1: \"error: timed out\""},
		{"every worker at the new version, an uncordon not run yet: not over",
			nodes(next, next), base(func(in *rollInput) { in.uncordons, in.uncordoned = set("w1", "w2"), set("w1") }),
			map[string]string{"m1": next, "w1": next, "w2": next}, nil, []string{"w2"},
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for worker w2 to be uncordoned"},
		{"every uncordon ran: the new version runs, nothing is left on the drainer's plan",
			nodes(next, next), base(func(in *rollInput) { in.uncordons, in.uncordoned = set("w1", "w2"), set("w1", "w2") }),
			map[string]string{"m1": next, "w1": next, "w2": next}, nil, nil,
			api.KubernetesPhaseReady, next, ReasonUpToDate, "every machine runs Kubernetes v1.37.2"},
		{"drainWorkers.enabled false: the worker is rewritten at once, never drained",
			nodes(old, old), base(func(in *rollInput) { in.drain = false }),
			map[string]string{"m1": next, "w1": next, "w2": old}, nil, nil,
			api.KubernetesPhaseUpgrading, old, ReasonUpgrading, "waiting for machine w1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := order(tc.nodes, []string{"m1"}, nil)
			r := roll(&d, tc.nodes, tc.in)
			if !reflect.DeepEqual(r.versions, tc.want) {
				t.Errorf("versions %v; want %v", r.versions, tc.want)
			}
			if !reflect.DeepEqual(r.drain, tc.wantDrain) || !reflect.DeepEqual(r.uncordon, tc.wantUncord) {
				t.Errorf("drain %v uncordon %v; want %v and %v", r.drain, r.uncordon, tc.wantDrain, tc.wantUncord)
			}
			if d.phase != tc.wantPhase || r.running != tc.wantRunning {
				t.Errorf("phase %s running %q; want %s and %q (%s)", d.phase, r.running, tc.wantPhase, tc.wantRunning, d.message)
			}
			if r.cond.reason != tc.wantReason || !strings.Contains(r.cond.message, tc.wantInMsg) {
				t.Errorf("condition %s %q; want %s saying %q", r.cond.reason, r.cond.message, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

// TestDrainInstructions: the drainer's plan gains a drain and an uncordon
// instruction with the flags docs/clusters.md gives, and nothing else of
// it changes (its files, and so run.sh's commands, are the same: adding
// the drain restarts neither its etcd nor its kube-apiserver). The
// planner then reads back, from the plan's status, which worker was
// drained, whose drain failed and why, and which was uncordoned.
func TestDrainInstructions(t *testing.T) {
	k, err := newClusterPKI("c")
	if err != nil {
		t.Fatal(err)
	}
	members := []member{{"m1", "10.0.0.1"}}
	in := renderInput{cluster: "c", spec: api.ClusterKubernetes{Distribution: "kubernetes", Version: "v1.37.2"},
		machine: "m1", address: "10.0.0.1", stage: stage{etcdMember: 0, apiServer: true, controllers: true},
		members: members, allMembers: members, pki: k, existing: map[string]string{}}
	plain, err := render(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range plain.Files {
		in.existing[f.Path[strings.LastIndex(f.Path, "/")+1:]] = f.Content
	}
	in.drain, in.uncordon, in.drainTimeout = []string{"w1"}, []string{"w2"}, 45
	drainer, err := render(in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plain.Files, drainer.Files) {
		t.Errorf("the drain changed the drainer's files: its processes would restart")
	}
	got := map[string]string{}
	for _, i := range drainer.Instructions {
		got[i.Name] = strings.Join(i.Args, " ")
	}
	for name, want := range map[string]string{
		"drain-w1":    "drain w1 --ignore-daemonsets --delete-emptydir-data --force --skip-wait-for-delete-timeout=1 --timeout=45s",
		"uncordon-w2": "uncordon w2",
	} {
		if !strings.Contains(got[name], want) || !strings.Contains(got[name], "/var/lib/muster-kubernetes/c/m1/admin.kubeconfig") {
			t.Errorf("instruction %s: %q; want it to run %q with the plan's admin kubeconfig", name, got[name], want)
		}
	}
	if len(drainer.Instructions) != len(plain.Instructions)+2 {
		t.Errorf("the drainer's plan has %d instructions; want the %d it had and the drain and uncordon", len(drainer.Instructions), len(plain.Instructions))
	}

	applied := func(name string, ann map[string]string, out ...api.InstructionOutput) *api.MachinePlan {
		p := &api.MachinePlan{}
		p.Name, p.Labels, p.Annotations = name, map[string]string{PlannerLabel: "c"}, ann
		p.Status = api.MachinePlanStatus{State: api.PlanStateSucceeded, Checksum: "x", AppliedChecksum: "x", Output: out}
		return p
	}
	pending := applied("m2", map[string]string{DrainsAnnotation: "w4"})
	pending.Status.AppliedChecksum = "older"
	var ri rollInput
	drainInput(&ri, "c", map[string]*api.MachinePlan{
		"m1": applied("m1", map[string]string{DrainsAnnotation: "w1,w3", UncordonsAnnotation: "w2"},
			api.InstructionOutput{Name: "drain-w1", Output: "node/w1 cordoned\nevicting pod default/p\ndrained w1\n"},
			api.InstructionOutput{Name: "drain-w3", Output: "error: Cannot evict pod as it would violate the pod's disruption budget.\nkubectl drain w3 failed (above)\n"},
			api.InstructionOutput{Name: "uncordon-w2", Output: "node/w2 uncordoned\nuncordoned w2\n"}),
		"m2": pending,
	})
	if !reflect.DeepEqual(ri.drains, map[string]bool{"w1": true, "w3": true, "w4": true}) || !reflect.DeepEqual(ri.drained, map[string]bool{"w1": true}) ||
		!reflect.DeepEqual(ri.uncordoned, map[string]bool{"w2": true}) || len(ri.drainFailed) != 1 || !strings.Contains(ri.drainFailed["w3"], "disruption budget") {
		t.Errorf("read back: drains %v drained %v uncordoned %v failed %v", ri.drains, ri.drained, ri.uncordoned, ri.drainFailed)
	}
}
