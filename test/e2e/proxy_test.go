package e2e

import (
	"context"
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// proxyOutage is how long the proxy stays down in TestProxyOnlyRoute: the
// issue's 30 s, longer than the load balancer's failure threshold and
// several heartbeats, so the agent has lost the server for certain.
const proxyOutage = 30 * time.Second

// tinyproxy is a real forward proxy (Debian's tinyproxy) on the host end of
// a network namespace's veth, asking for a user and password.
type tinyproxy struct {
	t              *testing.T
	conf, logFile  string
	listen         string // host:port
	user, password string
	cmd            *exec.Cmd
	exited         chan struct{}
}

func startTinyproxy(t *testing.T, listenIP string, allowPort int) *tinyproxy {
	t.Helper()
	if _, err := exec.LookPath("tinyproxy"); err != nil {
		cannotRun(t, "no tinyproxy here (Debian package tinyproxy; .ci/run installs it)")
	}
	dir := t.TempDir()
	p := &tinyproxy{t: t, conf: filepath.Join(dir, "tinyproxy.conf"), logFile: filepath.Join(dir, "tinyproxy.log"),
		listen: fmt.Sprintf("%s:%d", listenIP, freePort(t)), user: "edge", password: "pr0xy-" + randomHex(4)}
	port := p.listen[strings.LastIndex(p.listen, ":")+1:]
	// LogLevel Connect logs each client connection and its CONNECT line;
	// ConnectPort allows CONNECT to the server's port only; the long
	// Timeout keeps the agent's idle watch and tunnel open.
	conf := fmt.Sprintf("Port %s\nListen %s\nTimeout 3600\nLogFile %q\nLogLevel Connect\nMaxClients 200\nConnectPort %d\nBasicAuth %s %s\n",
		port, listenIP, p.logFile, allowPort, p.user, p.password)
	if err := os.WriteFile(p.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	t.Cleanup(p.stop)
	return p
}

func (p *tinyproxy) start() {
	p.t.Helper()
	// -d: in the foreground, so the test owns the process.
	p.cmd = exec.Command("tinyproxy", "-d", "-c", p.conf)
	out := &syncBuffer{}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("starting tinyproxy: %v", err)
	}
	p.exited = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	waitFor(p.t, 10*time.Second, "tinyproxy to listen on "+p.listen, func() bool {
		c, err := net.DialTimeout("tcp", p.listen, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (p *tinyproxy) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// url is the proxy URL with its credentials, as an operator sets HTTPS_PROXY.
func (p *tinyproxy) url(password string) string {
	return fmt.Sprintf("http://%s:%s@%s", p.user, password, p.listen)
}

func (p *tinyproxy) log() string {
	b, _ := os.ReadFile(p.logFile)
	return string(b)
}

var (
	tinyproxyClient  = regexp.MustCompile(`Connect \(file descriptor (\d+)\): (\S+)`)
	tinyproxyConnect = regexp.MustCompile(`Request \(file descriptor (\d+)\): CONNECT (\S+) HTTP`)
)

// requests are the CONNECTs in the proxy's log, each "client -> target".
// (A connection that asks for nothing, like start's readiness probe, is
// no request.)
func (p *tinyproxy) requests() []string {
	client := map[string]string{} // file descriptor -> client address
	var out []string
	for _, line := range strings.Split(p.log(), "\n") {
		if m := tinyproxyClient.FindStringSubmatch(line); m != nil {
			client[m[1]] = m[2]
		} else if m := tinyproxyConnect.FindStringSubmatch(line); m != nil {
			out = append(out, client[m[1]]+" -> "+m[2])
		}
	}
	return out
}

// addUnroutedAddress gives the host end of n's veth a second address, off
// n's /30: the host (and the proxy on it) reaches it, the namespace, whose
// only route is its /30, does not. It goes with the veth at cleanup.
func addUnroutedAddress(t *testing.T, n *netns) string {
	t.Helper()
	// 10.216/16: off the process driver's default 10.212/16, which pool
	// tests running beside this one give their machines.
	ip := "10.216." + strings.Split(n.hostIP, ".")[2] + ".1"
	out, err := exec.Command("ip", "-o", "addr", "show", "to", n.hostIP+"/32").Output()
	fields := strings.Fields(string(out))
	if err != nil || len(fields) < 2 {
		t.Fatalf("finding the device of %s: %v: %s", n.hostIP, err, out)
	}
	if out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", fields[1]).CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s dev %s: %v: %s", ip, fields[1], err, out)
	}
	return ip
}

// startNetnsAgent runs muster-agent inside n with env added.
func startNetnsAgent(t *testing.T, n *netns, env []string, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{t: t, log: &syncBuffer{}, exited: make(chan struct{})}
	// ip netns exec and env both exec: the process is the agent itself.
	a.cmd = exec.Command("ip", append(append(append([]string{"netns", "exec", n.name, "env"}, env...), agentBin), args...)...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting muster-agent in %s: %v", n.name, err)
	}
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			t.Logf("muster-agent %v in %s, the end of its output:\n%s", args, n.name, lastLines(a.log.String(), 40))
		}
	})
	return a
}

