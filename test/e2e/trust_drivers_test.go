package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 27, the machine-pool drivers: what an operator (muster:operators,
// who may write MachinePools) reaches through them. Each test fails on the
// code before the issue: see the comment of each.

// operatorApply applies manifest as the operator holding kubeconfig.
func operatorApply(t *testing.T, kubeconfig, manifest string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return kubectlAs(kubeconfig, "apply", "-f", path)
}

// TestTrustProcessDriverOffByDefault: the process driver runs machines as
// the server's user on its host, so an operator's pool naming it would be
// a shell as root there with the CA key in reach. A server started without
// --enable-process-driver refuses such a pool (422) saying how an admin
// turns it on, and does not list the driver. Before issue 27 the pool was
// stored and its machine ran as root.
func TestTrustProcessDriverOffByDefault(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	operator := userKubeconfig(t, s, "olga", "muster:operators")
	out, err := operatorApply(t, operator, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: shell}
spec: {cluster: edge-east, replicas: 1, template: {driver: process}}
`)
	for _, part := range []string{`The MachinePool "shell" is invalid`, `spec.template.driver`, "not enabled on this server", "--enable-process-driver"} {
		if err == nil || !strings.Contains(out, part) {
			t.Errorf("an operator's process pool on a server without --enable-process-driver: %v\n%s\nwant it refused (422) saying %q", err, out, part)
		}
	}
	if got := s.mustKubectl("get", "machinepools,machines", "-o", "name"); strings.TrimSpace(got) != "" {
		t.Errorf("the refused pool made objects: %s", got)
	}
	if out := s.mustKubectl("get", "--raw", "/drivers"); strings.Contains(out, `"process"`) || !strings.Contains(out, `"ssh"`) {
		t.Errorf("/drivers on a server without --enable-process-driver:\n%s\nwant ssh and no process", out)
	}
	if out, err := s.kubectl("get", "--raw", "/drivers/process"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("/drivers/process on a server without the flag: %v\n%s; want NotFound", err, out)
	}
	if _, err := os.Stat(processMachines(s)); !os.IsNotExist(err) {
		t.Errorf("the process driver's dir exists on a server that does not offer it: %v", err)
	}
}

// TestTrustProcessDriverMachines: with --enable-process-driver, a machine's
// dir is outside the server's data dir, its agent's environment holds
// nothing of the server's (no MUSTER_* variable: no server token, no
// datastore endpoint), and no join token file is left once it is Running.
// Before issue 27 the machines were under <data-dir>/pools, the agent had
// the server's whole environment, and <machine>/join-token stayed.
func TestTrustProcessDriverMachines(t *testing.T) {
	// Not parallel: sets the process environment, which parallel tests would inherit.
	// A secret in the server's environment, as a datastore password in
	// $MUSTER_DATASTORE_ENDPOINT would be; the server inherits the test's.
	t.Setenv("MUSTER_TEST_SECRET", "s3cret-of-the-server")
	s := startServer(t, "", processDriver)
	killPoolAgentsAtEnd(t, s)
	_, machine := operatorProcessMachine(t, s)
	data, _ := filepath.Abs(s.dataDir)
	dir := filepath.Join(processMachines(s), machine)
	if rel, err := filepath.Rel(data, dir); err != nil || !strings.HasPrefix(rel, "..") {
		t.Errorf("the machine's dir %s is inside the server's data dir %s", dir, data)
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "pools")); !os.IsNotExist(err) {
		t.Errorf("<data-dir>/pools exists: %v", err)
	}
	// No join token file anywhere under the machine's dir.
	_ = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(fi.Name(), "token") {
			t.Errorf("a token file is left in the Running machine's dir: %s", path)
		}
		return nil
	})
	pid := agentPID(s, machine)
	if pid == 0 {
		t.Fatalf("machine %s has no agent process", machine)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(environ), "\x00") {
		// The join token is the one variable of its own it is given.
		if strings.HasPrefix(kv, "MUSTER_") && !strings.HasPrefix(kv, "MUSTER_TOKEN=") {
			t.Errorf("the agent's environment has the server's %s", kv)
		}
		if strings.Contains(kv, "s3cret-of-the-server") {
			t.Errorf("the agent's environment has the server's secret: %s", kv)
		}
	}
}

// TestTrustSSHDriverSaysTheSameWhateverTheNetworkSaid: an operator's ssh
// pools aimed at a closed port and at ports that answer but are not SSH
// leave machines whose status messages are the same but for the address,
// so pools are no port scanner. Before issue 27 the message quoted the
// dial error ("connection refused" against "handshake failed: EOF").
func TestTrustSSHDriverSaysTheSameWhateverTheNetworkSaid(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	// Open ports that are not SSH: one hangs up at once, one speaks HTTP.
	listen := func(greeting string) int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(greeting))
				c.Close()
			}
		}()
		return l.Addr().(*net.TCPAddr).Port
	}
	ports := map[string]int{"closed": closedPort, "hangs-up": listen(""), "http": listen("HTTP/1.1 400 Bad Request\r\n\r\n")}

	s := startServer(t, "")
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	operator := userKubeconfig(t, s, "olga", "muster:operators")
	const hostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	for name, port := range ports {
		if out, err := operatorApply(t, operator, fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %s}
spec:
  cluster: edge-east
  replicas: 1
  health: {unhealthyTimeout: 0s}
  template: {driver: ssh, driverConfig: {host: 127.0.0.1, port: "%d", hostKey: "%s"}}
`, name, port, hostKey)); err != nil {
			t.Fatalf("pool %s: %v\n%s", name, err, out)
		}
	}
	messages := map[string]string{}
	for name, port := range ports {
		waitFor(t, 90*time.Second, "pool "+name+"'s machine Failed", func() bool {
			out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool="+name, "-o", `jsonpath={.items[0].status.phase}|{.items[0].status.message}|{.items[0].status.conditions[?(@.type=="Provisioned")].message}`)
			phase, rest, _ := strings.Cut(out, "|")
			if phase != "Failed" {
				return false
			}
			messages[name] = strings.ReplaceAll(rest, "127.0.0.1:"+strconv.Itoa(port), "ADDR")
			return true
		})
	}
	// The pools' messages quote their machines' (with the machine's name,
	// and the attempts while they last): they must not quote the network.
	for name := range ports {
		pool, _ := s.kubectl("get", "machinepool", name, "-o", "jsonpath={.status.message}")
		for _, leak := range []string{"refused", "EOF", "handshake", "reset", "HTTP"} {
			if strings.Contains(pool, leak) {
				t.Errorf("pool %s's message quotes the network (%q): %s", name, leak, pool)
			}
		}
	}
	t.Logf("what the operator reads: %q", messages["closed"])
	for name, msg := range messages {
		want := messages["closed"]
		if msg != want {
			t.Errorf("%s: the operator reads %q, the closed port %q: the message tells what the network said", name, msg, want)
		}
		for _, leak := range []string{"refused", "EOF", "handshake", "reset", "HTTP"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: the message quotes the network (%q): %s", name, leak, msg)
			}
		}
	}
	if !strings.Contains(messages["closed"], "could not reach or log in to ADDR") {
		t.Errorf("the message does not say what failed: %q", messages["closed"])
	}
	// The cause is the admin's to read, in the server's log.
	if log := s.log.String(); !strings.Contains(log, "connection refused") {
		t.Errorf("the server's log does not have the cause:\n%s", lastLines(log, 30))
	}
}

