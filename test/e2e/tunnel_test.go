package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/pgtest"
)

var buildPlugin sync.Once

// startTunnelAgent joins an agent named name with flags and waits until
// its tunnel is open.
func startTunnelAgent(t *testing.T, s *server, name string, flags ...string) *agentProc {
	t.Helper()
	a := startAgent(t, s, t.TempDir(), append([]string{"--token-file", writeTokenFile(t, newToken(t, s)), "--node-name", name}, flags...)...)
	a.waitOutput("opened the tunnel to the server", 60*time.Second)
	return a
}

// TestTunnelExec: kubectl muster exec streams 10 MiB and the exit code
// through the agent's tunnel, is recorded, and is refused where it must be.
func TestTunnelExec(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	admin := s.kubeconfig()
	a := startTunnelAgent(t, s, "edge-1")

	start := time.Now()
	stdout, stderr, code := kubectlMuster(t, admin, "exec", "machine/edge-1", "--", "sh", "-c", `head -c 10485760 /dev/zero | tr "\0" x; echo err >&2; exit 7`)
	t.Logf("10 MiB exec took %s", time.Since(start).Round(time.Millisecond))
	if len(stdout) != 10<<20 || strings.Trim(stdout, "x") != "" || stderr != "err\n" || code != 7 {
		t.Fatalf("exec: %d bytes of stdout (all x: %v), stderr %q, exit code %d; want 10485760 x, \"err\\n\", 7",
			len(stdout), strings.Trim(stdout, "x") == "", lastLines(stderr, 5), code)
	}

	// Recorded where an auditor looks: an Event on the Machine and the
	// server's log (who, command, exit code), never the output.
	row := waitForEvent(t, s, "the exec's event", func(r string) bool {
		return strings.Contains(r, "Exec Machine/edge-1") && strings.Contains(r, "exited 7")
	}, "--field-selector", "involvedObject.name=edge-1")
	if !strings.Contains(row, "exec by muster-admin") {
		t.Errorf("the exec's event does not say who: %s", row)
	}
	waitFor(t, 10*time.Second, "the exec in the server's log", func() bool {
		return strings.Contains(s.log.String(), `"Exec on machine" machine="edge-1"`) && strings.Contains(s.log.String(), "exitCode=7")
	})
	if strings.Contains(s.log.String(), "xxxxxxxxxxxxxxxx") {
		t.Error("the server logged the exec's output")
	}

	// Roles: an operator may, a viewer may not (403), exec nor logs.
	operator := userKubeconfig(t, s, "otto", "muster:operators")
	viewer := userKubeconfig(t, s, "vera", "muster:viewers")
	if out, errOut, code := kubectlMuster(t, operator, "exec", "machine/edge-1", "--", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("operator exec: exit %d, %q %q", code, out, errOut)
	}
	if out, _, code := kubectlMuster(t, operator, "logs", "machine/edge-1"); code != 0 || !strings.Contains(out, "opened the tunnel") || !strings.Contains(out, "exec by otto") {
		t.Fatalf("operator logs: exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"exec", "machine/edge-1", "--", "true"}, {"logs", "machine/edge-1"}} {
		_, errOut, code := kubectlMuster(t, viewer, args...)
		if code == 0 || !strings.Contains(errOut, "Forbidden") || !strings.Contains(errOut, "muster:operators") {
			t.Errorf("viewer %v: exit %d, %s; want Forbidden naming muster:operators", args, code, errOut)
		}
	}

	// An agent's certificate never execs, not even into its own machine,
	// and a tunnel needs a machine's certificate.
	if code, _, body := do(t, certHTTPClient(t, s, a.dataDir), s, http.MethodPost, "/apis/muster.io/v1alpha1/machines/edge-1/exec?command=true", nil, nil); code != http.StatusForbidden {
		t.Errorf("an agent's certificate exec'ing into its machine: %d %.300s; want 403", code, body)
	}
	anonymous := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	if code, _, body := do(t, anonymous, s, http.MethodPost, "/tunnel", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("an anonymous tunnel: %d %.300s; want 401", code, body)
	}
	if code, body := adminRequest(t, s, http.MethodPost, "/tunnel"); code != http.StatusForbidden || !strings.Contains(body, "machine") {
		t.Errorf("an admin opening a tunnel: %d %.300s; want 403 (only a machine's agent may)", code, body)
	}

	// An agent started with --disable-exec refuses, and says so.
	b := startTunnelAgent(t, s, "edge-2", "--disable-exec")
	_, errOut, code := kubectlMuster(t, admin, "exec", "machine/edge-2", "--", "true")
	if code == 0 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "--disable-exec") {
		t.Fatalf("exec on a --disable-exec agent: exit %d, %s", code, errOut)
	}
	b.waitOutput("refused exec asked by muster-admin: exec is disabled", 10*time.Second)

	// Bad inputs: each a clear 4xx, and nothing run.
	base := "/apis/muster.io/v1alpha1/machines/"
	for _, tc := range []struct {
		name, path string
		status     int
		says       string
	}{
		{"empty command", base + "edge-1/exec", 400, "no command to run"},
		{"100 KB of arguments", base + "edge-1/exec?" + url.Values{"command": {"echo", strings.Repeat("a", 100<<10)}}.Encode(), 413, "at most 65536"},
		{"unknown machine", base + "nope/exec?command=true", 404, `not found`},
	} {
		if status, body := adminRequest(t, s, http.MethodPost, tc.path); status != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %.500s; want %d saying %q", tc.name, status, body, tc.status, tc.says)
		}
	}
	for _, tc := range []struct {
		name string
		argv []string
		says string
	}{
		{"empty command", nil, "no command to run"},
		// 1 MiB in 8,192 arguments: Linux caps one argument at 128 KiB.
		{"1 MB of arguments", append([]string{"echo"}, slices.Repeat([]string{strings.Repeat("a", 127)}, 8192)...), "at most 65536"},
	} {
		_, errOut, code := kubectlMuster(t, admin, append([]string{"exec", "machine/edge-1", "--"}, tc.argv...)...)
		if code == 0 || !strings.Contains(errOut, tc.says) {
			t.Errorf("kubectl muster exec with %s: exit %d, %.500s; want it to say %q", tc.name, code, errOut, tc.says)
		}
	}

	// A machine whose agent is down: 503 that says so.
	a.kill()
	waitFor(t, 30*time.Second, "a 503 for the killed agent", func() bool {
		_, errOut, _ := kubectlMuster(t, admin, "exec", "machine/edge-1", "--", "true")
		return strings.Contains(errOut, "ServiceUnavailable") && strings.Contains(errOut, "is not connected")
	})
	_, errOut, _ = kubectlMuster(t, admin, "exec", "machine/edge-1", "--", "true")
	t.Logf("agent down: %s", strings.TrimSpace(errOut))

	// A deleted machine: a clear error, never its agent.
	s.mustKubectl("delete", "machine", "edge-2", "--wait=false")
	waitFor(t, 60*time.Second, "a clear refusal for the deleted machine", func() bool {
		_, errOut, code := kubectlMuster(t, admin, "exec", "machine/edge-2", "--", "true")
		return code != 0 && (strings.Contains(errOut, "is being deleted") || strings.Contains(errOut, "not found"))
	})
	_, errOut, _ = kubectlMuster(t, admin, "exec", "machine/edge-2", "--", "true")
	t.Logf("deleted machine: %s", strings.TrimSpace(errOut))
}

