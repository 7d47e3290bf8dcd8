package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// processDriver is the server flag that offers the process driver: a
// server without it refuses pools naming it (issue 27).
const processDriver = "--enable-process-driver"

// processMachines is where s's process driver keeps its machines: beside
// its data dir, never in it (the default of --process-driver-dir).
func processMachines(s *server) string { return filepath.Clean(s.dataDir) + "-process-machines" }

// agentPID is the process-driver agent of machine m, 0 if none runs.
func agentPID(s *server, m string) int {
	b, err := os.ReadFile(filepath.Join(processMachines(s), m, "pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if strings.Contains(string(stat), ") Z ") {
		return 0
	}
	return pid
}

// samePoolHosts checks that the pool's Machines, the agent processes and
// the driver's directories are the same set: no duplicate, no leak.
func samePoolHosts(t *testing.T, s *server, pool string) {
	t.Helper()
	ms := poolMachines(s, pool)
	procs := poolAgents(s)
	entries, _ := os.ReadDir(processMachines(s))
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	if len(procs) != len(ms) || len(dirs) != len(ms) {
		t.Errorf("pool %s: %d Machines %v, %d agent processes %v, %d directories %v", pool, len(ms), ms, len(procs), procs, len(dirs), dirs)
	}
	for m := range ms {
		if _, ok := procs[m]; !ok {
			t.Errorf("machine %s has no agent process", m)
		}
	}
}

