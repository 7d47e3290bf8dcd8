package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"

	"github.com/jackc/pgx/v5"
	"github.com/muster-io/muster/internal/pki"
	clientset "github.com/muster-io/muster/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// writeTokenFile puts a join token in a 0600 file, as an operator would
// for --token-file.
func writeTokenFile(t *testing.T, token string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "join-token")
	if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// agentProc is one muster-agent process.
type agentProc struct {
	t       testing.TB
	dataDir string
	cmd     *exec.Cmd
	log     *syncBuffer
	exited  chan struct{}
}

// startAgent runs muster-agent against s with the given flags.
func startAgent(t testing.TB, s *server, dataDir string, args ...string) *agentProc {
	t.Helper()
	a := runAgentBinary(t, append([]string{"--server", s.url(), "--data-dir", dataDir}, args...)...)
	a.dataDir = dataDir
	return a
}

// runAgentBinary runs the muster-agent binary with args, killed at the end of the test.
func runAgentBinary(t testing.TB, args ...string) *agentProc {
	t.Helper()
	return runAgentBinaryEnv(t, nil, args...)
}

func newToken(t *testing.T, s *server, args ...string) string {
	t.Helper()
	return strings.TrimSpace(s.muster(t, append([]string{"token", "create"}, args...)...))
}

// storedBytes returns every byte the datastore holds for this server.
func storedBytes(t *testing.T, s *server, endpoint string) []byte {
	t.Helper()
	if endpoint == "" {
		var all []byte
		for _, f := range []string{"state.db", "state.db-wal"} {
			b, err := os.ReadFile(filepath.Join(s.dataDir, "db", f))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		if len(all) == 0 {
			t.Fatal("no SQLite data found to inspect")
		}
		return all
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT name, coalesce(value, ''::bytea), coalesce(old_value, ''::bytea) FROM kine")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var all []byte
	for rows.Next() {
		var name string
		var v, old []byte
		if err := rows.Scan(&name, &v, &old); err != nil {
			t.Fatal(err)
		}
		all = append(append(append(all, name...), v...), old...)
	}
	if len(all) == 0 {
		t.Fatal("no PostgreSQL rows found to inspect")
	}
	return all
}

func (a *agentProc) kill() {
	select {
	case <-a.exited:
	default:
		_ = a.cmd.Process.Signal(syscall.SIGKILL)
		<-a.exited
	}
}

// waitFor waits until the agent's output contains want.
func (a *agentProc) waitOutput(want string, timeout time.Duration) {
	a.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(a.log.String(), want) {
			return
		}
		select {
		case <-a.exited:
			if strings.Contains(a.log.String(), want) {
				return
			}
			a.t.Fatalf("muster-agent exited (%v) before %q:\n%s", a.cmd.ProcessState, want, a.log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	a.t.Fatalf("muster-agent did not say %q within %s:\n%s", want, timeout, a.log.String())
}

// waitExit waits for the agent to give up and returns its output.
func (a *agentProc) waitExit(timeout time.Duration) (string, int) {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.log.String(), a.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		a.t.Fatalf("muster-agent still running after %s:\n%s", timeout, a.log.String())
		return "", 0
	}
}

// joiner is an attacker's (or a test's) hand-made agent: its own clientID,
// node password and key, registering with whatever credential it is given.
type joiner struct {
	node, clientID, password string
	keyPEM                   []byte
}

func newJoiner(node string) *joiner {
	return &joiner{node: node, clientID: "cid-" + randomHex(8), password: randomHex(16)}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tokenClient is a bootstrap client holding join token tok.
func tokenClient(s *server, tok string) clientset.Interface {
	caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	return clientset.NewForConfigOrDie(&rest.Config{Host: s.url(), BearerToken: tok[strings.Index(tok, "::")+2:],
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}})
}

func tokenID(tok string) string {
	return tok[strings.Index(tok, "::")+2 : strings.LastIndex(tok, ".")]
}

// register makes one registration request; mutate may change it first.
func (j *joiner) register(ctx context.Context, c clientset.Interface, opts metav1.CreateOptions, mutate func(*api.ClusterRegistration)) (*api.ClusterRegistration, error) {
	key, keyPEM, err := pki.NewPrivateKey()
	if err != nil {
		return nil, err
	}
	csr, err := pki.NewCSR(j.node, key)
	if err != nil {
		return nil, err
	}
	random := randomHex(8)
	r := &api.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: api.RegistrationName(j.clientID, random)},
		Spec: api.ClusterRegistrationSpec{ClientID: j.clientID, ClientRandom: random, NodeName: j.node, CSR: csr,
			NodePassword: j.password},
	}
	if mutate != nil {
		mutate(r)
	}
	out, err := c.MusterV1alpha1().ClusterRegistrations().Create(ctx, r, opts)
	if err == nil {
		j.keyPEM = keyPEM
	}
	return out, err
}

// machineClient is the client of the machine a granted registration made.
func (j *joiner) machineClient(s *server, granted *api.ClusterRegistration) clientset.Interface {
	caPEM, _ := os.ReadFile(filepath.Join(s.dataDir, "tls", "ca.crt"))
	return clientset.NewForConfigOrDie(&rest.Config{Host: s.url(), QPS: 1000, Burst: 1000, TLSClientConfig: rest.TLSClientConfig{
		CAData: caPEM, CertData: granted.Status.Certificate, KeyData: j.keyPEM}})
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

// createRegistration submits a well-formed registration, changed by mutate.
func createRegistration(ctx context.Context, c clientset.Interface, node string, mutate func(*api.ClusterRegistration)) error {
	key, _, err := pki.NewPrivateKey()
	if err != nil {
		return err
	}
	csr, err := pki.NewCSR(node, key)
	if err != nil {
		return err
	}
	clientID, random := "client-"+node, fmt.Sprintf("r%d", time.Now().UnixNano())
	r := &api.ClusterRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: api.RegistrationName(clientID, random)},
		Spec: api.ClusterRegistrationSpec{ClientID: clientID, ClientRandom: random, NodeName: node, CSR: csr,
			NodePassword: "3f9c2a7e0b14d85c6e2f91a0c47b3d58"},
	}
	mutate(r)
	_, err = c.MusterV1alpha1().ClusterRegistrations().Create(ctx, r, metav1.CreateOptions{})
	return err
}

// heartbeat sends an agent's heartbeat with c's credential.
func heartbeat(ctx context.Context, c clientset.Interface) error {
	return c.MusterV1alpha1().RESTClient().Get().AbsPath(api.HeartbeatPath).Do(ctx).Error()
}
