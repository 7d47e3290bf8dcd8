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

// poolMachines lists the pool's Machines and their phases.
func poolMachines(s *server, pool string) map[string]string {
	out, err := s.kubectl("get", "machines", "-l", "muster.io/pool="+pool, "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}`)
	got := map[string]string{}
	if err != nil {
		return got
	}
	for _, line := range strings.Fields(out) {
		name, phase, _ := strings.Cut(line, "=")
		got[name] = phase
	}
	return got
}

func countPhase(ms map[string]string, phase string) int {
	n := 0
	for _, p := range ms {
		if p == phase {
			n++
		}
	}
	return n
}

// agentPID is the process-driver agent of machine m, 0 if none runs.
func agentPID(s *server, m string) int {
	b, err := os.ReadFile(filepath.Join(s.dataDir, "pools", m, "pid"))
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

// TestMachinePoolProcessDriver: a pool of real agent processes made by the
// server itself scales up and down, removes the right machines with their
// processes and data dirs, and leaves nothing behind when deleted.
func TestMachinePoolProcessDriver(t *testing.T) {
	s := startServer(t, "")
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	pool := `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata:
  name: edge
spec:
  cluster: edge-east
  replicas: 3
  template:
    driver: process
    labels:
      role: worker
`
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.mustKubectl("apply", "-f", path)
	waitFor(t, 120*time.Second, "3 pool machines Running", func() bool {
		ms := poolMachines(s, "edge")
		return len(ms) == 3 && countPhase(ms, "Running") == 3
	})
	t.Logf("pool of 3 (process driver) created to all Running: %v", time.Since(start).Round(time.Millisecond))
	if out := s.mustKubectl("get", "machines", "-l", "role=worker", "-o", "name"); strings.Count(out, "machine.muster.io/") != 3 {
		t.Errorf("the template's labels are not on the pool's machines:\n%s", out)
	}
	waitFor(t, 30*time.Second, "the pool's status to count 3 ready", func() bool {
		out, _ := s.kubectl("get", "machinepool", "edge", "-o", "jsonpath={.status.replicas}/{.status.readyReplicas}")
		return out == "3/3"
	})

	// Scale down to 1: two machines go, with their processes and dirs; the
	// one that stays keeps running.
	before := poolMachines(s, "edge")
	s.mustKubectl("patch", "machinepool", "edge", "--type", "merge", "-p", `{"spec":{"replicas":1}}`)
	waitFor(t, 60*time.Second, "the pool to scale down to 1", func() bool { return len(poolMachines(s, "edge")) == 1 })
	after := poolMachines(s, "edge")
	for m := range before {
		if _, kept := after[m]; kept {
			if agentPID(s, m) == 0 {
				t.Errorf("the machine the pool kept (%s) has no running agent", m)
			}
			continue
		}
		waitFor(t, 30*time.Second, "the removed machine's agent to stop and its dir to go", func() bool {
			_, err := os.Stat(filepath.Join(s.dataDir, "pools", m))
			return agentPID(s, m) == 0 && os.IsNotExist(err)
		})
		if out, err := s.kubectl("get", "nodepassword", m); err == nil {
			t.Errorf("a removed machine's NodePassword is left: %s", out)
		}
	}

	// Delete the pool: every machine, process and directory goes, and no
	// join token of the pool's is left.
	var kept string
	for m := range after {
		kept = m
	}
	s.mustKubectl("delete", "machinepool", "edge", "--wait=true", "--timeout=60s")
	if ms := poolMachines(s, "edge"); len(ms) != 0 {
		t.Errorf("machines left after deleting the pool: %v", ms)
	}
	if agentPID(s, kept) != 0 {
		t.Errorf("the agent of %s still runs after its pool was deleted", kept)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.dataDir, "pools")); len(entries) != 0 {
		t.Errorf("pool directories left: %v", entries)
	}
	if out := s.mustKubectl("get", "clusterregistrationtokens", "-o", "jsonpath={.items[*].spec.description}"); strings.Contains(out, "pool edge") {
		t.Errorf("the pool's join tokens are left: %s", out)
	}
	if out := s.mustKubectl("get", "nodepasswords", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("NodePasswords left: %s", out)
	}
}
