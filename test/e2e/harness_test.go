// Package e2e runs real muster-server processes over TLS and drives them with
// the real kubectl, on SQLite and on PostgreSQL: what a user would do,
// checked the way a user would check it.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/pgtest"
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

// server is one muster-server process.
type server struct {
	t        testing.TB
	host     string // the 127.0.0.x address it binds and advertises
	dataDir  string
	port     int
	endpoint string
	extra    []string
	cmd      *exec.Cmd
	log      *syncBuffer
	exited   chan struct{}
}

// startServer starts muster-server on a fresh data dir and waits for /readyz.
func startServer(t testing.TB, endpoint string, extra ...string) *server {
	t.Helper()
	s := newServer(t, "127.0.0.1", endpoint, extra...)
	s.start()
	return s
}

// newServer prepares a muster-server on host without starting it.
func newServer(t testing.TB, host, endpoint string, extra ...string) *server {
	t.Helper()
	s := &server{t: t, host: host, dataDir: t.TempDir(), port: freePort(t), endpoint: endpoint, extra: extra}
	t.Cleanup(s.stop)
	return s
}

// url is the server's HTTPS base URL.
func (s *server) url() string { return fmt.Sprintf("https://%s:%d", s.host, s.port) }

func (s *server) args() []string {
	args := []string{"--data-dir", s.dataDir, "--https-port", fmt.Sprint(s.port), "--bind-address", s.host, "--advertise-address", s.host}
	if s.endpoint != "" {
		args = append(args, "--datastore-endpoint", s.endpoint)
	}
	return append(args, s.extra...)
}

func (s *server) start() {
	s.t.Helper()
	s.launch()
	if err := s.waitReady(90 * time.Second); err != nil {
		s.t.Fatalf("server did not become ready: %v\n--- server log ---\n%s", err, s.log.String())
	}
}

// launch starts the process without waiting for readiness.
func (s *server) launch() {
	s.log = &syncBuffer{}
	s.cmd = exec.Command(serverBin, s.args()...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting muster-server: %v", err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
}

func (s *server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("muster-server exited: %v", s.cmd.ProcessState)
		default:
		}
		code, _, err := s.get("/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		last = fmt.Errorf("readyz: %d %v", code, err)
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// kill9 kills the server without letting it shut down.
func (s *server) kill9() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Errorf("muster-server did not stop within 30s of SIGTERM\n%s", s.log.String())
		s.kill9()
	}
}

func (s *server) kubeconfig() string { return filepath.Join(s.dataDir, "admin.kubeconfig") }

func (s *server) caPool() *x509.CertPool {
	pem, err := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	pool := x509.NewCertPool()
	if err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	return pool
}

// get makes an unauthenticated request that trusts the server's CA.
func (s *server) get(path string) (int, []byte, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	resp, err := client.Get(s.url() + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes(), nil
}

// kubectl runs the real kubectl as the admin and returns its output.
func (s *server) kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustKubectl fails the test when kubectl fails.
func (s *server) mustKubectl(args ...string) string {
	s.t.Helper()
	out, err := s.kubectl(args...)
	if err != nil {
		s.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

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

// bearerOf is the bearer credential of a full join token ("<id>.<secret>").
func bearerOf(token string) string { return token[strings.Index(token, "::")+2:] }

// certHTTPClient is an HTTP client of s that presents the client
// certificate an agent keeps in dir.
func certHTTPClient(t testing.TB, s *server, dir string) *http.Client {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	if err != nil {
		t.Fatalf("loading the agent's certificate: %v", err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: s.caPool(), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
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

// runAgentBinaryEnv is runAgentBinary with extra environment variables.
func runAgentBinaryEnv(t testing.TB, env []string, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{t: t, log: &syncBuffer{}, exited: make(chan struct{})}
	a.cmd = exec.Command(agentBin, args...)
	a.cmd.Env = append(os.Environ(), env...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting muster-agent: %v", err)
	}
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			t.Logf("muster-agent %v, the end of its output:\n%s", args, lastLines(a.log.String(), 40))
		}
	})
	return a
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
