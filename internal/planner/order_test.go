package planner

import (
	"reflect"
	"strings"
	"testing"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// n builds a machine for the tables: name, roles ("etcd,controlplane"),
// and the stage its plan is applied and healthy at ("" for none).
func n(name, roles, healthyAt string) node {
	r := map[string]bool{}
	for _, x := range strings.Split(roles, ",") {
		if x != "" {
			r[x] = true
		}
	}
	return node{name: name, roles: r, address: "10.0.0." + name[len(name)-1:], planned: healthyAt != "", healthyStage: healthyAt, plannedStage: healthyAt}
}

// hm is n whose etcd probe passes; del marks a machine deleted.
func hm(name, roles, healthyAt string) node {
	x := n(name, roles, healthyAt)
	x.etcdHealthy = true
	return x
}

func del(x node) node { x.deleting = true; return x }

// TestOrder: the planner's order, pass by pass: the first etcd member
// bootstraps alone; the next joins only once every member is healthy, one
// at a time; kube-apiserver starts on one control-plane machine at a time
// once etcd is whole; workers get plans only once the control plane is up.
func TestOrder(t *testing.T) {
	const ecp = "etcd,controlplane"
	for _, tc := range []struct {
		name       string
		nodes      []node
		members    []string
		wantStages map[string]string // machine -> stage key
		wantPhase  string
		wantWait   string
		wantInMsg  string
	}{
		{"nothing planned: the first etcd machine by name bootstraps, alone",
			[]node{n("m2", ecp, ""), n("m1", ecp, ""), n("m3", ecp, ""), n("w1", "worker", "")}, nil,
			map[string]string{"m1": "etcd"}, api.KubernetesPhaseBootstrappingEtcd, "m1", "etcd /health"},
		{"the first member not healthy yet: nobody else is planned",
			[]node{n("m1", ecp, ""), n("m2", ecp, ""), n("m3", ecp, "")}, []string{"m1"},
			map[string]string{"m1": "etcd"}, api.KubernetesPhaseBootstrappingEtcd, "m1", ""},
		{"the first member healthy: the second joins, the third waits",
			[]node{n("m1", ecp, "etcd"), n("m2", ecp, ""), n("m3", ecp, "")}, []string{"m1"},
			map[string]string{"m1": "etcd", "m2": "etcd"}, api.KubernetesPhaseJoiningEtcd, "m2", ""},
		{"etcd whole: kube-apiserver starts on the first control-plane machine only",
			[]node{n("m1", ecp, "etcd"), n("m2", ecp, "etcd"), n("m3", ecp, "etcd"), n("w1", "worker", "")}, []string{"m1", "m2", "m3"},
			map[string]string{"m1": "etcd-apiserver", "m2": "etcd", "m3": "etcd"}, api.KubernetesPhaseStartingControlPlane, "m1", "/readyz"},
		{"the first kube-apiserver ready: its kube-controller-manager and kube-scheduler start, the second machine waits",
			[]node{n("m1", ecp, "etcd-apiserver"), n("m2", ecp, "etcd"), n("m3", ecp, "etcd")}, []string{"m1", "m2", "m3"},
			map[string]string{"m1": "etcd-apiserver-controllers", "m2": "etcd", "m3": "etcd"}, api.KubernetesPhaseStartingControlPlane, "m1", "kube-controller-manager and kube-scheduler /healthz"},
		{"the first machine's controllers healthy: the second's kube-apiserver starts",
			[]node{n("m1", ecp, "etcd-apiserver-controllers"), n("m2", ecp, "etcd"), n("m3", ecp, "etcd")}, []string{"m1", "m2", "m3"},
			map[string]string{"m1": "etcd-apiserver-controllers", "m2": "etcd-apiserver", "m3": "etcd"}, api.KubernetesPhaseStartingControlPlane, "m2", "/readyz"},
		{"a machine's controllers being applied, kube-apiserver's probe failing: the plan keeps them, waited on as a whole",
			[]node{n("m1", ecp, "etcd-apiserver-controllers"), func() node {
				x := hm("m2", ecp, "")
				x.planned, x.plannedStage = true, "etcd-apiserver-controllers"
				return x
			}(), n("m3", ecp, "etcd")}, []string{"m1", "m2", "m3"},
			map[string]string{"m1": "etcd-apiserver-controllers", "m2": "etcd-apiserver-controllers", "m3": "etcd"}, api.KubernetesPhaseStartingControlPlane, "m2", "kube-controller-manager and kube-scheduler /healthz"},
		{"the control plane up: every worker gets its plan at once",
			[]node{n("m1", ecp, "etcd-apiserver-controllers"), n("w1", "worker", ""), n("w2", "worker", "")}, []string{"m1"},
			map[string]string{"m1": "etcd-apiserver-controllers", "w1": "worker", "w2": "worker"}, api.KubernetesPhaseJoiningWorkers, "w1", "kubelet client certificate and Node registration"},
		{"kube-apiserver ready but not yet its controllers: no worker is planned",
			[]node{n("m1", ecp, "etcd-apiserver"), n("w1", "worker", "")}, []string{"m1"},
			map[string]string{"m1": "etcd-apiserver-controllers"}, api.KubernetesPhaseStartingControlPlane, "m1", "kube-controller-manager"},
		{"separate roles: etcd-only members, then a control-plane-only machine",
			[]node{n("e1", "etcd", "etcd"), n("c1", "controlplane", "")}, []string{"e1"},
			map[string]string{"e1": "etcd", "c1": "apiserver"}, api.KubernetesPhaseStartingControlPlane, "c1", ""},
		{"separate roles: a control-plane-only machine's controllers after its kube-apiserver",
			[]node{n("e1", "etcd", "etcd"), n("c1", "controlplane", "apiserver")}, []string{"e1"},
			map[string]string{"e1": "etcd", "c1": "apiserver-controllers"}, api.KubernetesPhaseStartingControlPlane, "c1", "/healthz"},
		{"a plan that gained kube-apiserver, being applied, etcd's probe passing: the etcd gate holds",
			[]node{{name: "m1", roles: map[string]bool{"etcd": true, "controlplane": true}, address: "10.0.0.1", planned: true, plannedStage: "etcd-apiserver", etcdHealthy: true}}, []string{"m1"},
			map[string]string{"m1": "etcd-apiserver"}, api.KubernetesPhaseStartingControlPlane, "m1", "/readyz"},
		{"the same with etcd's probe failing: back to waiting on etcd, and the plan keeps kube-apiserver",
			[]node{{name: "m1", roles: map[string]bool{"etcd": true, "controlplane": true}, address: "10.0.0.1", planned: true, plannedStage: "etcd-apiserver"}}, []string{"m1"},
			map[string]string{"m1": "etcd-apiserver"}, api.KubernetesPhaseBootstrappingEtcd, "m1", "etcd /health"},
		{"a deleted member's machine: it leaves etcd first (its drain plan), while the others keep quorum",
			[]node{hm("m1", ecp, "etcd-apiserver"), hm("m2", ecp, "etcd-apiserver"), del(hm("m3", ecp, "etcd-apiserver"))}, []string{"m1", "m2", "m3"},
			map[string]string{"m1": "etcd-apiserver", "m2": "etcd-apiserver", "m3": "leave"}, api.KubernetesPhaseRemovingEtcd, "m3", "before its host goes"},
		{"a deleted member whose removal would break quorum stays, and nothing leaves",
			[]node{hm("m1", ecp, "etcd-apiserver"), n("m2", ecp, ""), del(hm("m3", ecp, "etcd-apiserver"))}, []string{"m1", "m2", "m3"},
			map[string]string{"m1": "etcd-apiserver", "m2": "etcd"}, api.KubernetesPhaseRemovingEtcd, "m3", "below quorum"},
		{"two deleted members: one leaves at a time, the first to have joined first",
			[]node{hm("m1", ecp, "etcd-apiserver"), hm("m2", ecp, "etcd-apiserver"), hm("m3", ecp, "etcd-apiserver"), del(hm("m4", ecp, "etcd-apiserver")), del(hm("m5", ecp, "etcd-apiserver"))},
			[]string{"m1", "m2", "m3", "m5", "m4"},
			map[string]string{"m1": "etcd-apiserver", "m2": "etcd-apiserver", "m3": "etcd-apiserver", "m5": "leave"}, api.KubernetesPhaseRemovingEtcd, "m5", ""},
		{"a member already leaving goes on before one that joined earlier starts",
			[]node{hm("m1", ecp, "etcd-apiserver"), hm("m2", ecp, "etcd-apiserver"), hm("m3", ecp, "etcd-apiserver"), del(hm("m4", ecp, "etcd-apiserver")), func() node { x := del(hm("m5", ecp, "")); x.plannedStage = "leave"; return x }()},
			[]string{"m1", "m2", "m3", "m4", "m5"},
			map[string]string{"m1": "etcd-apiserver", "m2": "etcd-apiserver", "m3": "etcd-apiserver", "m5": "leave"}, api.KubernetesPhaseRemovingEtcd, "m5", ""},
		{"a member that has left is no member: the cluster is whole again",
			[]node{hm("m1", ecp, "etcd-apiserver-controllers"), hm("m2", ecp, "etcd-apiserver-controllers"), hm("m3", ecp, "etcd-apiserver-controllers"), del(hm("m4", ecp, "leave"))}, []string{"m1", "m2", "m3", "m4"},
			map[string]string{"m1": "etcd-apiserver-controllers", "m2": "etcd-apiserver-controllers", "m3": "etcd-apiserver-controllers"}, api.KubernetesPhaseReady, "", "3 etcd members"},
		{"the only member's machine deleted: etcd goes with it, nothing planned",
			[]node{del(hm("m1", ecp, "etcd-apiserver")), n("m2", ecp, "")}, []string{"m1"},
			map[string]string{}, api.KubernetesPhaseRemovingEtcd, "", "etcd goes with them"},
		{"all healthy: Ready",
			[]node{n("m1", ecp, "etcd-apiserver-controllers"), n("w1", "worker", "worker")}, []string{"m1"},
			map[string]string{"m1": "etcd-apiserver-controllers", "w1": "worker"}, api.KubernetesPhaseReady, "", "1 etcd members, 1 control-plane machines, 1 workers"},
		{"a joining etcd machine without an address yet: waited on, not planned",
			[]node{n("m1", ecp, "etcd"), {name: "m2", roles: map[string]bool{"etcd": true}}}, []string{"m1"},
			map[string]string{"m1": "etcd"}, api.KubernetesPhaseJoiningEtcd, "m2", "has not reported an address"},
		{"a machine with a plan the planner did not write: waited on, never planned",
			[]node{n("m1", ecp, "etcd"), {name: "m2", roles: map[string]bool{"etcd": true}, address: "10.0.0.2", foreign: true}}, []string{"m1"},
			map[string]string{"m1": "etcd"}, api.KubernetesPhaseJoiningEtcd, "m2", "did not write"},
		{"no etcd machine: Invalid, nothing planned",
			[]node{n("c1", "controlplane", ""), n("w1", "worker", "")}, nil,
			map[string]string{}, api.KubernetesPhaseInvalid, "", "no machine with role etcd"},
		{"no control-plane machine: Invalid, nothing planned",
			[]node{n("e1", "etcd", "")}, nil,
			map[string]string{}, api.KubernetesPhaseInvalid, "", "no machine with role controlplane"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := order(tc.nodes, tc.members, nil)
			got := map[string]string{}
			for m, s := range d.stages {
				got[m] = s.key()
			}
			if !reflect.DeepEqual(got, tc.wantStages) {
				t.Errorf("stages %v; want %v", got, tc.wantStages)
			}
			if d.phase != tc.wantPhase || d.waitingFor != tc.wantWait {
				t.Errorf("phase %s waiting for %q; want %s waiting for %q (%s)", d.phase, d.waitingFor, tc.wantPhase, tc.wantWait, d.message)
			}
			if !strings.Contains(d.message, tc.wantInMsg) {
				t.Errorf("message %q does not say %q", d.message, tc.wantInMsg)
			}
		})
	}
}

