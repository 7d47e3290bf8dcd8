package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/pki"
)

// peerDir builds (or finds cached) the real kube-apiserver and kine with
// hack/peer.sh, as CI does on a fresh machine.
func peerDir(t *testing.T) string {
	out, err := exec.Command(filepath.Join("..", "..", "hack", "peer.sh")).Output()
	if err != nil {
		t.Fatalf("hack/peer.sh (builds kube-apiserver and kine from the Go module proxy): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// hostIP is an address of this machine that is not loopback: Kubernetes
// refuses loopback addresses in endpoints.
func hostIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Fatalf("this machine has no non-loopback IPv4 address for the aggregator to reach muster on")
	return ""
}

// startKubeAPIServer runs a real kube-apiserver on a real standalone kine
// (SQLite), with a front proxy whose client certificate the test keeps, and
// static tokens: "admin" (system:masters), "muster" (muster's delegation
// user) and "bob" (no rights until a test grants some). extra are more
// flags (a test's own serving certificate or client CA).
func startKubeAPIServer(t *testing.T, peer string, extra ...string) (*kubeAPIServer, tls.Certificate) {
	dir := t.TempDir()
	kinePort := freePort(t)
	kine := exec.Command(filepath.Join(peer, "kine"), "--endpoint",
		"sqlite://"+dir+"/state.db?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate", "--listen-address", fmt.Sprintf("127.0.0.1:%d", kinePort),
		// Its metrics would take :8080, which tests running beside it (and
		// anything else on the host) may hold.
		"--metrics-bind-address", "0")
	kineLog := &syncBuffer{}
	kine.Stdout, kine.Stderr = kineLog, kineLog
	if err := kine.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kine.Process.Kill(); _ = kine.Wait() })

	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa))
	pub, _ := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	writePEM(t, filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub)

	frontCA, err := pki.NewCA("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "front-proxy-ca.crt"), frontCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	proxyCert, proxyKey, err := frontCA.IssueClient("front-proxy-client", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "front-proxy-client.crt"), proxyCert, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "front-proxy-client.key"), proxyKey, 0o600)
	proxyPair, err := tls.X509KeyPair(proxyCert, proxyKey)
	if err != nil {
		t.Fatal(err)
	}
	tokens := "admin-token,admin,1,\"system:masters\"\nmuster-token,muster-delegate,2\nbob-token,bob,3\n"
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	k := &kubeAPIServer{url: fmt.Sprintf("https://127.0.0.1:%d", port), dir: dir, log: &syncBuffer{}}
	cmd := exec.Command(filepath.Join(peer, "kube-apiserver"),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", kinePort),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--cert-dir="+filepath.Join(dir, "certs"),
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1",
		"--authorization-mode=RBAC", "--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--service-cluster-ip-range=10.43.0.0/16",
		"--enable-aggregator-routing=true",
		"--requestheader-client-ca-file="+filepath.Join(dir, "front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+filepath.Join(dir, "front-proxy-client.crt"),
		"--proxy-client-key-file="+filepath.Join(dir, "front-proxy-client.key"),
	)
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = k.log, k.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	k.pids = []int{cmd.Process.Pid, kine.Process.Pid}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, k.url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		if resp, err := insecure.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready:\n%s\n--- kine ---\n%s", tail(k.log.String(), 3000), tail(kineLog.String(), 1000))
		}
		time.Sleep(300 * time.Millisecond)
	}
	return k, proxyPair
}
