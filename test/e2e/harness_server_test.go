package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// muster runs a muster-server subcommand against this server's data dir.
func (s *server) muster(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.musterErr(args...)
	if err != nil {
		t.Fatalf("muster-server %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (s *server) musterErr(args ...string) (string, error) {
	cmd := exec.Command(serverBin, append(args, "--data-dir", s.dataDir)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func adminClient(b testing.TB, s *server) clientset.Interface {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
	if err != nil {
		b.Fatal(err)
	}
	// The measuring client must not be the bottleneck (client-go's default is 5/s).
	cfg.QPS, cfg.Burst = 1000, 1000
	return clientset.NewForConfigOrDie(cfg)
}

// names lists the objects of the kinds a join writes, to check that a
// refused or dry-run request changed nothing.
func (s *server) joinState(t *testing.T) string {
	t.Helper()
	return s.mustKubectl("get", "clusters,machines,machineplans,nodepasswords,clusterregistrations", "-o", "name")
}

// startHA starts n servers on 127.0.0.1..n sharing one PostgreSQL database:
// the first generates the server token, the others are given it.
// extra are flags every server gets (an etcd's TLS files).
func startHA(t *testing.T, dsn string, n int, extra ...string) []*server {
	t.Helper()
	first := newServer(t, "127.0.0.1", dsn, extra...)
	first.start()
	token := serverToken(t, first)
	servers := []*server{first}
	for i := 2; i <= n; i++ {
		s := newServer(t, fmt.Sprintf("127.0.0.%d", i), dsn, append(slices.Clone(extra), "--token", token)...)
		s.start()
		servers = append(servers, s)
	}
	return servers
}

func serverToken(t *testing.T, s *server) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// clientVia is server `from`'s admin identity talking to server `to`.
func clientVia(t testing.TB, from, to *server) clientset.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", from.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = to.url()
	cfg.QPS, cfg.Burst = 1000, 1000
	return clientset.NewForConfigOrDie(cfg)
}

func endpointAddresses(t *testing.T, c clientset.Interface) []string {
	t.Helper()
	list, err := c.MusterV1alpha1().ServerEndpoints().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Spec.Address)
	}
	return out
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
		code, body, err := s.get("/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		// A failing /readyz lists its checks: keep them, so a failure says which one.
		last = fmt.Errorf("readyz: %d %v\n%s", code, err, body)
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
	// The bundle is every CA the server trusts: during a CA rotation its
	// serving certificate is still the old CA's, while ca.crt is the new.
	pem, err := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca-bundle.crt"))
	if err != nil {
		pem, err = os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	}
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

func (s *server) caPEM(t *testing.T) []byte {
	b, err := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func startOwnPostgres(t *testing.T) *ownPostgres {
	t.Helper()
	// Not t.TempDir(): its parent is private to root, and PostgreSQL runs
	// as the postgres user.
	dir, err := os.MkdirTemp("", "muster-own-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pg := &ownPostgres{t: t, dir: dir}
	out := pg.run("start")
	t.Cleanup(func() { _ = exec.Command(postgresScript(), "stop", dir).Run() })
	lines := strings.Split(strings.TrimSpace(out), "\n")
	pg.dsn = lines[len(lines)-1]
	return pg
}