// TestOrderTeardown: when every member's machine was deleted (the pool or
// the cluster goes), no member leaves first: their deletions are released.
func TestOrderTeardown(t *testing.T) {
	d := order([]node{del(hm("m1", "etcd,controlplane", "etcd-apiserver")), del(hm("m2", "etcd,controlplane", "etcd-apiserver"))}, []string{"m1", "m2"}, nil)
	if !reflect.DeepEqual(d.release, []string{"m1", "m2"}) || len(d.stages) != 0 || d.phase != api.KubernetesPhaseRemovingEtcd {
		t.Errorf("every member deleted: release %v, stages %v, phase %s; want both released, nothing planned", d.release, d.stages, d.phase)
	}
}

// TestOrderWarnings: an even etcd count is warned of, and the planner goes
// on; a cluster without roles names the machines of other clusters that
// have them, which do not count.
func TestOrderWarnings(t *testing.T) {
	d := order([]node{n("m1", "etcd,controlplane", ""), n("m2", "etcd", "")}, nil, nil)
	if len(d.warnings) != 1 || !strings.Contains(d.warnings[0], "2 etcd machines: an even count") || d.phase != api.KubernetesPhaseBootstrappingEtcd {
		t.Errorf("two etcd machines: warnings %q, phase %s; want the even count warned of and etcd bootstrapping", d.warnings, d.phase)
	}
	d = order([]node{n("w1", "worker", "")}, nil, []string{"x1 (role etcd, cluster other)"})
	if d.phase != api.KubernetesPhaseInvalid || !strings.Contains(d.invalid, "machines of other clusters do not count: x1 (role etcd, cluster other)") {
		t.Errorf("a role on another cluster's machine: %s %q", d.phase, d.invalid)
	}
}