// TestProxyOnlyRoute: an agent whose only way to the server is an HTTP
// proxy (it runs in a network namespace that reaches the proxy's address
// and nothing else; the server listens on an address only the host, and
// so the proxy, can reach) joins, has its plan delivered by the watch,
// heartbeats (Running), opens its tunnel (kubectl muster exec runs inside
// the namespace), and recovers after the proxy is down for proxyOutage,
// saying so in its log. The proxy's log holds every connection. An agent
// with NO_PROXY naming the server goes direct (the proxy never sees it),
// and one whose proxy answers 407 says so and never registers.
func TestProxyOnlyRoute(t *testing.T) {
	t.Parallel()
	n := newNetns(t)
	serverIP := addUnroutedAddress(t, n)
	s := newServer(t, serverIP, "")
	s.start()
	proxy := startTinyproxy(t, n.hostIP, s.port)

	// The namespace really has no route to the server.
	if out, err := exec.Command("ip", "netns", "exec", n.name, "curl", "-sk", "--max-time", "3", s.url()+"/readyz").CombinedOutput(); err == nil {
		t.Fatalf("the namespace reaches the server without the proxy: %s", out)
	}

	token := writeTokenFile(t, newToken(t, s))
	viaProxy := []string{"HTTPS_PROXY=" + proxy.url(proxy.password)}
	agent := startNetnsAgent(t, n, viaProxy, "--server", s.url(), "--data-dir", t.TempDir(), "--token-file", token, "--node-name", "proxied-1")
	agent.waitOutput("stored the certificate", 60*time.Second)
	// The agent says how it reaches servers, naming the proxy without its credentials.
	agent.waitOutput("connecting to servers through the proxy http://"+proxy.listen+" (from HTTPS_PROXY)", time.Second)

	// NO_PROXY naming the server: straight there, on the host (the
	// namespace has no direct route), with the same HTTPS_PROXY set.
	direct := runAgentBinaryEnv(t, append(viaProxy, "NO_PROXY="+serverIP),
		"--server", s.url(), "--data-dir", t.TempDir(), "--token-file", token, "--node-name", "direct-1")
	direct.waitOutput("stored the certificate", 60*time.Second)
	// (Join times through the proxy and direct: TestProxyJoinTime.)

	waitPhase(t, s, "proxied-1", "Running", 60*time.Second)
	waitPhase(t, s, "direct-1", "Running", 60*time.Second)
	c := adminClient(t, s)
	setPlan(t, c, "proxied-1", "echo through the proxy")
	waitFor(t, 60*time.Second, "the proxied agent to apply its plan (delivered by its watch)", func() bool { return planApplied(c, "proxied-1") })
	agent.waitOutput("opened the tunnel to the server", 30*time.Second)
	exec1 := func() (string, bool) {
		out, errOut, code := kubectlMuster(t, s.kubeconfig(), "exec", "machine/proxied-1", "--", "ip", "-o", "-4", "addr")
		return out + errOut, code == 0 && strings.Contains(out, n.nsIP)
	}
	if out, ok := exec1(); !ok {
		t.Fatalf("kubectl muster exec through the proxied tunnel: %s; want the namespace's address %s", out, n.nsIP)
	}

	// Every connection the proxy saw came from the namespace and asked for
	// the server; none came from the NO_PROXY agent on the host.
	want := fmt.Sprintf("%s -> %s:%d", n.nsIP, serverIP, s.port)
	requests := proxy.requests()
	if len(requests) < 3 {
		t.Fatalf("the proxy logged %d CONNECTs, want the join's, the load balancer's and its health checks':\n%s", len(requests), proxy.log())
	}
	for _, r := range requests {
		if r != want {
			t.Errorf("the proxy logged CONNECT %s; want only %s (NO_PROXY sends direct-1 on the host straight to the server)", r, want)
		}
	}

	// The proxy goes down: the agent names it and why, and keeps trying.
	proxy.stop()
	downAt := time.Now()
	// Killed with a health check's connection open the first failure is
	// an EOF or a reset, later ones a refused dial; whichever comes first,
	// the line names the proxy and the variable (forwardproxy.Explain).
	named := regexp.MustCompile(`load balancer: server \S+ does not answer: .*the proxy ` + regexp.QuoteMeta("http://"+proxy.listen+" (HTTPS_PROXY)"))
	waitFor(t, 30*time.Second, "the agent to say the proxy is down", func() bool { return named.MatchString(agent.log.String()) })
	waitFor(t, 30*time.Second, "the agent to notice it lost the server", func() bool { return strings.Contains(agent.log.String(), "lost the server") })
	// The outage itself is the scenario: the proxy stays down this long.
	time.Sleep(time.Until(downAt.Add(proxyOutage)))
	before := len(proxy.requests())
	proxy.start()
	agent.waitOutput("the server answers again", 60*time.Second)
	waitPhase(t, s, "proxied-1", "Running", 60*time.Second)
	waitFor(t, 60*time.Second, "kubectl muster exec through the reopened tunnel", func() bool {
		_, ok := exec1()
		return ok
	})
	if after := len(proxy.requests()); after <= before {
		t.Errorf("the agent came back without the proxy (%d CONNECTs before, %d after)", before, after)
	}
	if strings.Contains(agent.log.String(), proxy.password) {
		t.Errorf("the agent's log holds the proxy password")
	}

	// A proxy that wants credentials the agent lacks (407), or other ones
	// (tinyproxy answers 401): said plainly, retried, nothing registered.
	target := fmt.Sprintf("%s:%d", serverIP, s.port)
	for _, tc := range []struct{ node, proxyURL, status, hint string }{
		{"refused-1", "http://" + proxy.listen, "407 Proxy Authentication Required", "the proxy wants a user and password; give them in HTTPS_PROXY"},
		{"refused-2", proxy.url("not-the-password"), "401 Unauthorized", "the proxy does not accept the user and password in HTTPS_PROXY; check them"},
	} {
		a := startNetnsAgent(t, n, []string{"HTTPS_PROXY=" + tc.proxyURL},
			"--server", s.url(), "--data-dir", t.TempDir(), "--token-file", token, "--node-name", tc.node)
		a.waitOutput("the proxy http://"+proxy.listen+" (HTTPS_PROXY) refused to connect to "+target+": "+tc.status+": "+tc.hint, 30*time.Second)
		waitFor(t, 30*time.Second, tc.node+" to retry", func() bool { return strings.Count(a.log.String(), tc.status) >= 2 })
		if strings.Contains(a.log.String(), "not-the-password") {
			t.Errorf("the agent's log holds the proxy password:\n%s", a.log.String())
		}
	}
	regs, err := c.MusterV1alpha1().ClusterRegistrations().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regs.Items {
		if strings.HasPrefix(r.Spec.NodeName, "refused-") {
			t.Errorf("the agent refused by its proxy registered anyway: %s", r.Name)
		}
	}
}

