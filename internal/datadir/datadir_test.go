package datadir

import (
	"os"
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

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}
