package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/muster-io/muster/internal/pki"
	"github.com/muster-io/muster/internal/testenv/pgtest"
)

// kubeAPIServerOnlyCheck is a readiness check kube-apiserver has and
// muster-server (a standalone k8s.io/apiserver) does not.
const kubeAPIServerOnlyCheck = "[+]poststarthook/rbac/bootstrap-roles ok"

// downstreamCluster is a real kube-apiserver (hack/peer.sh) playing a
// cluster's control plane on this host, with a CA of the test's own: it
// signs its serving certificate for 127.0.0.1 and the client certificate
// Muster impersonates users with (in system:masters, so it may).
type downstreamCluster struct {
	*kubeAPIServer
	port              int
	caPEM             []byte
	proxyCert, proxyK []byte
}

func startDownstream(t *testing.T) *downstreamCluster {
	t.Helper()
	peer := peerDir(t)
	ca, err := pki.NewCA("downstream-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	serving, servingKey, err := ca.IssueServing("kube-apiserver", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	proxyCert, proxyKey, err := ca.IssueClient("muster-proxy", []string{"system:masters"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.crt": ca.CertPEM, "serving.crt": serving, "serving.key": servingKey} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k, _ := startKubeAPIServer(t, peer, "--client-ca-file="+filepath.Join(dir, "ca.crt"),
		"--tls-cert-file="+filepath.Join(dir, "serving.crt"), "--tls-private-key-file="+filepath.Join(dir, "serving.key"))
	var port int
	if _, err := fmt.Sscanf(k.url, "https://127.0.0.1:%d", &port); err != nil {
		t.Fatal(err)
	}
	return &downstreamCluster{kubeAPIServer: k, port: port, caPEM: ca.CertPEM, proxyCert: proxyCert, proxyK: proxyKey}
}

// indentPEM indents every line of a PEM block by n spaces, for a YAML block scalar.
func indentPEM(n int, b []byte) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n"+pad)
}

// grantMusterRoles binds, in the cluster's RBAC, Muster's operators to
// cluster-admin and its viewers to reading namespaces. (Muster's own roles
// decide first, in front. The built-in view role is aggregated by
// kube-controller-manager, which does not run here, so it grants nothing.)
func (d *downstreamCluster) grantMusterRoles(t *testing.T) {
	t.Helper()
	for _, args := range [][]string{
		{"create", "clusterrolebinding", "muster-operators", "--clusterrole=cluster-admin", "--group=muster:operators"},
		{"create", "clusterrole", "read-namespaces", "--verb=get,list,watch", "--resource=namespaces"},
		{"create", "clusterrolebinding", "muster-viewers", "--clusterrole=read-namespaces", "--group=muster:viewers"},
	} {
		if out, err := d.kubectl("admin-token", args...); err != nil {
			t.Fatalf("downstream kubectl %v: %v\n%s", args, err, out)
		}
	}
}

