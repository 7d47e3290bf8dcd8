package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlanSet: a set gives the workers, and only them, its plan; a
// template change rolls out within maxUnavailable and stops on a failure;
// a machine relabelled out loses the set's plan; a hand-written plan and a
// machine two sets select are left alone, with a Conflict; bad sets are 422.
func TestPlanSet(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	out := map[string]string{}
	labels := map[string][]string{
		"ps-w1": {"role=worker", "site=a"}, "ps-w2": {"role=worker"}, "ps-w3": {"role=worker"}, "ps-db": {"role=db"},
	}
	for _, name := range []string{"ps-w1", "ps-w2", "ps-w3", "ps-db"} {
		out[name] = t.TempDir()
		args := []string{"--server", s.url(), "--data-dir", t.TempDir(), "--token", token, "--node-name", name}
		for _, l := range labels[name] {
			args = append(args, "--label", l)
		}
		// Killed, and its output shown on a failure, by its cleanup.
		runAgentBinaryEnv(t, []string{"PLANSET_OUT=" + out[name]}, args...)
	}
	for name := range out {
		// kubectl wait fails at once on a Machine its agent has not made yet.
		waitFor(t, 60*time.Second, "machine "+name+" to register", func() bool {
			_, err := s.kubectl("get", "machine", name)
			return err == nil
		})
		waitPhase(t, s, name, "Running", 60*time.Second)
	}

	// Bad sets are refused with 422 ("is invalid") and say what to do.
	bad := []struct{ what, doc, words string }{
		{"empty selector", strings.Replace(setDoc("bad", "role: worker", "x", ""), "{matchLabels: {role: worker}}", "{}", 1), "spec.matchAll: true"},
		{"maxUnavailable 0", setDoc("bad", "role: worker", "x", "  strategy: {maxUnavailable: 0}\n"), "at least 1"},
		{"percent over 100", setDoc("bad", "role: worker", "x", "  strategy: {maxUnavailable: \"150%\"}\n"), "1% to 100%"},
		{"bad label key", setDoc("bad", "\"bad key!\": x", "x", ""), "spec.selector.matchLabels"},
		{"bad template", strings.Replace(setDoc("bad", "role: worker", "x", ""), "command: /bin/sh", "command: \"\"", 1), "spec.template.instructions[0].command"},
	}
	for _, b := range bad {
		f := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(f, []byte(b.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := s.kubectl("create", "-f", f)
		if err == nil || !strings.Contains(got, "is invalid") || !strings.Contains(got, b.words) {
			t.Errorf("%s: want a 422 saying %q, got %v:\n%s", b.what, b.words, err, got)
		}
	}

	// A hand-written plan on ps-w3 is never the set's.
	applyPlan(t, s, "ps-w3", `  instructions:
  - name: hand
    command: /bin/sh
    args: ["-c", "printf hand > \"$PLANSET_OUT/hand.conf\""]
`)
	waitFor(t, 30*time.Second, "the hand-written plan to be applied", func() bool {
		o, _ := s.kubectl("get", "machineplan", "ps-w3", "-o", "jsonpath={.status.state}")
		return o == "succeeded"
	})

	// The set reaches the workers, and only them.
	applySet(t, s, setDoc("workers", "role: worker", "v1", ""))
	waitSetCondition(t, s, "workers", "Complete", "True")
	s.mustKubectl("wait", "--for=condition=Complete", "machineplanset/workers", "--timeout=10s")
	for name, want := range map[string]string{"ps-w1": "v1", "ps-w2": "v1", "ps-w3": "<none>", "ps-db": "<none>"} {
		if got := readConf(t, out[name]); got != want {
			t.Errorf("%s: set.conf is %q, want %q", name, got, want)
		}
	}
	if got := s.mustKubectl("get", "machineplans", "-l", "muster.io/plan-set=workers", "-o", "jsonpath={.items[*].metadata.name}"); got != "ps-w1 ps-w2" {
		t.Errorf("the set's plans are %q, want ps-w1 ps-w2", got)
	}
	if got := s.mustKubectl("get", "machineplan", "ps-w3", "-o", "jsonpath={.spec.instructions[0].name} {.metadata.labels}"); got != "hand " {
		t.Errorf("the hand-written plan was changed: %q", got)
	}
	if got := setCondition(s, "workers", "Conflict"); !strings.HasSuffix(got, "True MachinesSkipped") {
		t.Errorf("no Conflict for the hand-written plan: %q", got)
	}
	msg := s.mustKubectl("get", "machineplanset", "workers", "-o", `jsonpath={.status.conditions[?(@.type=="Conflict")].message}`)
	if !strings.Contains(msg, "ps-w3 has a hand-written plan") {
		t.Errorf("the Conflict message does not name ps-w3's hand-written plan: %s", msg)
	}
	table := s.mustKubectl("get", "mps")
	if !strings.Contains(table, "REVISION") || !strings.Contains(table, "MATCHED") || !strings.Contains(table, "READY") || !strings.Contains(table, "FAILED") {
		t.Errorf("kubectl get mps lacks columns:\n%s", table)
	}
	if f := strings.Fields(strings.Split(table, "\n")[1]); len(f) < 7 || f[2] != "3" || f[3] != "2" || f[4] != "2" || f[5] != "0" || f[6] != "Conflict" {
		t.Errorf("kubectl get mps: want 3 matched, 2 updated, 2 ready, 0 failed, Conflict:\n%s", table)
	}

	// A template change rolls out: at most maxUnavailable (1) of the
	// set's plans are unapplied at any sample.
	applySet(t, s, setDoc("workers", "role: worker", "v2", ""))
	waitFor(t, 90*time.Second, "the v2 rollout", func() bool {
		states := s.mustKubectl("get", "machineplans", "-l", "muster.io/plan-set=workers", "-o", "jsonpath={range .items[*]}{.status.state}{\"\\n\"}{end}")
		if n := strings.Count(states, "pending") + strings.Count(states, "in-progress"); n > 1 {
			t.Errorf("%d plans updating at once with maxUnavailable 1:\n%s", n, states)
		}
		f := strings.Fields(setCondition(s, "workers", "Complete"))
		return len(f) >= 3 && f[0] == f[1] && f[2] == "True"
	})
	for _, name := range []string{"ps-w1", "ps-w2"} {
		if got := readConf(t, out[name]); got != "v2" {
			t.Errorf("%s: set.conf is %q after the rollout, want v2", name, got)
		}
	}

	// A machine failing on a new revision pauses the rollout: the other
	// keeps the revision before.
	before := s.mustKubectl("get", "machineplan", "ps-w2", "-o", "jsonpath={.metadata.labels.muster\\.io/plan-set-revision}")
	applySet(t, s, strings.Replace(setDoc("workers", "role: worker", "v3", ""), "printf", "exit 3; printf", 1))
	waitSetCondition(t, s, "workers", "Paused", "True")
	if got := setCondition(s, "workers", "Paused"); !strings.HasSuffix(got, "True MachineFailed") {
		t.Errorf("paused for the wrong reason: %q", got)
	}
	if got := setCondition(s, "workers", "Progressing"); !strings.HasSuffix(got, "False RolloutPaused") {
		t.Errorf("a paused rollout says it is progressing: Progressing is %q", got)
	}
	waitPhase(t, s, "ps-w1", "Failed", 30*time.Second)
	if got := s.mustKubectl("get", "machineplan", "ps-w2", "-o", "jsonpath={.metadata.labels.muster\\.io/plan-set-revision}"); got != before {
		t.Errorf("ps-w2 was updated after ps-w1 failed: revision %s, was %s", got, before)
	}
	// A fixed template resumes, the failed machine first.
	applySet(t, s, setDoc("workers", "role: worker", "v4", ""))
	waitSetCondition(t, s, "workers", "Complete", "True")
	for _, name := range []string{"ps-w1", "ps-w2"} {
		if got := readConf(t, out[name]); got != "v4" {
			t.Errorf("%s: set.conf is %q after the fix, want v4", name, got)
		}
	}
	if got := s.mustKubectl("get", "machineplanset", "workers", "-o", "jsonpath={.status.revisions[*].machines}"); !strings.HasPrefix(got, "2 0 0") {
		t.Errorf("revision history: %q, want the current revision's 2 first, then earlier ones", got)
	}

	// Relabelled out of the selector, a machine loses the set's plan.
	s.mustKubectl("label", "machine", "ps-w2", "role=retired", "--overwrite")
	waitFor(t, 30*time.Second, "ps-w2's set plan to be removed", func() bool {
		_, err := s.kubectl("get", "machineplan", "ps-w2")
		return err != nil
	})

	// Two sets selecting ps-w1: both say Conflict, its plan stays.
	gen := s.mustKubectl("get", "machineplan", "ps-w1", "-o", "jsonpath={.metadata.generation} {.metadata.labels.muster\\.io/plan-set}")
	applySet(t, s, setDoc("site-a", "site: a", "site", ""))
	waitSetCondition(t, s, "site-a", "Conflict", "True")
	waitSetCondition(t, s, "workers", "Conflict", "True")
	for _, set := range []string{"site-a", "workers"} {
		msg := s.mustKubectl("get", "machineplanset", set, "-o", `jsonpath={.status.conditions[?(@.type=="Conflict")].message}`)
		if !strings.Contains(msg, "ps-w1 also selected by plan set") {
			t.Errorf("%s's Conflict does not name ps-w1: %s", set, msg)
		}
	}
	if got := s.mustKubectl("get", "machineplan", "ps-w1", "-o", "jsonpath={.metadata.generation} {.metadata.labels.muster\\.io/plan-set}"); got != gen {
		t.Errorf("ps-w1's plan changed under two sets: %q, was %q", got, gen)
	}
	if got := readConf(t, out["ps-w1"]); got != "v4" {
		t.Errorf("ps-w1: set.conf is %q under two sets, want v4", got)
	}

	// A deleted set's plans go with it: ps-w1, then selected by site-a
	// alone, gets site-a's plan; deleting site-a too leaves it none.
	s.mustKubectl("delete", "machineplanset", "workers")
	// Complete alone proves nothing here: site-a owned no machine before.
	waitFor(t, 30*time.Second, "ps-w1 to get site-a's plan and apply it", func() bool {
		got, _ := s.kubectl("get", "machineplan", "ps-w1", "-o", "jsonpath={.metadata.labels.muster\\.io/plan-set} {.status.state}")
		return got == "site-a succeeded" && readConf(t, out["ps-w1"]) == "site"
	})
	s.mustKubectl("delete", "machineplanset", "site-a")
	waitFor(t, 30*time.Second, "the deleted set's plan on ps-w1 to be removed", func() bool {
		_, err := s.kubectl("get", "machineplan", "ps-w1")
		return err != nil
	})
	if _, err := s.kubectl("get", "machineplan", "ps-w3"); err != nil {
		t.Errorf("the hand-written plan went with the set: %v", err)
	}
}

// TestPlanSetOnUnmatch: a machine relabelled out of a set loses the set's
// plan; with onUnmatch: RemoveFiles the agent first deletes the files the
// template wrote, by default (Keep) they stay.
func TestPlanSetOnUnmatch(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	dirs := map[string]string{"um-remove": t.TempDir(), "um-keep": t.TempDir()}
	for name, dir := range dirs {
		runAgentBinaryEnv(t, []string{"PLANSET_OUT=" + dir},
			"--server", s.url(), "--data-dir", t.TempDir(), "--token", token, "--node-name", name, "--label", "set="+name)
	}
	for name := range dirs {
		waitFor(t, 60*time.Second, "machine "+name+" to register", func() bool {
			_, err := s.kubectl("get", "machine", name)
			return err == nil
		})
		waitPhase(t, s, name, "Running", 60*time.Second)
	}
	set := func(name, onUnmatch string) string {
		return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePlanSet
metadata:
  name: %s
spec:
  selector: {matchLabels: {set: %s}}
  onUnmatch: %s
  template:
    files:
    - {path: %s, content: "from the set\n", mode: 420}
`, name, name, onUnmatch, filepath.Join(dirs[name], "app.conf"))
	}
	applySet(t, s, set("um-remove", "RemoveFiles"))
	applySet(t, s, set("um-keep", "Keep"))
	for name, dir := range dirs {
		waitSetCondition(t, s, name, "Complete", "True")
		if b, err := os.ReadFile(filepath.Join(dir, "app.conf")); err != nil || string(b) != "from the set\n" {
			t.Fatalf("%s: the set's file is %q, %v", name, b, err)
		}
	}
	bad := strings.Replace(set("um-bad", "Keep"), "onUnmatch: Keep", "onUnmatch: Shred", 1)
	f := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(f, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := s.kubectl("create", "-f", f); err == nil || !strings.Contains(got, "spec.onUnmatch") || !strings.Contains(got, "RemoveFiles") {
		t.Errorf("onUnmatch: Shred: want a 422 naming spec.onUnmatch and its values, got %v:\n%s", err, got)
	}

	for name := range dirs {
		s.mustKubectl("label", "machine", name, "set=none", "--overwrite")
	}
	for name := range dirs {
		waitFor(t, 60*time.Second, name+"'s set plan to be removed", func() bool {
			_, err := s.kubectl("get", "machineplan", name)
			return err != nil
		})
	}
	if _, err := os.Stat(filepath.Join(dirs["um-remove"], "app.conf")); !os.IsNotExist(err) {
		t.Errorf("onUnmatch: RemoveFiles left the set's file in place (stat: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(dirs["um-keep"], "app.conf")); err != nil {
		t.Errorf("onUnmatch: Keep removed the set's file: %v", err)
	}
	for _, name := range []string{"um-remove", "um-keep"} {
		if got := s.mustKubectl("get", "machine", name, "-o", "jsonpath={.status.phase}"); got != "Running" {
			t.Errorf("%s is %s after leaving the set, want Running", name, got)
		}
	}
}
