package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muster-io/muster/internal/testenv/pgtest"
)

// ipv6Loopback skips (or, under CI, fails) where ::1 cannot be bound.
func ipv6Loopback(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		cannotRun(t, "IPv6 loopback unavailable here: %v", err)
	}
	l.Close()
}

// addIPv6Pair gives n's veth pair IPv6 addresses (host ::1, namespace
// ::2 of a /64 of its own) beside its IPv4 /30, and returns them.
func addIPv6Pair(t *testing.T, n *netns) (hostIP, nsIP string) {
	t.Helper()
	third := strings.Split(n.hostIP, ".")[2]
	hostIP, nsIP = "fd00:212:"+third+"::1", "fd00:212:"+third+"::2"
	out, err := exec.Command("ip", "-o", "addr", "show", "to", n.hostIP+"/32").Output()
	hostDev := strings.Fields(string(out))
	out2, err2 := exec.Command("ip", "-n", n.name, "-o", "addr", "show", "to", n.nsIP+"/32").Output()
	nsDev := strings.Fields(string(out2))
	if err != nil || err2 != nil || len(hostDev) < 2 || len(nsDev) < 2 {
		t.Fatalf("finding the veth pair of %s: %v %v: %s %s", n.name, err, err2, out, out2)
	}
	// nodad: usable at once, not after duplicate address detection.
	for _, args := range [][]string{
		{"addr", "add", hostIP + "/64", "dev", hostDev[1], "nodad"},
		{"-n", n.name, "addr", "add", nsIP + "/64", "dev", nsDev[1], "nodad"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			cannotRun(t, "cannot add IPv6 addresses here (ip %s: %v: %s)", strings.Join(args, " "), err, out)
		}
	}
	return hostIP, nsIP
}

// TestIPv6DualStackServer: a server bound to :: and advertising an IPv6
// address serves both families: its serving certificate verifies for both,
// its ServerEndpoint and admin kubeconfig carry the bracketed IPv6
// literal, an agent in a network namespace joins over IPv6 on a veth pair
// (and its Machine reports its addresses of both families), an agent on
// the host joins over IPv4, both are Running, and exec reaches the
// namespace's agent through its tunnel over IPv6.
func TestIPv6DualStackServer(t *testing.T) {
	t.Parallel()
	n := newNetns(t)
	v6Host, v6NS := addIPv6Pair(t, n)
	// host 127.0.0.1 is what the harness polls for readiness; the flags
	// after it (the last of a flag wins) bind :: and advertise IPv6.
	s := newServer(t, "127.0.0.1", "", "--bind-address", "::", "--advertise-address", v6Host)
	s.start()
	v6Addr := net.JoinHostPort(v6Host, fmt.Sprint(s.port))
	v6, v4 := "https://"+v6Addr, fmt.Sprintf("https://127.0.0.1:%d", s.port)

	// The serving certificate verifies for both families.
	for _, addr := range []string{v6Addr, fmt.Sprintf("127.0.0.1:%d", s.port)} {
		host, _, _ := net.SplitHostPort(addr)
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: s.caPool(), ServerName: host, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("TLS to %s verified against the CA: %v", addr, err)
		}
		conn.Close()
	}
	kc, err := os.ReadFile(s.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), "server: "+v6) {
		t.Errorf("the admin kubeconfig does not name the advertised %s:\n%s", v6, kc)
	}
	waitFor(t, 30*time.Second, "the server's ServerEndpoint to carry its IPv6 address", func() bool {
		return slices.Contains(endpointAddresses(t, adminClient(t, s)), v6Addr)
	})

	token := writeTokenFile(t, newToken(t, s))
	over6 := startNetnsAgent(t, n, nil, "--server", v6, "--data-dir", t.TempDir(), "--token-file", token, "--node-name", "over-v6")
	over4 := runAgentBinary(t, "--server", v4, "--data-dir", t.TempDir(), "--token-file", token, "--node-name", "over-v4")
	over6.waitOutput("stored the certificate", 60*time.Second)
	over4.waitOutput("stored the certificate", 60*time.Second)
	// kubectl, with the kubeconfig's https://[IPv6]:PORT, does these waits.
	waitPhase(t, s, "over-v6", "Running", 60*time.Second)
	waitPhase(t, s, "over-v4", "Running", 60*time.Second)
	var addrs string
	waitFor(t, 30*time.Second, "over-v6 to report its addresses of both families", func() bool {
		addrs, _ = s.kubectl("get", "machine", "over-v6", "-o", "jsonpath={.status.addresses[*].address}")
		f := strings.Fields(addrs)
		return slices.Contains(f, n.nsIP) && slices.Contains(f, v6NS)
	})
	over6.waitOutput("opened the tunnel to the server", 30*time.Second)
	if out, errOut, code := kubectlMuster(t, s.kubeconfig(), "exec", "machine/over-v6", "--", "ip", "-o", "-6", "addr"); code != 0 || !strings.Contains(out, v6NS) {
		t.Errorf("kubectl muster exec through the IPv6 tunnel: exit %d: %s %s; want the namespace's %s", code, out, errOut, v6NS)
	}
}

// TestIPv6ServerWithoutBrackets: an IPv6 --server without brackets stops
// the agent at once with the bracketed URL to use.
func TestIPv6ServerWithoutBrackets(t *testing.T) {
	t.Parallel()
	a := runAgentBinary(t, "--server", "https://2001:db8::1:9443", "--data-dir", t.TempDir(), "--token-file", writeTokenFile(t, "K10"+strings.Repeat("0", 64)+"::abcdef.0123456789abcdef"))
	out, code := a.waitExit(20 * time.Second)
	if code == 0 || !strings.Contains(out, "an IPv6 address goes in brackets, like --server https://[2001:db8::1]:9443") {
		t.Errorf("exit %d, output:\n%s\nwant the bracketed URL to use", code, out)
	}
}

