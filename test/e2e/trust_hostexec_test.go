package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 27: the operator's boundary on the server's own host, and what an
// exec leaves behind for others to read.

// operatorPlan applies a MachinePlan for machine as the user of kubeconfig.
func operatorPlan(t *testing.T, kubeconfig, machine, spec string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "plan.yaml")
	doc := fmt.Sprintf("apiVersion: muster.io/v1alpha1\nkind: MachinePlan\nmetadata:\n  name: %s\nspec:\n%s", machine, spec)
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectlAs(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", f); err != nil {
		t.Fatalf("applying the plan as %s: %v\n%s", kubeconfig, err, out)
	}
}

// TestTrustHostAgent: the agent muster-server --with-agent runs (what
// install.sh server sets up) runs as the server's user, so by default an
// operator's exec and an operator's plan that runs something are refused
// there, with a message that names the admin's flag; nothing of the plan
// runs. Restarted with --host-agent-exec and --host-agent-plans, the same
// exec and plan run: the flags, and only they, give that power.
func TestTrustHostAgent(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", "--with-agent")
	host, _ := os.Hostname()
	host = strings.ToLower(host)
	waitPhase(t, s, host, "Running", 60*time.Second)
	operator := userKubeconfig(t, s, "otto", "muster:operators")
	caKey := filepath.Join(s.dataDir, "tls", "ca.key")
	steal := fmt.Sprintf("id -u; cat %s", caKey)

	// The plan an operator would use instead of exec: an instruction that
	// leaves a marker and saves the CA key into the plan's status.
	planFor := func(marker string) string {
		return fmt.Sprintf(`  maxFailures: 1
  instructions:
  - name: steal
    command: /bin/sh
    args: ["-c", "touch %s; cat %s"]
    saveOutput: true
`, marker, caKey)
	}
	planStatus := func() string {
		out, _ := s.kubectl("get", "machineplan", host, "-o", "jsonpath={.status.state} {.status.failureCount} {.status.output[*].name}: {.status.output[*].output}")
		return out
	}

	// tryExec waits for the host agent's tunnel (it opens after the Machine
	// is Running), then returns the exec's answer.
	tryExec := func() (stdout, stderr string, code int) {
		waitFor(t, 60*time.Second, "the host agent's tunnel", func() bool {
			stdout, stderr, code = kubectlMuster(t, operator, "exec", "machine/"+host, "--", "sh", "-c", steal)
			return !strings.Contains(stderr, "not connected")
		})
		return stdout, stderr, code
	}

	// By default (s.start runs the server in the parent test, so the two
	// phases are not subtests).
	{
		stdout, stderr, code := tryExec()
		if code == 0 || strings.Contains(stdout, "PRIVATE KEY") {
			// Not fatal: the plan below is the other way in, tested too.
			t.Errorf("an operator's exec on the server's host ran: exit %d, stdout %.300q", code, stdout)
		}
		for _, want := range []string{"refused", "inside muster-server", "--host-agent-exec"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("the refused exec does not say %q: %s", want, strings.TrimSpace(stderr))
			}
		}

		// Nor does it publish a loopback port of the host (the server's
		// own API, a local database) to port-forwards.
		if status, body := adminRequest(t, s, http.MethodPost, "/apis/muster.io/v1alpha1/machines/"+host+"/portforward?port="+fmt.Sprint(s.port)); status != http.StatusForbidden || !strings.Contains(body, "--host-agent-allow-port") {
			t.Errorf("port-forward to the server's host: %d %.400s; want 403 naming --host-agent-allow-port", status, body)
		}

		marker := filepath.Join(t.TempDir(), "plan-ran")
		operatorPlan(t, operator, host, planFor(marker))
		// Its end, whichever it is: refused (failed for good at once), or
		// run (succeeded), which is what the checks below must catch.
		waitFor(t, 60*time.Second, "the host's plan to be reported at its end", func() bool {
			st := planStatus()
			return strings.HasPrefix(st, "failed 1 ") || strings.HasPrefix(st, "succeeded ")
		})
		st := planStatus()
		if !strings.HasPrefix(st, "failed 1 refused:") || !strings.Contains(st, "--host-agent-plans") || !strings.Contains(st, "inside muster-server") || strings.Contains(st, "PRIVATE KEY") {
			t.Errorf("the refused plan's status: %s; want the refusal naming --host-agent-plans, and no key", st)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Errorf("the refused plan's instruction ran: %s exists (%v)", marker, err)
		}
		// The Machine says why too, where kubectl describe machine shows it.
		waitPhase(t, s, host, "Failed", 30*time.Second)
		if msg := s.mustKubectl("get", "machine", host, "-o", `jsonpath={.status.conditions[?(@.type=="PlanFailed")].message}`); !strings.Contains(msg, "--host-agent-plans") {
			t.Errorf("the host's Machine's PlanFailed condition does not name --host-agent-plans: %s", msg)
		}
	}

	// With the admin's flags.
	{
		s.stop()
		s.extra = append(s.extra, "--host-agent-exec", "--host-agent-plans")
		s.start()
		stdout, stderr, code := tryExec()
		if code != 0 || !strings.Contains(stdout, "PRIVATE KEY") {
			t.Fatalf("exec with --host-agent-exec: exit %d, %s", code, strings.TrimSpace(stderr))
		}

		marker := filepath.Join(t.TempDir(), "plan-ran")
		operatorPlan(t, operator, host, planFor(marker))
		waitFor(t, 60*time.Second, "the host's plan to succeed", func() bool {
			return strings.HasPrefix(planStatus(), "succeeded ")
		})
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("the plan's instruction did not run with --host-agent-plans: %v", err)
		}
		// The host agent's log is the server's log: its exec record holds
		// the program, not the command line.
		if strings.Contains(s.log.String(), caKey) {
			t.Errorf("the server's log holds the exec's arguments (%s)", caKey)
		}
	}
}

