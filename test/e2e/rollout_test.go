package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// rolloutAgents starts one agent per name with its labels, each writing
// the set's file in its own directory (they share one host), and waits
// for every machine to be Running. It returns the directories by name.
func rolloutAgents(t *testing.T, s *server, token string, labels map[string][]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, ls := range labels {
		out[name] = t.TempDir()
		args := []string{"--server", s.url(), "--data-dir", t.TempDir(), "--token", token, "--node-name", name}
		for _, l := range ls {
			args = append(args, "--label", l)
		}
		runAgentBinaryEnv(t, []string{"PLANSET_OUT=" + out[name]}, args...)
	}
	for name := range labels {
		waitFor(t, 60*time.Second, "machine "+name+" to register", func() bool {
			_, err := s.kubectl("get", "machine", name)
			return err == nil
		})
		waitPhase(t, s, name, "Running", 60*time.Second)
	}
	return out
}

// setPlanSample is one of a set's plans as a sample shows it.
type setPlanSample struct {
	revision string
	// applied: succeeded, and the agent applied the plan's current spec.
	applied bool
	// updating: the agent has not finished the plan's current spec.
	updating bool
}

// setPlans samples the set's plans, by machine, in one list call, so the
// sample is one consistent view of them.
func setPlans(t *testing.T, s *server, set string) map[string]setPlanSample {
	t.Helper()
	raw := s.mustKubectl("get", "machineplans", "-l", "muster.io/plan-set="+set, "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.muster\.io/plan-set-revision} {.status.state} {.status.checksum} {.status.appliedChecksum}{"\n"}{end}`)
	out := map[string]setPlanSample{}
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		p := setPlanSample{revision: f[1]}
		p.applied = len(f) >= 5 && f[2] == "succeeded" && f[3] == f[4]
		p.updating = len(f) < 3 || f[2] == "pending" || f[2] == "in-progress"
		out[f[0]] = p
	}
	return out
}

// setField is one jsonpath of the set.
func setField(s *server, set, path string) string {
	out, _ := s.kubectl("get", "machineplanset", set, "-o", "jsonpath="+path)
	return out
}

// currentRevision waits for the set's status to describe its current spec
// and returns the revision of its template.
func currentRevision(t *testing.T, s *server, set string) string {
	t.Helper()
	var rev string
	waitFor(t, 30*time.Second, "plan set "+set+" to observe its spec", func() bool {
		f := strings.Fields(setField(s, set, "{.metadata.generation} {.status.observedGeneration} {.status.revision}"))
		if len(f) == 3 && f[0] == f[1] {
			rev = f[2]
			return true
		}
		return false
	})
	return rev
}