// TestIPv6LoadBalancerFailover: one HA deployment (two servers on one
// PostgreSQL database), one server on IPv6 (::1), the other on IPv4
// (127.0.0.2). An agent learns both from their ServerEndpoints; when the
// server its load balancer uses is killed, it moves to the other family's
// server and the machine stays Running there.
func TestIPv6LoadBalancerFailover(t *testing.T) {
	t.Parallel()
	ipv6Loopback(t)
	dsn := pgtest.DSN(t)
	// The harness builds its readiness URL from host, so the IPv6 server's
	// host is the bracketed literal; the later flags give the server the
	// bare address (the last of a flag wins).
	s6 := newServer(t, "[::1]", dsn, "--bind-address", "::1", "--advertise-address", "::1")
	s6.start()
	s4 := newServer(t, "127.0.0.2", dsn, "--token", serverToken(t, s6))
	s4.start()
	addr6, addr4 := fmt.Sprintf("[::1]:%d", s6.port), fmt.Sprintf("127.0.0.2:%d", s4.port)

	dir := t.TempDir()
	a := runAgentBinary(t, "--server", "https://"+addr6, "--data-dir", dir, "--token-file", writeTokenFile(t, newToken(t, s6)), "--node-name", "fo-dual")
	// kubectl wait fails at once on a Machine not created yet.
	a.waitOutput("running as machine", 60*time.Second)
	waitPhase(t, s6, "fo-dual", "Running", 60*time.Second)
	// The load balancer learns both servers (it refreshes every 6 heartbeats).
	waitFor(t, 60*time.Second, "the agent's load balancer to learn both servers", func() bool {
		var p struct{ Servers []string }
		b, err := os.ReadFile(filepath.Join(dir, "loadbalancer.json"))
		return err == nil && json.Unmarshal(b, &p) == nil && slices.Contains(p.Servers, addr6) && slices.Contains(p.Servers, addr4)
	})
	active := regexp.MustCompile(`load balancer: active server (\S+)`)
	var victim, survivor *server
	waitFor(t, 30*time.Second, "the load balancer to settle on a learned server", func() bool {
		m := active.FindAllStringSubmatch(a.log.String(), -1)
		if len(m) == 0 {
			return false
		}
		switch m[len(m)-1][1] {
		case addr6:
			victim, survivor = s6, s4
		case addr4:
			victim, survivor = s4, s6
		default:
			return false
		}
		return true
	})
	before := strings.Count(a.log.String(), "load balancer: active server")
	victim.kill9()
	want := addr4
	if survivor == s6 {
		want = addr6
	}
	waitFor(t, 30*time.Second, "the load balancer to fail over to "+want, func() bool {
		m := active.FindAllStringSubmatch(a.log.String(), -1)
		return strings.Count(a.log.String(), "load balancer: active server") > before && m[len(m)-1][1] == want
	})
	c := clientVia(t, survivor, survivor)
	heard := func() bool {
		ages, err := heardBy(c)
		age, ok := ages["fo-dual"]
		return err == nil && ok && age < 6*time.Second
	}
	waitFor(t, 30*time.Second, "the surviving server ("+want+") to hear the agent", heard)
	m, err := c.MusterV1alpha1().Machines().Get(context.Background(), "fo-dual", metav1.GetOptions{})
	if err != nil || m.Status.Phase != "Running" {
		t.Errorf("after the failover: %v, machine %v", err, m)
	}
}

// TestInstallScriptIPv6: install.sh fetched from and pointed at a server
// by its bracketed IPv6 literal installs the agent, whose unit's command
// joins over IPv6.
func TestInstallScriptIPv6(t *testing.T) {
	t.Parallel()
	ipv6Loopback(t)
	s := newServer(t, "[::1]", "", "--bind-address", "::1", "--advertise-address", "::1")
	s.start()
	r := newInstallRoot(t)
	out, err := pipeInstall(t, s, s.url(), r, "agent", "--token", newToken(t, s), "--server", s.url(), "--node-name", "installed-v6")
	if err != nil {
		t.Fatalf("install.sh with --server %s: %v\n%s", s.url(), err, out)
	}
	unit := filepath.Join(r.systemdDir, "muster-agent.service")
	argv, envFile := unitExecStart(t, unit)
	if !slices.Contains(argv, s.url()) {
		t.Errorf("the unit's command %v does not carry --server %s", argv, s.url())
	}
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
	envText, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	a := runAgentBinaryEnv(t, strings.Fields(string(envText)), argv[1:]...)
	a.waitOutput("running as machine", 60*time.Second)
	waitPhase(t, s, "installed-v6", "Running", 60*time.Second)
}

// TestConsoleIPv6: the web console served at a bracketed IPv6 literal
// (https://[::1]:PORT/console/) signs in and lists a machine, live; the
// console-token command names that address.
func TestConsoleIPv6(t *testing.T) {
	// Not parallel: a headless browser keeps a core busy (as TestConsole).
	ipv6Loopback(t)
	chromiumPath(t)
	s := newServer(t, "[::1]", "", "--bind-address", "::1", "--advertise-address", "::1")
	s.start()
	viewer := consoleToken(t, s, "vera", "muster:viewers") // checks it says "paste it at https://[::1]:PORT/console/"
	ctx := browser(t, s)
	signIn(t, ctx, s, viewer)
	open(t, ctx, s.url()+"/console/#/")
	startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "console-v6").waitOutput("running as machine", 60*time.Second)
	run(t, ctx, "the IPv6-joined machine listed live", 60*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`.row[data-name="console-v6"] .phase-Running`)))
}
