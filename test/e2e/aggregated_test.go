package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestAggregatedMode: muster behind a real kube-apiserver. Users reach it
// through the aggregator with the kube-apiserver's credentials and RBAC,
// muster asks the kube-apiserver (SubjectAccessReview) what a user may do,
// and agents keep joining muster directly.
func TestAggregatedMode(t *testing.T) {
	t.Parallel()
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
	// The aggregator fetches muster's OpenAPI on its own schedule, a moment
	// after the APIService is Available: explain works once it has.
	explained := func() (string, error) { return kube.kubectl("admin-token", "explain", "machine.spec") }
	deadline := time.Now().Add(60 * time.Second)
	explanation, err := explained()
	for (err != nil || !strings.Contains(explanation, "cluster")) && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		explanation, err = explained()
	}
	if err != nil || !strings.Contains(explanation, "cluster") {
		index, _ := kube.kubectl("admin-token", "get", "--raw", "/openapi/v3")
		gv, _ := kube.kubectl("admin-token", "get", "--raw", "/openapi/v3/apis/muster.io/v1alpha1")
		t.Fatalf("kubectl explain machine through the aggregator: %v\n%s\n--- the aggregator's /openapi/v3 ---\n%s\n--- its muster.io/v1alpha1 ---\n%s\n--- kube-apiserver ---\n%s",
			err, explanation, lastLines(index, 40), tail(gv, 1500), lastLines(kube.log.String(), 40))
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
