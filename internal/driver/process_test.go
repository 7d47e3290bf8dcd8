package driver

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeAgent is a stand-in for muster-agent that runs until killed, with the
// agent's command line (the driver recognises its processes by it).
func fakeAgent(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "muster-agent")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProcessDriver(t *testing.T) {
	// What the server's environment holds must not reach its machines,
	// which operators may run commands in (issue 27).
	t.Setenv("MUSTER_DATASTORE_ENDPOINT", "postgres://muster:dbsecret@db/muster")
	t.Setenv("MUSTER_TOKEN", "K10servertoken")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "awssecret")
	p := Process{Dir: t.TempDir(), AgentBinary: fakeAgent(t)}
	ctx := context.Background()
	req := CreateRequest{Name: "m-1", Bootstrap: Bootstrap{ServerURL: "https://127.0.0.1:1", Token: "K10secret"}}
	first, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(ctx, HostRequest{Name: "m-1"}) })
	if st, _ := p.Status(ctx, HostRequest{Name: "m-1"}); !st.Exists {
		t.Fatal("a created machine's process does not exist")
	}
	// Idempotent by name: a repeated create (after a server crash) makes no second process.
	again, err := p.Create(ctx, req)
	if err != nil || again["pid"] != first["pid"] {
		t.Fatalf("a repeated create started another process: %v then %v (%v)", first, again, err)
	}
	// The join token is in the agent's environment, alone of the
	// server's secrets, and in no file and on no command line.
	if _, err := os.Stat(filepath.Join(p.Dir, "m-1", "join-token")); !os.IsNotExist(err) {
		t.Errorf("a join token file is in the machine's dir: %v", err)
	}
	environ, err := os.ReadFile("/proc/" + first["pid"] + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(environ), "\x00")
	if !slices.Contains(env, "MUSTER_TOKEN=K10secret") {
		t.Errorf("the agent's environment has not its join token: %q", env)
	}
	for _, secret := range []string{"dbsecret", "K10servertoken", "awssecret", "MUSTER_DATASTORE"} {
		if strings.Contains(string(environ), secret) {
			t.Errorf("the agent's environment holds the server's %q: %q", secret, env)
		}
	}
	if cmdline, _ := os.ReadFile("/proc/" + first["pid"] + "/cmdline"); strings.Contains(string(cmdline), "K10secret") {
		t.Errorf("the join token is on the agent's command line: %q", cmdline)
	}
	if err := p.Remove(ctx, HostRequest{Name: "m-1"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := p.Status(ctx, HostRequest{Name: "m-1"}); st.Exists {
		t.Fatal("the process runs after remove")
	}
	if _, err := os.Stat(filepath.Join(p.Dir, "m-1")); !os.IsNotExist(err) {
		t.Fatalf("the machine's dir is left after remove: %v", err)
	}
	// Removing what does not exist succeeds: a retried remove is not an error.
	if err := p.Remove(ctx, HostRequest{Name: "m-1"}); err != nil {
		t.Fatal(err)
	}
}

// TestProcessDriverNeverKillsAStranger: a pid file naming a process that is
// not this machine's agent (the kernel recycled the pid) is not signalled.
func TestProcessDriverNeverKillsAStranger(t *testing.T) {
	p := Process{Dir: t.TempDir(), AgentBinary: fakeAgent(t)}
	dir := filepath.Join(p.Dir, "m-2")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Our own test process stands for the stranger.
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Remove(ctx, HostRequest{Name: "m-2"}); err != nil {
		t.Fatal(err)
	}
	// Still here: the test process was not killed.
}

func TestProcessDriverRefusesPathNames(t *testing.T) {
	p := Process{Dir: t.TempDir(), AgentBinary: "/bin/true"}
	for _, name := range []string{"", "..", "a/b", "."} {
		if _, err := p.Create(context.Background(), CreateRequest{Name: name}); err == nil {
			t.Errorf("Create(%q) accepted a name that is a path", name)
		}
	}
}

// A server killed after it started an agent and before it wrote the
// agent's pid file: the agent runs, known only to /proc. Create finds it
// (no second agent), and Remove stops it and leaves no directory behind.
func TestProcessDriverAgentWithoutPidFile(t *testing.T) {
	p := Process{Dir: t.TempDir(), AgentBinary: fakeAgent(t)}
	ctx := context.Background()
	req := CreateRequest{Name: "m-1", Bootstrap: Bootstrap{ServerURL: "https://127.0.0.1:1", Token: "K10secret"}}
	first, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(ctx, HostRequest{Name: "m-1"}) })
	pid, _ := strconv.Atoi(first["pid"])
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	if err := os.Remove(filepath.Join(p.Dir, "m-1", "pid")); err != nil {
		t.Fatal(err)
	}
	again, err := p.Create(ctx, req)
	if err != nil || again["pid"] != first["pid"] {
		t.Fatalf("a create after the pid file was lost started another agent: %v then %v (%v)", first, again, err)
	}
	_ = os.Remove(filepath.Join(p.Dir, "m-1", "pid"))
	if err := p.Remove(ctx, HostRequest{Name: "m-1"}); err != nil {
		t.Fatal(err)
	}
	if isAgentOf(pid, filepath.Join(p.Dir, "m-1")) {
		t.Errorf("the agent without a pid file (pid %d) runs after remove", pid)
	}
	if _, err := os.Stat(filepath.Join(p.Dir, "m-1")); !os.IsNotExist(err) {
		t.Errorf("the machine's dir is left after remove: %v", err)
	}
}