// TestMachinePoolProcessDriver (issue 15): a pool of 5 real agent
// processes made by the server itself scales to 8, then to 3 — the delete
// policy's machines go, with their processes and data dirs — and leaves
// nothing behind when deleted. On SQLite and on PostgreSQL.
func TestMachinePoolProcessDriver(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint, processDriver)
		killPoolAgentsAtEnd(t, s)
		s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
		pool := func(replicas int) string {
			return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata:
  name: edge
spec:
  cluster: edge-east
  replicas: %d
  deletePolicy: Oldest
  template:
    driver: process
    roles: [worker]
    labels:
      role: worker
`, replicas)
		}
		running := func(n int) func() bool {
			return func() bool {
				ms := poolMachines(s, "edge")
				return len(ms) == n && countPhase(ms, "Running") == n
			}
		}
		start := time.Now()
		applyPool(t, s, pool(5))
		waitFor(t, 180*time.Second, "5 pool machines Running", running(5))
		t.Logf("pool of 5 (process driver) created to all Running: %v", time.Since(start).Round(time.Millisecond))
		if out := s.mustKubectl("get", "machines", "-l", "role=worker", "-o", "name"); strings.Count(out, "machine.muster.io/") != 5 {
			t.Errorf("the template's labels are not on the pool's machines:\n%s", out)
		}
		if out := s.mustKubectl("get", "machines", "-l", "muster.io/pool=edge", "-o", "jsonpath={range .items[*]}{.spec.roles}{\"\\n\"}{end}"); strings.Count(out, `["worker"]`) != 5 {
			t.Errorf("the template's roles are not the pool's machines' spec.roles:\n%s", out)
		}
		waitFor(t, 30*time.Second, "the pool's status to count 5 ready and up to date", func() bool {
			out, _ := s.kubectl("get", "machinepool", "edge", "-o", "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.updatedReplicas}")
			return out == "5/5/5"
		})
		if table := s.mustKubectl("get", "machinepools"); !strings.Contains(table, "UP-TO-DATE") || !strings.Contains(table, "REVISION") {
			t.Errorf("kubectl get machinepools lacks the desired/current/ready/up-to-date/revision columns:\n%s", table)
		}
		first := poolMachines(s, "edge")

		applyPool(t, s, pool(8))
		waitFor(t, 180*time.Second, "8 pool machines Running", running(8))
		samePoolHosts(t, s, "edge")
		var added []string
		for m := range poolMachines(s, "edge") {
			if _, old := first[m]; !old {
				added = append(added, m)
			}
		}

		// Down to 3 with deletePolicy Oldest: the 5 first machines go, the
		// 3 added last stay, their agents untouched.
		pids := poolAgents(s)
		applyPool(t, s, pool(3))
		waitFor(t, 120*time.Second, "the pool to scale down to 3", func() bool {
			return len(poolMachines(s, "edge")) == 3 && len(poolAgents(s)) == 3
		})
		kept := poolMachines(s, "edge")
		for _, m := range added {
			if _, ok := kept[m]; !ok {
				t.Errorf("scale-down with deletePolicy Oldest removed %s, one of the 3 newest; kept %v", m, kept)
			} else if now := poolAgents(s)[m]; now != pids[m] {
				t.Errorf("the agent of kept machine %s changed (pid %d -> %d)", m, pids[m], now)
			}
		}
		waitFor(t, 30*time.Second, "the removed machines' directories to go", func() bool {
			entries, _ := os.ReadDir(processMachines(s))
			return len(entries) == 3
		})
		samePoolHosts(t, s, "edge")
		for m := range first {
			if out, err := s.kubectl("get", "nodepassword", m); err == nil {
				t.Errorf("a removed machine's NodePassword is left: %s", out)
			}
		}

		// Delete the pool: every machine, process and directory goes, and
		// no join token of the pool's is left.
		s.mustKubectl("delete", "machinepool", "edge", "--wait=true", "--timeout=90s")
		if ms := poolMachines(s, "edge"); len(ms) != 0 {
			t.Errorf("machines left after deleting the pool: %v", ms)
		}
		waitFor(t, 30*time.Second, "every pool agent to exit", func() bool { return len(poolAgents(s)) == 0 })
		if entries, _ := os.ReadDir(processMachines(s)); len(entries) != 0 {
			t.Errorf("pool directories left: %v", entries)
		}
		if out := s.mustKubectl("get", "clusterregistrationtokens", "-o", "jsonpath={.items[*].spec.description}"); strings.Contains(out, "pool edge") {
			t.Errorf("the pool's join tokens are left: %s", out)
		}
		if out := s.mustKubectl("get", "nodepasswords", "-o", "name"); strings.TrimSpace(out) != "" {
			t.Errorf("NodePasswords left: %s", out)
		}
	})
}

// TestMachinePoolServerKilled (issue 15): kill -9 the server in the middle
// of a scale-up and again in the middle of a rolling replacement; after each
// restart the pool converges with no duplicate Machine and no leaked
// process or directory.
func TestMachinePoolServerKilled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testMachinePoolServerKilled)
}

func testMachinePoolServerKilled(t *testing.T, endpoint string) {
	s := startServer(t, endpoint, processDriver)
	killPoolAgentsAtEnd(t, s)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	pool := func(replicas int, role string) string {
		return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: crash}
spec:
  cluster: edge-east
  replicas: %d
  strategy: {maxSurge: 1, maxUnavailable: 0}
  # An agent whose registration was granted as the server died retries
  # with its single-use token, is refused and gives up: its machine is
  # replaced once it has not checked in within startupTimeout.
  health: {startupTimeout: 20s}
  template:
    driver: process
    labels: {role: %s}
`, replicas, role)
	}
	converged := func(n int, role string) func() bool {
		return func() bool {
			ms := poolMachines(s, "crash")
			out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=crash,role="+role, "-o", "name")
			return len(ms) == n && countPhase(ms, "Running") == n && strings.Count(out, "machine.muster.io/") == n && len(poolAgents(s)) == n
		}
	}
	applyPool(t, s, pool(1, "blue"))
	waitFor(t, 90*time.Second, "1 pool machine Running", converged(1, "blue"))

	applyPool(t, s, pool(5, "blue"))
	waitFor(t, 60*time.Second, "the scale-up to be under way", func() bool { return len(poolMachines(s, "crash")) >= 3 })
	s.kill9()
	s.start()
	start := time.Now()
	waitFor(t, 180*time.Second, "5 pool machines Running after the restart", converged(5, "blue"))
	t.Logf("scale-up converged %v after the restart", time.Since(start).Round(time.Millisecond))
	samePoolHosts(t, s, "crash")

	applyPool(t, s, pool(5, "green"))
	waitFor(t, 60*time.Second, "the rollout to be under way", func() bool {
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=crash,role=green", "-o", "name")
		return strings.Contains(out, "machine.muster.io/")
	})
	s.kill9()
	s.start()
	start = time.Now()
	waitFor(t, 300*time.Second, "5 green pool machines Running after the restart", converged(5, "green"))
	t.Logf("rolling replacement converged %v after the restart", time.Since(start).Round(time.Millisecond))
	samePoolHosts(t, s, "crash")
}