// TestPlanSetPartitions: a template change rolls out partition by
// partition (control plane, then workers): no worker gets the new revision
// before the control-plane machine applied it; a machine joining later
// gets the current revision; spec.strategy.paused holds a rollout until a
// kubectl patch resumes it.
func TestPlanSetPartitions(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	labels := map[string][]string{
		"pt-cp": {"role=control-plane"}, "pt-w1": {"role=worker"}, "pt-w2": {"role=worker"}, "pt-w3": {"role=worker"}, "pt-w4": {"role=worker"},
	}
	out := rolloutAgents(t, s, token, labels)
	strategy := `  strategy:
    maxUnavailable: 2
    partitions:
    - {name: control-plane, selector: {matchLabels: {role: control-plane}}}
    - {name: worker, selector: {matchLabels: {role: worker}}}
`
	doc := func(content string, extra string) string {
		// A second's sleep makes the control plane's turn long enough for
		// a worker started too early to show in a sample.
		return strings.Replace(setDoc("fleet", "role: fleet", content, strategy+extra), "{matchLabels: {role: fleet}}",
			"{matchExpressions: [{key: role, operator: In, values: [control-plane, worker]}]}", 1)
	}
	slow := func(d string) string { return strings.Replace(d, "printf", "sleep 1; printf", 1) }
	applySet(t, s, doc("v1", ""))
	waitSetCondition(t, s, "fleet", "Complete", "True")
	v1 := currentRevision(t, s, "fleet")

	applySet(t, s, slow(doc("v2", "")))
	v2 := currentRevision(t, s, "fleet")
	sawPartition, sawInTable := map[string]bool{}, map[string]bool{}
	waitFor(t, 90*time.Second, "the v2 rollout, control plane first", func() bool {
		ps := setPlans(t, s, "fleet")
		cp := ps["pt-cp"]
		updating := 0
		for _, p := range ps {
			if p.updating {
				updating++
			}
		}
		if updating > 2 {
			t.Errorf("%d plans updating at once with maxUnavailable 2: %+v", updating, ps)
		}
		for name, p := range ps {
			if name != "pt-cp" && p.revision == v2 && !(cp.revision == v2 && cp.applied) {
				t.Errorf("worker %s got revision %s before the control plane applied it (control plane: %+v)", name, v2, cp)
			}
		}
		if p := setField(s, "fleet", "{.status.currentPartition}"); p != "" {
			sawPartition[p] = true
		}
		// Read apart from the status above: the partition may have moved
		// on in between, so the table is checked on its own.
		table := s.mustKubectl("get", "mps", "fleet")
		if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) == 2 && strings.Contains(lines[0], "PARTITION") {
			// The column's cell, by its header's offset: an empty cell
			// would shift a split by fields.
			if at := strings.Index(lines[0], "PARTITION"); len(lines[1]) > at {
				switch cell := strings.Fields(lines[1][at:]); {
				case len(cell) > 0 && (cell[0] == "control-plane" || cell[0] == "worker"):
					sawInTable[cell[0]] = true
				}
			}
		} else {
			t.Errorf("kubectl get mps has no PARTITION column:\n%s", table)
		}
		f := strings.Fields(setCondition(s, "fleet", "Complete"))
		return len(f) >= 3 && f[0] == f[1] && f[2] == "True"
	})
	t.Logf("partitions seen in status.currentPartition during the rollout: %v", sawPartition)
	if !sawPartition["control-plane"] && !sawPartition["worker"] {
		t.Errorf("status.currentPartition never named a partition during the rollout: saw %v", sawPartition)
	}
	if len(sawInTable) == 0 {
		t.Errorf("kubectl get mps never showed a partition in its PARTITION column during the rollout")
	}
	for name, dir := range out {
		if got := readConf(t, dir); got != "v2" {
			t.Errorf("%s: set.conf is %q after the rollout, want v2", name, got)
		}
	}
	if got := setField(s, "fleet", "{.status.lastCompleteRevision} {.status.currentPartition}"); strings.TrimSpace(got) != v2 {
		t.Errorf("a complete rollout: status lastCompleteRevision and currentPartition are %q, want %q and none", got, v2)
	}
	if v1 == v2 {
		t.Fatalf("the template change did not change the revision (%s)", v1)
	}

	// A machine joining afterwards gets the current revision.
	late := rolloutAgents(t, s, token, map[string][]string{"pt-w5": {"role=worker"}})
	waitFor(t, 60*time.Second, "pt-w5 to apply the current revision", func() bool {
		p := setPlans(t, s, "fleet")["pt-w5"]
		return p.revision == v2 && p.applied && readConf(t, late["pt-w5"]) == "v2"
	})

	// Paused: a new template starts nothing until a patch resumes it.
	applySet(t, s, doc("v3", "    paused: true\n"))
	v3 := currentRevision(t, s, "fleet")
	waitSetCondition(t, s, "fleet", "Paused", "True")
	if got := setCondition(s, "fleet", "Paused"); !strings.HasSuffix(got, "True PausedBySpec") {
		t.Errorf("paused for the wrong reason: %q", got)
	}
	// The status of the paused generation is written after its decision:
	// any plan written on v3 would show now.
	for name, p := range setPlans(t, s, "fleet") {
		if p.revision == v3 {
			t.Errorf("%s got revision %s while the set is paused", name, v3)
		}
	}
	s.mustKubectl("patch", "machineplanset", "fleet", "--type=merge", "-p", `{"spec":{"strategy":{"paused":false}}}`)
	waitSetCondition(t, s, "fleet", "Complete", "True")
	for name, dir := range map[string]string{"pt-cp": out["pt-cp"], "pt-w1": out["pt-w1"], "pt-w5": late["pt-w5"]} {
		if got := readConf(t, dir); got != "v3" {
			t.Errorf("%s: set.conf is %q after resuming, want v3", name, got)
		}
	}
}

