package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tokenSecret is the secret part of K10<hash>::<id>.<secret>.
func tokenSecret(token string) string { return token[strings.LastIndex(token, ".")+1:] }

// TestAgentMachineDeletedAndRejoin (issue 20, blocker 1): an agent whose
// Machine is deleted while it runs exits non-zero within a bounded time,
// saying what happened and how to join again; started again on the same
// data dir with a new token, it joins at once with the new certificate and
// the new Machine reaches Running.
func TestAgentMachineDeletedAndRejoin(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token-file", writeTokenFile(t, newToken(t, s)), "--node-name", "r1")
	a.waitOutput("running as machine r1", 60*time.Second)
	waitPhase(t, s, "r1", "Running", 60*time.Second)

	s.mustKubectl("delete", "machine", "r1")
	deleted := time.Now()
	out, code := a.waitExit(60 * time.Second)
	t.Logf("the agent exited %s after its Machine was deleted", time.Since(deleted).Round(100*time.Millisecond))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Logf("its last words: %s", strings.Join(lines[max(0, len(lines)-3):], "\n"))
	if code == 0 {
		t.Errorf("the agent exited 0 after its Machine was deleted; systemd would not restart it:\n%s", out)
	}
	for _, want := range []string{"Machine was deleted", "muster-server token create", "--token-file", "--data-dir " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent's last words do not say %q:\n%s", want, out)
		}
	}

	// Same data dir, a new token: the new certificate is used at once.
	b := startAgent(t, s, dir, "--token-file", writeTokenFile(t, newToken(t, s)), "--node-name", "r1")
	b.waitOutput("stored the certificate of machine r1", 60*time.Second)
	waitPhase(t, s, "r1", "Running", 60*time.Second)
	log := b.log.String()
	if after := log[strings.Index(log, "stored the certificate"):]; strings.Contains(after, "no longer exists") {
		t.Errorf("after re-joining the agent still used the voided certificate:\n%s", log)
	}
	select {
	case <-b.exited:
		t.Fatalf("the re-joined agent exited:\n%s", b.log.String())
	default:
	}
}

// TestAgentTokenNotOnCommandLine (issue 13, finding 7): with --token-file or
// $MUSTER_TOKEN the join token's secret is nowhere in the agent's command
// line, and the agent joins.
func TestAgentTokenNotOnCommandLine(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	for _, how := range []string{"--token-file", "MUSTER_TOKEN"} {
		t.Run(how, func(t *testing.T) {
			token := newToken(t, s)
			node := "cmdline-" + strings.ToLower(strings.ReplaceAll(strings.Trim(how, "-_"), "_", "-"))
			args := []string{"--server", s.url(), "--data-dir", t.TempDir(), "--node-name", node}
			var env []string
			if how == "--token-file" {
				args = append(args, "--token-file", writeTokenFile(t, token))
			} else {
				env = []string{"MUSTER_TOKEN=" + token}
			}
			a := runAgentBinaryEnv(t, env, args...)
			cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(a.cmd.Process.Pid), "cmdline"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(cmdline), tokenSecret(token)) {
				t.Errorf("the token's secret is in /proc/PID/cmdline: %q", cmdline)
			}
			a.waitOutput("running as machine "+node, 60*time.Second)
			if strings.Contains(a.log.String(), tokenSecret(token)) {
				t.Errorf("the token's secret is in the agent's log:\n%s", a.log.String())
			}
		})
	}
}

// TestAgentFailedJoinKeepsNoToken (issue 20, item 15): a join that fails
// leaves no join token in the data dir, and the next start without a token
// says it needs one instead of silently reusing the old one.
func TestAgentFailedJoinKeepsNoToken(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	token := newToken(t, s)
	id := token[strings.LastIndex(token, "::")+2 : strings.LastIndex(token, ".")]
	s.muster(t, "token", "revoke", id)
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token-file", writeTokenFile(t, token), "--node-name", "fj")
	if out, code := a.waitExit(60 * time.Second); code == 0 || !strings.Contains(out, "refused") {
		t.Fatalf("a join with a revoked token: exit %d, want non-zero with the server's refusal:\n%s", code, out)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if strings.Contains(string(b), tokenSecret(token)) {
			t.Errorf("the failed join left the join token in %s", filepath.Join(dir, e.Name()))
		}
	}
	b := startAgent(t, s, dir, "--node-name", "fj")
	out, code := b.waitExit(30 * time.Second)
	if code == 0 || !strings.Contains(out, "no join token") || strings.Contains(out, "registering") {
		t.Errorf("a start without a token after a failed join: exit %d, want it to ask for a token without registering:\n%s", code, out)
	}
}

// TestAgentOneAgentPerDataDir (issue 20, item 13): a second agent on the
// data dir of a running one refuses to start, naming the first one's pid.
func TestAgentOneAgentPerDataDir(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token-file", writeTokenFile(t, newToken(t, s)), "--node-name", "solo")
	a.waitOutput("running as machine solo", 60*time.Second)
	b := startAgent(t, s, dir, "--node-name", "solo")
	out, code := b.waitExit(30 * time.Second)
	if code == 0 || !strings.Contains(out, "pid "+strconv.Itoa(a.cmd.Process.Pid)) || !strings.Contains(out, dir) {
		t.Errorf("a second agent on the same data dir: exit %d, want a refusal naming pid %d and %s:\n%s", code, a.cmd.Process.Pid, dir, out)
	}
	// Once the first is gone (even killed), the data dir is free again.
	a.kill()
	c := startAgent(t, s, dir, "--node-name", "solo")
	c.waitOutput("using the stored certificate of machine solo", 30*time.Second)
}