// TestTrustDriverConfigAdmission: a driverConfig the driver itself refuses
// is refused when the pool is written (422 on the key), not stored to fail
// at create. A Machine of a deleted pool whose driver refuses its config
// for good (the pool was stored before its driver checked, or the driver's
// rules changed) does not stay Deleting forever: it goes, with a Warning
// Event saying what may be left. Before issue 27 the ssh pool was stored,
// and the Machine stayed Deleting, its remove retried every 5 s.
func TestTrustDriverConfigAdmission(t *testing.T) {
	t.Parallel()
	drivers := t.TempDir()
	strict := filepath.Join(drivers, "strict-now")
	// A driver that checks its config (validates: true) — from the moment
	// strict-now exists; before that it accepts any, as a driver or
	// server from before the check did. It refuses zone mars at create
	// and at remove, as ssh refused binDir "/tmp/x;id".
	script := fmt.Sprintf(`#!/bin/sh
in=$(cat)
case "$1" in
schema) echo '{"fields":[{"name":"zone","type":"string"}],"validates":true}' ;;
validate) [ -e %s ] || exit 0
  case "$in" in *mars*) echo "zone mars has no hosts" >&2; exit 1 ;; esac ;;
create|remove) case "$in" in *mars*) echo "zone mars has no hosts" >&2; exit 1 ;; esac
  [ "$1" = create ] && echo '{"instance":"i-1"}' ;;
status) echo '{"exists":true}' ;;
esac
`, strict)
	if err := os.WriteFile(filepath.Join(drivers, "muster-driver-strict"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--drivers-dir", drivers)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	operator := userKubeconfig(t, s, "olga", "muster:operators")

	// The ssh driver's own check, at admission.
	out, err := operatorApply(t, operator, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: inject}
spec:
  cluster: edge-east
  replicas: 1
  template:
    driver: ssh
    driverConfig: {host: 127.0.0.1, hostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", binDir: "/tmp/x;id"}
`)
	for _, part := range []string{`The MachinePool "inject" is invalid`, `spec.template.driverConfig[binDir]`, `driver "ssh" refuses it`, "must be an absolute path"} {
		if err == nil || !strings.Contains(out, part) {
			t.Errorf("an ssh pool with binDir \"/tmp/x;id\": %v\n%s\nwant 422 saying %q", err, out, part)
		}
	}

	// A pool stored before its driver checked: its machine fails at create.
	if out, err := operatorApply(t, operator, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: mars}
spec:
  cluster: edge-east
  replicas: 1
  health: {unhealthyTimeout: 0s}
  template: {driver: strict, driverConfig: {zone: mars}}
`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var machine string
	waitFor(t, 60*time.Second, "the mars machine Failed", func() bool {
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=mars", "-o", "jsonpath={.items[0].metadata.name}|{.items[0].status.phase}")
		name, phase, _ := strings.Cut(out, "|")
		machine = name
		return phase == "Failed"
	})
	// The driver checks now; a new pool like it is refused at once.
	if err := os.WriteFile(strict, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = operatorApply(t, operator, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: mars2}
spec: {cluster: edge-east, replicas: 1, template: {driver: strict, driverConfig: {zone: mars}}}
`)
	if err == nil || !strings.Contains(out, "zone mars has no hosts") {
		t.Errorf("a pool the executable's validate refuses: %v\n%s; want 422 with its reason", err, out)
	}
	// Deleting the old pool: its machine goes although remove is refused.
	if out, err := kubectlAs(operator, "delete", "machinepool", "mars", "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "the refused machine and its pool to go", func() bool {
		out, _ := s.kubectl("get", "machinepools,machines", "-o", "name")
		return strings.TrimSpace(out) == ""
	})
	row := waitForEvent(t, s, "the Warning Event of the machine released without its host", func(row string) bool {
		return strings.Contains(row, "DriverRefusedConfig")
	}, "--field-selector", "involvedObject.name="+machine)
	for _, part := range []string{"Warning", "zone mars has no hosts", "the driver never recorded a host"} {
		if !strings.Contains(row, part) {
			t.Errorf("the Event %q does not say %q", row, part)
		}
	}
}

// TestTrustDriverStateIsTheServers: the driver state on a pool's Machine
// (what the host's removal acts on: the ssh driver uninstalls on the host
// it names) and the config it was made with are the pool controller's
// alone. An operator's — or an admin's — patch that changes, adds or
// removes them is refused, and the stored value stays. Before issue 27 an
// operator could aim the uninstall at another host.
func TestTrustDriverStateIsTheServers(t *testing.T) {
	t.Parallel()
	drivers := t.TempDir()
	script := "#!/bin/sh\ncat >/dev/null\ncase \"$1\" in\nschema) echo '{\"fields\":[]}' ;;\ncreate) echo '{\"instance\":\"i-1\"}' ;;\nstatus) echo '{\"exists\":true}' ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(drivers, "muster-driver-cloud"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--drivers-dir", drivers)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	applyPool(t, s, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: cloud}
spec: {cluster: edge-east, replicas: 1, template: {driver: cloud}}
`)
	const jp = `jsonpath={.items[0].metadata.name}|{.items[0].metadata.annotations.muster\.io/driver-state}|{.items[0].metadata.annotations.muster\.io/driver-config}`
	var machine, state, config string
	waitFor(t, 60*time.Second, "the pool machine's driver state", func() bool {
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=cloud", "-o", jp)
		parts := strings.SplitN(out, "|", 3)
		if len(parts) != 3 {
			return false
		}
		machine, state, config = parts[0], parts[1], parts[2]
		return state != ""
	})
	operator := userKubeconfig(t, s, "olga", "muster:operators")
	admin := func(args ...string) (string, error) { return s.kubectl(args...) }
	asOperator := func(args ...string) (string, error) { return kubectlAs(operator, args...) }
	for _, tc := range []struct {
		name, patch string
	}{
		{"state aimed at another host", `{"metadata":{"annotations":{"muster.io/driver-state":"{\"host\":\"10.0.0.9\",\"port\":\"22\"}"}}}`},
		{"state removed", `{"metadata":{"annotations":{"muster.io/driver-state":null}}}`},
		{"config changed", `{"metadata":{"annotations":{"muster.io/driver-config":"{\"host\":\"10.0.0.9\"}"}}}`},
		{"creation time changed", `{"metadata":{"annotations":{"muster.io/pool-created-at":"2001-01-01T00:00:00Z"}}}`},
	} {
		for who, run := range map[string]func(...string) (string, error){"operator": asOperator, "admin": admin} {
			out, err := run("patch", "machine", machine, "--type", "merge", "-p", tc.patch)
			if err == nil || !strings.Contains(out, "is invalid") || !strings.Contains(out, "written by the server's machine-pool controller alone") {
				t.Errorf("%s, by the %s: %v\n%s\nwant 422 saying the annotation is the server's", tc.name, who, err, out)
			}
		}
	}
	// A label is still the operator's to change.
	if out, err := kubectlAs(operator, "label", "machine", machine, "team=edge"); err != nil {
		t.Errorf("an operator's label on a pool machine: %v\n%s", err, out)
	}
	out := s.mustKubectl("get", "machines", "-l", "muster.io/pool=cloud", "-o", jp)
	if want := machine + "|" + state + "|" + config; out != want {
		t.Errorf("the machine's annotations are %q after the refused patches, want %q", out, want)
	}
	// Nor may a client, an admin included, make a Machine that carries them.
	out, err := s.kubectl("apply", "-f", writeFile(t, "forged.yaml", `apiVersion: muster.io/v1alpha1
kind: Machine
metadata:
  name: forged
  labels: {muster.io/pool: gone}
  annotations: {muster.io/driver-state: '{"host":"10.0.0.9"}'}
spec: {cluster: edge-east, driver: ssh}
`))
	if err == nil || !strings.Contains(out, "written by the server's machine-pool controller alone") {
		t.Errorf("an admin's Machine with driver state: %v\n%s; want 422", err, out)
	}
}

// TestTrustProcessDriverAsAnotherUser: with --process-driver-user, the
// process driver's agents run as that unprivileged user, so what an
// operator runs in a machine (kubectl muster exec) cannot read the
// server's CA key. Before issue 27 there was no such flag, and the agents
// ran as the server's user (root here: the command read the key).
func TestTrustProcessDriverAsAnotherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the server as root, as CI does, to start agents as nobody")
	}
	// The agents' user must reach their dirs: a 0755 dir of its own, not
	// under the test's 0700 temp dir.
	machines, err := os.MkdirTemp("", "muster-process-machines-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(machines) })
	if err := os.Chmod(machines, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", processDriver, "--process-driver-dir", machines, "--process-driver-user", "nobody")
	t.Cleanup(func() {
		entries, _ := os.ReadDir(machines)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(machines, e.Name(), "pid"))
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscallKillGroup(pid)
			}
		}
	})
	operator, machine := operatorProcessMachine(t, s)
	caKey := filepath.Join(s.dataDir, "tls", "ca.key")
	out, errOut, code := kubectlMuster(t, operator, "exec", "machine/"+machine, "--", "sh", "-c", "id -u; cat "+caKey)
	t.Logf("an operator's exec of `id -u; cat %s`: exit %d\n%s%s", caKey, code, out, errOut)
	if strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]) != "65534" {
		t.Errorf("the machine's commands run as uid %q, want nobody's 65534", strings.SplitN(out, "\n", 2)[0])
	}
	if code == 0 || strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("an operator's command in a process machine read the server's CA key (exit %d)", code)
	}
}

// syscallKillGroup kills the process group pid leads (an agent the
// process driver started in its own session).
func syscallKillGroup(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }

// operatorProcessMachine has an operator make a one-machine process pool
// on s (which runs with --enable-process-driver) and waits for its
// machine to be Running: the operator's kubeconfig and the machine.
func operatorProcessMachine(t *testing.T, s *server) (operator, machine string) {
	t.Helper()
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	operator = userKubeconfig(t, s, "olga", "muster:operators")
	if out, err := operatorApply(t, operator, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: edge}
spec: {cluster: edge-east, replicas: 1, template: {driver: process}}
`); err != nil {
		t.Fatalf("an operator's process pool on a server with --enable-process-driver: %v\n%s", err, out)
	}
	waitFor(t, 120*time.Second, "the pool's machine Running", func() bool {
		for m, phase := range poolMachines(s, "edge") {
			machine = m
			return phase == "Running"
		}
		return false
	})
	return operator, machine
}