// TestOrderDeadMember: a deleted member whose agent is gone (a pool
// replacing a dead machine) cannot run its own drain plan: the first
// healthy member that stays removes it from etcd through its own plan;
// once that plan is applied the dead member is out, its machine's
// deletion is released, and the replacement joins.
func TestOrderDeadMember(t *testing.T) {
	const ecp = "etcd,controlplane"
	dead := func() node { x := del(hm("m3", ecp, "etcd-apiserver")); x.agentGone = true; return x }
	members := []string{"m1", "m2", "m3"}

	d := order([]node{hm("m1", ecp, "etcd-apiserver"), hm("m2", ecp, "etcd-apiserver"), dead(), n("m4", ecp, "")}, members, nil)
	if s, ok := d.stages["m3"]; ok {
		t.Errorf("the dead member's machine got stage %q; want none (its agent cannot apply it)", s.key())
	}
	if d.stages["m1"].remove != "m3" || d.stages["m1"].key() != "etcd-apiserver" || d.stages["m2"].remove != "" {
		t.Errorf("stages %+v; want m1 (the first healthy member) to remove m3, its stage unchanged", d.stages)
	}
	if _, ok := d.stages["m4"]; ok || d.phase != api.KubernetesPhaseRemovingEtcd || d.waitingFor != "m3" || !strings.Contains(d.message, "through member m1") {
		t.Errorf("phase %s waiting for %q (%s), m4 planned %v; want the removal first, the replacement waiting", d.phase, d.waitingFor, d.message, d.stages["m4"])
	}
	if len(d.release) != 0 {
		t.Errorf("released %v before the member was removed", d.release)
	}

	// m1's plan with the removal applied: m3 is out and released, m1 keeps
	// the removal (its plan unchanged), and the replacement m4 joins.
	m1 := hm("m1", ecp, "etcd-apiserver")
	m1.removing, m1.removed = "m3", "m3"
	d = order([]node{m1, hm("m2", ecp, "etcd-apiserver"), dead(), n("m4", ecp, "")}, members, nil)
	if !reflect.DeepEqual(d.members, []string{"m1", "m2", "m4"}) || !reflect.DeepEqual(d.release, []string{"m3"}) {
		t.Errorf("members %v, released %v; want m3 out and released, m4 joining", d.members, d.release)
	}
	if d.stages["m1"].remove != "m3" || d.stages["m4"].key() != "etcd" || d.phase != api.KubernetesPhaseJoiningEtcd {
		t.Errorf("stages %+v, phase %s; want m1's removal kept and m4 joining etcd", d.stages, d.phase)
	}

	// The removal would leave no healthy quorum: nobody removes it.
	d = order([]node{hm("m1", ecp, "etcd-apiserver"), n("m2", ecp, "etcd-apiserver"), dead()}, members, nil)
	if d.stages["m1"].remove != "" || !strings.Contains(d.message, "below quorum") {
		t.Errorf("one healthy member of the two that stay: stages %+v (%s); want no removal, below quorum said", d.stages, d.message)
	}

	// A deleted member whose agent lives leaves by its own drain plan, as before.
	d = order([]node{hm("m1", ecp, "etcd-apiserver"), hm("m2", ecp, "etcd-apiserver"), del(hm("m3", ecp, "etcd-apiserver"))}, members, nil)
	if !d.stages["m3"].leave || d.stages["m1"].remove != "" {
		t.Errorf("a live deleted member: stages %+v; want its own leave plan", d.stages)
	}
}