// TestTunnelPortForward: kubectl muster port-forward reaches an HTTP server
// on the agent's loopback through the tunnel, only on a port the agent
// allows; the agent itself refuses the others.
func TestTunnelPortForward(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the machine, %s", r.URL.Path)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = web.Serve(l) }()
	t.Cleanup(func() { _ = web.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	a := startTunnelAgent(t, s, "pf-1", "--allow-port", fmt.Sprint(port))

	forward := func(local, remote int) (string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, "kubectl", "muster", "port-forward", "machine/pf-1", fmt.Sprintf("%d:%d", local, remote))
		cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig(), "PATH="+pluginDir(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "kubectl muster port-forward to listen", func() bool { return strings.Contains(out.String(), "Forwarding from") })
		return fmt.Sprintf("127.0.0.1:%d", local), func() { cancel(); _ = cmd.Wait(); t.Logf("port-forward output:\n%s", out.String()) }
	}
	addr, stop := forward(freePort(t), port)
	defer stop()
	for i := range 3 { // several connections, each its own stream
		resp, err := http.Get(fmt.Sprintf("http://%s/try%d", addr, i))
		if err != nil {
			t.Fatalf("GET through the port-forward: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("hello from the machine, /try%d", i); string(b) != want {
			t.Fatalf("GET through the port-forward = %q, want %q", b, want)
		}
	}

	// A port the agent does not allow: refused by the agent, which says so.
	closed := freePort(t)
	status, body := adminRequest(t, s, http.MethodPost, fmt.Sprintf("/apis/muster.io/v1alpha1/machines/pf-1/portforward?port=%d", closed))
	if status != http.StatusForbidden || !strings.Contains(body, "the agent of machine pf-1 refused") || !strings.Contains(body, "--allow-port") {
		t.Fatalf("port-forward to a port not allowed: %d %s", status, body)
	}
	a.waitOutput(fmt.Sprintf("port %d is not published by this agent", closed), 10*time.Second)

	// The same through the plugin: a client of the local port sees its
	// connection closed at once, not held open until it times out.
	refusedAddr, stopRefused := forward(freePort(t), closed)
	defer stopRefused()
	conn, err := net.Dial("tcp", refusedAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	if n, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection to a refused port stayed open (read %d bytes, %v after %v)", n, err, time.Since(start).Round(time.Millisecond))
	} else {
		t.Logf("a connection to a refused port closed after %v (%v)", time.Since(start).Round(time.Millisecond), err)
	}

	// Ports outside 1-65535: 400 from the server, and the plugin says so first.
	for _, p := range []string{"0", "70000", "x"} {
		status, body := adminRequest(t, s, http.MethodPost, "/apis/muster.io/v1alpha1/machines/pf-1/portforward?port="+p)
		if status != http.StatusBadRequest || !strings.Contains(body, "1 to 65535") {
			t.Errorf("port %s: %d %s; want 400 naming 1 to 65535", p, status, body)
		}
	}
	if _, errOut, code := kubectlMuster(t, s.kubeconfig(), "port-forward", "machine/pf-1", "8080:70000"); code == 0 || !strings.Contains(errOut, "1 to 65535") {
		t.Errorf("kubectl muster port-forward 8080:70000: exit %d, %s", code, errOut)
	}
}

// TestTunnelHA: with three servers, an exec (and a log read) sent to any
// of them reaches the agent, whichever server holds its tunnel: the others
// forward it there as the same user, and the audit names that user.
func TestTunnelHA(t *testing.T) {
	t.Parallel()
	servers := startHA(t, pgtest.DSN(t), 3)
	startTunnelAgent(t, servers[0], "ha-1")
	for i, s := range servers {
		// Server N's exec has N arguments: an exec's record counts its
		// arguments and never shows them, so the count tells them apart.
		args := slices.Repeat([]string{"via"}, i+1)
		var out, errOut string
		waitFor(t, 30*time.Second, fmt.Sprintf("an exec through server %d", i+1), func() bool {
			var code int
			out, errOut, code = kubectlMuster(t, s.kubeconfig(), append([]string{"exec", "machine/ha-1", "--", "echo"}, args...)...)
			return code == 0
		})
		if out != strings.Join(args, " ")+"\n" {
			t.Fatalf("exec through server %d: %q %q", i+1, out, errOut)
		}
		if out, _, code := kubectlMuster(t, s.kubeconfig(), "logs", "machine/ha-1"); code != 0 || !strings.Contains(out, "exec by muster-admin of echo with 1 argument") {
			t.Fatalf("logs through server %d: exit %d:\n%s", i+1, code, lastLines(out, 5))
		}
	}
	forwarded := 0
	for _, s := range servers {
		if strings.Contains(s.log.String(), "Forwarding to the server that holds the machine's tunnel") {
			forwarded++
		}
	}
	if forwarded != 2 {
		t.Errorf("%d servers forwarded to the tunnel's holder; want the 2 that do not hold it", forwarded)
	}
	waitForEvent(t, servers[0], "the forwarded exec's event, naming the user", func(r string) bool {
		return strings.Contains(r, "exec by muster-admin of echo with 3 arguments")
	}, "--field-selector", "involvedObject.name=ha-1")
}
