package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/muster-io/muster/internal/atomicfile"
)

// Process is the built-in "process" driver: each machine is a real
// muster-agent process on the server's host, with its own data dir under
// Dir/<machine>. For demos, tests and trying pools without infrastructure.
// Its processes run in their own session, so they outlive a server crash
// like hosts would; the server finds them again by their pid file.
//
// Whoever may write MachinePools may run commands in those machines
// (exec, plans): they run as the server's user on the server's host. So
// the server offers this driver only when an admin turns it on
// (--enable-process-driver), Dir is outside the server's data dir, and an
// agent starts with an environment of its own, never the server's.
type Process struct {
	// Dir holds one directory per machine.
	Dir string
	// AgentBinary is the muster-agent to run.
	AgentBinary string
	// User, if set, is the unprivileged user the agents run as (uid and
	// gid, no supplementary groups); their dirs are theirs. Empty: the
	// server's own user.
	User *Credential
}

// Credential is the user and group an agent runs as.
type Credential struct{ UID, GID uint32 }

func (p Process) machineDir(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return "", fmt.Errorf("machine name %q cannot name a directory", name)
	}
	return filepath.Join(p.Dir, name), nil
}

// Schema: the process driver takes no config.
func (Process) Schema(context.Context) (Schema, error) {
	return Schema{Description: "each machine is a muster-agent process on the server's own host, with its own data dir", Fields: []Field{
		{Name: ConfigNetworkNamespace, Type: FieldBoolean, Default: "false", Description: "run each machine in a network namespace of its own, with its own address (needs a server running as root with ip(8), advertising a non-loopback address)"},
		{Name: ConfigNetworkCIDR, Type: FieldString, Default: DefaultNetworkCIDR, Description: "with networkNamespace: the IPv4 range the machines' addresses come from; its first address is the host's bridge"},
	}}, nil
}

// Create starts the agent of req.Name, unless it already runs.
func (p Process) Create(_ context.Context, req CreateRequest) (State, error) {
	dir, err := p.machineDir(req.Name)
	if err != nil {
		return nil, err
	}
	cidr, err := networkConfig(req.Config)
	if err != nil {
		return nil, err
	}
	if cidr != nil {
		if err := checkReachable(req.Bootstrap.ServerURL); err != nil {
			return nil, err
		}
	}
	state := func(pid int, n *machineNetwork) State {
		s := State{"pid": strconv.Itoa(pid), "dir": dir}
		if n != nil {
			s["netns"], s["address"] = n.Namespace, n.Address
		}
		return s
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	var network *machineNetwork
	if cidr != nil {
		n, err := p.ensureNetwork(req.Name, dir, *cidr)
		if err != nil {
			return nil, err
		}
		network = &n
	}
	if pid, ok := p.running(dir); ok {
		return state(pid, network), nil
	}
	if p.User != nil {
		// The agent writes its data dir; the pid file and log stay the
		// server's (opened here, handed over as a descriptor).
		if err := os.Chown(dir, int(p.User.UID), int(p.User.GID)); err != nil {
			return nil, fmt.Errorf("giving %s to uid %d: %w", dir, p.User.UID, err)
		}
	}
	// A join token file left by an earlier version: the token is spent
	// or will be, and nothing reads it.
	_ = os.Remove(filepath.Join(dir, "join-token"))
	log, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	agentArgs := []string{p.AgentBinary, "--server", req.Bootstrap.ServerURL, "--data-dir", filepath.Join(dir, "agent"), "--node-name", req.Name}
	var cmd *exec.Cmd
	if network == nil {
		cmd = exec.Command(agentArgs[0], agentArgs[1:]...)
	} else {
		// ip netns exec (and setpriv) exec the agent in place: the pid
		// recorded below is the agent's.
		args := []string{"netns", "exec", network.Namespace}
		if p.User != nil {
			// Entering a namespace needs root: the drop to the agent's
			// user comes after, inside it.
			args = append(args, "setpriv", "--reuid", strconv.Itoa(int(p.User.UID)), "--regid", strconv.Itoa(int(p.User.GID)), "--clear-groups", "--")
		}
		cmd = exec.Command("ip", append(args, agentArgs...)...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = dir
	// The token goes in the agent's environment, which the agent drops
	// once read: not on its command line (every local user reads that),
	// and not in a file that would outlive the join.
	cmd.Env = agentEnv(dir, req.Bootstrap.Token)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if p.User != nil && network == nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: p.User.UID, Gid: p.User.GID, Groups: []uint32{}}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", strings.Join(cmd.Args, " "), err)
	}
	pid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it when it exits
	if err := atomicfile.Write(filepath.Join(dir, "pid"), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return nil, err
	}
	return state(pid, network), nil
}

// agentEnv is the whole environment of a machine's agent: a PATH for the
// commands plans run, a HOME of its own, the locale and time zone, and
// the join token. Nothing else of the server's: no MUSTER_* variable
// (the server token, the datastore endpoint and its password), no
// credential a server's environment may hold.
func agentEnv(dir, token string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	env := []string{"PATH=" + path, "HOME=" + dir, "MUSTER_TOKEN=" + token}
	for _, k := range []string{"LANG", "LC_ALL", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// running returns the agent process of dir if it is alive: the one its
// pid file records, or, without one, the one /proc shows running with
// dir's data dir. A server killed between starting an agent and writing
// its pid file leaves an agent that only /proc knows of; unseen, a
// Remove would leave it running and writing its data dir back. A pid
// the kernel recycled for another process is never taken for the agent.
func (p Process) running(dir string) (int, bool) {
	if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 && isAgentOf(pid, dir) {
			return pid, true
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range procs {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 1 && isAgentOf(pid, dir) {
			return pid, true
		}
	}
	return 0, false
}

// isAgentOf reports whether process pid is a live agent of dir: its
// command line names dir's data dir, and it is not a zombie (exited, not
// yet reaped).
func isAgentOf(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) && args[i+1] == filepath.Join(dir, "agent") {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			return err == nil && !strings.Contains(string(stat), ") Z ")
		}
	}
	return false
}

// Remove stops the machine's agent and deletes its directory.
func (p Process) Remove(ctx context.Context, req HostRequest) error {
	dir, err := p.machineDir(req.Name)
	if err != nil {
		return err
	}
	if pid, ok := p.running(dir); ok {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, alive := p.running(dir); !alive {
				break
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if err := p.removeNetwork(dir); err != nil {
		return fmt.Errorf("removing machine %s's network namespace: %w", req.Name, err)
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// Status says whether the machine's agent process runs.
func (p Process) Status(_ context.Context, req HostRequest) (Status, error) {
	dir, err := p.machineDir(req.Name)
	if err != nil {
		return Status{}, err
	}
	_, ok := p.running(dir)
	return Status{Exists: ok}, nil
}