// TestPlanSetAutoRevert: a failing template with autoRevert and
// maxUnavailable 1 stops after the first machine, touches no other
// machine, puts that machine back on the last complete revision (Running
// again), and stays Paused saying why; a fixed template completes.
func TestPlanSetAutoRevert(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		token := newToken(t, s)
		names := []string{"ar-1", "ar-2", "ar-3", "ar-4"}
		labels := map[string][]string{}
		for _, n := range names {
			labels[n] = []string{"role=revert"}
		}
		out := rolloutAgents(t, s, token, labels)
		strategy := "  strategy: {maxUnavailable: 1, autoRevert: true}\n"
		applySet(t, s, setDoc("rv", "role: revert", "v1", strategy))
		waitSetCondition(t, s, "rv", "Complete", "True")
		v1 := currentRevision(t, s, "rv")
		if got := setField(s, "rv", "{.status.lastCompleteRevision}"); got != v1 {
			t.Fatalf("status.lastCompleteRevision is %q after the rollout, want %s", got, v1)
		}
		generations := map[string]string{}
		for _, n := range names {
			generations[n] = s.mustKubectl("get", "machineplan", n, "-o", "jsonpath={.metadata.generation}")
		}

		applySet(t, s, strings.Replace(setDoc("rv", "role: revert", "bad", strategy), "printf", "exit 3; printf", 1))
		bad := currentRevision(t, s, "rv")
		touched := map[string]bool{}
		waitFor(t, 90*time.Second, "the failed machine to be reverted to "+v1, func() bool {
			ps := setPlans(t, s, "rv")
			for n, p := range ps {
				if p.revision == bad {
					touched[n] = true
				}
			}
			if len(touched) > 1 {
				t.Fatalf("machines %v got the failing revision; with maxUnavailable 1 only the first batch may", touched)
			}
			if setField(s, "rv", "{.status.failedRevision}") != bad {
				return false
			}
			for _, p := range ps {
				if p.revision != v1 || !p.applied {
					return false
				}
			}
			return len(ps) == len(names)
		})
		// The revert can be quicker than a sample: the plans' generations
		// say which were written at all.
		for _, n := range names {
			if got := s.mustKubectl("get", "machineplan", n, "-o", "jsonpath={.metadata.generation}"); got != generations[n] {
				touched[n] = true
			}
		}
		if len(touched) != 1 {
			t.Fatalf("machines %v were written during the failed rollout; with maxUnavailable 1 exactly one (the first batch) must be", touched)
		}
		var batch string
		for n := range touched {
			batch = n
		}
		waitPhase(t, s, batch, "Running", 60*time.Second)
		generations[batch] = s.mustKubectl("get", "machineplan", batch, "-o", "jsonpath={.metadata.generation}")
		if got := readConf(t, out[batch]); got != "v1" {
			t.Errorf("%s: set.conf is %q after the revert, want v1", batch, got)
		}
		// Reverted, the set must still be Paused on the bad revision, not
		// roll it again: a few reconciles (resync is 10s) change nothing.
		got := setCondition(s, "rv", "Paused")
		if !strings.HasSuffix(got, "True MachineFailed") {
			t.Errorf("the reverted set is not Paused with reason MachineFailed: %q", got)
		}
		msg := setField(s, "rv", `{.status.conditions[?(@.type=="Paused")].message}`)
		for _, want := range []string{batch, bad, v1} {
			if !strings.Contains(msg, want) {
				t.Errorf("the Paused message does not name %q: %s", want, msg)
			}
		}
		deadline := time.Now().Add(12 * time.Second)
		waitFor(t, 20*time.Second, "a resync to pass without rolling the failed revision again", func() bool {
			for n, p := range setPlans(t, s, "rv") {
				if p.revision == bad {
					t.Fatalf("%s got the failed revision %s again after the revert", n, bad)
				}
			}
			return time.Now().After(deadline)
		})

		// Clearing the memory, as the docs say, retries the revision: it
		// fails on the same first machine and is reverted again.
		s.mustKubectl("patch", "mps", "rv", "--subresource=status", "--type=merge", "-p", `{"status":{"failedRevision":null}}`)
		waitFor(t, 60*time.Second, "the retried revision to fail and be reverted again", func() bool {
			gen := s.mustKubectl("get", "machineplan", batch, "-o", "jsonpath={.metadata.generation}")
			if setField(s, "rv", "{.status.failedRevision}") != bad || gen == generations[batch] {
				return false
			}
			for _, p := range setPlans(t, s, "rv") {
				if p.revision != v1 || !p.applied {
					return false
				}
			}
			return true
		})
		waitPhase(t, s, batch, "Running", 60*time.Second)

		// A fixed template resumes and completes.
		applySet(t, s, setDoc("rv", "role: revert", "v3", strategy))
		waitSetCondition(t, s, "rv", "Complete", "True")
		for _, n := range names {
			if got := readConf(t, out[n]); got != "v3" {
				t.Errorf("%s: set.conf is %q after the fix, want v3", n, got)
			}
			waitPhase(t, s, n, "Running", 30*time.Second)
			assertLegalHistory(t, s, n)
		}
	})
}

