package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDataDir takes an exclusive lock on the data dir before anything in it
// is read or written, so that a second server pointed at the same dir
// changes nothing (not even the admin kubeconfig) and says who holds it.
// SQLite in WAL mode would otherwise let two servers share one database.
// The lock is released when the process exits, however it exits.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create data dir %s: %w; choose a writable --data-dir", dir, err)
	}
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot write in data dir %s: %w; choose a writable --data-dir", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
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

// LockDataDir is lockDataDir for the offline datastore commands (migrate,
// restore): they refuse a data dir a running server holds.
func LockDataDir(dir string) (*os.File, error) { return lockDataDir(dir) }
