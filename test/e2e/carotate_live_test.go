package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/internal/liveness"
	"github.com/muster-io/muster/internal/testenv/pgtest"
)

// TestCARotationLive: 'muster-server certificate rotate-ca' and its
// --retire reach a running server with 20 real agents, without a restart
// of the server (the same process throughout) and without any agent
// joining again: every agent holds a certificate of the new CA, renewed on
// its own Machine; after --retire the server serves a certificate of the
// new CA, and an old admin kubeconfig and an old agent certificate are
// refused.
func TestCARotationLive(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	pid := s.cmd.Process.Pid
	oldCA := s.caPEM(t)
	oldKubeconfig, err := os.ReadFile(s.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}

	const n = 20
	token := newToken(t, s)
	dirs := make([]string, n)
	names := make([]string, n)
	agents := make([]*agentProc, n)
	for i := range n {
		dirs[i], names[i] = t.TempDir(), fmt.Sprintf("live-%02d", i)
		// A short check interval so that the rotation is seen within
		// seconds; the default is a minute.
		agents[i] = startAgent(t, s, dirs[i], "--token", token, "--node-name", names[i], "--ca-check-interval", "1s")
	}
	for i := range n {
		agents[i].waitOutput("running as machine "+names[i], 90*time.Second)
	}
	uids := machineUIDs(t, s)
	if len(uids) != n {
		t.Fatalf("want %d machines before the rotation, have %v", n, uids)
	}
	// An agent's certificate of the old CA, kept to try it after --retire.
	oldAgentCert := readPair(t, dirs[0])
	if code := getAs(t, s, oldAgentCert, oldCA, "/apis/muster.io/v1alpha1/machines/"+names[0]); code == http.StatusUnauthorized {
		t.Fatalf("the agent's own certificate before the rotation: %d, want it authenticated", code)
	}

	start := time.Now()
	out := s.muster(t, "certificate", "rotate-ca")
	if !strings.Contains(out, "no restart") {
		t.Errorf("rotate-ca does not say that no restart is needed:\n%s", out)
	}
	var newCA []byte
	waitFor(t, 30*time.Second, "the running server to take the new CA and serve both on /cacerts", func() bool {
		newCA = s.caPEM(t)
		if string(newCA) == string(oldCA) {
			return false
		}
		code, b, err := s.get("/cacerts")
		return err == nil && code == 200 && strings.Contains(string(b), string(pemBody(t, oldCA))) && strings.Contains(string(b), string(pemBody(t, newCA)))
	})
	waitFor(t, 90*time.Second, "all 20 agents to hold a certificate of the new CA", func() bool {
		for _, d := range dirs {
			if !signedBy(filepath.Join(d, "client.crt"), newCA) {
				return false
			}
		}
		return true
	})
	t.Logf("FIGURE: %d agents moved to the new CA %.1f s after rotate-ca, no server restart", n, time.Since(start).Seconds())
	c := adminClient(t, s)
	waitFor(t, 60*time.Second, "every agent Running under the new CA", func() bool { return allRunning(c, names...) })
	if got := machineUIDs(t, s); fmt.Sprint(got) != fmt.Sprint(uids) {
		t.Errorf("the rotation changed the machines (a new registration?): before %v, after %v", uids, got)
	}
	// Every certificate of the new CA came from a renewal of the Machine
	// the agent had (spec.machineUID), none from a join.
	regs, err := c.MusterV1alpha1().ClusterRegistrations().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := map[string]bool{}
	for _, r := range regs.Items {
		if r.Status.Phase != "Granted" || !certSignedBy(r.Status.Certificate, newCA) {
			continue
		}
		if r.Spec.MachineUID == "" {
			t.Errorf("registration %s granted a new-CA certificate to %s as a new join", r.Name, r.Status.Machine)
		}
		renewed[r.Status.Machine] = true
	}
	if len(renewed) != n {
		t.Errorf("renewals under the new CA found for %d machines (%v), want %d", len(renewed), renewed, n)
	}

	out = s.muster(t, "certificate", "rotate-ca", "--retire")
	if !strings.Contains(out, "retired") {
		t.Errorf("rotate-ca --retire says:\n%s", out)
	}
	oldPath := filepath.Join(t.TempDir(), "old.kubeconfig")
	if err := os.WriteFile(oldPath, oldKubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the running server to serve a certificate of the new CA alone", func() bool {
		out, err := kubectlAs(oldPath, "get", "machines")
		return err != nil && strings.Contains(out, "certificate signed by unknown authority")
	})
	// The old admin certificate, even trusting the new CA, is refused.
	cfg, err := clientcmd.Load(oldKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range cfg.Clusters {
		cl.CertificateAuthorityData = newCA
	}
	oldCertPath := filepath.Join(t.TempDir(), "old-cert.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, oldCertPath); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the old admin certificate to be refused", func() bool {
		out, err := kubectlAs(oldCertPath, "get", "machines")
		return err != nil && strings.Contains(out, "You must be logged in")
	})
	if code := getAs(t, s, oldAgentCert, newCA, "/apis/muster.io/v1alpha1/machines/"+names[0]); code != http.StatusUnauthorized {
		t.Errorf("an agent certificate of the retired CA: %d, want 401", code)
	}
	waitFor(t, 60*time.Second, "every agent to hold the new CA alone", func() bool {
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, "ca.crt"))
			if err != nil || string(b) != string(newCA) {
				return false
			}
		}
		return true
	})
	// The admin kubeconfig in the data dir was re-written under the new CA.
	c = adminClient(t, s)
	waitFor(t, 60*time.Second, "every agent Running after the old CA was retired", func() bool { return allRunning(c, names...) })
	if got := machineUIDs(t, s); fmt.Sprint(got) != fmt.Sprint(uids) {
		t.Errorf("retiring the old CA changed the machines: before %v, after %v", uids, got)
	}
	select {
	case <-s.exited:
		t.Fatal("the server exited during the rotation")
	default:
	}
	if s.cmd.Process.Pid != pid {
		t.Fatalf("the server was restarted (pid %d, was %d)", s.cmd.Process.Pid, pid)
	}
}

