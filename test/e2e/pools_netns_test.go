package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMachinePoolNetworkNamespaces (issue 29): with networkNamespace the
// process driver runs each machine in a network namespace of its own with
// its own address from the pool's range, so two machines on one host both
// listen on 2379 (as two etcd members must) and the host reaches each at
// its own address; deleting the pool removes the namespaces, their veths,
// the bridge and what ran in them.
func TestMachinePoolNetworkNamespaces(t *testing.T) {
	t.Parallel()
	// A namespace's machines reach the server at its advertise address
	// through their default route, so the server needs a non-loopback
	// address of this host: the host side of a test namespace is one.
	// (That namespace serves for nothing else.)
	host := newNetns(t)
	// The real interpreter, not a pyenv shim: plans run with the agent's
	// own HOME, where no pyenv is.
	py, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		cannotRun(t, "no python3 here to listen on 2379 with: %v", err)
	}
	python := strings.TrimSpace(string(py))

	s := newServer(t, host.hostIP, "", processDriver)
	s.start()
	killPoolAgentsAtEnd(t, s)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	// A /24 of its own per run, so that parallel runs seldom share one.
	cidr := netip.MustParsePrefix(fmt.Sprintf("10.212.%d.0/24", rand.IntN(256)))
	start := time.Now()
	applyPool(t, s, fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: etcd}
spec:
  cluster: edge-east
  replicas: 2
  template:
    driver: process
    driverConfig: {networkNamespace: "true", networkCIDR: %q}
`, cidr))
	waitFor(t, 120*time.Second, "2 namespaced pool machines Running", func() bool {
		ms := poolMachines(s, "etcd")
		return len(ms) == 2 && countPhase(ms, "Running") == 2
	})
	t.Logf("pool of 2 (process driver, a network namespace each) created to both Running: %v", time.Since(start).Round(time.Millisecond))

	// Each machine reports one address of its own, in the pool's range.
	addrs := map[string]string{}
	for m := range poolMachines(s, "etcd") {
		out := strings.Fields(s.mustKubectl("get", "machine", m, "-o", `jsonpath={range .status.addresses[?(@.type=="InternalIP")]}{.address} {end}`))
		if len(out) != 1 {
			t.Fatalf("machine %s reports internal addresses %v; want its namespace's one", m, out)
		}
		a, err := netip.ParseAddr(out[0])
		if err != nil || !cidr.Contains(a) || a == cidr.Addr().Next() {
			t.Fatalf("machine %s reports %s; want a machine's address in %s", m, out[0], cidr)
		}
		addrs[m] = out[0]
	}
	distinct := map[string]bool{}
	for _, a := range addrs {
		distinct[a] = true
	}
	if len(distinct) != 2 {
		t.Fatalf("the machines' addresses %v are not two distinct ones", addrs)
	}
	netnsList, _ := exec.Command("ip", "netns", "list").Output()
	for m := range addrs {
		if !strings.Contains(string(netnsList), "muster-"+m) {
			t.Errorf("no network namespace muster-%s in ip netns list:\n%s", m, netnsList)
		}
	}

	// A plan on each machine listens on port 2379 of its own address and
	// serves its name, left running in its own session as a member would be.
	for m, a := range addrs {
		applyPlan(t, s, m, fmt.Sprintf(`  instructions:
  - name: listen
    command: /bin/sh
    args: ["-c", "d=$(mktemp -d) && echo %[1]s > $d/who && setsid %[3]s -m http.server 2379 --bind %[2]s --directory $d >/dev/null 2>&1 </dev/null &"]
  probes:
  - name: member
    periodSeconds: 1
    httpGet: {url: "http://%[2]s:2379/who"}
`, m, a, python))
	}
	client := &http.Client{Timeout: 3 * time.Second}
	who := func(a string) string {
		resp, err := client.Get("http://" + a + ":2379/who")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	for m, a := range addrs {
		waitFor(t, 60*time.Second, "machine "+m+" to answer on "+a+":2379 from the host", func() bool { return who(a) == m })
		waitFor(t, 30*time.Second, "machine "+m+"'s plan and probe to pass", func() bool {
			out, _ := s.kubectl("get", "machineplan", m, "-o", "jsonpath={.status.state} {.status.probes[0].healthy}")
			return out == "succeeded true"
		})
	}

	// What the driver made for each machine, to check it all goes.
	type made struct{ Namespace, HostLink, Bridge string }
	var links []made
	for m := range addrs {
		var n made
		b, err := os.ReadFile(filepath.Join(processMachines(s), m, "network.json"))
		if err != nil || json.Unmarshal(b, &n) != nil || n.HostLink == "" {
			t.Fatalf("machine %s's network.json: %v %s", m, err, b)
		}
		links = append(links, n)
	}
	s.mustKubectl("delete", "machinepool", "etcd", "--wait=true", "--timeout=90s")
	waitFor(t, 30*time.Second, "every pool agent to exit", func() bool { return len(poolAgents(s)) == 0 })
	netnsList, _ = exec.Command("ip", "netns", "list").Output()
	linkList, _ := exec.Command("ip", "-o", "link").Output()
	for _, n := range links {
		if strings.Contains(string(netnsList), n.Namespace) {
			t.Errorf("namespace %s is left after deleting the pool:\n%s", n.Namespace, netnsList)
		}
		for _, l := range []string{n.HostLink, n.Bridge} {
			if strings.Contains(string(linkList), " "+l+":") || strings.Contains(string(linkList), " "+l+"@") {
				t.Errorf("link %s is left after deleting the pool:\n%s", l, linkList)
			}
		}
	}
	for m, a := range addrs {
		if got := who(a); got != "" {
			t.Errorf("machine %s's listener still answers at %s after its machine went: %q", m, a, got)
		}
	}
}

// TestMachinePoolNetworkNamespaceRefused (issue 29): a range the process
// driver cannot give addresses from is refused when the pool is written,
// naming the field and the fix, and nothing is stored.
func TestMachinePoolNetworkNamespaceRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", processDriver)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	for _, tc := range []struct{ name, config, want string }{
		{"bad-cidr", `{networkNamespace: "true", networkCIDR: "10.212.0.0/33"}`, `networkCIDR "10.212.0.0/33" is not an IPv4 CIDR such as 10.212.0.0/16`},
		{"ipv6-cidr", `{networkNamespace: "true", networkCIDR: "fd00::/64"}`, `networkCIDR "fd00::/64" is not an IPv4 CIDR`},
		{"tiny-cidr", `{networkNamespace: "true", networkCIDR: "10.212.0.0/30"}`, `has a /30 prefix; give one from /8 to /29`},
		{"cidr-alone", `{networkCIDR: "10.212.0.0/16"}`, `networkCIDR is used only with networkNamespace: "true"`},
		{"not-a-bool", `{networkNamespace: "yes"}`, `spec.template.driverConfig[networkNamespace]: Invalid value: "yes": "yes" is not true or false`},
	} {
		path := writeFile(t, tc.name+".yaml", fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %s}
spec:
  cluster: edge-east
  replicas: 1
  template: {driver: process, driverConfig: %s}
`, tc.name, tc.config))
		out, err := s.kubectl("apply", "-f", path)
		if err == nil || !strings.Contains(out, `The MachinePool "`+tc.name+`" is invalid`) || !strings.Contains(out, tc.want) {
			t.Errorf("%s: kubectl apply: %v\n%s; want 422 Invalid saying %q", tc.name, err, out, tc.want)
		}
	}
	if out := s.mustKubectl("get", "machinepools", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("refused pools were stored: %s", out)
	}
}
