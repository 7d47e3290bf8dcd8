// Package sshtest runs a real OpenSSH server (Debian's openssh-server;
// .ci/run installs it) for tests of the ssh machine driver: sshd on a free
// loopback port with a host key, a config and an authorized_keys file of
// its own, letting in the keys of the user running the test.
package sshtest

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
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// Binary is where Debian installs sshd.
const Binary = "/usr/sbin/sshd"

// Host is one running sshd.
type Host struct {
	// Port is its loopback port on 127.0.0.1.
	Port int
	// HostKey is its host key as an authorized_keys line, to pin.
	HostKey string
	// AuthorizedKeys is the file of keys it lets in.
	AuthorizedKeys string
	// User is the user running the test, who may log in.
	User string
	log  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Log is what sshd has logged (LogLevel VERBOSE).
func (h *Host) Log() string { return h.log.String() }

// Start runs sshd until the test ends; a missing sshd fails the test.
func Start(t testing.TB) *Host {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Fatalf("%s is not installed (apt-get install openssh-server; .ci/run installs it): %v", Binary, err)
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
	hostKeyFile := filepath.Join(dir, "ssh_host_ed25519_key")
	if err := os.WriteFile(hostKeyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))),
		AuthorizedKeys: filepath.Join(dir, "authorized_keys"), log: &lockedBuffer{}}
	if err := os.WriteFile(h.AuthorizedKeys, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// sshd's privilege separation needs its empty dir.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		t.Fatal(err)
	}
	h.User = strings.TrimSpace(string(out))
	config := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
PidFile none
LogLevel VERBOSE
`, h.Port, hostKeyFile, h.AuthorizedKeys)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary, "-D", "-e", "-f", config)
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("sshd exited: %v\n%s", cmd.ProcessState, h.log.String())
		default:
		}
		if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(h.Port))); err == nil {
			c.Close()
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd does not listen on %d after 10s\n%s", h.Port, h.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Authorize lets in the key of an authorized_keys line.
func (h *Host) Authorize(t testing.TB, pubKey string) {
	t.Helper()
	f, err := os.OpenFile(h.AuthorizedKeys, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(pubKey + "\n"); err != nil {
		t.Fatal(err)
	}
}
