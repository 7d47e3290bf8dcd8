package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/fsm"
)

// TestMachineLifecycle: a joined machine runs its plans through the whole
// lifecycle, on SQLite and PostgreSQL.
func TestMachineLifecycle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint, "--agent-silence-threshold", "6s")
		work := t.TempDir()
		agentDir := t.TempDir()
		a := startAgent(t, s, agentDir, "--token", newToken(t, s), "--node-name", "life-1")
		a.waitOutput("running as machine life-1", 30*time.Second)
		waitPhase(t, s, "life-1", "Running", 30*time.Second)

		// A new plan: Updating, then Running, with the file written.
		conf := filepath.Join(work, "etc", "app.conf")
		applyPlan(t, s, "life-1", fmt.Sprintf(`  files:
  - path: %s
    content: "version = 2\n"
    mode: 416
  instructions:
  - name: show
    command: /bin/cat
    args: [%q]
    saveOutput: true
`, conf, conf))
		waitPhase(t, s, "life-1", "Running", 30*time.Second)
		waitFor(t, 30*time.Second, "the new plan to be applied", func() bool {
			out, _ := s.kubectl("get", "machineplan", "life-1", "-o", "jsonpath={.status.state}/{.status.output[0].output}")
			return out == "succeeded/version = 2\n"
		})
		b, err := os.ReadFile(conf)
		fi, _ := os.Stat(conf)
		if err != nil || string(b) != "version = 2\n" || fi.Mode().Perm() != 0o640 {
			t.Errorf("plan file: %q %v mode %v", b, err, fi.Mode().Perm())
		}
		events := s.mustKubectl("get", "machine", "life-1", "-o", "jsonpath={.status.transitions[*].event}")
		if !strings.Contains(events, "plan-changed plan-applied") {
			t.Errorf("no Updating→Running in the history: %s", events)
		}

		// A failing command is retried up to maxFailures, then the machine is Failed.
		applyPlan(t, s, "life-1", `  maxFailures: 2
  instructions:
  - name: broken
    command: /bin/sh
    args: ["-c", "echo disk full >&2; exit 3"]
`)
		waitPhase(t, s, "life-1", "Failed", 60*time.Second)
		if out := s.mustKubectl("get", "machineplan", "life-1", "-o", "jsonpath={.status.failureCount} {.status.output[0].exitCode} {.status.output[0].output}"); out != "2 3 disk full\n" {
			t.Errorf("failed plan status: %q", out)
		}
		// A fixed plan leaves Failed.
		applyPlan(t, s, "life-1", `  instructions:
  - name: fixed
    command: /bin/true
`)
		waitPhase(t, s, "life-1", "Running", 30*time.Second)

		// A silent agent makes the machine Unavailable; its return, Running.
		a.kill()
		start := time.Now()
		waitPhase(t, s, "life-1", "Unavailable", 30*time.Second)
		t.Logf("silent agent detected after %s (threshold 6s)", time.Since(start).Round(100*time.Millisecond))
		// The cluster's status follows its machines' a moment later.
		waitFor(t, 30*time.Second, "the cluster with an unavailable machine to be Degraded", func() bool {
			return s.mustKubectl("get", "cluster", "-o", "jsonpath={.items[0].status.phase}") == "Degraded"
		})
		b2 := startAgent(t, s, agentDir, "--node-name", "life-1")
		b2.waitOutput("using the stored certificate", 30*time.Second)
		waitPhase(t, s, "life-1", "Running", 30*time.Second)

		// Every recorded transition is one the state machine allows.
		assertLegalHistory(t, s, "life-1")

		// Deletion: Draining → Deleting → gone, with its plan and password.
		s.mustKubectl("delete", "machine", "life-1", "--timeout=60s")
		for _, kind := range []string{"machine", "machineplan", "nodepassword"} {
			if out, err := s.kubectl("get", kind, "life-1"); err == nil {
				t.Errorf("%s life-1 still exists after delete:\n%s", kind, out)
			}
		}
	})
}

