package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlanSecretsHiddenFromViewers (issue 27, item 3): a plan's secrets —
// a 0600 file's content, an instruction's arguments and environment, what
// the instruction echoed into its saved output, an exec probe's arguments,
// a plan set's templates and kubectl's last-applied record of them — are
// read whole by operators and by the machine's agent (the plan runs with
// them), and a viewer reads "<redacted>" in their place through every
// path: get, a list as JSON and as the table kubectl prints, the status
// subresource, a watch started before the plan was written, and the
// plan set. Neither the Machine's PlanFailed condition nor any Event
// quotes what a failing instruction printed, and the server's log never
// holds the secret. A plan written back with the marker is refused.
func TestPlanSecretsHiddenFromViewers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	secret := "dbpass-" + hex.EncodeToString(b)

	a := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "sec-1")
	a.waitOutput("running as machine sec-1", 30*time.Second)
	waitPhase(t, s, "sec-1", "Running", 30*time.Second)

	viewer := userKubeconfig(t, s, "vera", "muster:viewers")
	operator := userKubeconfig(t, s, "otto", "muster:operators")

	// The viewer's watch starts before the plan exists, so it sees every
	// version of it: the operator's write, the agent's in-progress and
	// succeeded reports with the saved output.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, "kubectl", "--kubeconfig", viewer, "get", "machineplans", "-w", "-o", "json")
	watched := &syncBuffer{}
	watch.Stdout, watch.Stderr = watched, watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()

	dir := t.TempDir()
	envFile := filepath.Join(dir, "app.env")
	plan := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePlan
metadata:
  name: sec-1
spec:
  files:
  - path: %[1]s
    content: "DB_PASSWORD=%[2]s\n"
    mode: 384
  instructions:
  - name: show
    command: /bin/sh
    args: ["-c", "cat %[1]s; echo env=$DB_PASS; echo arg=%[2]s"]
    env: ["DB_PASS=%[2]s"]
    saveOutput: true
  probes:
  - name: has-password
    exec:
      command: /bin/sh
      args: ["-c", "grep -q %[2]s %[1]s"]
