package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// netns is a network namespace joined to this host by one veth pair
// (host 10.211.N.1, namespace 10.211.N.2, a /30) and nothing else: no
// default route, so from inside only the host's address is reachable,
// and nothing outside reaches the namespace's loopback.
type netns struct {
	name, hostIP, nsIP string
}

// cannotRun skips a test this machine cannot run, except under CI, where
// .ci/run provides what it needs and a skip would pass for a pass.
func cannotRun(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format+" (under CI this must work: .ci/run runs as root and installs iproute2, python3 and curl)", args...)
	}
	t.Skipf(format, args...)
}

// netnsIDs numbers this run's namespaces, from a random start so that two
// runs on one machine seldom meet.
var netnsIDs = func() *atomic.Int64 { var n atomic.Int64; n.Store(rand.Int64N(250)); return &n }()

func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		cannotRun(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		cannotRun(t, "no ip(8) to make network namespaces with")
	}
	// Each namespace of this run has its own /30; parallel tests must not share one.
	id := int(netnsIDs.Add(1)-1)%250 + 1
	n := &netns{name: fmt.Sprintf("mtun-%d-%d", os.Getpid(), id), hostIP: fmt.Sprintf("10.211.%d.1", id), nsIP: fmt.Sprintf("10.211.%d.2", id)}
	host, peer := fmt.Sprintf("mth%d%d", os.Getpid()%10000, id), fmt.Sprintf("mtn%d%d", os.Getpid()%10000, id)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", n.name).Run()
		_ = exec.Command("ip", "link", "del", host).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", n.name},
		{"link", "add", host, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", n.name},
		{"addr", "add", n.hostIP + "/30", "dev", host},
		{"link", "set", host, "up"},
		{"-n", n.name, "addr", "add", n.nsIP + "/30", "dev", peer},
		{"-n", n.name, "link", "set", peer, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			cannotRun(t, "cannot make a network namespace here (ip %s: %v: %s)", strings.Join(args, " "), err, out)
		}
	}
	return n
}

// start runs name args... inside the namespace, killed at the end of the test.
func (n *netns) start(t *testing.T, log *syncBuffer, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// TestTunnelNoInboundRoute: an agent in a network namespace that nothing
// outside can reach (its web server listens on the namespace's own
// loopback) is reached through its tunnel alone: exec runs inside the
// namespace, and port-forward fetches from that loopback.
func TestTunnelNoInboundRoute(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"python3", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			cannotRun(t, "no %s here to serve and fetch the namespace's web page", tool)
		}
	}
	n := newNetns(t)
	s := newServer(t, n.hostIP, "")
	s.start()

	// A web server on the namespace's loopback: unreachable from the host.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("only through the tunnel\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const port = 18080
	webLog := &syncBuffer{}
	n.start(t, webLog, "python3", "-m", "http.server", fmt.Sprint(port), "--bind", "127.0.0.1", "--directory", dir)

	agentLog := &syncBuffer{}
	token := writeTokenFile(t, newToken(t, s))
	n.start(t, agentLog, agentBin, "--server", s.url(), "--data-dir", t.TempDir(), "--token-file", token, "--node-name", "hidden-1",
		"--allow-port", fmt.Sprint(port))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the namespaced agent's output:\n%s\nthe server's log, its end:\n%s", agentLog.String(), lastLines(s.log.String(), 40))
		}
	})
	waitFor(t, 120*time.Second, "the namespaced agent's tunnel", func() bool {
		return strings.Contains(agentLog.String(), "opened the tunnel to the server")
	})

	// Nothing on the host reaches into the namespace: its address has no
	// listener, and its loopback is its own.
	if out, err := exec.Command("curl", "-s", "--max-time", "2", fmt.Sprintf("http://%s:%d/secret.txt", n.nsIP, port)).CombinedOutput(); err == nil {
		t.Fatalf("the host reached the namespace's web server directly: %s", out)
	}

	out, errOut, code := kubectlMuster(t, s.kubeconfig(), "exec", "machine/hidden-1", "--", "ip", "-o", "-4", "addr")
	if code != 0 || !strings.Contains(out, n.nsIP) {
		t.Fatalf("exec in the namespace: exit %d, %s %s; want its address %s", code, out, errOut, n.nsIP)
	}

	forwardLog := &syncBuffer{}
	local := freePort(t)
	pf := exec.Command("kubectl", "muster", "port-forward", "machine/hidden-1", fmt.Sprintf("%d:%d", local, port))
	pf.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig(), "PATH="+pluginDir(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	pf.Stdout, pf.Stderr = forwardLog, forwardLog
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	waitFor(t, 30*time.Second, "the port-forward to listen", func() bool { return strings.Contains(forwardLog.String(), "Forwarding from") })
	var got []byte
	waitFor(t, 30*time.Second, "the namespace's web server through the tunnel", func() bool {
		got, _ = exec.Command("curl", "-s", "--max-time", "5", fmt.Sprintf("http://127.0.0.1:%d/secret.txt", local)).Output()
		return string(got) == "only through the tunnel\n"
	})
}