// TestProxyMalformedURL: a proxy variable that is no URL stops the agent
// at once with an error naming the variable, never its password, instead
// of a join retried forever.
func TestProxyMalformedURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ env, want string }{
		{"HTTPS_PROXY=http://user:hunter2@proxy.example:port", `HTTPS_PROXY: "http://proxy.example:port" is not a proxy URL`},
		{"https_proxy=socks4://proxy.example:1080", "https_proxy"},
		{"HTTP_PROXY=http://2001:db8::1:3128", "in brackets"},
	} {
		a := runAgentBinaryEnv(t, []string{tc.env},
			"--server", "https://10.0.0.1:9443", "--data-dir", t.TempDir(), "--token-file", writeTokenFile(t, "K10"+strings.Repeat("0", 64)+"::abcdef.0123456789abcdef"))
		out, code := a.waitExit(20 * time.Second)
		if code == 0 || !strings.Contains(out, tc.want) || !strings.Contains(out, "set it like http://") && !strings.Contains(out, "brackets") {
			t.Errorf("%s: exit %d, output:\n%s\nwant an error saying %q", tc.env, code, out, tc.want)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("%s: the error repeats the password:\n%s", tc.env, out)
		}
		if strings.Contains(out, "fetching the CA") {
			t.Errorf("%s: the agent tried to join with a malformed proxy:\n%s", tc.env, out)
		}
	}
}