// clusterDoc is a Cluster whose API is the downstream's.
func (d *downstreamCluster) clusterDoc(name string) string {
	return fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Cluster
metadata:
  name: %s
spec:
  kubernetesAPI:
    port: %d
    caCertificate: |
%s
    credential:
      clientCertificate: |
%s
      clientKey: |
%s
`, name, d.port, indentPEM(6, d.caPEM), indentPEM(8, d.proxyCert), indentPEM(8, d.proxyK))
}

func applyDoc(t *testing.T, s *server, doc string) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "doc.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return s.kubectl("apply", "-f", f)
}

// clusterKubeconfig runs `kubectl muster kubeconfig cluster` as the user of
// kubeconfig and returns the file it wrote.
func clusterKubeconfig(t *testing.T, kubeconfig, cluster string) string {
	t.Helper()
	out, errOut, code := kubectlMuster(t, kubeconfig, "kubeconfig", cluster)
	if code != 0 {
		t.Fatalf("kubectl muster kubeconfig %s: exit %d: %s", cluster, code, errOut)
	}
	path := filepath.Join(t.TempDir(), cluster+".kubeconfig")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// httpFor is the HTTP client and server URL a kubeconfig describes.
func httpFor(t testing.TB, kubeconfig string) (*http.Client, *rest.Config) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return hc, cfg
}

func get(t testing.TB, hc *http.Client, url string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// TestClusterAPIProxy: a cluster's own kube-apiserver (real, on this host)
// is reached through Muster at /k8s/clusters/NAME over its control-plane
// machine's tunnel, with real kubectl and the kubeconfig `kubectl muster
// kubeconfig` prints: reads, writes, a watch and a websocket (an upgraded
// request) work; the cluster sees the Muster user, impersonated; viewers
// only read, agents and users without a role never get in, and a client's
// own impersonation headers are not honoured. The proxied and direct
// latencies of /readyz are logged.
func TestClusterAPIProxy(t *testing.T) {
	t.Parallel()
	d := startDownstream(t)
	s := startServer(t, "")

	d.grantMusterRoles(t)

	if out, err := applyDoc(t, s, d.clusterDoc("prod")); err != nil {
		t.Fatalf("applying the cluster: %v\n%s", err, out)
	}
	// --controlplane, as Rancher's registration command spells the role.
	a := startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, s, "--cluster", "prod")), "--node-name", "cp-1",
		"--controlplane", "--kube-apiserver-port", fmt.Sprint(d.port))
	a.waitOutput("opened the tunnel to the server", 60*time.Second)
	waitPhase(t, s, "cp-1", "Running", 60*time.Second)

	operator := userKubeconfig(t, s, "otto", "muster:operators")
	viewer := userKubeconfig(t, s, "vera", "muster:viewers")
	noRole := userKubeconfig(t, s, "prometheus", "muster:metrics-readers")
	proxied := clusterKubeconfig(t, operator, "prod")

	// The kubeconfig points at Muster, not at the cluster.
	raw, _ := os.ReadFile(proxied)
	if want := s.url() + "/k8s/clusters/prod"; !strings.Contains(string(raw), "server: "+want) {
		t.Fatalf("kubectl muster kubeconfig prod does not point at %s:\n%s", want, raw)
	}

	// kubectl (1.32 here) drops the kubeconfig's server path from a
	// --raw path, so a raw request names the cluster's path itself. The
	// verbose answer lists a check only a kube-apiserver has: it is the
	// cluster's, not Muster's own /readyz.
	if out, err := kubectlAs(proxied, "get", "--raw", "/k8s/clusters/prod/readyz?verbose"); err != nil || !strings.Contains(out, kubeAPIServerOnlyCheck) || !strings.Contains(out, "readyz check passed") {
		t.Fatalf("kubectl get --raw /readyz through Muster: %v: %s", err, out)
	}
	if _, own, err := s.get("/readyz?verbose"); err != nil || strings.Contains(string(own), kubeAPIServerOnlyCheck) {
		t.Fatalf("Muster's own /readyz?verbose: %v, %.300s; the check must tell the cluster's answer from Muster's", err, own)
	}
	if out, err := kubectlAs(proxied, "create", "namespace", "made-through-muster"); err != nil {
		t.Fatalf("kubectl create namespace through Muster: %v: %s", err, out)
	}
	if out, err := d.kubectl("admin-token", "get", "namespace", "made-through-muster"); err != nil {
		t.Fatalf("the namespace made through Muster is not in the cluster: %v: %s", err, out)
	}

	// The cluster sees the Muster user, impersonated by Muster's
	// credential; never system:masters (Muster's administrators are
	// muster:admins there).
	who := func(kubeconfig string) (string, []string) {
		t.Helper()
		out, err := kubectlAs(kubeconfig, "auth", "whoami", "-o", "json")
		if err != nil {
			t.Fatalf("kubectl auth whoami through Muster: %v: %s", err, out)
		}
		var review struct {
			Status struct {
				UserInfo struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &review); err != nil {
			t.Fatalf("kubectl auth whoami: %v: %s", err, out)
		}
		return review.Status.UserInfo.Username, review.Status.UserInfo.Groups
	}
	if name, groups := who(proxied); name != "otto" || !slices.Contains(groups, "muster:operators") || slices.Contains(groups, "system:masters") {
		t.Errorf("the cluster sees the operator as %q in %v; want otto in muster:operators", name, groups)
	}
	if name, groups := who(clusterKubeconfig(t, s.kubeconfig(), "prod")); !slices.Contains(groups, "muster:admins") || slices.Contains(groups, "system:masters") {
		t.Errorf("the cluster sees Muster's administrator as %q in %v; want muster:admins and never system:masters", name, groups)
	}

	// A watch through Muster sees a namespace made in the cluster.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, "kubectl", "--kubeconfig", proxied, "get", "namespaces", "--watch", "--output-watch-events")
	watched := &syncBuffer{}
	watch.Stdout, watch.Stderr = watched, watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	waitFor(t, 30*time.Second, "the watch through Muster to list the namespaces", func() bool { return strings.Contains(watched.String(), "made-through-muster") })
	if out, err := d.kubectl("admin-token", "create", "namespace", "made-in-the-cluster"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	waitFor(t, 30*time.Second, "the watch through Muster to see the new namespace", func() bool {
		return strings.Contains(watched.String(), "ADDED") && strings.Contains(watched.String(), "made-in-the-cluster")
	})

	// An upgraded request (as exec, attach and port-forward are): a
	// websocket watch, the one the kube-apiserver serves without a kubelet.
	wsPath := "/k8s/clusters/prod/api/v1/namespaces?watch=true&fieldSelector=metadata.name%3Dmade-in-the-cluster"
	if status, body := websocket(t, s, operator, wsPath, "made-in-the-cluster"); status != http.StatusSwitchingProtocols || !strings.Contains(body, "made-in-the-cluster") {
		t.Errorf("an operator's websocket watch through Muster: %d %.300q; want 101 and the namespace's event", status, body)
	}
	if status, body := websocket(t, s, viewer, wsPath, "made-in-the-cluster"); status != http.StatusForbidden || !strings.Contains(body, "muster:operators") {
		t.Errorf("a viewer's websocket (an upgraded request is a write): %d %.300q; want 403 naming muster:operators", status, body)
	}

	// A viewer reads, and cannot write: Muster refuses before the cluster.
	viewerProxied := clusterKubeconfig(t, viewer, "prod")
	if out, err := kubectlAs(viewerProxied, "get", "namespace", "made-through-muster"); err != nil {
		t.Errorf("a viewer reading through Muster: %v: %s", err, out)
	}
	if out, err := kubectlAs(viewerProxied, "create", "namespace", "viewer-was-here"); err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, "muster:operators") {
		t.Errorf("a viewer creating a namespace through Muster: %v: %s; want Forbidden by Muster, naming muster:operators", err, out)
	}
	if out, err := d.kubectl("admin-token", "get", "namespace", "viewer-was-here"); err == nil {
		t.Errorf("the viewer's namespace exists in the cluster: %s", out)
	}

	// An agent's certificate, even the control-plane machine's own, never
	// reaches the API; nor a user without a role on clusters, on any
	// cluster, even one that does not exist; nor a join token.
	agentHTTP := certHTTPClient(t, s, a.dataDir)
	noRoleHTTP, _ := httpFor(t, noRole)
	tokenHTTP := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.caPool()}}}
	tok := newToken(t, s, "--cluster", "prod")
	for _, tc := range []struct {
		who     string
		hc      *http.Client
		cluster string
		headers map[string]string
	}{
		{"the control-plane machine's agent certificate", agentHTTP, "prod", nil},
		{"a user without a role", noRoleHTTP, "prod", nil},
		{"a user without a role, another cluster", noRoleHTTP, "nope", nil},
		{"a join token", tokenHTTP, "prod", map[string]string{"Authorization": "Bearer " + bearerOf(tok)}},
	} {
		if status, body := get(t, tc.hc, s.url()+"/k8s/clusters/"+tc.cluster+"/readyz", tc.headers); status != http.StatusForbidden {
			t.Errorf("%s on /k8s/clusters/%s/readyz: %d %.300s; want 403", tc.who, tc.cluster, status, body)
		}
	}
	if _, errOut, code := kubectlMuster(t, noRole, "kubeconfig", "prod"); code == 0 || !strings.Contains(errOut, "Forbidden") {
		t.Errorf("kubectl muster kubeconfig as a user without a role: exit %d: %s; want Forbidden", code, errOut)
	}

	// A client's own impersonation is not honoured: Muster's impersonation
	// filter refuses an operator, and nothing reaches the cluster as the
	// name the client asked for.
	operatorHTTP, _ := httpFor(t, operator)
	for _, h := range []map[string]string{
		{"Impersonate-User": "muster-admin"},
		{"Impersonate-User": "otto", "Impersonate-Group": "system:masters"},
	} {
		status, body := get(t, operatorHTTP, s.url()+"/k8s/clusters/prod/api/v1/namespaces", h)
		if status != http.StatusForbidden {
			t.Errorf("an operator sending %v: %d %.300s; want 403", h, status, body)
		}
	}

	// The credential is the administrators' alone: viewers and operators
	// read it redacted; it is never in the server's log.
	for _, kc := range []string{viewer, operator} {
		out, err := kubectlAs(kc, "get", "cluster", "prod", "-o", "jsonpath={.spec.kubernetesAPI.credential.clientKey}")
		if err != nil || out != "<redacted>" {
			t.Errorf("a non-administrator reading the cluster's credential key: %v: %q; want <redacted>", err, out)
		}
		out, err = kubectlAs(kc, "get", "clusters", "-o", "jsonpath={.items[*].spec.kubernetesAPI.credential.clientKey}")
		if err != nil || out != "<redacted>" {
			t.Errorf("a non-administrator listing the clusters' credential keys: %v: %q; want <redacted>", err, out)
		}
	}
	if out := s.mustKubectl("get", "cluster", "prod", "-o", "jsonpath={.spec.kubernetesAPI.credential.clientKey}"); strings.TrimSpace(out) != strings.TrimSpace(string(d.proxyK)) {
		t.Errorf("the administrator reads the credential key as %.80q; want it whole", out)
	}
	keyBody := strings.Split(strings.TrimSpace(string(d.proxyK)), "\n")[1]
	if strings.Contains(s.log.String(), keyBody) {
		t.Error("the server's log holds the cluster credential's key")
	}

	// Bad inputs: clear errors, nothing broken.
	for _, tc := range []struct {
		name, doc, says string
	}{
		{"a CA that is no certificate", strings.Replace(d.clusterDoc("bad-ca"), "BEGIN CERTIFICATE", "BEGIN NOTHING", 1), "holds no PEM certificate"},
		{"the redacted marker written back", strings.Replace(d.clusterDoc("bad-key"), "clientKey: |\n"+indentPEM(8, d.proxyK), `clientKey: "<redacted>"`, 1), "write the real value"},
	} {
		if out, err := applyDoc(t, s, tc.doc); err == nil || !strings.Contains(out, tc.says) {
			t.Errorf("applying a cluster with %s: %v: %.400s; want it refused saying %q", tc.name, err, out, tc.says)
		}
	}
	if out, err := applyDoc(t, s, "apiVersion: muster.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: bare\n"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := applyDoc(t, s, strings.Replace(d.clusterDoc("empty"), "name: prod", "name: empty", 1)); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, tc := range []struct{ cluster, says string }{
		{"bare", "declares no Kubernetes API"},
		{"empty", "has no machine with role controlplane"},
		{"missing", "not found"},
	} {
		if status, body := get(t, operatorHTTP, s.url()+"/k8s/clusters/"+tc.cluster+"/readyz", nil); status < 400 || !strings.Contains(body, tc.says) {
			t.Errorf("/k8s/clusters/%s/readyz: %d %.300s; want an error saying %q", tc.cluster, status, body, tc.says)
		}
	}

	// The kube-apiserver's port is the proxy's alone: an operator's
	// port-forward to it is refused by the agent (no --allow-port).
	if code, _, body := do(t, operatorHTTP, s, http.MethodPost, fmt.Sprintf("/apis/muster.io/v1alpha1/machines/cp-1/portforward?port=%d", d.port), nil, nil); code != http.StatusForbidden || !strings.Contains(body, "not published") {
		t.Errorf("an operator's port-forward to the kube-apiserver's port: %d %.300s; want 403 from the agent", code, body)
	}
	// An agent whose --kube-apiserver-port is not the Cluster's refuses,
	// and the user reads why.
	if out, err := applyDoc(t, s, strings.Replace(d.clusterDoc("other"), "name: prod", "name: other", 1)); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b := startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, s, "--cluster", "other")), "--node-name", "cp-2",
		"--role", "controlplane", "--kube-apiserver-port", fmt.Sprint(d.port+1))
	b.waitOutput("opened the tunnel to the server", 60*time.Second)
	waitPhase(t, s, "cp-2", "Running", 60*time.Second)
	if status, body := get(t, operatorHTTP, s.url()+"/k8s/clusters/other/readyz", nil); status != http.StatusServiceUnavailable || !strings.Contains(body, "--kube-apiserver-port") {
		t.Errorf("a cluster whose agent allows another port: %d %.400s; want 503 saying the agent's flag", status, body)
	}

	// Latency of /readyz through Muster (TLS to Muster, the tunnel, TLS
	// to the kube-apiserver, impersonation) and straight to the
	// kube-apiserver, on kept-alive connections, 100 each.
	proxiedHTTP, _ := httpFor(t, proxied)
	directHTTP := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pkiPool(t, d.caPEM)}}}
	viaMuster := medianGet(t, proxiedHTTP, s.url()+"/k8s/clusters/prod/readyz", nil)
	direct := medianGet(t, directHTTP, d.url+"/readyz", map[string]string{"Authorization": "Bearer admin-token"})
	t.Logf("GET /readyz, median of 100 on kept-alive connections: through Muster %s, straight to the kube-apiserver %s (+%s)",
		viaMuster.Round(10*time.Microsecond), direct.Round(10*time.Microsecond), (viaMuster - direct).Round(10*time.Microsecond))
}

