// Package e2e runs real muster-server processes over TLS and drives them with
// the real kubectl, on SQLite and on PostgreSQL: what a user would do,
// checked the way a user would check it.
package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/muster-io/muster/internal/testenv/pgtest"
)

var serverBin, agentBin string

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(func() int {
		bin, cleanup, err := buildServer()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer cleanup()
		serverBin = bin
		agentBin = os.Getenv("MUSTER_AGENT_BIN")
		if agentBin == "" {
			agentBin = filepath.Join(filepath.Dir(bin), "muster-agent")
			if out, err := exec.Command("go", "build", "-o", agentBin, "github.com/muster-io/muster/cmd/agent").CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "e2e: building muster-agent: %v\n%s", err, out)
				return 1
			}
		}
		if _, err := exec.LookPath("kubectl"); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: kubectl is not on PATH; install it (apt-get install kubectl) — these tests drive the real kubectl")
			return 1
		}
		return m.Run()
	}))
}

// buildServer uses MUSTER_SERVER_BIN (set by `make test`) or builds the binary.
func buildServer() (string, func(), error) {
	if bin := os.Getenv("MUSTER_SERVER_BIN"); bin != "" {
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "muster-e2e-bin")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "muster-server")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/muster-io/muster/cmd/server")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", nil, fmt.Errorf("building muster-server: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// backend is a datastore the suite runs against.
type backend struct {
	name     string
	endpoint func(t testing.TB) string
}

var backends = []backend{
	{name: "sqlite", endpoint: func(testing.TB) string { return "" }},
	{name: "postgres", endpoint: func(t testing.TB) string { return pgtest.DSN(t) }},
}

// forEachBackend runs fn as a subtest on SQLite and on PostgreSQL.
func forEachBackend(t *testing.T, fn func(t *testing.T, endpoint string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.endpoint(t)) })
	}
}

// freePort hands out a port no other test of this run was given and that
// nothing listens on now. Tests run in parallel, and a port asked of the
// kernel (":0") comes from the ephemeral range, where it can be handed out
// again, or taken by any outgoing connection, before the server that was
// to listen on it starts; these come from below that range, each once.
func freePort(t testing.TB) int {
	t.Helper()
	for {
		port := int(portBase + nextPort.Add(1)%portSpan)
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue // in use by something outside this run
		}
		l.Close()
		return port
	}
}

const (
	// portBase and portSpan stay below Linux's default ephemeral range
	// (32768-60999, /proc/sys/net/ipv4/ip_local_port_range).
	portBase = 20000
	portSpan = 12000
)

// nextPort starts at a place of its own per test binary, so that two runs
// on one machine seldom try the same ports.
var nextPort atomic.Int64

func init() { nextPort.Store(int64(os.Getpid() % portSpan)) }

// syncBuffer collects a process's output from its two pipes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testdata returns the path of a file under the repository's testdata/.
func testdata(parts ...string) string {
	return filepath.Join(append([]string{"..", "..", "testdata"}, parts...)...)
}

// do sends method path to s with client and headers, and returns the
// status, the Retry-After header and the body.
func do(t testing.TB, client *http.Client, s *server, method, path string, body []byte, headers map[string]string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.url()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), b.String()
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
