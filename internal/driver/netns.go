package driver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/muster-io/muster/internal/atomicfile"
)

// The process driver's network namespace option: each machine's agent runs
// in a network namespace of its own, with an address of its own from a
// CIDR, so that machines on one host can each listen on the same port (two
// etcd members on 2379). The namespaces of one CIDR hang off one bridge on
// the host, whose address is the CIDR's first: the machines reach each
// other over it without the host forwarding packets, and reach the server
// through it (their default route), at the server's advertise address,
// which must therefore be one of the host's own non-loopback addresses.
const (
	// ConfigNetworkNamespace turns the option on ("true").
	ConfigNetworkNamespace = "networkNamespace"
	// ConfigNetworkCIDR is the IPv4 range the machines' addresses come from.
	ConfigNetworkCIDR = "networkCIDR"
	// DefaultNetworkCIDR is the range when a pool names none.
	DefaultNetworkCIDR = "10.212.0.0/16"
	// networkFile, in a machine's dir, records its namespace and address:
	// the allocation outlives a server restart, and goes with the dir
	// when the machine is removed.
	networkFile = "network.json"
	// networkLock, in the driver's Dir, serialises allocations (flock).
	networkLock = ".network.lock"
)

// machineNetwork is one machine's namespace, as network.json keeps it.
type machineNetwork struct {
	Namespace string `json:"namespace"` // ip netns name
	HostLink  string `json:"hostLink"`  // the host side of its veth pair
	Bridge    string `json:"bridge"`    // the bridge that side is on
	CIDR      string `json:"cidr"`
	Gateway   string `json:"gateway"` // the bridge's address: the default route
	Address   string `json:"address"` // the machine's own address
}

// networkConfig reads the option from a pool's config: nil when off.
func networkConfig(config map[string]string) (*netip.Prefix, error) {
	on := false
	if v, ok := config[ConfigNetworkNamespace]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, &ConfigError{Key: ConfigNetworkNamespace, Value: v, Reason: fmt.Sprintf("%s %q is not true or false", ConfigNetworkNamespace, v)}
		}
		on = b
	}
	cidr, set := config[ConfigNetworkCIDR]
	if !on {
		if set {
			return nil, &ConfigError{Key: ConfigNetworkCIDR, Value: cidr, Reason: fmt.Sprintf("%s is used only with %s: \"true\"; set that too, or drop %s", ConfigNetworkCIDR, ConfigNetworkNamespace, ConfigNetworkCIDR)}
		}
		return nil, nil
	}
	if !set {
		cidr = DefaultNetworkCIDR
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return nil, &ConfigError{Key: ConfigNetworkCIDR, Value: cidr, Reason: fmt.Sprintf("%s %q is not an IPv4 CIDR such as %s", ConfigNetworkCIDR, cidr, DefaultNetworkCIDR)}
	}
	if p.Bits() > 29 || p.Bits() < 8 {
		return nil, &ConfigError{Key: ConfigNetworkCIDR, Value: cidr, Reason: fmt.Sprintf("%s %q has a /%d prefix; give one from /8 to /29 (its first address is the host's, the others the machines')", ConfigNetworkCIDR, cidr, p.Bits())}
	}
	if p.Masked() != p {
		return nil, &ConfigError{Key: ConfigNetworkCIDR, Value: cidr, Reason: fmt.Sprintf("%s %q has host bits set; did you mean %s?", ConfigNetworkCIDR, cidr, p.Masked())}
	}
	if p.Addr().IsLoopback() || p.Addr().IsMulticast() || p.Addr().IsUnspecified() {
		return nil, &ConfigError{Key: ConfigNetworkCIDR, Value: cidr, Reason: fmt.Sprintf("%s %q is not a unicast range; use a private one such as %s", ConfigNetworkCIDR, cidr, DefaultNetworkCIDR)}
	}
	return &p, nil
}

// Validate refuses a config the driver cannot honour: a bad option, or
// namespaces on a server that cannot make them (not root, no ip(8)).
func (p Process) Validate(_ context.Context, config map[string]string) error {
	cidr, err := networkConfig(config)
	if err != nil || cidr == nil {
		return err
	}
	if os.Geteuid() != 0 {
		return &ConfigError{Key: ConfigNetworkNamespace, Value: "true", Reason: fmt.Sprintf("%s needs the server to run as root (it makes network namespaces, veths and a bridge), and this server runs as uid %d: drop the option, or run muster-server as root", ConfigNetworkNamespace, os.Geteuid())}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return &ConfigError{Key: ConfigNetworkNamespace, Value: "true", Reason: fmt.Sprintf("%s needs ip(8) on the server's PATH, and there is none: install iproute2, or drop the option", ConfigNetworkNamespace)}
	}
	if p.User != nil {
		if _, err := exec.LookPath("setpriv"); err != nil {
			return &ConfigError{Key: ConfigNetworkNamespace, Value: "true", Reason: fmt.Sprintf("%s with --process-driver-user needs setpriv(1) (util-linux) to drop to that user inside the namespace, and there is none: install util-linux, or drop the option", ConfigNetworkNamespace)}
		}
	}
	return nil
}

