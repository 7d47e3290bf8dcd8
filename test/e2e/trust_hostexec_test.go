package e2e

import (
	"strings"
	"testing"
	"time"
)

// Issue 27: the operator's boundary on the server's own host, and what an
// exec leaves behind for others to read.

// TestTrustExecRecord: an exec's record (the Machine's Event that viewers
// read, the server's log, the agent's log) says who ran which program on
// which machine, never the arguments, where a password goes.
func TestTrustExecRecord(t *testing.T) {
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