// runServerCommand runs muster-server args to its end (bounded: one that
// does not refuse would serve forever) and returns its output.
func runServerCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, serverBin, args...).CombinedOutput()
	return string(out), err
}

// TestTrustHostAgentFlagsNeedWithAgent: a --host-agent-* flag without
// --with-agent is refused at start, not silently ignored.
func TestTrustHostAgentFlagsNeedWithAgent(t *testing.T) {
	t.Parallel()
	out, err := runServerCommand(t, "--data-dir", t.TempDir(), "--host-agent-exec")
	if err == nil || !strings.Contains(out, "add --with-agent") {
		t.Fatalf("muster-server --host-agent-exec without --with-agent: %v\n%s", err, out)
	}
}

// TestTrustExecRecord: an exec's record (the Machine's Event that viewers
// read, the server's log, the agent's log) says who ran which program on
// which machine, never the arguments, where a password goes.
func TestTrustExecRecord(t *testing.T) {
	t.Parallel()
	const secret = "S3cretPassw0rd"
	s := startServer(t, "")
	a := startTunnelAgent(t, s, "rec-1")
	startTunnelAgent(t, s, "rec-2", "--disable-exec")
	operator := userKubeconfig(t, s, "otto", "muster:operators")
	viewer := userKubeconfig(t, s, "vera", "muster:viewers")

	argv := []string{"sh", "-c", "echo connected", "mysql", "-p" + secret}
	if out, errOut, code := kubectlMuster(t, operator, append([]string{"exec", "machine/rec-1", "--"}, argv...)...); code != 0 || out != "connected\n" {
		t.Fatalf("operator exec: exit %d, %q %q", code, out, errOut)
	}
	// A refused exec is recorded as well (ExecFailed), and the same way.
	if _, errOut, code := kubectlMuster(t, operator, append([]string{"exec", "machine/rec-2", "--"}, argv...)...); code == 0 || !strings.Contains(errOut, "--disable-exec") {
		t.Fatalf("exec on a --disable-exec agent: exit %d, %s", code, errOut)
	}

	for _, tc := range []struct{ machine, says string }{
		{"rec-1", "exec by otto of sh with 4 arguments exited 0"},
		{"rec-2", "exec by otto of sh with 4 arguments failed"},
	} {
		var events string
		waitFor(t, 30*time.Second, "the viewer to read the exec's Event on "+tc.machine, func() bool {
			out, err := kubectlAs(viewer, "get", "events", "--field-selector", "involvedObject.name="+tc.machine, "-o", "yaml")
			events = out
			return err == nil && strings.Contains(out, "exec by otto of ")
		})
		if strings.Contains(events, secret) {
			t.Errorf("the Events a viewer reads on %s hold the exec's argument:\n%s", tc.machine, events)
		}
		if !strings.Contains(events, tc.says) {
			t.Errorf("the Events on %s do not say %q:\n%s", tc.machine, tc.says, events)
		}
	}
	// The whole list, as a viewer reads it, and the server's log.
	if out, err := kubectlAs(viewer, "get", "events", "-o", "yaml"); err != nil || strings.Contains(out, secret) {
		t.Errorf("kubectl get events -o yaml as a viewer: %v; holds the argument: %v", err, strings.Contains(out, secret))
	}
	waitFor(t, 10*time.Second, "the exec in the server's log", func() bool {
		return strings.Contains(s.log.String(), `"Exec on machine" machine="rec-1" user="otto"`)
	})
	if strings.Contains(s.log.String(), secret) {
		t.Error("the server's log holds the exec's argument")
	}
	// The agent's log, on its machine and served to operators.
	if strings.Contains(a.log.String(), secret) || !strings.Contains(a.log.String(), "exec by otto of sh with 4 arguments") {
		t.Errorf("the agent's log: holds the argument %v; says who ran what: %v", strings.Contains(a.log.String(), secret), strings.Contains(a.log.String(), "exec by otto of sh"))
	}
	if out, _, code := kubectlMuster(t, operator, "logs", "machine/rec-1"); code != 0 || strings.Contains(out, secret) {
		t.Errorf("kubectl muster logs: exit %d, holds the argument: %v", code, strings.Contains(out, secret))
	}
}
