package planner

import (
	"reflect"
	"strings"
	"testing"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// at gives a table's machine the version its plan runs, written at since.
func at(x node, version string, since time.Time) node {
	x.version, x.versionSince = version, since
	return x
}

// planFailed marks the machine's plan's last attempt failed.
func planFailed(x node) node { x.planFailed = true; x.healthyStage = ""; return x }

// unhealthy: its plan is not applied with every probe healthy.
func unhealthy(x node) node { x.healthyStage = ""; return x }

// TestRoll: a version change, pass by pass. The etcd,controlplane
// machines go one at a time, each only once the one before is healthy at
// the new version; workers after the whole control plane, workerConcurrency
// at a time; the cluster runs the new version once Ready. A machine whose
// plan at the new version fails, or is not healthy in time, sends every
// upgraded machine back, the failed one first; the failed version is not
// tried again while spec names it.
func TestRoll(t *testing.T) {
	const ecp = "etcd,controlplane"
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	recent, long := now.Add(-10*time.Second), now.Add(-10*time.Minute)
	members := []string{"m1", "m2", "m3"}
	healthyAt := func(version string) []node {
		return []node{at(n("m1", ecp, "etcd-apiserver-controllers"), version, long), at(n("m2", ecp, "etcd-apiserver-controllers"), version, long), at(n("m3", ecp, "etcd-apiserver-controllers"), version, long),
			at(n("w1", "worker", "worker"), version, long), at(n("w2", "worker", "worker"), version, long), at(n("w3", "worker", "worker"), version, long)}
	}
	with := func(nodes []node, change map[string]func(node) node) []node {
		out := append([]node(nil), nodes...)
		for i := range out {
			if f := change[out[i].name]; f != nil {
				out[i] = f(out[i])
			}
		}
		return out
	}
	newAt := func(since time.Time) func(node) node { return func(x node) node { return at(x, "v1.37.2", since) } }
	newUnhealthy := func(x node) node { return unhealthy(at(x, "v1.37.2", recent)) }
	const old, next = "v1.36.3", "v1.37.2"
	for _, tc := range []struct {
		name  string
		nodes []node
		in    rollInput
		// want: machine -> version its plan is rendered at
		want                  map[string]string
		wantPhase, wantWait   string
		wantRunning, wantFail string
		wantReason, wantInMsg string
	}{
		{"the first bring-up: every machine at spec's version, which runs once Ready",
			healthyAt(""), rollInput{spec: next},
			map[string]string{"m1": next, "m2": next, "m3": next, "w1": next, "w2": next, "w3": next},
			api.KubernetesPhaseReady, "", next, "", ReasonUpToDate, "every machine runs Kubernetes v1.37.2"},
		{"a version change: the first control-plane machine goes alone",
			healthyAt(old), rollInput{spec: next, running: old},
			map[string]string{"m1": next, "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m1", old, "", ReasonUpgrading, "upgrading Kubernetes from v1.36.3 to v1.37.2: waiting for machine m1"},
		{"the first not healthy yet at the new version: no other goes",
			with(healthyAt(old), map[string]func(node) node{"m1": newUnhealthy}), rollInput{spec: next, running: old, timeout: time.Minute, now: now},
			map[string]string{"m1": next, "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m1", old, "", ReasonUpgrading, "0 of 6 machines run v1.37.2"},
		{"the first healthy at the new version: the second goes",
			with(healthyAt(old), map[string]func(node) node{"m1": newAt(recent)}), rollInput{spec: next, running: old, timeout: time.Minute, now: now},
			map[string]string{"m1": next, "m2": next, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m2", old, "", ReasonUpgrading, "1 of 6"},
		{"a control-plane machine down at the old version holds the upgrade of the healthy ones",
			with(healthyAt(old), map[string]func(node) node{"m1": newAt(recent), "m3": unhealthy}), rollInput{spec: next, running: old, timeout: time.Minute, now: now},
			map[string]string{"m1": next, "m2": old, "m3": next, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m3", old, "", ReasonUpgrading, ""},
		{"the control plane done: workers go, workerConcurrency at a time",
			with(healthyAt(old), map[string]func(node) node{"m1": newAt(recent), "m2": newAt(recent), "m3": newAt(recent)}), rollInput{spec: next, running: old, workerConcurrency: 2, timeout: time.Minute, now: now},
			map[string]string{"m1": next, "m2": next, "m3": next, "w1": next, "w2": next, "w3": old},
			api.KubernetesPhaseUpgrading, "w1", old, "", ReasonUpgrading, "3 of 6"},
		{"every machine healthy at the new version: it runs",
			healthyAt(next), rollInput{spec: next, running: old, timeout: time.Minute, now: now},
			map[string]string{"m1": next, "m2": next, "m3": next, "w1": next, "w2": next, "w3": next},
			api.KubernetesPhaseReady, "", next, "", ReasonUpToDate, "every machine runs Kubernetes v1.37.2"},
		{"an upgraded machine's plan failed: reverted, it first",
			with(healthyAt(old), map[string]func(node) node{"m1": newAt(recent), "m2": func(x node) node { return planFailed(at(x, next, recent)) }}), rollInput{spec: next, running: old, timeout: time.Minute, now: now},
			map[string]string{"m1": next, "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m2", old, next, ReasonReverting, "Kubernetes v1.37.2 was reverted to v1.36.3: machine m2's plan at v1.37.2 failed"},
		{"the failed one back and healthy: the other upgraded one goes back",
			with(healthyAt(old), map[string]func(node) node{"m1": newAt(recent)}), rollInput{spec: next, running: old, failed: next, failedWhy: "Kubernetes v1.37.2 was reverted", timeout: time.Minute, now: now},
			map[string]string{"m1": old, "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m1", old, next, ReasonReverting, "Kubernetes v1.37.2 was reverted. Reverting to v1.36.3: waiting for machine m1"},
		{"an upgraded machine not healthy within the timeout: reverted",
			with(healthyAt(old), map[string]func(node) node{"m1": func(x node) node { return unhealthy(at(x, next, long)) }}), rollInput{spec: next, running: old, timeout: time.Minute, now: now},
			map[string]string{"m1": old, "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m1", old, next, ReasonReverting, "was not applied with every probe healthy (etcd /health, kube-apiserver /readyz) within 1m0s"},
		{"reverted, spec still names the failed version: not tried again",
			healthyAt(old), rollInput{spec: next, running: old, failed: next, failedWhy: "Kubernetes v1.37.2 was reverted to v1.36.3: why", timeout: time.Minute, now: now},
			map[string]string{"m1": old, "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseReady, "", old, next, ReasonReverted, "Kubernetes v1.37.2 was reverted to v1.36.3: why"},
		{"spec moved on from the failed version: the new one rolls",
			healthyAt(old), rollInput{spec: "v1.37.3", running: old, failed: next, timeout: time.Minute, now: now},
			map[string]string{"m1": "v1.37.3", "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseUpgrading, "m1", old, "", ReasonUpgrading, "to v1.37.3"},
		{"a version not available: nothing moves, and the condition says why",
			healthyAt(old), rollInput{spec: next, running: old, unavailable: "Kubernetes v1.37.2 is not available for linux-amd64", timeout: time.Minute, now: now},
			map[string]string{"m1": old, "m2": old, "m3": old, "w1": old, "w2": old, "w3": old},
			api.KubernetesPhaseReady, "", old, "", ReasonVersionUnavailable, "not available for linux-amd64; the cluster stays on v1.36.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := order(tc.nodes, members, nil)
			r := roll(&d, tc.nodes, tc.in)
			if !reflect.DeepEqual(r.versions, tc.want) {
				t.Errorf("versions %v; want %v", r.versions, tc.want)
			}
			if d.phase != tc.wantPhase || d.waitingFor != tc.wantWait {
				t.Errorf("phase %s waiting for %q; want %s waiting for %q (%s)", d.phase, d.waitingFor, tc.wantPhase, tc.wantWait, d.message)
			}
			if r.running != tc.wantRunning || r.failed != tc.wantFail {
				t.Errorf("running %q failed %q; want %q and %q", r.running, r.failed, tc.wantRunning, tc.wantFail)
			}
			if r.cond.reason != tc.wantReason || !strings.Contains(r.cond.message, tc.wantInMsg) {
				t.Errorf("condition %s %q; want %s saying %q", r.cond.reason, r.cond.message, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

// TestRollRevertReason: the reason a version was reverted, written in
// the condition while the revert rolls, is read back whole on the next
// pass and is the Reverted condition's message, never nested in itself.
func TestRollRevertReason(t *testing.T) {
	now := time.Now()
	nodes := []node{at(n("m1", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.37.2", now), planFailed(at(n("m2", "etcd,controlplane", ""), "v1.37.2", now)),
		at(n("m3", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", now)}
	members := []string{"m1", "m2", "m3"}
	in := rollInput{spec: "v1.37.2", running: "v1.36.3", timeout: time.Minute, now: now}
	d := order(nodes, members, nil)
	r := roll(&d, nodes, in)
	why := "Kubernetes v1.37.2 was reverted to v1.36.3: machine m2's plan at v1.37.2 failed (kubectl get machineplan m2 -o yaml: status.output says why); " + notRetried
	if r.cond.reason != ReasonReverting || !strings.HasPrefix(r.cond.message, why+". Reverting to v1.36.3") {
		t.Fatalf("the condition while reverting: %s %q", r.cond.reason, r.cond.message)
	}
	// The failed machine rolled back, not healthy yet: still Reverting.
	in.failed, in.failedWhy, in.reverting = r.failed, failedReason(r.cond.message), true
	nodes = []node{at(n("m1", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", now), unhealthy(at(n("m2", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", now)),
		at(n("m3", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", now)}
	d = order(nodes, members, nil)
	r = roll(&d, nodes, in)
	if r.cond.reason != ReasonReverting || d.phase != api.KubernetesPhaseUpgrading || d.waitingFor != "m2" {
		t.Errorf("the last machine rolled back, not healthy yet: %s waiting for %q, %s; want Upgrading waiting for m2, Reverting", d.phase, d.waitingFor, r.cond.reason)
	}
	// Every pass after reads it back; the revert done, it is the message.
	for pass := 0; pass < 3; pass++ {
		in.failed, in.failedWhy, in.reverting = r.failed, failedReason(r.cond.message), r.cond.reason == ReasonReverting
		nodes = []node{at(n("m1", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", now), at(n("m2", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", now),
			at(n("m3", "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", now)}
		d = order(nodes, members, nil)
		r = roll(&d, nodes, in)
	}
	if r.cond.reason != ReasonReverted || r.cond.message != why || d.phase != api.KubernetesPhaseReady {
		t.Errorf("after the revert: %s %s %q; want Ready, Reverted saying %q", d.phase, r.cond.reason, r.cond.message, why)
	}
}

// TestRollFiveMembers: with five etcd members and controlPlaneConcurrency
// 3, no more than two (what etcd tolerates losing) go at once.
func TestRollFiveMembers(t *testing.T) {
	var nodes []node
	var members []string
	for _, m := range []string{"m1", "m2", "m3", "m4", "m5"} {
		nodes = append(nodes, at(n(m, "etcd,controlplane", "etcd-apiserver-controllers"), "v1.36.3", time.Time{}))
		members = append(members, m)
	}
	d := order(nodes, members, nil)
	r := roll(&d, nodes, rollInput{spec: "v1.37.2", running: "v1.36.3", cpConcurrency: 3, timeout: time.Minute, now: time.Now()})
	moved := 0
	for _, v := range r.versions {
		if v == "v1.37.2" {
			moved++
		}
	}
	if moved != 2 {
		t.Errorf("%d of 5 etcd members upgraded at once (%v); want 2, what etcd tolerates losing", moved, r.versions)
	}
}
