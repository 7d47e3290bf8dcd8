package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// TestCARotation: 'muster-server certificate rotate-ca' replaces the
// cluster CA under three agents without any of them joining again. After
// the rotation is staged and the server restarted, each agent picks up the
// CA bundle and renews its certificate under the new CA, the same Machine
// throughout; one that was down meanwhile holds --retire back until it is
// back and has renewed; a join token made before the rotation is
// refused with words that say to make a new one; once the old CA is
// retired, a kubeconfig that trusts only the old CA cannot reach the
// server, a certificate of the old CA is refused, and a new agent joins
// with a new token.
func TestCARotation(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	oldCA := s.caPEM(t)
	oldKubeconfig, err := os.ReadFile(s.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	oldToken := newToken(t, s)

	names := []string{"carot-1", "carot-2", "carot-3"}
	dirs := make([]string, len(names))
	agents := make([]*agentProc, len(names))
	for i, n := range names {
		dirs[i] = t.TempDir()
		// A short check interval so that the test sees the rotation
		// within seconds; the default is a minute.
		agents[i] = startAgent(t, s, dirs[i], "--token", newToken(t, s), "--node-name", n, "--ca-check-interval", "1s")
	}
	for i, n := range names {
		agents[i].waitOutput("running as machine "+n, 60*time.Second)
	}
	uids := machineUIDs(t, s)
	if len(uids) != len(names) {
		t.Fatalf("want %d machines before the rotation, have %v", len(names), uids)
	}

	// One agent is down across the rotation: it cannot renew, so --retire
	// must be refused until it has. Killed before the new CA is staged:
	// running servers take a staged CA within seconds, and an agent that
	// saw it would renew before the test could stop it.
	agents[2].kill()
	out := s.muster(t, "certificate", "rotate-ca")
	if !strings.Contains(out, "--retire") {
		t.Errorf("rotate-ca does not say what to do next:\n%s", out)
	}
	// A second rotation before the first is retired would leave agents
	// behind: refused.
	if out, err := s.musterErr("certificate", "rotate-ca"); err == nil || !strings.Contains(out, "--retire") {
		t.Errorf("a second rotate-ca while one is under way: err %v, want a refusal naming --retire:\n%s", err, out)
	}
	s.stop()
	s.start()
	newCA := s.caPEM(t)
	if string(newCA) == string(oldCA) {
		t.Fatal("after rotate-ca and a restart the server's ca.crt is still the old CA")
	}
	code, cacerts, err := s.get("/cacerts")
	if err != nil || code != 200 || !strings.Contains(string(cacerts), string(pemBody(t, oldCA))) || !strings.Contains(string(cacerts), string(pemBody(t, newCA))) {
		t.Fatalf("/cacerts during the rotation: %d %v, want both CAs:\n%s", code, err, cacerts)
	}

	waitFor(t, 90*time.Second, "the running agents to hold a certificate of the new CA", func() bool {
		for _, d := range dirs[:2] {
			if !signedBy(filepath.Join(d, "client.crt"), newCA) {
				return false
			}
		}
		return true
	})
	out, err = s.musterErr("certificate", "rotate-ca", "--retire")
	if err == nil || !strings.Contains(out, "carot-3") || strings.Contains(out, "carot-1") {
		t.Fatalf("--retire while carot-3 holds only a certificate of the old CA: err %v, want a refusal naming carot-3 alone:\n%s", err, out)
	}
	// Back up with its stored certificate of the old CA, it catches up.
	agents[2] = startAgent(t, s, dirs[2], "--node-name", names[2], "--ca-check-interval", "1s")
	waitFor(t, 90*time.Second, "every agent to hold a certificate of the new CA", func() bool {
		for _, d := range dirs {
			if !signedBy(filepath.Join(d, "client.crt"), newCA) {
				return false
			}
		}
		return true
	})
	c := adminClient(t, s)
	waitFor(t, 60*time.Second, "every agent Running under the new CA", func() bool { return allRunning(c, names...) })
	if got := machineUIDs(t, s); fmt.Sprint(got) != fmt.Sprint(uids) {
		t.Errorf("the rotation changed the machines (a new registration?): before %v, after %v", uids, got)
	}

	// Each new-CA certificate came from a renewal of the Machine the agent
	// already had (spec.machineUID set by the server), not from a join.
	regs, err := c.MusterV1alpha1().ClusterRegistrations().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := map[string]bool{}
	for _, r := range regs.Items {
		if r.Status.Phase != "Granted" || !strings.HasPrefix(r.Status.Machine, "carot-") || !certSignedBy(r.Status.Certificate, newCA) {
			continue
		}
		want := ""
		for _, u := range uids {
			if strings.HasPrefix(u, r.Status.Machine+"=") {
				want = strings.TrimPrefix(u, r.Status.Machine+"=")
			}
		}
		if r.Spec.MachineUID == "" || r.Spec.MachineUID != want {
			t.Errorf("registration %s granted a new-CA certificate to %s as a new join (machineUID %q, the Machine's %q)", r.Name, r.Status.Machine, r.Spec.MachineUID, want)
		}
		renewed[r.Status.Machine] = true
	}
	if len(renewed) != len(names) {
		t.Errorf("renewals under the new CA found for %v, want all of %v", renewed, names)
	}

	// A token made before the rotation pins the old CA alone.
	late := startAgent(t, s, t.TempDir(), "--token", oldToken, "--node-name", "carot-late")
	if out, code := late.waitExit(60 * time.Second); code == 0 || !strings.Contains(out, "make a new token") {
		t.Errorf("a pre-rotation token: exit %d, want a refusal that says to make a new token:\n%s", code, out)
	}

	out = s.muster(t, "certificate", "rotate-ca", "--retire")
	if !strings.Contains(out, "retired") {
		t.Errorf("rotate-ca --retire says:\n%s", out)
	}
	s.stop()
	s.start()
	if string(s.caPEM(t)) != string(newCA) {
		t.Fatal("retiring changed the current CA")
	}
	// The agents reach the server, now serving with the new CA only, and
	// take the bundle of one CA.
	waitFor(t, 90*time.Second, "every agent to hold the new CA alone", func() bool {
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, "ca.crt"))
			if err != nil || string(b) != string(newCA) {
				return false
			}
		}
		return true
	})
	c = adminClient(t, s)
	waitFor(t, 60*time.Second, "every agent Running after the old CA was retired", func() bool { return allRunning(c, names...) })
	if got := machineUIDs(t, s); fmt.Sprint(got) != fmt.Sprint(uids) {
		t.Errorf("retiring the old CA changed the machines: before %v, after %v", uids, got)
	}

	// A kubeconfig of the old CA cannot verify the server any more.
	oldPath := filepath.Join(t.TempDir(), "old.kubeconfig")
	if err := os.WriteFile(oldPath, oldKubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectlAs(oldPath, "get", "machines"); err == nil || !strings.Contains(out, "certificate signed by unknown authority") {
		t.Errorf("kubectl trusting only the old CA: err %v, want a TLS verification failure:\n%s", err, out)
	}
	// A client certificate of the old CA, even trusting the new CA, is refused.
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
	if out, err := kubectlAs(oldCertPath, "get", "machines"); err == nil || !strings.Contains(out, "You must be logged in") {
		t.Errorf("kubectl with a client certificate of the retired CA: err %v, want 401 (You must be logged in):\n%s", err, out)
	}

	// Joining works with a token made now.
	fresh := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "carot-4")
	fresh.waitOutput("running as machine carot-4", 60*time.Second)
}

// machineUIDs lists the machines as name=uid, sorted by name.
func machineUIDs(t *testing.T, s *server) []string {
	t.Helper()
	list, err := adminClient(t, s).MusterV1alpha1().Machines().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list.Items {
		out = append(out, m.Name+"="+string(m.UID))
	}
	return out
}

// signedBy reports whether the certificate in path verifies as a client
// certificate against caPEM alone.
func signedBy(path string, caPEM []byte) bool {
	b, err := os.ReadFile(path)
	return err == nil && certSignedBy(b, caPEM)
}

// certSignedBy reports whether the PEM certificate b verifies as a client
// certificate against caPEM alone.
func certSignedBy(b, caPEM []byte) bool {
	block, _ := pem.Decode(b)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// pemBody is the base64 body of a PEM certificate, to find it in a bundle.
func pemBody(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("not PEM: %q", certPEM)
	}
	return pem.EncodeToMemory(block)
}
