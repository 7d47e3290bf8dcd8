package driver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needNetns: the network namespace option makes namespaces, veths and a
// bridge, which needs root and ip(8). Under CI (.ci/run runs as root with
// iproute2) a skip would pass for a pass, so there it fails.
func needNetns(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "network namespaces need root"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "no ip(8) to make network namespaces with"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(why + " (under CI this must work: .ci/run runs as root and installs iproute2)")
	}
	t.Skip(why)
}

// TestProcessDriverNetworkNamespaceAllocation (issue 29): each machine
// gets its own namespace and an address no other machine of the driver
// has, also after a server restart (a new driver value on the same dir);
// removing a machine deletes its namespace and veth, and the last one
// the bridge, and frees its address.
func TestProcessDriverNetworkNamespaceAllocation(t *testing.T) {
	needNetns(t)
	// A /29 of its own per run (6 usable: the bridge and 5 machines), so
	// parallel runs on one host seldom meet.
	cidr := fmt.Sprintf("10.214.%d.%d/29", rand.IntN(256), rand.IntN(32)*8)
	config := map[string]string{ConfigNetworkNamespace: "true", ConfigNetworkCIDR: cidr}
	ctx := context.Background()
	dir, agent := t.TempDir(), fakeAgent(t)
	suffix := fmt.Sprintf("%d", rand.IntN(1e6))
	create := func(p Process, name string) State {
		t.Helper()
		st, err := p.Create(ctx, CreateRequest{Name: name, Config: config, Bootstrap: Bootstrap{ServerURL: "https://10.0.0.1:6443", Token: "K10x"}})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { _ = p.Remove(ctx, HostRequest{Name: name, Config: config}) })
		return st
	}
	a, b := "na-"+suffix, "nb-"+suffix
	p := Process{Dir: dir, AgentBinary: agent}
	sa, sb := create(p, a), create(p, b)
	if sa["address"] == "" || sa["address"] == sb["address"] {
		t.Fatalf("two machines' addresses: %q and %q; want two distinct ones", sa["address"], sb["address"])
	}
	// The agent runs in the namespace: it sees the machine's address.
	out, err := exec.Command("ip", "netns", "identify", sa["pid"]).Output()
	if err != nil || strings.TrimSpace(string(out)) != namespaceName(a) {
		t.Fatalf("the agent of %s is in namespace %q (%v); want %s", a, out, err, namespaceName(a))
	}

	// A restarted server (a new driver value) gives a third machine
	// neither address, and a repeated create keeps the address.
	p = Process{Dir: dir, AgentBinary: agent}
	c := "nc-" + suffix
	sc := create(p, c)
	if sc["address"] == sa["address"] || sc["address"] == sb["address"] {
		t.Fatalf("after a restart machine %s got %s, already %s's or %s's (%s, %s)", c, sc["address"], a, b, sa["address"], sb["address"])
	}
	if again := create(p, a); again["address"] != sa["address"] || again["pid"] != sa["pid"] {
		t.Fatalf("a repeated create of %s changed it: %v then %v", a, sa, again)
	}

	bridge := ""
	for _, m := range []string{a, b, c} {
		n, _ := readNetwork(dir + "/" + m)
		bridge = n.Bridge
		if err := p.Remove(ctx, HostRequest{Name: m, Config: config}); err != nil {
			t.Fatal(err)
		}
		if namespaceExists(namespaceName(m)) || linkExists(n.HostLink) {
			t.Errorf("removing %s left its namespace %s or veth %s", m, namespaceName(m), n.HostLink)
		}
	}
	if bridge == "" || linkExists(bridge) {
		t.Errorf("the bridge %q is left after its last machine went", bridge)
	}
}

