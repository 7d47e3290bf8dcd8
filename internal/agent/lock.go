package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockFile holds the pid of the agent using the data dir.
const lockFile = "agent.lock"

// lock makes the agent the only one using its data dir: two agents on one
// node password and certificate would renew over each other's key and
// report each other's plans. The lock is the kernel's (flock), so a killed
// agent never leaves a stale one behind.
func (d dataDir) lock() (unlock func(), err error) {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return nil, fmt.Errorf("creating data dir %s: %w; choose a writable --data-dir", d, err)
	}
	f, err := os.OpenFile(d.path(lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w; choose a writable --data-dir", d.path(lockFile), err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(d.path(lockFile))
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking %s: %w", d.path(lockFile), err)
		}
		who := "another muster-agent"
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
			who = fmt.Sprintf("another muster-agent (pid %d)", pid)
		}
		return nil, fmt.Errorf("%s is already using data dir %s: stop it first, or give this agent its own --data-dir", who, d)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}