// TestProxyJoinTime measures what the proxy adds to a join: agents in one
// network namespace join one server alternately through tinyproxy and
// directly (NO_PROXY and a second address the namespace can reach), in the
// same run. It asserts only that every join succeeds; the figures are
// logged for docs/network.md.
func TestProxyJoinTime(t *testing.T) {
	t.Parallel()
	const rounds = 5
	n := newNetns(t)
	// Bound to every address: the namespace reaches it directly at the
	// host end of its veth, and through the proxy at the unrouted address.
	serverIP := addUnroutedAddress(t, n)
	s := newServer(t, serverIP, "", "--bind-address", "0.0.0.0", "--tls-san", n.hostIP)
	s.start()
	proxy := startTinyproxy(t, n.hostIP, s.port)
	token := writeTokenFile(t, newToken(t, s))
	// Timed by the agent's own millisecond timestamps, from its first line
	// to "stored the certificate" (polling its output would round to 100 ms).
	stamp := regexp.MustCompile(`(?m)^(\S+) muster-agent: (.*)$`)
	join := func(name, server string, env []string) time.Duration {
		a := startNetnsAgent(t, n, env, "--server", server, "--data-dir", t.TempDir(), "--token-file", token, "--node-name", name)
		a.waitOutput("stored the certificate", 60*time.Second)
		a.kill()
		var first, stored time.Time
		for _, m := range stamp.FindAllStringSubmatch(a.log.String(), -1) {
			at, err := time.Parse("2006-01-02T15:04:05.000Z", m[1])
			if err != nil {
				continue
			}
			if first.IsZero() {
				first = at
			}
			if strings.HasPrefix(m[2], "stored the certificate") {
				stored = at
				break
			}
		}
		if first.IsZero() || stored.IsZero() {
			t.Fatalf("no timestamps in the agent's output:\n%s", a.log.String())
		}
		return stored.Sub(first)
	}
	var proxied, direct []time.Duration
	for i := 0; i < rounds; i++ {
		proxied = append(proxied, join(fmt.Sprintf("jt-proxy-%d", i), s.url(), []string{"HTTPS_PROXY=" + proxy.url(proxy.password)}))
		direct = append(direct, join(fmt.Sprintf("jt-direct-%d", i), fmt.Sprintf("https://%s:%d", n.hostIP, s.port),
			[]string{"HTTPS_PROXY=" + proxy.url(proxy.password), "NO_PROXY=" + n.hostIP}))
	}
	if got := len(proxy.requests()); got < rounds {
		t.Errorf("the proxy saw %d CONNECTs for %d proxied joins", got, rounds)
	}
	median := func(d []time.Duration) time.Duration { d = slices.Clone(d); slices.Sort(d); return d[len(d)/2] }
	t.Logf("join time (the agent's first line to certificate stored), %d joins each, alternated, same run: through tinyproxy median %s (all %v); direct median %s (all %v)",
		rounds, median(proxied).Round(time.Millisecond), proxied, median(direct).Round(time.Millisecond), direct)
}

// TestProxyServerHostAgentDirect: a server whose environment names a proxy
// (for its S3 calls; install.sh server writes it into the server's env
// file) still runs its own host agent (--with-agent) against itself
// directly, even at a non-loopback advertise address: the proxy here is
// down, and the host's Machine is Running all the same.
func TestProxyServerHostAgentDirect(t *testing.T) {
	t.Parallel()
	n := newNetns(t) // a non-loopback address of this host, which a proxy would apply to
	s := newServer(t, n.hostIP, "", "--with-agent")
	// launch, with the proxy variables only this server gets.
	s.log = &syncBuffer{}
	s.cmd = exec.Command(serverBin, s.args()...)
	s.cmd.Env = append(os.Environ(), "HTTPS_PROXY=http://127.0.0.1:9", "https_proxy=", "NO_PROXY=", "no_proxy=")
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(90 * time.Second); err != nil {
		t.Fatalf("server: %v\n%s", err, s.log.String())
	}
	host, _ := os.Hostname()
	host = strings.ToLower(host)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's log:\n%s", lastLines(s.log.String(), 30))
		}
	})
	waitFor(t, 60*time.Second, "the server's own host to be a Running machine despite a dead proxy in its environment", func() bool {
		phase, _ := s.kubectl("get", "machine", host, "-o", "jsonpath={.status.phase}")
		return phase == "Running"
	})
	if strings.Contains(s.log.String(), "the proxy http://127.0.0.1:9") {
		t.Errorf("the host agent tried the server's proxy:\n%s", lastLines(s.log.String(), 20))
	}
}
