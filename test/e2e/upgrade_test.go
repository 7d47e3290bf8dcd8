package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// upgradeAgents is how many agents TestAgentUpgrade upgrades: the
// issue's 20 (the whole test takes about 20s here).
const upgradeAgents = 20

// buildAgentVersion builds muster-agent with version v into dir, named as
// --agent-binaries-dir wants it.
func buildAgentVersion(t *testing.T, dir, v string) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("muster-agent-%s-%s-%s", v, runtime.GOOS, runtime.GOARCH))
	cmd := exec.Command("go", "build", "-ldflags", "-X github.com/muster-io/muster/internal/version.Version="+v+" -s -w", "-o", out, "github.com/muster-io/muster/cmd/agent")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building muster-agent %s: %v\n%s", v, err, b)
	}
	return out
}

// startAgentFrom runs the agent binary bin (the test's own copy) with args.
func startAgentFrom(t *testing.T, bin string, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{t: t, log: &syncBuffer{}, exited: make(chan struct{})}
	a.cmd = exec.Command(bin, args...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			t.Logf("%s, the end of its output:\n%s", bin, lastLines(a.log.String(), 30))
		}
	})
	return a
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func upgradeSetDoc(name, version, sum string, extra string) string {
	return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePlanSet
metadata:
  name: %s
spec:
  selector: {matchLabels: {fleet: upgrade}}
  strategy:
    maxUnavailable: 25%%
%s  template:
    maxFailures: 1
    agentUpgrade:
      version: %s
      sha256: %s
`, name, extra, version, sum)
}

// TestAgentUpgrade: a plan set with agentUpgrade moves a fleet of real
// agents, each running its own copy of the binary, from vA to vB within
// maxUnavailable; a build that fails its self-check fails the first batch,
// which keeps running vB, and pauses the set; a wrong sha256 and an
// unknown version fail the plan with a clear message and replace nothing;
// invalid fields are 422.
func TestAgentUpgrade(t *testing.T) {
	t.Parallel()
	bins := t.TempDir()
	vA := buildAgentVersion(t, bins, "vA")
	buildAgentVersion(t, bins, "vB")
	broken := filepath.Join(bins, fmt.Sprintf("muster-agent-vBroken-%s-%s", runtime.GOOS, runtime.GOARCH))
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'this build is broken' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--agent-binaries-dir", bins)
	token := newToken(t, s)
	sumOf := func(v string) string {
		t.Helper()
		code, body, err := s.get(fmt.Sprintf("/assets/agent/%s/muster-agent-%s-%s.sha256", v, runtime.GOOS, runtime.GOARCH))
		if err != nil || code != 200 {
			t.Fatalf("sha256 of %s: %d %v %s", v, code, err, body)
		}
		return strings.Fields(string(body))[0]
	}
	if code, body, _ := s.get("/assets/agent/..%2f..%2fetc/muster-agent-linux-amd64"); code != 400 || !strings.Contains(string(body), "not an agent version") {
		t.Errorf("a traversal version: %d %s", code, body)
	}

	n := upgradeAgents
	exes := map[string]string{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("up-%02d", i)
		dir := t.TempDir()
		exes[name] = filepath.Join(dir, "muster-agent")
		copyExecutable(t, vA, exes[name])
		startAgentFrom(t, exes[name], "--server", s.url(), "--data-dir", filepath.Join(dir, "data"), "--token", token,
			"--node-name", name, "--label", "fleet=upgrade")
	}
	versions := func() map[string]string {
		out := map[string]string{}
		raw := s.mustKubectl("get", "machines", "-l", "fleet=upgrade", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.agentVersion}{"\n"}{end}`)
		for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
			if f := strings.Fields(line); len(f) == 3 {
				out[f[0]] = f[1] + " " + f[2]
			}
		}
		return out
	}
	waitFor(t, 120*time.Second, fmt.Sprintf("%d agents Running vA", n), func() bool {
		vs := versions()
		c := 0
		for _, v := range vs {
			if v == "Running vA" {
				c++
			}
		}
		return c == n
	})

	// The sampler: never more than 25% of the machines out of Running.
	budget := n / 4
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	worst := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			out, err := s.kubectl("get", "machines", "-l", "fleet=upgrade", "-o", "jsonpath={.items[*].status.phase}")
			if err != nil {
				continue
			}
			down := 0
			for _, p := range strings.Fields(out) {
				if p != "Running" {
					down++
				}
			}
			mu.Lock()
			worst = max(worst, down)
			mu.Unlock()
		}
	}()
	start := time.Now()
	applySet(t, s, upgradeSetDoc("agents", "vB", sumOf("vB"), ""))
	waitSetCondition(t, s, "agents", "Complete", "True")
	waitFor(t, 60*time.Second, "every machine to show agentVersion vB", func() bool {
		for _, v := range versions() {
			if !strings.HasSuffix(v, " vB") {
				return false
			}
		}
		return true
	})
	took := time.Since(start)
	close(stop)
	wg.Wait()
	t.Logf("upgrading %d agents from vA to vB with maxUnavailable 25%% took %s; at most %d of them out of Running at once", n, took.Round(100*time.Millisecond), worst)
	if worst > budget {
		t.Errorf("the sampler saw %d machines out of Running at once; maxUnavailable 25%% of %d allows %d", worst, n, budget)
	}
	if out := s.mustKubectl("get", "machineplan", "up-03", "-o", "jsonpath={.status.output[0].output}"); out != "muster-agent upgraded from vA to vB" {
		t.Errorf("up-03's plan output says %q, want the upgrade", out)
	}
	for name, exe := range exes {
		if out, err := exec.Command(exe, "version").Output(); err != nil || !strings.Contains(string(out), " vB ") {
			t.Errorf("%s: %s version = %q, %v; want vB", name, exe, out, err)
		}
	}

	// The broken build: the first batch fails its self-check and keeps
	// running vB; the set pauses; no other machine is touched.
	s.mustKubectl("delete", "machineplanset", "agents")
	applySet(t, s, upgradeSetDoc("agents-broken", "vBroken", sumOf("vBroken"), ""))
	waitSetCondition(t, s, "agents-broken", "Paused", "True")
	if c := setCondition(s, "agents-broken", "Paused"); !strings.Contains(c, "MachineFailed") {
		t.Errorf("Paused: %q, want MachineFailed", c)
	}
	states := s.mustKubectl("get", "machineplans", "-l", "muster.io/plan-set=agents-broken", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.state} {.status.output[0].output}{"\n"}{end}`)
	failed, pending := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(states), "\n") {
		switch f := strings.Fields(line); {
		case len(f) >= 2 && f[1] == "failed":
			failed++
			if !strings.Contains(line, "self-check of muster-agent vBroken failed") || !strings.Contains(line, "this build is broken") {
				t.Errorf("failed plan says: %s", line)
			}
		case len(f) >= 2 && (f[1] == "pending" || f[1] == ""):
			pending++
		}
	}
	if failed == 0 || failed > budget {
		t.Errorf("%d plans failed, want the first batch (1..%d):\n%s", failed, budget, states)
	}
	for name, v := range versions() {
		if !strings.HasSuffix(v, " vB") {
			t.Errorf("%s: %s after the broken upgrade, want vB", name, v)
		}
	}
	t.Logf("broken build: %d plans failed, %d pending, %d machines never given the set's plan:\n%s", failed, pending, n-failed-pending, states)
	s.mustKubectl("delete", "machineplanset", "agents-broken")
	// The set's plans go after the set: a plan written before they are
	// gone could be pruned with them.
	waitFor(t, 60*time.Second, "the broken set's plans to be pruned", func() bool {
		out, err := s.kubectl("get", "machineplans", "-l", "muster.io/plan-set=agents-broken", "-o", "name")
		return err == nil && strings.TrimSpace(out) == ""
	})

	// Bad inputs on one machine's own plan: a wrong sha256, an unknown version.
	one := "up-00"
	before, _ := os.ReadFile(exes[one])
	for _, bad := range []struct{ version, sum, want string }{
		{"vA", strings.Repeat("ab", 32), "refusing it, nothing was replaced"},
		{"v404", strings.Repeat("cd", 32), "404"},
	} {
		applyPlan(t, s, one, fmt.Sprintf("  maxFailures: 1\n  agentUpgrade: {version: %s, sha256: %s}\n", bad.version, bad.sum))
		waitFor(t, 60*time.Second, "plan "+one+" to fail for "+bad.version, func() bool {
			out, _ := s.kubectl("get", "machineplan", one, "-o", "jsonpath={.status.state}")
			return out == "failed"
		})
		msg := s.mustKubectl("get", "machineplan", one, "-o", "jsonpath={.status.output[0].output}")
		if !strings.Contains(msg, bad.want) {
			t.Errorf("agentUpgrade %s: the plan says %q, want %q", bad.version, msg, bad.want)
		}
		t.Logf("agentUpgrade %s fails with: %s", bad.version, msg)
	}
	if after, _ := os.ReadFile(exes[one]); string(after) != string(before) {
		t.Errorf("a refused upgrade changed %s", exes[one])
	}

	// A new agent that cannot check in by the deadline puts the previous
	// one back, which fails the plan with the reason. timeoutSeconds 1 is
	// over before the new agent's first check.
	applyPlan(t, s, one, fmt.Sprintf("  maxFailures: 1\n  agentUpgrade: {version: vA, sha256: %s, timeoutSeconds: 1}\n", sumOf("vA")))
	waitFor(t, 60*time.Second, "plan "+one+" to fail after the rollback", func() bool {
		out, _ := s.kubectl("get", "machineplan", one, "-o", "jsonpath={.status.state}")
		return out == "failed"
	})
	msg := s.mustKubectl("get", "machineplan", one, "-o", "jsonpath={.status.output[0].output}")
	if !strings.Contains(msg, "did not check in") || !strings.Contains(msg, "vB was put back") {
		t.Errorf("rolled-back upgrade: the plan says %q", msg)
	}
	t.Logf("a new agent too late to check in: %s", msg)
	if out, err := exec.Command(exes[one], "version").Output(); err != nil || !strings.Contains(string(out), " vB ") {
		t.Errorf("after the rollback %s version = %q, %v; want vB", exes[one], out, err)
	}
	waitFor(t, 30*time.Second, one+" to show agentVersion vB after the rollback", func() bool { return strings.HasSuffix(versions()[one], " vB") })
	// Invalid fields: 422, in a plan set's template as in a plan.
	f := filepath.Join(t.TempDir(), "set.yaml")
	_ = os.WriteFile(f, []byte(upgradeSetDoc("agents-bad", "vB", "nothex", "")), 0o644)
	if out, err := s.kubectl("apply", "-f", f); err == nil || !strings.Contains(out, "spec.template.agentUpgrade.sha256") {
		t.Errorf("a set with a bad sha256: want a 422 naming the field, got %v: %s", err, out)
	}
	// Invalid fields: 422.
	for _, bad := range []string{"{version: ../x, sha256: " + strings.Repeat("ab", 32) + "}", "{version: vB, sha256: nothex}", "{version: vB}"} {
		f := filepath.Join(t.TempDir(), "plan.yaml")
		_ = os.WriteFile(f, []byte(fmt.Sprintf("apiVersion: muster.io/v1alpha1\nkind: MachinePlan\nmetadata:\n  name: %s\nspec:\n  agentUpgrade: %s\n", one, bad)), 0o644)
		// replace, not apply: a client-side apply would merge in the fields left out.
		out, err := s.kubectl("replace", "-f", f)
		if err == nil || !strings.Contains(out, "spec.agentUpgrade") || !strings.Contains(out, "is invalid") {
			t.Errorf("agentUpgrade %s: want a 422 naming the field, got %v: %s", bad, err, out)
		}
	}
}
