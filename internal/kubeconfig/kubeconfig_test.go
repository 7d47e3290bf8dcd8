package kubeconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The order is kubectl's, with --data-dir as explicit as --kubeconfig.
func TestFind(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvVar {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name      string
		lookup    Lookup
		wantPaths []string
		wantFrom  string
	}{
		{"nothing given: the default data dir", Lookup{DataDir: "/var/lib/muster/server", Env: env("")},
			[]string{"/var/lib/muster/server/admin.kubeconfig"}, "the data dir /var/lib/muster/server"},
		{"$KUBECONFIG before the default data dir", Lookup{DataDir: "/var/lib/muster/server", Env: env("/home/a/k")},
			[]string{"/home/a/k"}, "$KUBECONFIG"},
		{"$KUBECONFIG as a list, empty entries dropped", Lookup{DataDir: "d", Env: env("/a::/b")},
			[]string{"/a", "/b"}, "$KUBECONFIG"},
		{"--kubeconfig before $KUBECONFIG", Lookup{Flag: "/f", DataDir: "d", Env: env("/home/a/k")},
			[]string{"/f"}, "--kubeconfig"},
		{"--kubeconfig before --data-dir", Lookup{Flag: "/f", DataDir: "d", DataDirSet: true, Env: env("")},
			[]string{"/f"}, "--kubeconfig"},
		{"--data-dir before $KUBECONFIG", Lookup{DataDir: "muster-data", DataDirSet: true, Env: env("/home/a/k")},
			[]string{"muster-data/admin.kubeconfig"}, "--data-dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.lookup.Find()
			if !reflect.DeepEqual(got.Paths, tt.wantPaths) || got.From != tt.wantFrom {
				t.Errorf("Find = %v from %q, want %v from %q", got.Paths, got.From, tt.wantPaths, tt.wantFrom)
			}
		})
	}
}

// A missing credential says what was tried and what to do.
func TestRESTConfigMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := Lookup{DataDir: dir, Env: func(string) string { return "" }}.RESTConfig()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, FileName)+" does not exist") || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "$KUBECONFIG") {
		t.Errorf("RESTConfig error = %v", err)
	}
	_, err = Lookup{DataDir: dir, Env: func(string) string { return filepath.Join(dir, "nope") }}.RESTConfig()
	if err == nil || !strings.Contains(err.Error(), "$KUBECONFIG="+filepath.Join(dir, "nope")) {
		t.Errorf("RESTConfig error with a wrong $KUBECONFIG = %v", err)
	}
}

// WriteFile replaces the file whole or not at all, never leaving it empty.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "admin.kubeconfig")
	if err := WriteFile(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Errorf("content %q", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x"), []byte("two")); err == nil {
		t.Error("writing into a missing dir succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestServerDataDir: the commands that read a data dir directly follow the
// credential's rule: --data-dir, else the data dir of $KUBECONFIG's admin
// kubeconfig, else the default.
func TestServerDataDir(t *testing.T) {
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "tls", "ca.crt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	copied := t.TempDir() // an admin.kubeconfig copied out of its data dir
	for _, tc := range []struct {
		name       string
		kubeconfig string
		flag       bool
		want       string
	}{
		{"--data-dir wins", filepath.Join(data, FileName), true, "/given"},
		{"$KUBECONFIG in a data dir", filepath.Join(data, FileName), false, data},
		{"$KUBECONFIG elsewhere", filepath.Join(copied, FileName), false, "/given"},
		{"$KUBECONFIG another file", filepath.Join(data, "alice.kubeconfig"), false, "/given"},
		{"$KUBECONFIG a list", filepath.Join(data, FileName) + string(filepath.ListSeparator) + "/x", false, "/given"},
		{"no $KUBECONFIG", "", false, "/given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Lookup{DataDir: "/given", DataDirSet: tc.flag, Env: func(string) string { return tc.kubeconfig }}
			if got := l.ServerDataDir(); got != tc.want {
				t.Errorf("ServerDataDir() = %s, want %s", got, tc.want)
			}
		})
	}
}
