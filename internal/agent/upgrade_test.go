package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/version"
	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestWriteVerifiedRefusesAnotherSum(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "muster-agent")
	if err := os.WriteFile(exe, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := []byte("new agent")
	wrong := strings.Repeat("0", 64)
	_, err := writeVerified(bytes.NewReader(body), &api.AgentUpgrade{Version: "v2", Sha256: wrong}, wrong, exe)
	if err == nil || !strings.Contains(err.Error(), hexSum(body)) || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "nothing was replaced") {
		t.Fatalf("err = %v, want one naming both sums", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("a refused download left files behind: %v", entries)
	}
	if b, _ := os.ReadFile(exe); string(b) != "old" {
		t.Fatalf("the agent changed: %q", b)
	}
	tmp, err := writeVerified(bytes.NewReader(body), &api.AgentUpgrade{Version: "v2"}, strings.ToUpper(hexSum(body)), exe)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tmp); err != nil || fi.Mode().Perm() != 0o755 || filepath.Dir(tmp) != dir {
		t.Fatalf("temp file %s: %v %v", tmp, fi, err)
	}
}

func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSelfCheck(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if err := selfCheck(ctx, script(t, dir, "good", `echo "muster-agent v2 (go1.x, linux/amd64)"`), "v2"); err != nil {
		t.Errorf("good build: %v", err)
	}
	err := selfCheck(ctx, script(t, dir, "broken", `echo "panic: boom" >&2; exit 1`), "v2")
	if err == nil || !strings.Contains(err.Error(), "not installed") || !strings.Contains(err.Error(), "panic: boom") {
		t.Errorf("broken build: %v", err)
	}
	if err := selfCheck(ctx, script(t, dir, "other", `echo "muster-agent v3 (go1.x)"`), "v2"); err == nil || !strings.Contains(err.Error(), "not version v2") {
		t.Errorf("another version: %v", err)
	}
}

func TestMarkerRoundTrip(t *testing.T) {
	d := dataDir(t.TempDir())
	want := &upgradeMarker{From: "v1", To: "v2", Plan: "abc", Deadline: time.Now().Add(time.Minute).Round(0).UTC()}
	if err := writeMarker(d, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(d.path(upgradeMarkerFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("marker mode: %v %v", fi, err)
	}
	got, err := readMarker(d)
	if err != nil || *got != *want {
		t.Fatalf("read %+v, %v; want %+v", got, err, want)
	}
	removeMarker(d)
	if _, err := readMarker(d); !os.IsNotExist(err) {
		t.Fatalf("after remove: %v", err)
	}
}

func TestSwapBinaryKeepsAWorkingExecutable(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "muster-agent")
	if err := os.WriteFile(exe, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe+previousSuffix, []byte("older"), 0o755); err != nil {
		t.Fatal(err)
	}
	newBin := filepath.Join(dir, ".muster-agent.upgrade-1")
	if err := os.WriteFile(newBin, []byte("new"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The running agent holds its executable open: that file must stay
	// intact, whatever its name becomes.
	running, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	if err := swapBinary(exe, newBin); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{exe: "new", exe + previousSuffix: "old"} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
	if b, _ := os.ReadFile(running.Name()); string(b) != "new" {
		t.Errorf("exe = %q", b)
	}
	if _, err := os.Stat(newBin); !os.IsNotExist(err) {
		t.Errorf("the temp file is still there: %v", err)
	}
	// A failed install (no new file) replaces nothing.
	if err := swapBinary(exe, filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "nothing was replaced") {
		t.Errorf("missing new binary: %v", err)
	}
	if b, _ := os.ReadFile(exe); string(b) != "new" {
		t.Errorf("after a failed swap exe = %q", b)
	}
}

func testAgent(t *testing.T) *agent {
	var out syncWriter
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(out.String())
		}
	})
	return &agent{cfg: Config{Out: &out, SelfUpgrade: true}, dir: dataDir(t.TempDir())}
}

type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestResumeUpgrade(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The new agent checks in before the deadline: confirmed, marker gone.
	a := testAgent(t)
	if err := writeMarker(a.dir, &upgradeMarker{From: "v0", To: version.Version, Plan: "p", Deadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	a.resumeUpgrade(ctx)
	a.noteCheckIn()
	select {
	case <-a.upgrade.confirmed:
	case <-time.After(5 * time.Second):
		t.Fatal("a checked-in upgrade was not confirmed")
	}
	if _, err := readMarker(a.dir); !os.IsNotExist(err) {
		t.Errorf("marker after confirmation: %v", err)
	}

	// The previous agent, put back: the marker keeps the reason for the plan.
	a = testAgent(t)
	_ = writeMarker(a.dir, &upgradeMarker{From: version.Version, To: "v9", Plan: "p", Deadline: time.Now()})
	a.resumeUpgrade(ctx)
	if m, err := readMarker(a.dir); err != nil || !strings.Contains(m.Failed, "started instead of v9") {
		t.Errorf("marker of an undone upgrade: %+v, %v", m, err)
	}
	_, err := a.upgradeForPlan(ctx, &api.MachinePlan{Spec: api.MachinePlanSpec{AgentUpgrade: &api.AgentUpgrade{Version: "v9"}}, Status: api.MachinePlanStatus{Checksum: "p"}})
	if err == nil || !strings.Contains(err.Error(), "upgrading to muster-agent v9 failed: muster-agent "+version.Version+" started instead of v9") {
		t.Errorf("plan error: %v", err)
	}

	// Past the deadline with nothing to put back (no <exe>.previous beside
	// the test binary): the agent carries on rather than stop.
	a = testAgent(t)
	_ = writeMarker(a.dir, &upgradeMarker{From: "v0", To: version.Version, Plan: "p", Deadline: time.Now().Add(-time.Second)})
	a.resumeUpgrade(ctx)
	select {
	case <-a.upgrade.confirmed:
	default:
		t.Fatal("an upgrade that cannot be undone blocks the agent")
	}
	if !strings.Contains(a.cfg.Out.(*syncWriter).String(), "keeps running") {
		t.Errorf("output: %s", a.cfg.Out.(*syncWriter).String())
	}
}

func TestNoSelfUpgradeInsideTheServer(t *testing.T) {
	a := testAgent(t)
	a.cfg.SelfUpgrade = false
	a.resumeUpgrade(context.Background())
	_, err := a.upgradeForPlan(context.Background(), &api.MachinePlan{Spec: api.MachinePlanSpec{AgentUpgrade: &api.AgentUpgrade{Version: "v9"}}})
	if err == nil || !strings.Contains(err.Error(), "inside muster-server") {
		t.Fatalf("err = %v", err)
	}
}