// assertLegalHistory checks that every recorded transition is an event of
// the Machine state machine and that the records form one unbroken chain.
func assertLegalHistory(t *testing.T, s *server, machine string) {
	t.Helper()
	get := func(field string) []string {
		return strings.Fields(s.mustKubectl("get", "machine", machine, "-o", "jsonpath={.status.transitions[*]."+field+"}"))
	}
	from, to, events := get("from"), get("to"), get("event")
	if len(from) == 0 || len(from) != len(to) || len(to) != len(events) {
		t.Fatalf("%s history is malformed: %v %v %v", machine, from, to, events)
	}
	for i := range from {
		if got, err := fsm.Machine.Fire(from[i], events[i]); err != nil || got != to[i] {
			t.Errorf("%s transition %d %s -%s-> %s is not legal: %v", machine, i, from[i], events[i], to[i], err)
		}
		if i > 0 && from[i] != to[i-1] {
			t.Errorf("%s history broken at %d: %v → %v", machine, i, from, to)
		}
	}
}

// TestPlanSurvivesAgentCrash: kill -9 the agent in the middle of a plan
// that takes seconds; on restart it runs the plan again and reports it.
func TestPlanSurvivesAgentCrash(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	dir, work := t.TempDir(), t.TempDir()
	a := startAgent(t, s, dir, "--token", newToken(t, s), "--node-name", "crash-1")
	a.waitOutput("running as machine crash-1", 30*time.Second)
	waitPhase(t, s, "crash-1", "Running", 30*time.Second)
	marker := filepath.Join(work, "runs")
	applyPlan(t, s, "crash-1", fmt.Sprintf(`  instructions:
  - name: slow
    command: /bin/sh
    args: ["-c", "echo run >> %s; sleep 3"]
`, marker))
	waitFor(t, 30*time.Second, "the plan to be in progress", func() bool {
		out, _ := s.kubectl("get", "machineplan", "crash-1", "-o", "jsonpath={.status.state}")
		return out == "in-progress"
	})
	a.kill()
	b := startAgent(t, s, dir, "--node-name", "crash-1")
	b.waitOutput("succeeded", 60*time.Second)
	out := s.mustKubectl("get", "machineplan", "crash-1", "-o", "jsonpath={.status.state} {.status.checksum} {.status.appliedChecksum}")
	f := strings.Fields(out)
	if len(f) != 3 || f[0] != "succeeded" || f[1] != f[2] {
		t.Errorf("after the crash the plan status is %q", out)
	}
	runs, _ := os.ReadFile(marker)
	if strings.Count(string(runs), "run") != 2 {
		t.Errorf("the plan ran %d times, want 2 (interrupted, then again)", strings.Count(string(runs), "run"))
	}
	waitPhase(t, s, "crash-1", "Running", 30*time.Second)
}

// TestProbesGateRunning: a machine whose plan applied but whose probe fails
// is not Running; when the probe passes it is, and a later failure past the
// threshold is reported in the plan's status.
func TestProbesGateRunning(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "probed-1")
	a.waitOutput("running as machine probed-1", 30*time.Second)
	waitPhase(t, s, "probed-1", "Running", 30*time.Second)
	ready := filepath.Join(t.TempDir(), "ready")
	applyPlan(t, s, "probed-1", fmt.Sprintf(`  probes:
  - name: ready-file
    periodSeconds: 1
    failureThreshold: 2
    exec:
      command: /usr/bin/test
      args: ["-f", %q]
`, ready))
	waitFor(t, 30*time.Second, "the plan to be applied with its probe failing", func() bool {
		out, _ := s.kubectl("get", "machineplan", "probed-1", "-o", "jsonpath={.status.state} {.status.probes[0].healthy}")
		return out == "succeeded false"
	})
	if phase := s.mustKubectl("get", "machine", "probed-1", "-o", "jsonpath={.status.phase}"); phase != "Updating" {
		t.Errorf("with a failing probe the machine is %s, want Updating", phase)
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, s, "probed-1", "Running", 30*time.Second)
	if err := os.Remove(ready); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the probe failure to be reported", func() bool {
		out, _ := s.kubectl("get", "machineplan", "probed-1", "-o", "jsonpath={.status.probes[0].healthy}")
		return out == "false"
	})
}