// TestCARotationLiveHA: with two servers on one PostgreSQL database, a
// rotation run against one server's data dir reaches both running servers:
// both serve the two CAs on /cacerts, the agent of each renews under the
// new CA, and after --retire both serve a certificate of the new CA,
// refuse the old admin kubeconfig, accept the new admin certificate, and
// still call each other (the leader counts the other server's agent as
// connected from its liveness report, fetched over the peer TLS), without
// a restart.
func TestCARotationLiveHA(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	servers := startHA(t, dsn, 2)
	oldCA := servers[0].caPEM(t)
	// One agent on each server.
	dirs := []string{t.TempDir(), t.TempDir()}
	for i, s := range servers {
		name := fmt.Sprintf("live-ha-%d", i+1)
		a := startAgent(t, s, dirs[i], "--token", newToken(t, servers[0]), "--node-name", name, "--ca-check-interval", "1s")
		a.waitOutput("running as machine "+name, 90*time.Second)
	}
	oldKubeconfig, err := os.ReadFile(servers[0].kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rotate := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(serverBin, append([]string{"certificate", "rotate-ca", "--data-dir", servers[0].dataDir}, args...)...)
		cmd.Env = append(os.Environ(), "MUSTER_DATASTORE_ENDPOINT="+dsn)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rotate-ca %v: %v\n%s", args, err, out)
		}
		return string(out)
	}

	rotate()
	var newCA []byte
	waitFor(t, 30*time.Second, "server 1 to take the new CA", func() bool {
		newCA = servers[0].caPEM(t)
		return string(newCA) != string(oldCA)
	})
	for i, s := range servers {
		waitFor(t, 30*time.Second, fmt.Sprintf("server %d to serve both CAs on /cacerts", i+1), func() bool {
			code, b, err := s.get("/cacerts")
			return err == nil && code == 200 && strings.Contains(string(b), string(pemBody(t, oldCA))) && strings.Contains(string(b), string(pemBody(t, newCA)))
		})
	}

	waitFor(t, 60*time.Second, "the agents of both servers to hold a certificate of the new CA", func() bool {
		return signedBy(filepath.Join(dirs[0], "client.crt"), newCA) && signedBy(filepath.Join(dirs[1], "client.crt"), newCA)
	})

	rotate("--retire")
	// Where each server's log stood at --retire.
	logMarks := []int{len(servers[0].log.String()), len(servers[1].log.String())}
	oldPath := filepath.Join(t.TempDir(), "old.kubeconfig")
	if err := os.WriteFile(oldPath, oldKubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		waitFor(t, 30*time.Second, fmt.Sprintf("server %d to serve a certificate of the new CA and refuse the old kubeconfig", i+1), func() bool {
			out, err := kubectlAs(oldPath, "--server", s.url(), "get", "machines")
			return err != nil && strings.Contains(out, "certificate signed by unknown authority")
		})
		// Server 1's admin kubeconfig, re-issued under the new CA while it
		// ran, works against both.
		waitFor(t, 30*time.Second, fmt.Sprintf("server %d to accept the new admin certificate", i+1), func() bool {
			_, err := clientVia(t, servers[0], s).MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
			return err == nil
		})
	}
	// Every server fetches the other's liveness report every 2 s with its
	// peer certificate, verifying the other's serving certificate: both
	// of the new CA alone once both servers have taken the retirement (a
	// fetch between one server taking it and the other may fail). Past
	// that, and past the 5 s the check below allows, the other server's
	// agent is still heard only if the fetches work under the new CA.
	var took time.Time
	waitFor(t, 60*time.Second, "both servers to take the retirement, and three peer fetches to go by", func() bool {
		if took.IsZero() {
			for i, s := range servers {
				if !strings.Contains(s.log.String()[logMarks[i]:], "it alone is trusted from now on") {
					return false
				}
			}
			took = time.Now()
		}
		return time.Since(took) > 3*liveness.PeerPollInterval+time.Second
	})
	// And each server still hears of both agents (LAST-SEEN), the one
	// connected to the other server through the other's report.
	for _, s := range servers {
		waitFor(t, 30*time.Second, "server "+s.url()+" to have heard both agents within 5 s", func() bool {
			out, err := s.kubectl("get", "machines", "--no-headers")
			if err != nil {
				return false
			}
			heard := 0
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				for j := 1; j < len(f); j++ {
					if f[j] == "ago" {
						if d, err := time.ParseDuration(f[j-1]); err == nil && d < 5*time.Second {
							heard++
						}
					}
				}
			}
			return heard == 2
		})
	}
	for i, s := range servers {
		select {
		case <-s.exited:
			t.Fatalf("server %d exited during the rotation", i+1)
		default:
		}
	}
}

// readPair loads an agent's client certificate and key from its data dir.
func readPair(t *testing.T, dir string) tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// getAs makes a GET to s with the client certificate pair, trusting caPEM
// alone, and returns the status code.
func getAs(t *testing.T, s *server, pair tls.Certificate, caPEM []byte, path string) int {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}}
	resp, err := client.Get(s.url() + path)
	if err != nil {
		t.Fatalf("GET %s with a client certificate: %v", path, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
