// Package tree checks the repository itself: what a clone carries and what
// a build leaves behind, so that a binary committed by a stray `go build`
// (170 MB once) is caught by the suite instead of by the next clone.
package tree

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// root is the repository's top directory.
func root(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func git(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestNoLargeTrackedFile: every tracked file is source, docs or a small
// fixture; anything over 1 MiB is a build output or belongs elsewhere.
func TestNoLargeTrackedFile(t *testing.T) {
	out, err := git(t, "ls-files", "-z")
	if err != nil {
		t.Fatalf("git ls-files: %v\n%s", err, out)
	}
	const limit = 1 << 20
	for _, f := range strings.Split(strings.TrimRight(out, "\x00"), "\x00") {
		fi, err := os.Lstat(filepath.Join(root(t), f))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Size() > limit {
			t.Errorf("%s is tracked and %d bytes (> 1 MiB): build outputs are never committed; `git rm --cached %s` and ignore it", f, fi.Size(), f)
		}
	}
}

// TestBuildOutputsIgnored: what `go build ./cmd/...` (one binary per
// directory, named for it) and `make build` leave behind is ignored.
func TestBuildOutputsIgnored(t *testing.T) {
	cmds, err := os.ReadDir(filepath.Join(root(t), "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{"bin/muster-server", "bin/muster-agent", "bin/kubectl-muster", "muster-data/db/state.db", "x.test"}
	for _, c := range cmds {
		if c.IsDir() {
			paths = append(paths, c.Name())
		}
	}
	for _, p := range paths {
		if out, err := git(t, "check-ignore", "--no-index", "-q", p); err != nil {
			t.Errorf("%s is not ignored by .gitignore (git check-ignore: %v %s): add it, so a build cannot be committed by accident", p, err, out)
		}
	}
}

// TestMakeDefaultBuilds: a bare `make` builds; it must never run tests or
// rewrite the docs' screenshots.
func TestMakeDefaultBuilds(t *testing.T) {
	cmd := exec.Command("make", "-n")
	cmd.Dir = root(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "go build") || strings.Contains(s, "go test") || strings.Contains(s, "screenshots") {
		t.Errorf("a bare make should only build; make -n prints:\n%s", s)
	}
}