// shortHash names links, whose names the kernel bounds to 15 bytes.
func shortHash(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

// namespaceName is the machine's namespace: named after it, bounded (a
// long name keeps its head and a hash of the whole).
func namespaceName(machine string) string {
	const max = 48
	if len(machine) <= max {
		return "muster-" + machine
	}
	return "muster-" + machine[:max-9] + "-" + shortHash(machine)[:8]
}

// bridgeName is the bridge of a CIDR: one per range on the host.
func bridgeName(cidr netip.Prefix) string { return "mbr" + shortHash(cidr.String())[:12] }

// bridgeMAC is the bridge's own hardware address, set when it is made: a
// bridge without one set takes the lowest of its ports' addresses, and so
// changes address when a machine's veth comes or goes. The machines keep
// the old address for their gateway in their ARP caches until it goes
// stale (tens of seconds), and in that time nothing they send leaves the
// bridge: an agent's tunnel to the server timed out, and its machine was
// taken for dead, when the pool removed another machine of the range.
// Locally administered and unicast (02:...), fixed by the range.
func bridgeMAC(cidr netip.Prefix) string {
	h := shortHash("mac", cidr.String())
	return "02:" + h[0:2] + ":" + h[2:4] + ":" + h[4:6] + ":" + h[6:8] + ":" + h[8:10]
}

// lockNetwork takes the driver's allocation lock, across goroutines and
// processes (a restarted server while the old one still exits).
func (p Process) lockNetwork() (func(), error) {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(p.Dir, networkLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// allocations reads every machine's network.json under Dir, by machine.
func (p Process) allocations() map[string]machineNetwork {
	out := map[string]machineNetwork{}
	entries, _ := os.ReadDir(p.Dir)
	for _, e := range entries {
		if n, ok := readNetwork(filepath.Join(p.Dir, e.Name())); ok {
			out[e.Name()] = n
		}
	}
	return out
}

func readNetwork(dir string) (machineNetwork, bool) {
	var n machineNetwork
	b, err := os.ReadFile(filepath.Join(dir, networkFile))
	if err != nil || json.Unmarshal(b, &n) != nil || n.Namespace == "" {
		return machineNetwork{}, false
	}
	return n, true
}

// hostAddrs are the host's own addresses with their interfaces.
func hostAddrs() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	ifaces, _ := net.Interfaces()
	for _, i := range ifaces {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
					out[ip.Unmap()] = i.Name
				}
			}
		}
	}
	return out
}

// allocate gives machine an address in cidr no machine of this driver has
// (allocations persist in the machines' dirs, so a restarted server does
// not give one twice) and the host does not have. Called under the lock.
func (p Process) allocate(machine string, cidr netip.Prefix) (machineNetwork, error) {
	taken := map[netip.Addr]bool{}
	for _, n := range p.allocations() {
		if a, err := netip.ParseAddr(n.Address); err == nil {
			taken[a] = true
		}
	}
	bridge := bridgeName(cidr)
	host := hostAddrs()
	for a, iface := range host {
		if cidr.Contains(a) && iface != bridge {
			return machineNetwork{}, fmt.Errorf("the host's interface %s already has %s, in %s %s: choose a range this host does not use", iface, a, ConfigNetworkCIDR, cidr)
		}
	}
	gw := cidr.Addr().Next()
	base := binary.BigEndian.Uint32(cidr.Addr().AsSlice())
	size := uint32(1) << (32 - cidr.Bits())
	// From the third address (network, gateway) to the one before broadcast.
	for i := uint32(2); i < size-1; i++ {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], base+i)
		a := netip.AddrFrom4(b)
		if taken[a] || host[a] != "" {
			continue
		}
		return machineNetwork{
			Namespace: namespaceName(machine),
			HostLink:  "mvh" + shortHash(p.Dir, machine)[:12],
			Bridge:    bridge, CIDR: cidr.String(), Gateway: gw.String(), Address: a.String(),
		}, nil
	}
	return machineNetwork{}, fmt.Errorf("%s %s has no free address left for machine %s: give the pool a larger range", ConfigNetworkCIDR, cidr, machine)
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func linkExists(name string) bool { _, err := net.InterfaceByName(name); return err == nil }

func namespaceExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