// medianGet is the median time of 100 GETs of url by hc, one after the
// other on its kept-alive connections; each must answer 200.
func medianGet(t testing.TB, hc *http.Client, url string, headers map[string]string) time.Duration {
	t.Helper()
	var took []time.Duration
	for range 100 {
		start := time.Now()
		if status, body := get(t, hc, url, headers); status != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", url, status, body)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[len(took)/2]
}

// TestClusterAPIProxyHA: with two servers, a user sending the cluster's
// API requests to the server that does not hold the control-plane
// machine's tunnel is forwarded, as themselves, to the one that does:
// reads, writes, the impersonated name and an upgraded request (over
// HTTP/1.1 between the servers) all work through either.
func TestClusterAPIProxyHA(t *testing.T) {
	t.Parallel()
	d := startDownstream(t)
	d.grantMusterRoles(t)
	servers := startHA(t, pgtest.DSN(t), 2)
	if out, err := applyDoc(t, servers[0], d.clusterDoc("prod")); err != nil {
		t.Fatalf("applying the cluster: %v\n%s", err, out)
	}
	a := startAgent(t, servers[0], t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, servers[0], "--cluster", "prod")), "--node-name", "cp-1",
		"--role", "controlplane", "--kube-apiserver-port", fmt.Sprint(d.port))
	a.waitOutput("opened the tunnel to the server", 60*time.Second)
	waitPhase(t, servers[0], "cp-1", "Running", 60*time.Second)

	other := servers[1]
	operator := userKubeconfig(t, other, "otto", "muster:operators")
	proxied := clusterKubeconfig(t, operator, "prod")
	if raw, _ := os.ReadFile(proxied); !strings.Contains(string(raw), other.url()+"/k8s/clusters/prod") {
		t.Fatalf("the kubeconfig does not point at the second server:\n%s", raw)
	}
	// Until the second server has the first's liveness report (which
	// says who holds the tunnel), it answers 503; then it forwards.
	waitFor(t, 30*time.Second, "the second server to forward /readyz", func() bool {
		out, err := kubectlAs(proxied, "get", "--raw", "/k8s/clusters/prod/readyz?verbose")
		return err == nil && strings.Contains(out, kubeAPIServerOnlyCheck)
	})
	if out, err := kubectlAs(proxied, "create", "namespace", "via-the-other-server"); err != nil {
		t.Fatalf("create namespace through the second server: %v: %s", err, out)
	}
	out, err := kubectlAs(proxied, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil || out != "otto" {
		t.Errorf("the cluster sees the forwarded user as %q (%v); want otto", out, err)
	}
	wsPath := "/k8s/clusters/prod/api/v1/namespaces?watch=true&fieldSelector=metadata.name%3Dvia-the-other-server"
	if status, body := websocket(t, other, operator, wsPath, "via-the-other-server"); status != http.StatusSwitchingProtocols || !strings.Contains(body, "via-the-other-server") {
		t.Errorf("a websocket watch through the second server: %d %.300q; want 101 and the namespace's event", status, body)
	}
	if !strings.Contains(other.log.String(), "Forwarding to the server that holds the machine's tunnel") {
		t.Error("the second server did not say it forwarded to the first")
	}
}

func pkiPool(t *testing.T, caPEM []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(caPEM) {
		t.Fatal("the downstream CA does not parse")
	}
	return p
}

// websocket makes a websocket request (an HTTP/1.1 upgrade) to path as
// the user of kubeconfig, and returns the status and what came back: the
// response's body, or the frames until one holds want (10 s at most).
func websocket(t *testing.T, s *server, kubeconfig, path, want string) (int, string) {
	t.Helper()
	_, cfg := httpFor(t, kubeconfig)
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg = tlsCfg.Clone()
	tlsCfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(s.url(), "https://"), tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: %s\r\n\r\n",
		path, strings.TrimPrefix(s.url(), "https://"), s.url())
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("websocket to %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, string(b)
	}
	// The first frames: watch events, unmasked from a server. Read
	// until one names want or the deadline ends the read.
	var got []byte
	buf := make([]byte, 8192)
	for !strings.Contains(string(got), want) {
		n, err := br.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	return resp.StatusCode, string(got)
}
