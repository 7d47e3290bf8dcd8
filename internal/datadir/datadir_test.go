package datadir

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	if _, err := New(""); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("New(\"\") = %v, want an error naming --data-dir", err)
	}
	dir := t.TempDir()
	l, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]string{
		"tls/ca.key":       l.CAKey,
		"admin.kubeconfig": l.AdminKubeconfig,
		"db/state.db":      l.SQLite,
		"kine.sock":        l.KineSocket,
		".lock":            l.Lock,
		"agent":            l.HostAgent,
		"drivers/ssh":      l.SSHDriverKeys,
	} {
		if want := filepath.Join(dir, what); got != want {
			t.Errorf("%s is at %s, want %s", what, got, want)
		}
	}
}

func TestLock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		refused string // words of the refusal; "" to lock
		mode    os.FileMode
	}{
		{"a new dir", func(*testing.T, string) {}, "", 0o700},
		{"an empty 0755 dir is tightened", func(t *testing.T, dir string) { mkdir(t, dir, 0o755) }, "", 0o700},
		{"a 0755 dir of an earlier start is tightened", func(t *testing.T, dir string) {
			mkdir(t, dir, 0o755)
			mkdir(t, filepath.Join(dir, "tls"), 0o700)
		}, "", 0o700},
		{"a 0755 dir holding others' files is refused", func(t *testing.T, dir string) {
			mkdir(t, dir, 0o755)
			if err := os.WriteFile(filepath.Join(dir, "someone-else"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not muster-server's", 0o755},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			tc.prepare(t, dir)
			f, err := Lock(dir)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("Lock = %v, want a refusal saying %q", err, tc.refused)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				// A second holder is refused and told who holds it.
				if _, err := Lock(dir); err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
					t.Errorf("a second Lock = %v, want a refusal naming pid %d", err, os.Getpid())
				}
			}
			if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != tc.mode {
				t.Errorf("mode after Lock: %v %v, want %v", fi.Mode().Perm(), err, tc.mode)
			}
		})
	}
}

// TestLockHeldByDepartedOwner: a server killed while it was forking a
// machine's agent leaves its lock in the child until the child's exec; a
// successor started at once must wait for that, not refuse because of a
// server that is gone. The child here holds the lock for half a second,
// the recorded owner has exited.
func TestLockHeldByDepartedOwner(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	f, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "0.5")
	holder.ExtraFiles = []*os.File{f}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	l, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.Lock, []byte(strconv.Itoa(gone.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Close() // only the child holds the lock now

	g, err := Lock(dir)
	if err != nil {
		t.Fatalf("Lock while a departed server's child still held the lock = %v, want it to wait and take it", err)
	}
	g.Close()
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}