// TestAgentSaysWhenItLosesTheServer (issue 20, item 7): the agent says when
// it loses its server and when the server is back, and every line it
// writes carries a timestamp.
func TestAgentSaysWhenItLosesTheServer(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a := startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, s)), "--node-name", "loser")
	a.waitOutput("running as machine loser", 60*time.Second)
	s.kill9()
	a.waitOutput("lost the server", 30*time.Second)
	s.start()
	a.waitOutput("the server answers again after", 60*time.Second)
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z muster-agent: `)
	for _, line := range strings.Split(strings.TrimSpace(a.log.String()), "\n") {
		if !stamp.MatchString(line) {
			t.Errorf("a line without a timestamp: %q", line)
		}
	}
}

// TestAgentPlanLimitsAndReasons (issue 13, finding 8; issue 20, item 4): an
// instruction whose background child holds its output ends at its
// timeout, and why a plan failed (a timeout, a file that cannot be
// written) is in the MachinePlan's status, where kubectl shows it.
func TestAgentPlanLimitsAndReasons(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	a := startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, s)), "--node-name", "limits")
	a.waitOutput("running as machine limits", 60*time.Second)
	waitPhase(t, s, "limits", "Running", 60*time.Second)

	status := func() string {
		return s.mustKubectl("get", "machineplan", "limits", "-o",
			`jsonpath={.status.state} {.status.failureCount} {range .status.output[*]}{.name}={.exitCode}:{.output};{end}`)
	}
	start := time.Now()
	applyPlan(t, s, "limits", `  maxFailures: 1
  instructions:
  - name: runaway
    command: /bin/sh
    args: ["-c", "sleep 25 & sleep 100"]
    timeoutSeconds: 2
`)
	waitFor(t, 60*time.Second, "the runaway instruction to be reported failed", func() bool {
		return strings.HasPrefix(status(), "failed 1 ")
	})
	took := time.Since(start)
	t.Logf("timeoutSeconds 2 on 'sleep 25 & sleep 100': reported failed after %s", took.Round(100*time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the plan took %s to fail; the instruction's limit is 2s", took.Round(time.Second))
	}
	if st := status(); !strings.Contains(st, "runaway=-1:") || !strings.Contains(st, "timed out after 2s") {
		t.Errorf("the status does not say the instruction timed out: %q", st)
	}

	notDir := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	applyPlan(t, s, "limits", `  maxFailures: 1
  files:
  - path: `+filepath.Join(notDir, "app.conf")+`
    content: "x"
`)
	waitFor(t, 60*time.Second, "the file failure to be reported", func() bool {
		st := status()
		return strings.HasPrefix(st, "failed 1 ") && strings.Contains(st, "app.conf") && strings.Contains(st, "not a directory")
	})
}

// TestAgentRidesThroughServerDownAtStart (issue 13, finding 12): an agent
// started while its server is down, joining or with its stored
// certificate, waits for the server instead of giving up, and runs once
// the server is back.
func TestAgentRidesThroughServerDownAtStart(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	tokenFile := writeTokenFile(t, newToken(t, s))
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token-file", tokenFile, "--node-name", "patient")
	a.waitOutput("running as machine patient", 60*time.Second)
	a.kill()

	s.kill9()
	b := startAgent(t, s, dir, "--node-name", "patient")
	b.waitOutput("checking the stored certificate", 30*time.Second)
	joining := startAgent(t, s, t.TempDir(), "--token-file", tokenFile, "--node-name", "latecomer")
	joining.waitOutput("joining failed", 30*time.Second)
	s.start()
	b.waitOutput("using the stored certificate of machine patient", 60*time.Second)
	joining.waitOutput("running as machine latecomer", 60*time.Second)
	waitPhase(t, s, "patient", "Running", 60*time.Second)
	waitPhase(t, s, "latecomer", "Running", 60*time.Second)
}

// TestAgentWarnsWhenFlagsDiffer (issue 20, item 12): restarted with another
// --node-name, --label or --role than it registered with, the agent keeps
// its Machine and says so, with the command that makes the change.
func TestAgentWarnsWhenFlagsDiffer(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token-file", writeTokenFile(t, newToken(t, s)), "--node-name", "drift-1", "--label", "site=17", "--role", "worker")
	a.waitOutput("running as machine drift-1", 60*time.Second)
	a.kill()
	b := startAgent(t, s, dir, "--node-name", "drift-2", "--label", "site=18", "--role", "etcd")
	b.waitOutput("running as machine drift-1", 60*time.Second)
	for _, want := range []string{"kubectl delete machine drift-1", "kubectl label machine drift-1 site=18 --overwrite", "kubectl patch machine drift-1"} {
		if !strings.Contains(b.log.String(), want) {
			t.Errorf("the agent does not say %q:\n%s", want, b.log.String())
		}
	}
}
