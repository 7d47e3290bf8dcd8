package e2e

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// sshHost is a real OpenSSH server on 127.0.0.1 standing in for a host a
// pool installs on: it lets in root with the keys in its own
// authorized_keys file.
type sshHost struct {
	port           int
	hostKey        string // authorized_keys line of its host key
	authorizedKeys string
	log            *lockedLog
}

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startSSHHost runs /usr/sbin/sshd -D on a free port with a host key,
// config and authorized_keys of its own in a temp dir.
func startSSHHost(t *testing.T) *sshHost {
	t.Helper()
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		t.Fatalf("%s is not installed (apt-get install openssh-server; .ci/run installs it): %v", sshd, err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the ssh driver test logs in as root to a local sshd, which must run as root; run it as root (CI does)")
	}
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "test host")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "ssh_host_ed25519_key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	h := &sshHost{port: freePort(t), hostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))),
		authorizedKeys: filepath.Join(dir, "authorized_keys"), log: &lockedLog{}}
	if err := os.WriteFile(h.authorizedKeys, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// sshd's privilege separation needs its empty dir.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("Port %d\nListenAddress 127.0.0.1\nHostKey %s\nAuthorizedKeysFile %s\n"+
		"StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"+
		"PermitRootLogin prohibit-password\nPidFile none\nLogLevel VERBOSE\n", h.port, keyFile, h.authorizedKeys)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sshd, "-D", "-e", "-f", config)
	cmd.Stdout, cmd.Stderr = h.log, h.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sshd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("--- sshd log ---\n%s", h.log.String())
		}
	})
	waitFor(t, 10*time.Second, "sshd to listen", func() bool {
		select {
		case <-exited:
			t.Fatalf("sshd exited: %v\n%s", cmd.ProcessState, h.log.String())
		default:
		}
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(h.port)))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return h
}

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
	h := startSSHHost(t)
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
`, h.port, h.hostKey, binDir, svcDir, dataDir)
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
		out, _ := s.kubectl("get", "machines", "-l", "muster.io/pool=lab", "-o", "jsonpath={.items[*].status.phase}|{.items[*].status.message}")
		return strings.HasPrefix(out, "Failed|") && strings.Contains(out, "authorized_keys") && strings.Contains(out, pub)
	})
	if fi, err := os.Stat(strings.TrimSuffix(pubFile, ".pub")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the server's SSH private key: %v %v, want mode 0600", err, fi)
	}

	// The operator authorizes it; the failed machine is replaced (after
	// unhealthyTimeout) by one that is installed.
	if err := os.WriteFile(h.authorizedKeys, []byte(pub+"\n"), 0o600); err != nil {
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
	if strings.Contains(h.log.String(), token) {
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