// TestProcessDriverNetworkNamespaceAsUser: with --process-driver-user the
// agent enters its namespace as root (only root may) and then runs as that
// user, with no supplementary groups.
func TestProcessDriverNetworkNamespaceAsUser(t *testing.T) {
	needNetns(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no setpriv(1) (util-linux) under CI")
		}
		t.Skip("no setpriv(1)")
	}
	// The user must reach the driver's dir and the agent binary.
	dir, bin := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir, bin} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	agent := bin + "/muster-agent"
	if err := os.WriteFile(agent, []byte("#!/bin/sh\nip -o -4 addr show > \"$HOME/addrs\"\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	p := Process{Dir: dir, AgentBinary: agent, User: &Credential{UID: nobody, GID: nobody}}
	config := map[string]string{ConfigNetworkNamespace: "true", ConfigNetworkCIDR: fmt.Sprintf("10.215.%d.0/29", rand.IntN(256))}
	if err := p.Validate(context.Background(), config); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("nu-%d", rand.IntN(1e6))
	st, err := p.Create(context.Background(), CreateRequest{Name: name, Config: config, Bootstrap: Bootstrap{ServerURL: "https://10.0.0.1:6443", Token: "K10x"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(context.Background(), HostRequest{Name: name, Config: config}) })
	// ip, then setpriv, exec the agent in place: wait for it.
	var status []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, err = os.ReadFile("/proc/" + st["pid"] + "/status")
		if err != nil {
			log, _ := os.ReadFile(dir + "/" + name + "/agent.log")
			t.Fatalf("%v; the agent's log: %s", err, log)
		}
		if !strings.Contains(string(status), "Name:\tip\n") && !strings.Contains(string(status), "Name:\tsetpriv\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not start within 10s:\n%s", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	groups := ""
	for _, l := range strings.Split(string(status), "\n") {
		if g, ok := strings.CutPrefix(l, "Groups:"); ok {
			groups = strings.TrimSpace(g)
		}
	}
	if !strings.Contains(string(status), "Uid:\t65534\t65534\t65534\t65534") || !strings.Contains(string(status), "Gid:\t65534\t65534\t65534\t65534") || groups != "" {
		t.Errorf("the agent's credentials are not user 65534's alone:\n%s", status)
	}
	// What the agent sees from inside is its namespace's address. (Root
	// may lack the ptrace right to read another user's /proc/PID/ns here.)
	var addrs []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if addrs, _ = os.ReadFile(dir + "/" + name + "/addrs"); strings.Contains(string(addrs), " "+st["address"]+"/") {
			return
		}
	}
	log, _ := os.ReadFile(dir + "/" + name + "/agent.log")
	t.Errorf("the agent sees the addresses %q; want its namespace's %s (its log: %s)", addrs, st["address"], log)
}

// TestProcessDriverNetworkNamespaceGatewayStays: a machine of the range
// going does not cut the others off from the host. The bridge has a
// hardware address of its own; one that took its ports' lowest address
// changed it when that port's machine went, the other machines' ARP
// caches kept the old one for tens of seconds, and an agent's tunnel to
// the server timed out (its machine taken for dead) when a pool replaced
// another machine. The machine removed is the one whose veth's address
// the bridge would have taken, so that this fails on such a bridge.
func TestProcessDriverNetworkNamespaceGatewayStays(t *testing.T) {
	needNetns(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("no bash to connect from a namespace with (/dev/tcp)")
	}
	cidr := netip.MustParsePrefix(fmt.Sprintf("10.216.%d.%d/29", rand.IntN(256), rand.IntN(32)*8))
	config := map[string]string{ConfigNetworkNamespace: "true", ConfigNetworkCIDR: cidr.String()}
	ctx := context.Background()
	p := Process{Dir: t.TempDir(), AgentBinary: fakeAgent(t)}
	suffix := fmt.Sprintf("%d", rand.IntN(1e6))
	names := []string{"ga-" + suffix, "gb-" + suffix, "gc-" + suffix}
	for _, name := range names {
		if _, err := p.Create(ctx, CreateRequest{Name: name, Config: config, Bootstrap: Bootstrap{ServerURL: "https://10.0.0.1:6443", Token: "K10x"}}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { _ = p.Remove(ctx, HostRequest{Name: name, Config: config}) })
	}
	n, _ := readNetwork(filepath.Join(p.Dir, names[0]))
	mac := func(link string) string {
		i, err := net.InterfaceByName(link)
		if err != nil {
			t.Fatalf("link %s: %v", link, err)
		}
		return i.HardwareAddr.String()
	}
	before := mac(n.Bridge)

	// The host listens on the gateway, as a server on the host is reached
	// through it; each machine connects once, which fills its ARP cache.
	l, err := net.Listen("tcp", net.JoinHostPort(n.Gateway, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	connect := func(name string) error {
		out, err := exec.Command("ip", "netns", "exec", namespaceName(name), "timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/"+n.Gateway+"/"+fmt.Sprint(l.Addr().(*net.TCPAddr).Port)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	gone := names[0]
	for _, name := range names {
		if err := connect(name); err != nil {
			t.Fatalf("machine %s cannot reach the host at %s: %v", name, n.Gateway, err)
		}
		if m, _ := readNetwork(filepath.Join(p.Dir, name)); mac(m.HostLink) == before {
			gone = name
		}
	}
	if err := p.Remove(ctx, HostRequest{Name: gone, Config: config}); err != nil {
		t.Fatal(err)
	}
	if after := mac(n.Bridge); after != before {
		t.Errorf("removing machine %s changed the bridge's address from %s to %s", gone, before, after)
	}
	for _, name := range names {
		if name == gone {
			continue
		}
		if err := connect(name); err != nil {
			t.Errorf("after machine %s went, machine %s cannot reach the host at %s within 3 s: %v", gone, name, n.Gateway, err)
		}
	}
}
