package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestRunBounds: a command ends at its timeout with everything it started,
// however it holds its output pipe, and its failure says why.
func TestRunBounds(t *testing.T) {
	tests := []struct {
		name        string
		script      string
		timeout     time.Duration
		within      time.Duration
		wantErr     string
		wantExit    int
		wantOutput  string
		wantNoError bool
	}{
		{name: "background child holding the pipe is killed at the timeout",
			script: "sleep 25 & sleep 100", timeout: 2 * time.Second, within: 5 * time.Second,
			wantErr: "timed out after 2s", wantExit: -1},
		{name: "a command ignoring SIGTERM is killed at the timeout",
			script: "trap '' TERM; sleep 100", timeout: time.Second, within: 4 * time.Second,
			wantErr: "timed out after 1s", wantExit: -1},
		{name: "a daemon left running does not hold the result",
			script: "sleep 30 & echo started", timeout: time.Minute, within: pipeGrace + 3*time.Second,
			wantNoError: true, wantOutput: "started"},
		{name: "binary output stays within the limit as UTF-8",
			script: "head -c 20000 /dev/urandom; exit 4", timeout: time.Minute, within: 3 * time.Second,
			wantErr: "exit status 4", wantExit: 4},
		{name: "exit code and output of a failure",
			script: "echo broken >&2; exit 3", timeout: time.Minute, within: 3 * time.Second,
			wantErr: "exit status 3", wantExit: 3, wantOutput: "broken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res := run(context.Background(), tt.timeout, "sh", []string{"-c", tt.script}, nil)
			took := time.Since(start)
			t.Logf("took %s", took.Round(10*time.Millisecond))
			if took > tt.within {
				t.Errorf("took %s, want at most %s", took.Round(time.Millisecond), tt.within)
			}
			if tt.wantNoError {
				if res.err != nil {
					t.Errorf("err = %v, want none", res.err)
				}
			} else if res.err == nil || !strings.Contains(res.err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want %q", res.err, tt.wantErr)
			}
			if !tt.wantNoError && res.exitCode != tt.wantExit {
				t.Errorf("exit code %d, want %d", res.exitCode, tt.wantExit)
			}
			if !utf8.ValidString(res.output) || len(res.output) > maxOutput {
				t.Errorf("output is %d bytes, valid UTF-8 %v: want at most %d, valid", len(res.output), utf8.ValidString(res.output), maxOutput)
			}
			if !strings.Contains(res.output, tt.wantOutput) {
				t.Errorf("output %q, want %q in it", res.output, tt.wantOutput)
			}
		})
	}
}

// TestRunCapsOutputWhileReading: 200 MB of output costs the agent the cap,
// not the output, and the start and end of the output are kept.
func TestRunCapsOutputWhileReading(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := run(context.Background(), time.Minute, "sh", []string{"-c", "echo FIRST; head -c 200000000 /dev/zero | tr '\\0' x; echo; echo LAST"}, nil)
	runtime.ReadMemStats(&after)
	if res.err != nil {
		t.Fatal(res.err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("200 MB of output: %d KiB allocated while reading it", allocated>>10)
	if allocated > 8<<20 {
		t.Errorf("reading 200 MB of output allocated %d MiB: it is buffered, not capped while read", allocated>>20)
	}
	if len(res.output) > maxOutput {
		t.Errorf("output is %d bytes, want at most %d", len(res.output), maxOutput)
	}
	for _, want := range []string{"FIRST", "LAST", "bytes left out"} {
		if !strings.Contains(res.output, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestCappedBuffer(t *testing.T) {
	for _, chunk := range []int{1, 7, 1000, 5000, 1 << 20} {
		b := newCappedBuffer(maxOutput)
		total := 0
		for total < 3<<20 {
			p := []byte(strings.Repeat("y", chunk))
			if total == 0 {
				p[0] = 'A'
			}
			_, _ = b.Write(p)
			total += chunk
			if held := len(b.head) + len(b.tail); held > maxOutput {
				t.Fatalf("chunk %d: holds %d bytes, want at most %d", chunk, held, maxOutput)
			}
		}
		_, _ = b.Write([]byte("Z"))
		s := b.String()
		if len(s) > maxOutput || s[0] != 'A' || s[len(s)-1] != 'Z' {
			t.Errorf("chunk %d: %d bytes, first %q last %q", chunk, len(s), s[0], s[len(s)-1])
		}
	}
	b := newCappedBuffer(maxOutput)
	_, _ = b.Write([]byte("short"))
	if b.String() != "short" {
		t.Errorf("short output changed: %q", b.String())
	}
}

// TestRunPlanReportsFailures: why a plan failed is in the outputs that go
// into its status, not only in the agent's log.
func TestRunPlanReportsFailures(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		spec      api.MachinePlanSpec
		wantEntry string
		want      string
	}{
		{name: "a file that cannot be written",
			spec:      api.MachinePlanSpec{Files: []api.PlanFile{{Path: filepath.Join(notDir, "x.conf"), Content: "x"}}},
			wantEntry: filesOutput, want: "x.conf"},
		{name: "a command not found",
			spec:      api.MachinePlanSpec{Instructions: []api.PlanInstruction{{Name: "install", Command: "no-such-command-muster"}}},
			wantEntry: "install", want: "no-such-command-muster"},
		{name: "a timeout",
			spec:      api.MachinePlanSpec{Instructions: []api.PlanInstruction{{Name: "slow", Command: "sleep", Args: []string{"10"}, TimeoutSeconds: 1}}},
			wantEntry: "slow", want: "timed out after 1s"},
		{name: "a failing command without saveOutput",
			spec:      api.MachinePlanSpec{Instructions: []api.PlanInstruction{{Name: "fail", Command: "sh", Args: []string{"-c", "echo why >&2; exit 2"}}}},
			wantEntry: "fail", want: "why"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outputs, err := runPlan(context.Background(), &tt.spec)
			if err == nil {
				t.Fatal("the plan succeeded")
			}
			for _, o := range outputs {
				if o.Name == tt.wantEntry && strings.Contains(o.Output, tt.want) {
					return
				}
			}
			t.Errorf("no output %q says %q: %+v", tt.wantEntry, tt.want, outputs)
		})
	}
}

func TestFileModeKeepsSpecialBits(t *testing.T) {
	dir := t.TempDir()
	for _, mode := range []int32{0o644, 0o4755, 0o2750, 0o1777} {
		path := filepath.Join(dir, "f")
		if err := applyFile(api.PlanFile{Path: path, Content: "x", Mode: mode}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != fileMode(mode) {
			t.Errorf("mode %o written as %v, want %v", mode, fi.Mode(), fileMode(mode))
		}
	}
}

// TestHTTPProbeReusesItsConnection: runs of one HTTP probe share a
// connection, and stopping the probe closes it.
func TestHTTPProbeReusesItsConnection(t *testing.T) {
	var opened, open atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("ok", 1000)))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	p := newProber(api.PlanProbe{Name: "web", HTTPGet: &api.HTTPGetProbe{URL: srv.URL}})
	for i := 0; i < 20; i++ {
		if err := p.Probe(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("20 probe runs opened %d connections, want 1", n)
	}
	p.Close()
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := open.Load(); n != 0 {
		t.Errorf("%d connections still open after the probe stopped", n)
	}
}