`, envFile, secret)
	planFile := filepath.Join(t.TempDir(), "plan.yaml")
	if err := os.WriteFile(planFile, []byte(plan), 0o600); err != nil {
		t.Fatal(err)
	}
	// A client-side apply: kubectl keeps the whole object, secrets
	// included, in its last-applied annotation.
	if out, err := kubectlAs(operator, "apply", "-f", planFile); err != nil {
		t.Fatalf("operator apply: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "the agent to run the plan", func() bool {
		out, _ := kubectlAs(operator, "get", "machineplan", "sec-1", "-o", "jsonpath={.status.state}")
		return out == "succeeded"
	})

	// The agent got the whole plan: the file holds the secret, and what
	// the instruction printed (read by the operator) echoes it three times.
	if got, err := os.ReadFile(envFile); err != nil || string(got) != "DB_PASSWORD="+secret+"\n" {
		t.Fatalf("the agent wrote %q (%v), want the plan's content", got, err)
	}
	whole, err := kubectlAs(operator, "get", "machineplan", "sec-1", "-o", "json")
	if err != nil {
		t.Fatalf("operator get: %v\n%s", err, whole)
	}
	for _, want := range []string{"DB_PASSWORD=" + secret, "env=" + secret, "arg=" + secret, `"DB_PASS=` + secret + `"`, "last-applied-configuration"} {
		if !strings.Contains(whole, want) {
			t.Errorf("the operator's plan lacks %q:\n%s", want, whole)
		}
	}

	// The watch has seen the final state before it is judged.
	waitFor(t, 30*time.Second, "the viewer's watch to see the plan succeed", func() bool {
		return strings.Contains(watched.String(), `"state": "succeeded"`)
	})

	// A plan set, written by client-side apply too, whose template and
	// drain template carry the secret; it selects no machine.
	set := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePlanSet
metadata:
  name: sec-set
spec:
  selector:
    matchLabels:
      secret-test: nobody
  template:
    files:
    - path: %[1]s
      content: "DB_PASSWORD=%[2]s\n"
    instructions:
    - name: show
      command: /bin/sh
      args: ["-c", "echo %[2]s"]
      env: ["DB_PASS=%[2]s"]
  drain:
    template:
      instructions:
      - name: stop
        command: /bin/sh
        args: ["-c", "logout %[2]s"]
`, envFile, secret)
	setFile := filepath.Join(t.TempDir(), "set.yaml")
	if err := os.WriteFile(setFile, []byte(set), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectlAs(operator, "apply", "-f", setFile); err != nil {
		t.Fatalf("operator apply of the plan set: %v\n%s", err, out)
	}
	if out, _ := kubectlAs(operator, "get", "machineplanset", "sec-set", "-o", "json"); strings.Count(out, secret) < 4 {
		t.Errorf("the operator's plan set does not hold the secret whole:\n%s", out)
	}

	// A failing instruction that prints the secret, on a second plan
	// version: the machine fails, with a PlanFailed condition and Events.
	applyPlan(t, s, "sec-1", fmt.Sprintf(`  maxFailures: 1
  instructions:
  - name: migrate
    command: /bin/sh
    args: ["-c", "echo connecting with %s >&2; exit 3"]
`, secret))
	waitPhase(t, s, "sec-1", "Failed", 60*time.Second)
	waitForEvent(t, s, "the plan's failure as a Warning", func(r string) bool {
		return strings.HasPrefix(r, "Warning PlanFailed Machine/sec-1 ")
	})

	// Everything a viewer reads.
	reads := map[string][]string{
		"get -o yaml":                {"get", "machineplan", "sec-1", "-o", "yaml"},
		"list -o json":               {"get", "machineplans", "-o", "json"},
		"the table":                  {"get", "machineplans", "-o", "wide"},
		"the status subresource":     {"get", "--raw", "/apis/muster.io/v1alpha1/machineplans/sec-1/status"},
		"the raw list":               {"get", "--raw", "/apis/muster.io/v1alpha1/machineplans"},
		"the plan set":               {"get", "machineplanset", "sec-set", "-o", "json"},
		"the plan sets' list":        {"get", "--raw", "/apis/muster.io/v1alpha1/machineplansets"},
		"the Machine":                {"get", "machine", "sec-1", "-o", "json"},
		"kubectl describe":           {"describe", "machine", "sec-1"},
		"Events":                     {"get", "events", "-o", "json"},
		"the plan, described":        {"describe", "machineplan", "sec-1"},
		"the plan set, as its table": {"get", "machineplansets"},
	}
	for what, args := range reads {
		out, err := kubectlAs(viewer, args...)
		out = unescapeJSON(out)
		if err != nil {
			t.Errorf("viewer %s: %v\n%s", what, err, out)
			continue
		}
		if strings.Contains(out, secret) {
			t.Errorf("a viewer reads the secret in %s:\n%s", what, out)
		}
	}
	// The viewer still sees what the plan is: paths, commands, names, the
	// marker where a value was, the checksum.
	seen, _ := kubectlAs(viewer, "get", "machineplanset", "sec-set", "-o", "json")
	seen = unescapeJSON(seen)
	for _, want := range []string{envFile, `"DB_PASS=<redacted>"`, `"<redacted>"`, "/bin/sh"} {
		if !strings.Contains(seen, want) {
			t.Errorf("the viewer's plan set lacks %q:\n%s", want, seen)
		}
	}

	cancel()
	_ = watch.Wait()
	if strings.Contains(watched.String(), secret) {
		t.Errorf("a viewer's watch carried the secret:\n%s", lastLines(watched.String(), 80))
	}
	if !strings.Contains(unescapeJSON(watched.String()), `"output": "<redacted>"`) {
		t.Errorf("the viewer's watch never showed the redacted output:\n%s", lastLines(watched.String(), 80))
	}

	// Written back redacted, a plan would replace the secret with the
	// marker on the machine: refused, saying what to do.
	redacted, _ := kubectlAs(viewer, "get", "machineplanset", "sec-set", "-o", "json")
	back := filepath.Join(t.TempDir(), "back.json")
	if err := os.WriteFile(back, []byte(redacted), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := kubectlAs(operator, "replace", "-f", back)
	if err == nil || !strings.Contains(out, "write the real value") {
		t.Errorf("a plan set written back with the marker: %v\n%s", err, out)
	}

	// The server's log never holds it either.
	sc := bufio.NewScanner(strings.NewReader(s.log.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), secret) {
			t.Errorf("the server logged the secret: %s", sc.Text())
		}
	}
}

// unescapeJSON undoes the escaping of < and > that Go's JSON encoder
// applies (kubectl prints "\u003credacted\u003e" for "<redacted>").
func unescapeJSON(s string) string {
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(s)
}