// ensureNetwork gives the machine of dir its namespace, allocating an
// address the first time and re-making what is missing after (a host
// reboot loses namespaces; the allocation stays).
func (p Process) ensureNetwork(machine, dir string, cidr netip.Prefix) (machineNetwork, error) {
	unlock, err := p.lockNetwork()
	if err != nil {
		return machineNetwork{}, fmt.Errorf("locking the process driver's address allocations: %w", err)
	}
	defer unlock()
	n, ok := readNetwork(dir)
	if ok && n.CIDR != cidr.String() {
		return machineNetwork{}, fmt.Errorf("machine %s has an address in %s, and its pool now says %s %s: a machine keeps its range; replace the machine to move it", machine, n.CIDR, ConfigNetworkCIDR, cidr)
	}
	if !ok {
		if n, err = p.allocate(machine, cidr); err != nil {
			return machineNetwork{}, err
		}
		if namespaceExists(n.Namespace) {
			return machineNetwork{}, fmt.Errorf("a network namespace %s already exists on this host and is not this driver's machine %s: delete it (ip netns del %s) if nothing uses it, or rename the pool", n.Namespace, machine, n.Namespace)
		}
		// Record the allocation before making anything, so that a crash
		// half way leaves something Remove finds and undoes.
		b, _ := json.Marshal(n)
		if err := atomicfile.Write(filepath.Join(dir, networkFile), b, 0o600); err != nil {
			return machineNetwork{}, err
		}
	}
	if !linkExists(n.Bridge) {
		if err := ipCmd("link", "add", n.Bridge, "address", bridgeMAC(cidr), "type", "bridge"); err != nil && !linkExists(n.Bridge) {
			return machineNetwork{}, err
		}
		for _, args := range [][]string{
			{"addr", "replace", n.Gateway + "/" + strconv.Itoa(cidr.Bits()), "dev", n.Bridge},
			{"link", "set", n.Bridge, "up"},
		} {
			if err := ipCmd(args...); err != nil {
				return machineNetwork{}, err
			}
		}
	}
	if namespaceExists(n.Namespace) && linkExists(n.HostLink) {
		return n, nil
	}
	// Start over: whatever half of it a crash left goes first.
	_ = ipCmd("netns", "del", n.Namespace)
	_ = ipCmd("link", "del", n.HostLink)
	for _, args := range [][]string{
		{"netns", "add", n.Namespace},
		{"link", "add", n.HostLink, "type", "veth", "peer", "name", "eth0", "netns", n.Namespace},
		{"link", "set", n.HostLink, "master", n.Bridge},
		{"link", "set", n.HostLink, "up"},
		{"-n", n.Namespace, "addr", "add", n.Address + "/" + strconv.Itoa(cidr.Bits()), "dev", "eth0"},
		{"-n", n.Namespace, "link", "set", "eth0", "up"},
		{"-n", n.Namespace, "link", "set", "lo", "up"},
		{"-n", n.Namespace, "route", "add", "default", "via", n.Gateway},
	} {
		if err := ipCmd(args...); err != nil {
			return machineNetwork{}, fmt.Errorf("making machine %s's network namespace: %w", machine, err)
		}
	}
	return n, nil
}

// removeNetwork deletes the machine's namespace and veth, and the bridge
// of its range when no other machine of the driver is on it. Its
// allocation goes with the machine's dir, after.
func (p Process) removeNetwork(dir string) error {
	n, ok := readNetwork(dir)
	if !ok {
		return nil
	}
	unlock, err := p.lockNetwork()
	if err != nil {
		return fmt.Errorf("locking the process driver's address allocations: %w", err)
	}
	defer unlock()
	if namespaceExists(n.Namespace) {
		// What the machine's plans started and left running (a listener
		// put in its own session) is the machine's too: it goes with it,
		// and would otherwise keep the namespace and its address alive.
		if out, err := exec.Command("ip", "netns", "pids", n.Namespace).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := ipCmd("netns", "del", n.Namespace); err != nil {
			return err
		}
	}
	// Deleting the namespace deletes its end of the pair, and so the pair;
	// a host end left by a half-made namespace goes here.
	if linkExists(n.HostLink) {
		if err := ipCmd("link", "del", n.HostLink); err != nil && linkExists(n.HostLink) {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, networkFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, other := range p.allocations() {
		if other.Bridge == n.Bridge {
			return nil
		}
	}
	if linkExists(n.Bridge) {
		return ipCmd("link", "del", n.Bridge)
	}
	return nil
}

// checkReachable refuses a server URL a namespace cannot reach: a
// loopback address is the host's own, not the namespace's.
func checkReachable(serverURL string) error {
	u, err := url.Parse(serverURL)
	if err != nil {
		return fmt.Errorf("the server URL %q does not parse: %w", serverURL, err)
	}
	h := u.Hostname()
	if a, err := netip.ParseAddr(h); (err == nil && a.IsLoopback()) || h == "localhost" {
		return fmt.Errorf("the server advertises %s, a loopback address, which a machine in its own network namespace cannot reach: restart muster-server with --advertise-address (and --bind-address) set to a non-loopback address of this host, or drop %s", h, ConfigNetworkNamespace)
	}
	return nil
}
