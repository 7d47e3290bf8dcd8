package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Lock takes an exclusive lock on the data dir before anything in it is
// read or written, so that a second server (or an offline datastore
// command: migrate, restore) pointed at the same dir changes nothing (not
// even the admin kubeconfig) and says who holds it. SQLite in WAL mode
// would otherwise let two servers share one database. The lock is
// released when the process exits, however it exits, or when the file is
// closed.
func Lock(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create data dir %s: %w; choose a writable --data-dir", dir, err)
	}
	l, err := New(dir)
	if err != nil {
		return nil, err
	}
	if err := tighten(l); err != nil {
		return nil, err
	}
	path := l.Lock
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot write in data dir %s: %w; choose a writable --data-dir", dir, err)
	}
	if err := flockOrWaitForDeparted(f, path); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another muster-server (pid %s): stop it, or give this one another --data-dir",
			dir, strings.TrimSpace(string(owner)))
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// departedGrace is how long a lock whose recorded owner has exited may
// stay held. A server killed while it was starting a machine's agent
// (the process driver forks) leaves the lock's descriptor in the child
// until the child's exec closes it, so a successor started at once (by
// systemd's Restart=, or an operator) would otherwise be refused by a
// server that is already gone.
const departedGrace = 10 * time.Second

// flockOrWaitForDeparted takes the lock; while it is held and the pid the
// holder wrote has exited, it retries for departedGrace. A live owner is
// refused at once: two servers must never share a data dir.
func flockOrWaitForDeparted(f *os.File, path string) error {
	deadline := time.Now().Add(departedGrace)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if ownerAlive(path) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ownerAlive says whether the pid recorded in the lock file is a running
// process; an unreadable record counts as alive, so Lock refuses.
func ownerAlive(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return true
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// tighten makes a data dir that others may read or enter (made by
// hand, by a packager, or by an older Muster with the umask's 0755) 0700,
// as k3s does with its own: it holds the CA's key, the admin kubeconfig
// and the database. It does so only to a dir that is Muster's: empty, or
// holding Muster's own lock or TLS dir. A wide dir that holds other
// files (--data-dir pointed at /var/lib, say) is refused instead:
// tightening it would break whatever else lives there.
func tighten(l Layout) error {
	dir := l.Dir
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w; choose a writable --data-dir", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory: move it away or choose another --data-dir", dir)
	}
	mode := fi.Mode().Perm()
	if mode&0o077 == 0 {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading data dir %s: %w; choose a readable --data-dir", dir, err)
	}
	// Empty, or marked by an earlier start: the lock file, the TLS dir.
	ours := len(entries) == 0
	for _, e := range entries {
		if e.Name() == filepath.Base(l.Lock) || (e.Name() == filepath.Base(l.TLSDir) && e.IsDir()) {
			ours = true
		}
	}
	if !ours {
		return fmt.Errorf("data dir %s has mode %04o and holds files that are not muster-server's: a data dir holds the CA's private key and must be 0700 and muster-server's own; "+
			"give it a dir of its own (e.g. --data-dir %s) or, if this dir is only muster-server's, run chmod 0700 %s", dir, mode, filepath.Join(dir, "muster"), dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s has mode %04o and could not be made 0700: %w; run chmod 0700 %s as its owner", dir, mode, err, dir)
	}
	klog.InfoS("Tightened the data dir to mode 0700: it holds the CA's key and the admin kubeconfig, which no other user may read", "dir", dir, "was", fmt.Sprintf("%04o", mode))
	return nil
}
