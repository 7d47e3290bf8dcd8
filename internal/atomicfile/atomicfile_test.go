package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		existing os.FileMode // 0: no existing file
		mode     os.FileMode
	}{
		{"new secret", 0, 0o600},
		{"new certificate", 0, 0o644},
		{"replaces a world-readable file with a secret", 0o644, 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if tc.existing != 0 {
				if err := os.WriteFile(path, []byte("old content that is longer"), tc.existing); err != nil {
					t.Fatal(err)
				}
			}
			if err := Write(path, []byte("new"), tc.mode); err != nil {
				t.Fatalf("Write: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "new" {
				t.Errorf("content = %q, %v", got, err)
			}
			info, _ := os.Stat(path)
			if info.Mode().Perm() != tc.mode {
				t.Errorf("mode = %v, want %v", info.Mode().Perm(), tc.mode)
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
	if err := Write(filepath.Join(dir, "no-such-dir", "f"), nil, 0o600); err == nil {
		t.Error("Write into a missing dir succeeded")
	}
}