// TestMachinePoolRollAndRemediate: a template change rolls with maxSurge 1
// and maxUnavailable 0 without ever dropping below replicas Running; a
// killed agent's machine is replaced after unhealthyTimeout; with every
// machine down and maxUnhealthy 1, nothing is replaced and the pool says why.
func TestMachinePoolRollAndRemediate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testMachinePoolRollAndRemediate)
}

func testMachinePoolRollAndRemediate(t *testing.T, endpoint string) {
	s := startServer(t, endpoint, processDriver, "--agent-silence-threshold", "6s")
	killPoolAgentsAtEnd(t, s)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	apply := func(role string, maxUnhealthy int) {
		pool := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata:
  name: roll
spec:
  cluster: edge-east
  replicas: 3
  strategy: {maxSurge: 1, maxUnavailable: 0}
  health: {unhealthyTimeout: 4s, maxUnhealthy: %d}
  template:
    driver: process
    labels: {role: %s}
`, maxUnhealthy, role)
		path := filepath.Join(t.TempDir(), "pool.yaml")
		if err := os.WriteFile(path, []byte(pool), 0o644); err != nil {
			t.Fatal(err)
		}
		s.mustKubectl("apply", "-f", path)
	}
	apply("blue", 1)
	waitFor(t, 120*time.Second, "3 pool machines Running", func() bool {
		ms := poolMachines(s, "roll")
		return len(ms) == 3 && countPhase(ms, "Running") == 3
	})
	first := poolMachines(s, "roll")

	// Roll to a new template while sampling: never fewer than 3 Running.
	apply("green", 1)
	minRunning := 3
	start := time.Now()
	waitFor(t, 180*time.Second, "every machine replaced by a green one, all Running", func() bool {
		ms := poolMachines(s, "roll")
		if r := countPhase(ms, "Running"); r < minRunning {
			minRunning = r
		}
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=roll,role=green", "-o", "name")
		for m := range first {
			if _, still := ms[m]; still {
				return false
			}
		}
		return strings.Count(out, "machine.muster.io/") == 3 && countPhase(ms, "Running") == 3 && len(ms) == 3
	})
	t.Logf("rolling replacement of 3 (maxSurge 1, maxUnavailable 0): %v", time.Since(start).Round(time.Millisecond))
	if minRunning < 3 {
		t.Errorf("the rollout dropped to %d Running machines, below replicas 3 with maxUnavailable 0", minRunning)
	}

	// kill -9 one agent: Unavailable, then replaced after unhealthyTimeout.
	ms := poolMachines(s, "roll")
	var victim string
	for m := range ms {
		victim = m
		break
	}
	if err := syscall.Kill(agentPID(s, victim), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitFor(t, 90*time.Second, "the killed machine to be replaced and 3 Running again", func() bool {
		now := poolMachines(s, "roll")
		_, still := now[victim]
		return !still && len(now) == 3 && countPhase(now, "Running") == 3
	})
	t.Logf("remediation of one killed machine (silence threshold 6s, unhealthyTimeout 4s): %v", time.Since(killed).Round(time.Millisecond))

	// Kill all three with maxUnhealthy 1: no remediation, and the pool says why.
	ms = poolMachines(s, "roll")
	for m := range ms {
		_ = syscall.Kill(agentPID(s, m), syscall.SIGKILL)
	}
	waitFor(t, 60*time.Second, "the pool to refuse remediating 3 unhealthy machines", func() bool {
		msg, _ := s.kubectl("get", "machinepool", "roll", "-o", "jsonpath={.status.message}")
		return strings.Contains(msg, "more than maxUnhealthy 1")
	})
	now := poolMachines(s, "roll")
	for m := range ms {
		if _, ok := now[m]; !ok {
			t.Errorf("machine %s was replaced although more machines than maxUnhealthy are unhealthy", m)
		}
	}
}

// TestMachinePoolDriverFailure: an executable driver whose create keeps
// failing leaves, after its retries, a Failed Machine carrying the driver's
// own message, and the pool says what failed.
func TestMachinePoolDriverFailure(t *testing.T) {
	t.Parallel()
	drivers := t.TempDir()
	// It answers schema (admission asks it, and takes no config) and fails
	// every create.
	script := `#!/bin/sh
cat >/dev/null
if [ "$1" = schema ]; then echo '{"description":"fails every create","fields":[]}'; exit 0; fi
echo "quota exceeded in region east-1" >&2
exit 1
`
	if err := os.WriteFile(filepath.Join(drivers, "muster-driver-broken"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", "--drivers-dir", drivers)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	pool := `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: broken}
spec:
  cluster: edge-east
  replicas: 1
  health: {unhealthyTimeout: 0s}
  template: {driver: broken}
`
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", path)
	waitFor(t, 60*time.Second, "the pool's machine to be Failed with the driver's message", func() bool {
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=broken", "-o", "jsonpath={.items[*].status.phase}|{.items[*].status.message}")
		return strings.HasPrefix(out, "Failed|") && strings.Contains(out, "quota exceeded in region east-1")
	})
	if out := s.mustKubectl("get", "machines", "-l", "muster.io/pool=broken", "-o", "jsonpath={.items[0].status.transitions[-1].event}"); out != "provision-failed" {
		t.Errorf("the failed machine's last transition is %q, want provision-failed", out)
	}
	if msg := s.mustKubectl("get", "machinepool", "broken", "-o", "jsonpath={.status.message}"); !strings.Contains(msg, "quota exceeded") {
		t.Errorf("the pool does not say why: %q", msg)
	}
	if out := s.mustKubectl("get", "machines", "-l", "muster.io/pool=broken", "-o", "name"); strings.Count(out, "machine.muster.io/") != 1 {
		t.Errorf("a failing driver made more than one Machine: %s", out)
	}
	if out := s.mustKubectl("get", "machines", "-l", "muster.io/pool=broken", "-o", `jsonpath={.items[0].status.conditions[?(@.type=="Provisioned")].status}|{.items[0].status.conditions[?(@.type=="Provisioned")].message}`); !strings.HasPrefix(out, "False|") || !strings.Contains(out, "quota exceeded") {
		t.Errorf("the Provisioned condition does not carry the driver's refusal: %q", out)
	}

	// A driver whose remove fails: the deleted Machine stays in Deleting
	// with the driver's reason until the remove succeeds, then goes.
	allow := filepath.Join(drivers, "allow-remove")
	stuck := fmt.Sprintf(`#!/bin/sh
cat >/dev/null
case "$1" in
schema) echo '{"fields":[]}' ;;
create) echo '{"instance":"i-1"}' ;;
remove) [ -e %s ] || { echo "the cloud API says instance i-1 is locked" >&2; exit 1; } ;;
status) echo '{"exists":true}' ;;
esac
`, allow)
	if err := os.WriteFile(filepath.Join(drivers, "muster-driver-stuck"), []byte(stuck), 0o755); err != nil {
		t.Fatal(err)
	}
	applyPool(t, s, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: stuck}
spec:
  cluster: edge-east
  replicas: 1
  template: {driver: stuck}
`)
	var victim string
	waitFor(t, 60*time.Second, "the stuck driver's machine to be provisioned", func() bool {
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=stuck", "-o", `jsonpath={.items[0].metadata.name}|{.items[0].status.conditions[?(@.type=="Provisioned")].status}`)
		name, status, _ := strings.Cut(out, "|")
		victim = name
		return status == "True"
	})
	s.mustKubectl("delete", "machine", victim, "--wait=false")
	waitFor(t, 60*time.Second, "the deleted machine to wait in Deleting with the driver's reason", func() bool {
		out, _ := s.kubectl("get", "machine", victim, "-o", "jsonpath={.status.phase}|{.status.reason}|{.status.message}")
		return strings.HasPrefix(out, "Deleting|DriverRemoveFailed|") && strings.Contains(out, "instance i-1 is locked")
	})
	if err := os.WriteFile(allow, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the machine to go once its driver removed the host", func() bool {
		_, err := s.kubectl("get", "machine", victim)
		return err != nil
	})
}

