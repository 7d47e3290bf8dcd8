package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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

type kubeAPIServer struct {
	url, dir string
	log      *syncBuffer
}

// kubectl runs kubectl against the kube-apiserver with a static token.
func (k *kubeAPIServer) kubectl(token string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"--server", k.url, "--insecure-skip-tls-verify", "--token", token}
	out, err := exec.CommandContext(ctx, "kubectl", append(base, args...)...).CombinedOutput()
	return string(out), err
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startKubeAPIServer runs a real kube-apiserver on a real standalone kine
// (SQLite), with a front proxy whose client certificate the test keeps, and
// static tokens: "admin" (system:masters), "muster" (muster's delegation
// user) and "bob" (no rights until a test grants some).
func startKubeAPIServer(t *testing.T, peer string) (*kubeAPIServer, tls.Certificate) {
	dir := t.TempDir()
	kinePort := freePort(t)
	kine := exec.Command(filepath.Join(peer, "kine"), "--endpoint",
		"sqlite://"+dir+"/state.db?_journal=WAL&cache=shared&_busy_timeout=30000&_txlock=immediate", "--listen-address", fmt.Sprintf("127.0.0.1:%d", kinePort))
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
	cmd.Stdout, cmd.Stderr = k.log, k.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
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

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestAggregatedMode: muster behind a real kube-apiserver. Users reach it
// through the aggregator with the kube-apiserver's credentials and RBAC,
// muster asks the kube-apiserver (SubjectAccessReview) what a user may do,
// and agents keep joining muster directly.
func TestAggregatedMode(t *testing.T) {
	peer := peerDir(t)
	kube, proxy := startKubeAPIServer(t, peer)
	ip := hostIP(t)

	// Muster's delegation user reaches the kube-apiserver with a token.
	delegateKubeconfig := filepath.Join(t.TempDir(), "delegate.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: kube, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: muster, user: {token: muster-token}}]
contexts: [{name: kube, context: {cluster: kube, user: muster}}]
current-context: kube
`, kube.url)
	if err := os.WriteFile(delegateKubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}

	s := newServer(t, ip, "", "--tls-san", "muster-api.muster.svc",
		"--authentication-kubeconfig", delegateKubeconfig, "--authorization-kubeconfig", delegateKubeconfig)
	// The delegation user must be allowed before muster starts, which
	// reads the front-proxy ConfigMap at start-up; the manifests muster
	// prints hold the same bindings, applied again below with the rest.
	rbac := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: muster-io:auth-delegator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: muster-delegate}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: muster-io:auth-reader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: muster-delegate}]
`
	rbacFile := filepath.Join(t.TempDir(), "rbac.yaml")
	_ = os.WriteFile(rbacFile, []byte(rbac), 0o644)
	if out, err := kube.kubectl("admin-token", "apply", "-f", rbacFile); err != nil {
		t.Fatalf("applying the delegation RBAC: %v\n%s", err, out)
	}
	s.start()

	out, err := exec.Command(serverBin, "manifests", "aggregated", "--data-dir", s.dataDir, "--address", ip, "--port", fmt.Sprint(s.port), "--user", "muster-delegate").CombinedOutput()
	if err != nil {
		t.Fatalf("muster-server manifests aggregated: %v\n%s", err, out)
	}
	manifests := filepath.Join(t.TempDir(), "aggregated.yaml")
	_ = os.WriteFile(manifests, out, 0o644)
	if out, err := kube.kubectl("admin-token", "apply", "-f", manifests); err != nil {
		t.Fatalf("applying the aggregated manifests: %v\n%s", err, out)
	}
	waitFor(t, 90*time.Second, "the APIService to be Available", func() bool {
		out, _ := kube.kubectl("admin-token", "get", "apiservice", "v1alpha1.muster.io", "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
		return out == "True"
	})

	// Through the aggregator: create, list, server-side apply, explain.
	if out, err := kube.kubectl("admin-token", "create", "-f", testdata("manifests", "cluster.yaml")); err != nil {
		t.Fatalf("creating a Cluster through the aggregator: %v\n%s", err, out)
	}
	if out := s.mustKubectl("get", "cluster", "edge-east", "-o", "name"); !strings.Contains(out, "edge-east") {
		t.Fatalf("muster does not have the cluster created through the aggregator: %s", out)
	}
	if out, err := kube.kubectl("admin-token", "apply", "--server-side", "-f", testdata("manifests", "machine.yaml")); err != nil {
		t.Fatalf("server-side apply through the aggregator: %v\n%s", err, out)
	}
	if out, err := kube.kubectl("admin-token", "explain", "machine.spec"); err != nil || !strings.Contains(out, "cluster") {
		t.Fatalf("kubectl explain machine through the aggregator: %v\n%s", err, out)
	}

	// A watch through the aggregator sees a machine that joins muster directly.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	watch := exec.CommandContext(ctx, "kubectl", "--server", kube.url, "--insecure-skip-tls-verify", "--token", "admin-token", "get", "machines", "--watch", "-o", "name")
	watchOut := &syncBuffer{}
	watch.Stdout, watch.Stderr = watchOut, watchOut
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	a := startAgent(t, s, t.TempDir(), "--token", newToken(t, s), "--node-name", "aggregated-1")
	a.waitOutput("running as machine aggregated-1", 60*time.Second)
	waitFor(t, 60*time.Second, "the watch through the aggregator to see the joined machine", func() bool {
		return strings.Contains(watchOut.String(), "machine.muster.io/aggregated-1")
	})
	waitFor(t, 60*time.Second, "the joined machine Running, seen through the aggregator", func() bool {
		out, _ := kube.kubectl("admin-token", "get", "machine", "aggregated-1", "-o", "jsonpath={.status.phase}")
		return out == "Running"
	})

	// bob may only get machines (kube RBAC). Through the aggregator he can
	// get and cannot delete.
	role := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: machine-getter}
rules: [{apiGroups: [muster.io], resources: [machines], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bob-gets-machines}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: machine-getter}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}]
`
	roleFile := filepath.Join(t.TempDir(), "role.yaml")
	_ = os.WriteFile(roleFile, []byte(role), 0o644)
	if out, err := kube.kubectl("admin-token", "apply", "-f", roleFile); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := kube.kubectl("bob-token", "get", "machine", "aggregated-1", "-o", "name"); err != nil {
		t.Errorf("bob getting a machine through the aggregator: %v\n%s", err, out)
	}
	if out, err := kube.kubectl("bob-token", "delete", "machine", "aggregated-1"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("bob deleting a machine through the aggregator: %v\n%s", err, out)
	}

	// Straight to muster as the front proxy would: muster believes the
	// headers only from the front proxy's certificate, and asks the
	// kube-apiserver (SubjectAccessReview) what bob may do.
	front := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool(), Certificates: []tls.Certificate{proxy}}}}
	asBob := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, s.url()+path, nil)
		req.Header.Set("X-Remote-User", "bob")
		resp, err := front.Do(req)
		if err != nil {
			t.Fatalf("%s %s as bob: %v", method, path, err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if code, body := asBob(http.MethodGet, "/apis/muster.io/v1alpha1/machines/aggregated-1"); code != http.StatusOK {
		t.Errorf("bob's GET through the front proxy's identity: %d %s", code, body)
	}
	if code, body := asBob(http.MethodDelete, "/apis/muster.io/v1alpha1/machines/aggregated-1"); code != http.StatusForbidden || !strings.Contains(body, `User \"bob\" cannot delete`) {
		t.Errorf("bob's DELETE straight to muster: %d %s; want muster's 403 from the SubjectAccessReview", code, body)
	}
	// Headers without the front proxy's certificate are not believed.
	plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	req, _ := http.NewRequest(http.MethodGet, s.url()+"/apis/muster.io/v1alpha1/machines", nil)
	req.Header.Set("X-Remote-User", "admin")
	req.Header.Set("X-Remote-Group", "system:masters")
	if resp, err := plain.Do(req); err != nil {
		t.Errorf("forged front-proxy headers: %v", err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged front-proxy headers without its certificate: %d; want 401", resp.StatusCode)
	}

	// GET latency, direct and through the aggregator (200 each, interleaved).
	adminPair, err := tls.LoadX509KeyPair(filepath.Join(s.dataDir, "tls", "admin.crt"), filepath.Join(s.dataDir, "tls", "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	adminDirect := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool(), Certificates: []tls.Certificate{adminPair}}}}
	kubeClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var direct, aggregated []time.Duration
	for i := 0; i < 200; i++ {
		start := time.Now()
		if resp, err := adminDirect.Get(s.url() + "/apis/muster.io/v1alpha1/machines/aggregated-1"); err == nil {
			resp.Body.Close()
			direct = append(direct, time.Since(start))
		}
		req, _ := http.NewRequest(http.MethodGet, kube.url+"/apis/muster.io/v1alpha1/machines/aggregated-1", nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		start = time.Now()
		if resp, err := kubeClient.Do(req); err == nil {
			resp.Body.Close()
			aggregated = append(aggregated, time.Since(start))
		}
	}
	p := func(d []time.Duration, q float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[int(q*float64(len(d)-1))].Round(10 * time.Microsecond)
	}
	t.Logf("GET machine, 200 each: direct p50 %v p99 %v; through the aggregator p50 %v p99 %v",
		p(direct, 0.5), p(direct, 0.99), p(aggregated, 0.5), p(aggregated, 0.99))
}