// TestPlanSetServerKilledMidRollout: kill -9 the server in the middle of a
// rollout. After the restart the rollout continues and completes, no
// sample shows more than maxUnavailable of the set's machines updating or
// not Running, and every recorded transition is legal.
func TestPlanSetServerKilledMidRollout(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		token := newToken(t, s)
		names := []string{"kr-1", "kr-2", "kr-3", "kr-4"}
		labels := map[string][]string{}
		for _, n := range names {
			labels[n] = []string{"role=kill"}
		}
		out := rolloutAgents(t, s, token, labels)
		strategy := "  strategy: {maxUnavailable: 1}\n"
		applySet(t, s, setDoc("kr", "role: kill", "v1", strategy))
		waitSetCondition(t, s, "kr", "Complete", "True")

		// Two seconds a machine: the rollout outlasts the kill and restart.
		applySet(t, s, strings.Replace(setDoc("kr", "role: kill", "v2", strategy), "printf", "sleep 2; printf", 1))
		v2 := currentRevision(t, s, "kr")
		// sample checks the bound on one consistent view of the plans and
		// one of the machines; they are two list calls, so each is checked
		// on its own.
		sample := func() map[string]setPlanSample {
			ps, _ := s.kubectl("get", "machineplans", "-l", "muster.io/plan-set=kr", "-o", "name")
			if ps == "" {
				return nil // the server is down or restarting
			}
			plans := setPlans(t, s, "kr")
			var updating []string
			for n, p := range plans {
				if p.updating || (p.revision == v2 && !p.applied) {
					updating = append(updating, n)
				}
			}
			if len(updating) > 1 {
				sort.Strings(updating)
				t.Errorf("plans of %v updating at once with maxUnavailable 1", updating)
			}
			phases, err := s.kubectl("get", "machines", "-l", "role=kill", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}`)
			if err == nil {
				var out []string
				for _, f := range strings.Fields(phases) {
					if !strings.HasSuffix(f, "=Running") {
						out = append(out, f)
					}
				}
				if len(out) > 1 {
					t.Errorf("machines %v not Running at once with maxUnavailable 1", out)
				}
			}
			return plans
		}
		waitFor(t, 60*time.Second, "the v2 rollout to start", func() bool {
			for _, p := range sample() {
				if p.revision == v2 {
					return true
				}
			}
			return false
		})
		s.kill9()
		s.start()
		waitFor(t, 120*time.Second, "the v2 rollout to complete after the restart", func() bool {
			sample()
			f := strings.Fields(setCondition(s, "kr", "Complete"))
			return len(f) >= 3 && f[0] == f[1] && f[2] == "True"
		})
		for _, n := range names {
			if got := readConf(t, out[n]); got != "v2" {
				t.Errorf("%s: set.conf is %q after the rollout, want v2", n, got)
			}
			waitPhase(t, s, n, "Running", 30*time.Second)
			assertLegalHistory(t, s, n)
		}
		if got := fmt.Sprint(setField(s, "kr", "{.status.ready}")); got != fmt.Sprint(len(names)) {
			t.Errorf("status.ready is %s, want %d", got, len(names))
		}
	})
}

// TestPlanSetProgressDeadline: a revision whose plan applies but whose
// probe never turns healthy fails once progressDeadline passes; with
// autoRevert the machine goes back to the last complete revision and
// Running, and the set says ProgressDeadlineExceeded.
func TestPlanSetProgressDeadline(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	out := rolloutAgents(t, s, token, map[string][]string{"pd-1": {"role=deadline"}, "pd-2": {"role=deadline"}})
	strategy := "  strategy: {maxUnavailable: 1, autoRevert: true, progressDeadline: 10s}\n"
	applySet(t, s, setDoc("pd", "role: deadline", "v1", strategy))
	waitSetCondition(t, s, "pd", "Complete", "True")
	v1 := currentRevision(t, s, "pd")

	sick := setDoc("pd", "role: deadline", "sick", strategy) + `    probes:
    - name: never
      periodSeconds: 1
      failureThreshold: 1
      exec: {command: /bin/sh, args: ["-c", "exit 1"]}
`
	applySet(t, s, sick)
	sickRev := currentRevision(t, s, "pd")
	waitSetCondition(t, s, "pd", "Paused", "True")
	if got := setCondition(s, "pd", "Paused"); !strings.HasSuffix(got, "True ProgressDeadlineExceeded") {
		t.Errorf("paused for the wrong reason: %q", got)
	}
	waitFor(t, 60*time.Second, "the unhealthy machine to be reverted to "+v1, func() bool {
		if setField(s, "pd", "{.status.failedRevision}") != sickRev {
			return false
		}
		ps := setPlans(t, s, "pd")
		return len(ps) == 2 && ps["pd-1"].revision == v1 && ps["pd-1"].applied && ps["pd-2"].revision == v1 && ps["pd-2"].applied
	})
	for _, n := range []string{"pd-1", "pd-2"} {
		waitPhase(t, s, n, "Running", 60*time.Second)
		assertLegalHistory(t, s, n)
	}
	msg := setField(s, "pd", `{.status.conditions[?(@.type=="Paused")].message}`)
	if !strings.Contains(msg, "progressDeadline") || !strings.Contains(msg, sickRev) {
		t.Errorf("the Paused message does not say the deadline passed on %s: %s", sickRev, msg)
	}
	if got := readConf(t, out["pd-1"]); got != "v1" {
		t.Errorf("pd-1: set.conf is %q after the revert, want v1", got)
	}
}