// writeFile writes content to a new file under the test's temp dir.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMachinePoolDriverSchema: a pool's driverConfig is checked against
// its driver's schema when the pool is written. A typo in a key, a bad
// integer, a missing required field or an unknown driver is refused with
// 422 naming the field, also on a server-side dry run, and nothing is
// stored; a driver that cannot print its schema refuses the pool with
// the driver's reason. Users read the schemas with kubectl get --raw.
func TestMachinePoolDriverSchema(t *testing.T) {
	t.Parallel()
	drivers := t.TempDir()
	scripts := map[string]string{
		// A driver with config; creates fail, as no pool here scales up.
		"cloud": `#!/bin/sh
cat >/dev/null
if [ "$1" = schema ]; then
  echo '{"description":"hosts in a test cloud","fields":[{"name":"size","type":"integer","required":true,"description":"disk GiB"},{"name":"zone","type":"string","default":"east-1"}]}'
  exit 0
fi
echo "this test never creates hosts" >&2
exit 1
`,
		// A driver from before the schema verb: it fails schema.
		"old": "#!/bin/sh\ncat >/dev/null\necho \"unknown verb $1\" >&2\nexit 2\n",
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(drivers, "muster-driver-"+name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "", "--drivers-dir", drivers, processDriver)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	pool := func(name, template string) string {
		return writeFile(t, name+".yaml", fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %s}
spec:
  cluster: edge-east
  replicas: 0
  template: %s
`, name, template))
	}
	refused := []struct {
		name, template string
		// want are parts of kubectl's message.
		want []string
	}{
		{"typo", `{driver: cloud, driverConfig: {size: "20", zon: west}}`,
			[]string{`spec.template.driverConfig[zon]: Invalid value: "west": unknown field`, `driver "cloud" accepts size (integer, required), zone (string, default east-1)`}},
		{"bad-integer", `{driver: cloud, driverConfig: {size: "20GiB"}}`,
			[]string{`spec.template.driverConfig[size]: Invalid value: "20GiB": "20GiB" is not an integer`}},
		{"missing-required", `{driver: cloud, driverConfig: {zone: west}}`,
			[]string{`spec.template.driverConfig[size]: Required value: required by the driver`}},
		{"process-config", `{driver: process, driverConfig: {size: "20"}}`,
			[]string{`spec.template.driverConfig[size]`, `driver "process" accepts networkNamespace (boolean, default false), networkCIDR (string, default 10.212.0.0/16)`}},
		{"unknown-driver", `{driver: clod}`,
			[]string{`spec.template.driver: Invalid value: "clod": no driver "clod"`, "the drivers are cloud, old, process", "muster-driver-clod"}},
	}
	for _, tc := range refused {
		path := pool(tc.name, tc.template)
		// Client-side apply creates; server-side apply creates through an
		// update (a patch of a pool that does not exist): both are checked.
		for _, dry := range [][]string{{"--dry-run=server"}, {"--server-side", "--dry-run=server"}, {"--server-side"}, nil} {
			out, err := s.kubectl(append([]string{"apply", "-f", path}, dry...)...)
			// "is invalid" is kubectl's rendering of reason Invalid, HTTP 422.
			if err == nil || !strings.Contains(out, `The MachinePool "`+tc.name+`" is invalid`) {
				t.Errorf("%s %v: kubectl apply: %v\n%s; want 422 Invalid", tc.name, dry, err, out)
				continue
			}
			if tc.name == "typo" {
				t.Logf("kubectl apply %v of a pool with a typo:\n%s", dry, out)
			}
			for _, part := range tc.want {
				if !strings.Contains(out, part) {
					t.Errorf("%s %v: the refusal does not say %q:\n%s", tc.name, dry, part, out)
				}
			}
		}
	}
	if out := s.mustKubectl("get", "machinepools", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("refused pools were stored: %s", out)
	}

	// A driver that cannot print its schema: the pool is refused (503, not
	// 422: the pool may be right) with the driver's reason and the fix.
	out, err := s.kubectl("apply", "-f", pool("old", "{driver: old}"))
	for _, part := range []string{"ServiceUnavailable", `driver "old" cannot say what driverConfig it accepts`, "unknown verb schema", "muster-driver-old schema"} {
		if err == nil || !strings.Contains(out, part) {
			t.Errorf("a pool of a driver without a schema: %v\n%s; want it refused saying %q", err, out, part)
		}
	}

	// A good pool is stored; changing its template is checked again, while
	// changes that leave the template alone are not.
	s.mustKubectl("apply", "-f", pool("good", `{driver: cloud, driverConfig: {size: "20"}}`))
	out, err = s.kubectl("patch", "machinepool", "good", "--type", "merge", "-p", `{"spec":{"template":{"driverConfig":{"size":"big"}}}}`)
	if err == nil || !strings.Contains(out, `spec.template.driverConfig[size]: Invalid value: "big"`) {
		t.Errorf("a template change to a bad integer: %v\n%s; want 422 naming the field", err, out)
	}
	s.mustKubectl("patch", "machinepool", "good", "--type", "merge", "-p", `{"spec":{"template":{"driverConfig":{"zone":"west"}}}}`)
	s.mustKubectl("label", "machinepool", "good", "team=infra")
	if got := s.mustKubectl("get", "machinepool", "good", "-o", "jsonpath={.spec.template.driverConfig.size}/{.spec.template.driverConfig.zone}"); got != "20/west" {
		t.Errorf("the good pool's config is %q; want 20/west", got)
	}

	// The schemas, as admission reads them: the admin and a viewer.
	viewer := userKubeconfig(t, s, "vera", "muster:viewers")
	for who, run := range map[string]func(...string) (string, error){
		"admin":  s.kubectl,
		"viewer": func(args ...string) (string, error) { return kubectlAs(viewer, args...) },
	} {
		out, err := run("get", "--raw", "/drivers/cloud")
		t.Logf("%s: kubectl get --raw /drivers/cloud:\n%s", who, out)
		if err != nil || !strings.Contains(out, `"name": "size"`) || !strings.Contains(out, `"type": "integer"`) || !strings.Contains(out, `"required": true`) || !strings.Contains(out, "hosts in a test cloud") {
			t.Errorf("%s: kubectl get --raw /drivers/cloud: %v\n%s", who, err, out)
		}
		out, err = run("get", "--raw", "/drivers")
		if err != nil || !strings.Contains(out, `"name": "process"`) || !strings.Contains(out, `"name": "cloud"`) || !strings.Contains(out, "unknown verb schema") {
			t.Errorf("%s: kubectl get --raw /drivers: %v\n%s; want every driver, and old's failure", who, err, out)
		}
		out, err = run("get", "--raw", "/drivers/nope")
		if err == nil || !strings.Contains(out, "NotFound") || !strings.Contains(out, "the drivers are cloud, old, process") {
			t.Errorf("%s: kubectl get --raw /drivers/nope: %v\n%s; want NotFound naming the drivers", who, err, out)
		}
	}
	// Reading schemas is for the roles that read pools.
	metrics := userKubeconfig(t, s, "mona", "muster:metrics-readers")
	if out, err := kubectlAs(metrics, "get", "--raw", "/drivers/cloud"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("a metrics reader read a driver's schema: %v\n%s", err, out)
	}
}

// BenchmarkMachinePool50 (make bench; issue 15's figures): a pool of 50
// real agents (process driver) from creation to all Running, a rolling
// replacement of the 50 (maxSurge 5, maxUnavailable 0), and the
// remediation of one killed machine.
func BenchmarkMachinePool50(b *testing.B) {
	const n = 50
	s := startServer(b, "", processDriver, "--agent-silence-threshold", "6s")
	killPoolAgentsAtEnd(b, s)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	pool := func(role string) string {
		return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: fifty}
spec:
  cluster: edge-east
  replicas: %d
  strategy: {maxSurge: 5, maxUnavailable: 0}
  health: {unhealthyTimeout: 4s}
  template:
    driver: process
    labels: {role: %s}
`, n, role)
	}
	converged := func(role string) func() bool {
		return func() bool {
			ms := poolMachines(s, "fifty")
			out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=fifty,role="+role, "-o", "name")
			return len(ms) == n && countPhase(ms, "Running") == n && strings.Count(out, "machine.muster.io/") == n
		}
	}
	start := time.Now()
	applyPool(b, s, pool("blue"))
	waitFor(b, 10*time.Minute, "50 pool machines Running", converged("blue"))
	created := time.Since(start)

	start = time.Now()
	applyPool(b, s, pool("green"))
	waitFor(b, 20*time.Minute, "50 green pool machines Running", converged("green"))
	rolled := time.Since(start)

	var victim string
	for m := range poolMachines(s, "fifty") {
		victim = m
		break
	}
	if err := syscall.Kill(agentPID(s, victim), syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	waitFor(b, 5*time.Minute, "the killed machine replaced, 50 Running", func() bool {
		ms := poolMachines(s, "fifty")
		_, still := ms[victim]
		return !still && len(ms) == n && countPhase(ms, "Running") == n
	})
	remediated := time.Since(start)
	b.ReportMetric(created.Seconds(), "s-create-50")
	b.ReportMetric(rolled.Seconds(), "s-roll-50")
	b.ReportMetric(remediated.Seconds(), "s-remediate-1")
	b.Logf("pool of 50 (process driver): created to all Running %v; rolling replacement (maxSurge 5) %v; one killed machine replaced %v (silence threshold 6s, unhealthyTimeout 4s)",
		created.Round(time.Millisecond), rolled.Round(time.Millisecond), remediated.Round(time.Millisecond))
}
