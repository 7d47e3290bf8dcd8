package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/testenv/sshtest"
)

// runningPID is the process in pidFile if it runs (not a zombie), else 0.
func runningPID(pidFile string) int {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(stat), ") Z ") {
		return 0
	}
	return pid
}

// TestMachinePoolSSHDriver: a pool with the ssh driver installs a real
// agent with install.sh (INSTALL_MUSTER_INIT=none) on a host reached over
// a real sshd. Until the operator authorizes the server's key, the machine
// fails with the key to authorize in its message; then the machine reaches
// Running with the join token only in the 0600 env file; deleting the pool
// uninstalls the agent: its process stops and its files go.
func TestMachinePoolSSHDriver(t *testing.T) {
	t.Parallel()
	h := sshtest.Start(t)
	s := startServer(t, "")
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))

	// The host's root: every path install.sh writes, given in the pool's
	// driver config. Under /tmp: the paths go into command lines.
	root, err := os.MkdirTemp("", "muster-ssh-host-")
	if err != nil {
		t.Fatal(err)
	}
	binDir, svcDir, dataDir := filepath.Join(root, "bin"), filepath.Join(root, "etc"), filepath.Join(root, "data")
	pidFile := filepath.Join(svcDir, "muster-agent.pid")
	t.Cleanup(func() {
		// A failed test must not leave an agent running.
		if _, err := os.Stat(filepath.Join(binDir, "muster-agent-uninstall.sh")); err == nil {
			_ = exec.Command("sh", filepath.Join(binDir, "muster-agent-uninstall.sh")).Run()
		}
		if pid := runningPID(pidFile); pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		os.RemoveAll(root)
	})

	pool := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: lab}
spec:
  cluster: edge-east
  replicas: 1
  health: {unhealthyTimeout: 1s}
  template:
    driver: ssh
    labels: {role: ssh}
    driverConfig:
      host: 127.0.0.1
      port: "%d"
      user: root
      hostKey: %q
      init: none
      binDir: %s
      serviceDir: %s
      dataDir: %s
`, h.Port, h.HostKey, binDir, svcDir, dataDir)
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", path)

	// The server's key is not authorized yet: the machine fails and says
	// which key to add.
	pubFile := filepath.Join(s.dataDir, "drivers", "ssh", "id_ed25519.pub")
	var pub string
	waitFor(t, 60*time.Second, "the pool's machine to fail naming the server's key", func() bool {
		b, err := os.ReadFile(pubFile)
		if err != nil {
			return false
		}
		pub = strings.TrimSpace(string(b))
		// One line per machine: a failed one may already have its
		// replacement beside it (unhealthyTimeout is 1 s).
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=lab", "-o", `jsonpath={range .items[*]}{.status.phase}|{.status.message}{"\n"}{end}`)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "Failed|") && strings.Contains(line, "authorized_keys") && strings.Contains(line, pub) {
				return true
			}
		}
		return false
	})
	if fi, err := os.Stat(strings.TrimSuffix(pubFile, ".pub")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the server's SSH private key: %v %v, want mode 0600", err, fi)
	}

	// The operator authorizes it; the failed machine is replaced (after
	// unhealthyTimeout) by one that is installed.
	if err := os.WriteFile(h.AuthorizedKeys, []byte(pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var machine string
	waitFor(t, 180*time.Second, "the pool's machine to be Running", func() bool {
		ms := poolMachines(s, "lab")
		for m, phase := range ms {
			if phase == "Running" && len(ms) == 1 {
				machine = m
				return true
			}
		}
		return false
	})
	t.Logf("ssh pool machine Running %v after the key was authorized", time.Since(start).Round(time.Millisecond))

	pid := runningPID(pidFile)
	if pid == 0 {
		t.Fatalf("no agent runs from %s", pidFile)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if args[0] != filepath.Join(binDir, "muster-agent") || !strings.Contains(strings.Join(args, " "), "--node-name "+machine) {
		t.Errorf("the process in the pid file is not the machine's agent: %q", args)
	}
	envFile := filepath.Join(svcDir, "muster-agent.env")
	if m := mode(t, envFile); m != 0o600 {
		t.Errorf("%s has mode %v, want 0600", envFile, m)
	}
	env, _ := os.ReadFile(envFile)
	token, ok := strings.CutPrefix(strings.TrimSpace(string(env)), "MUSTER_TOKEN=")
	if !ok || !strings.HasPrefix(token, "K10") {
		t.Fatalf("the env file holds no join token")
	}
	if strings.Contains(string(cmdline), token) {
		t.Errorf("the join token is on the agent's command line")
	}
	if strings.Contains(h.Log(), token) {
		t.Errorf("the join token is in sshd's log")
	}
	state := s.mustKubectl("get", "machine", machine, "-o", `jsonpath={.metadata.annotations.muster\.io/driver-state}`)
	if !strings.Contains(state, `"host":"127.0.0.1"`) || strings.Contains(state, token) {
		t.Errorf("the machine's driver state is %s: want the host, never the token", state)
	}
	if got := s.mustKubectl("get", "machine", machine, "-o", "jsonpath={.metadata.labels.role}"); got != "ssh" {
		t.Errorf("the template's label role is %q on the machine", got)
	}

	// Deleting the pool uninstalls the agent: the process stops, the files go.
	s.mustKubectl("delete", "machinepool", "lab", "--wait=true", "--timeout=90s")
	if ms := poolMachines(s, "lab"); len(ms) != 0 {
		t.Errorf("machines left after deleting the pool: %v", ms)
	}
	waitFor(t, 30*time.Second, "the agent process to stop", func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(stat), ") Z ")
	})
	var left []string
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("files left on the host after the pool was deleted: %v", left)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("the agent's data dir %s is left: %v", dataDir, err)
	}
}
