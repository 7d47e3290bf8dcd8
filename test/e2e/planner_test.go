package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/planner"
)

// kubernetesBinDir is a directory holding the etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kubectl the planner's plans
// run (the server's --kubernetes-bin-dir): Debian's etcd-server, the
// Kubernetes components hack/peer.sh builds, and the kubectl of this host.
// It is the local stand-in for binaries the plans download pinned by
// sha256 (planner_upgrade_test.go serves those).
func kubernetesBinDir(t *testing.T) string {
	t.Helper()
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		cannotRun(t, "no etcd here (Debian's etcd-server; .ci/run installs it): %v", err)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("no kubectl: %v", err)
	}
	dir := t.TempDir()
	peer := peerDir(t)
	for _, c := range []string{"kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(peer, c)); err != nil {
			t.Fatalf("no %s beside the peer's kube-apiserver (hack/peer.sh builds it; run make peer): %v", c, err)
		}
	}
	for name, target := range map[string]string{"etcd": etcd, "kube-apiserver": filepath.Join(peer, "kube-apiserver"),
		"kube-controller-manager": filepath.Join(peer, "kube-controller-manager"), "kube-scheduler": filepath.Join(peer, "kube-scheduler"), "kubectl": kubectl} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The plans run as the machines' agents, which need to reach it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// plannerCluster registers what a planner e2e test leaves behind, in the
// order it must go (cleanups run last first), and returns the cluster's
// directory on the machines. On a failure it logs the cluster's status
// (never its spec: that holds the proxy's client key), the plans and the
// last lines of the machines' logs; then the pools and their agents go,
// then whatever the plans started (in the machines' namespaces, which
// deleting the machines removes; killed by its pid files too, in case
// they were not), and last the plans' files.
func plannerCluster(t *testing.T, s *server, name string) string {
	t.Helper()
	dir := filepath.Join(planner.BaseDir, name)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(dir, "*", "*.pid"))
		for _, p := range pids {
			b, _ := os.ReadFile(p)
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	killPoolAgentsAtEnd(t, s)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := s.kubectl("get", "cluster", name, "-o", "jsonpath={.status}")
			t.Logf("the cluster's status at the failure:\n%s", out)
			out, _ = s.kubectl("get", "machineplans", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.labels} {.metadata.annotations} {.status.state} {.status.failureCount} {.status.output}{"\n"}{end}`)
			t.Logf("plans:\n%.6000s", out)
			logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", l, lastLines(string(b), 15))
			}
		}
		_, _ = s.kubectl("delete", "machinepools", "--all", "--wait=true", "--timeout=120s")
	})
	return dir
}

// TestPlannerKubernetes (issue 29): a Cluster with spec.kubernetes, a
// pool of 3 etcd,controlplane machines and a pool of 2 workers on the
// process driver, each machine in its own network namespace: from
// `kubectl apply` to a Ready cluster, with real etcd members (the first
// bootstrapped, the others added one at a time), real kube-apiservers,
// kube-controller-managers and kube-schedulers; then, through Muster's
// proxy with the kubeconfig `kubectl muster kubeconfig` prints, /readyz,
// create namespace and a watch; the workers' kubelet bootstrap credentials
// made a CSR each, which kube-controller-manager approved and signed, and
// with that certificate each worker registered its Node; the controllers
// hold their leader leases, and a viewer reads through the view role they
// aggregated. Then the
// control plane grows 3 -> 5, etcd answering all along. The times from
// apply to Ready and of the scale-up are logged. Not parallel: it measures that figure,
// and five machines running etcd and kube-apiserver keep both cores busy.
func TestPlannerKubernetes(t *testing.T) {
	host := newNetns(t)
	bin := kubernetesBinDir(t)
	s := newServer(t, host.hostIP, "", processDriver, "--kubernetes-bin-dir", bin)
	s.start()
	name := fmt.Sprintf("k8s-%d", rand.IntN(1_000_000))
	dir := plannerCluster(t, s, name)

	cidr := fmt.Sprintf("10.213.%d.0/24", rand.IntN(256))
	doc := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Cluster
metadata: {name: %[1]s}
spec:
  kubernetes: {distribution: kubernetes, version: v1.37.2}
---
apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %[1]s-cp}
spec:
  cluster: %[1]s
  replicas: 3
  template:
    roles: [etcd, controlplane]
    driver: process
    driverConfig: {networkNamespace: "true", networkCIDR: %[2]q}
---
apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %[1]s-workers}
spec:
  cluster: %[1]s
  replicas: 2
  template:
    roles: [worker]
    driver: process
    driverConfig: {networkNamespace: "true", networkCIDR: %[2]q}
`, name, cidr)
	start := time.Now()
	if out, err := applyDoc(t, s, doc); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	// Where the planner is, as a user reads it, each change logged.
	last := ""
	waitFor(t, 8*time.Minute, "the cluster's Kubernetes to be Ready", func() bool {
		out, _ := s.kubectl("get", "cluster", name, "-o", "jsonpath={.status.kubernetes.phase}: {.status.kubernetes.message}")
		if out != last {
			t.Logf("%6.1fs  %s", time.Since(start).Seconds(), out)
			last = out
		}
		return strings.HasPrefix(out, "Ready:")
	})
	ready := time.Since(start)
	t.Logf("apply to Ready (3 etcd,controlplane + 2 workers, process driver, a network namespace each): %v", ready.Round(100*time.Millisecond))

	var cl struct {
		Status struct {
			Kubernetes struct {
				EtcdMembers []string `json:"etcdMembers"`
			} `json:"kubernetes"`
			Conditions []struct{ Type, Status, Message string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(s.mustKubectl("get", "cluster", name, "-o", "json")), &cl); err != nil {
		t.Fatal(err)
	}
	for _, c := range cl.Status.Conditions {
		if strings.HasPrefix(c.Type, "Kubernetes") && c.Status != "True" {
			t.Errorf("condition %s is %s (%s) on a Ready cluster", c.Type, c.Status, c.Message)
		}
	}
	members := cl.Status.Kubernetes.EtcdMembers
	if len(members) != 3 {
		t.Fatalf("status.kubernetes.etcdMembers = %v; want the 3 etcd machines", members)
	}

	// etcd itself lists the three, each at its machine's own address:
	// asked through its API with the first member's certificate.
	pkiDir := filepath.Join(dir, members[0], "pki")
	pair, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "etcd.crt"), filepath.Join(pkiDir, "etcd.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	etcdClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots}}}
	addr := strings.TrimSpace(s.mustKubectl("get", "machine", members[0], "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`))
	resp, err := etcdClient.Post("https://"+addr+":2379/v3/cluster/member/list", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("etcd member list at %s: %v", addr, err)
	}
	var list struct {
		Members []struct {
			Name     string   `json:"name"`
			PeerURLs []string `json:"peerURLs"`
		} `json:"members"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	var names []string
	for _, m := range list.Members {
		names = append(names, m.Name)
	}
	if len(list.Members) != 3 {
		t.Errorf("etcd's member list %v; want the 3 members %v", names, members)
	}

	// The cluster's secrets are in its server machines' plans, which a
	// viewer reads redacted, and never in the server's log.
	viewer := userKubeconfig(t, s, "vera", "muster:viewers")
	contents, err := kubectlAs(viewer, "get", "machineplan", members[0], "-o", "jsonpath={range .spec.files[*]}{.content}{\"\\n\"}{end}")
	if lines := strings.Fields(contents); err != nil || len(lines) < 10 || strings.Count(contents, "<redacted>") != len(lines) {
		t.Errorf("a viewer's read of an etcd member's plan files: %v; want every content <redacted>:\n%.2000s", err, contents)
	}
	caKey, _ := os.ReadFile(filepath.Join(pkiDir, "ca.key"))
	token, _ := os.ReadFile(filepath.Join(dir, members[0], "pki", "bootstrap-token"))
	if len(caKey) == 0 || len(token) < 23 {
		t.Fatalf("the first member has no CA key or bootstrap token on disk (%d, %d bytes)", len(caKey), len(token))
	}
	for what, secret := range map[string]string{"private key": "PRIVATE KEY", "bootstrap token secret": strings.TrimSpace(string(token))[7:]} {
		if strings.Contains(s.log.String(), secret) {
			t.Errorf("the server's log holds the cluster's %s", what)
		}
	}

	// Through Muster: the kubeconfig the plugin prints, real kubectl.
	kc := clusterKubeconfig(t, s.kubeconfig(), name)
	if out, err := kubectlAs(kc, "get", "--raw", "/k8s/clusters/"+name+"/readyz?verbose"); err != nil || !strings.Contains(out, kubeAPIServerOnlyCheck) || !strings.Contains(out, "[+]etcd ok") {
		t.Fatalf("kubectl get --raw /readyz through Muster: %v: %s", err, out)
	}
	// The figure of a request through Muster (TLS to Muster, the agent's
	// tunnel, TLS to the kube-apiserver, impersonation) against the same
	// request straight to the first member's kube-apiserver, from this
	// host, in the same run.
	adminHTTP, _ := httpFor(t, s.kubeconfig())
	directHTTP := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}
	viaMuster := medianGet(t, adminHTTP, s.url()+"/k8s/clusters/"+name+"/readyz", nil)
	direct := medianGet(t, directHTTP, "https://"+addr+":6443/readyz", nil)
	t.Logf("GET /readyz, median of 100 on kept-alive connections: through Muster %s, straight to a kube-apiserver %s (+%s)",
		viaMuster.Round(10*time.Microsecond), direct.Round(10*time.Microsecond), (viaMuster - direct).Round(10*time.Microsecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kc, "get", "namespaces", "--watch", "--output-watch-events")
	watched := &syncBuffer{}
	watch.Stdout, watch.Stderr = watched, watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	waitFor(t, 30*time.Second, "the watch through Muster to list the namespaces", func() bool { return strings.Contains(watched.String(), "kube-system") })
	if out, err := kubectlAs(kc, "create", "namespace", "made-through-muster"); err != nil {
		t.Fatalf("kubectl create namespace through Muster: %v: %s", err, out)
	}
	waitFor(t, 30*time.Second, "the watch through Muster to see the new namespace", func() bool {
		return strings.Contains(watched.String(), "ADDED") && strings.Contains(watched.String(), "made-through-muster")
	})

	// Each worker's kubelet bootstrap credentials (a bootstrap token, the
	// cluster's CA, a control-plane address) made its CSR, as
	// system:bootstrap:<token id>, for its node's client certificate.
	workers := poolMachines(s, name+"-workers")
	if len(workers) != 2 {
		t.Fatalf("worker machines %v; want 2", workers)
	}
	for w := range workers {
		out, err := kubectlAs(kc, "get", "csr", "node-csr-"+w, "-o", "jsonpath={.spec.username} {.spec.signerName}")
		if err != nil || !strings.HasPrefix(out, "system:bootstrap:") || !strings.HasSuffix(out, " kubernetes.io/kube-apiserver-client-kubelet") {
			t.Errorf("worker %s's CSR through Muster: %v: %q; want one made by its bootstrap token for the kubelet signer", w, err, out)
		}
		// kube-controller-manager approved it (csrapproving: the
		// bootstrappers may auto-approve node client CSRs) and signed it
		// with the cluster's CA (csrsigning): kubectl's CONDITION column.
		out, err = kubectlAs(kc, "get", "csr", "node-csr-"+w, "--no-headers", "-o", "custom-columns=CONDITION:.status.conditions[*].type,CERT:.status.certificate")
		if f := strings.Fields(out); err != nil || len(f) != 2 || f[0] != "Approved" || len(f[1]) < 100 {
			t.Errorf("worker %s's CSR through Muster: %v: %.200q; want it Approved,Issued by kube-controller-manager", w, err, out)
		}
	}
	// With the issued certificate each worker registered its Node, as a
	// kubelet does (no container runtime here, so no kubelet, and the
	// Nodes never turn Ready).
	out, err := kubectlAs(kc, "get", "nodes", "-o", "name")
	var nodes []string
	for _, l := range strings.Fields(out) {
		nodes = append(nodes, strings.TrimPrefix(l, "node/"))
	}
	if err != nil || len(nodes) != len(workers) {
		t.Errorf("kubectl get nodes through Muster: %v: %q; want the %d workers", err, out, len(workers))
	}
	for _, n := range nodes {
		if _, ok := workers[n]; !ok {
			t.Errorf("Node %s is no worker of the cluster (%v)", n, workers)
		}
	}
	// kube-controller-manager and kube-scheduler run leader-elected:
	// their Leases in kube-system name the holder.
	for _, l := range []string{"kube-controller-manager", "kube-scheduler"} {
		if out, err := kubectlAs(kc, "-n", "kube-system", "get", "lease", l, "-o", "jsonpath={.spec.holderIdentity}"); err != nil || strings.TrimSpace(out) == "" {
			t.Errorf("the %s leader Lease through Muster: %v: %q; want one with a holder", l, err, out)
		}
	}
	// kube-controller-manager's clusterrole-aggregation filled the view
	// role (empty without it), so the muster:viewers binding grants
	// reads: a viewer lists kube-system's ConfigMaps through Muster (the
	// root CA one is kube-controller-manager's too).
	if out, err := kubectlAs(kc, "get", "clusterrole", "view", "-o", "jsonpath={.rules[*].resources}"); err != nil || !strings.Contains(out, "configmaps") {
		t.Errorf("the view ClusterRole's rules: %v: %.300q; want the aggregated read rules", err, out)
	}
	vkc := clusterKubeconfig(t, viewer, name)
	if out, err := kubectlAs(vkc, "-n", "kube-system", "get", "configmaps", "-o", "name"); err != nil || !strings.Contains(out, "configmap/kube-root-ca.crt") {
		t.Errorf("a viewer listing kube-system's ConfigMaps through Muster: %v: %s; want them read through the view role", err, out)
	}
	// What kube-controller-manager signs is no etcd credential: a
	// worker's kubelet certificate, which kube-apiserver takes, is
	// refused by etcd (it trusts the cluster's CA, not the CSR signer).
	for w := range workers {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, w, "kubelet.crt"), filepath.Join(dir, w, "kubelet.key"))
		if err != nil {
			t.Fatalf("worker %s's kubelet certificate and key on its machine: %v", w, err)
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots}}}
		if resp, err := c.Post("https://"+addr+":2379/v3/cluster/member/list", "application/json", strings.NewReader("{}")); err == nil {
			resp.Body.Close()
			t.Errorf("etcd answered worker %s's kubelet certificate (%s): a worker's credential must not reach etcd", w, resp.Status)
		}
		if fi, err := os.Stat(filepath.Join(dir, w, "kubelet.key")); err != nil {
			t.Errorf("worker %s's kubelet.key: %v", w, err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("worker %s's kubelet.key has mode %v; want 0600", w, fi.Mode().Perm())
		}
	}

	// Scale the control plane 3 -> 5: the two new etcd members join one
	// at a time and start kube-apiserver after, while etcd answers
	// /health all along (asked every 100 ms, never failing twice in a row)
	// and so does the cluster's API through Muster.
	var polls, failures, worst int
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		run := 0
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			resp, err := etcdClient.Get("https://" + addr + ":2379/health")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			polls++
			if ok {
				run = 0
				continue
			}
			failures++
			if run++; run > worst {
				worst = run
			}
		}
	}()
	scaleStart := time.Now()
	s.mustKubectl("patch", "machinepool", name+"-cp", "--type=merge", "-p", `{"spec":{"replicas":5}}`)
	last = ""
	waitFor(t, 6*time.Minute, "5 etcd members, Ready again", func() bool {
		out, _ := s.kubectl("get", "cluster", name, "-o", "jsonpath={.status.kubernetes.phase}: {.status.kubernetes.message} {.status.kubernetes.etcdMembers}")
		if out != last {
			t.Logf("%6.1fs  %s", time.Since(scaleStart).Seconds(), out)
			last = out
		}
		return strings.HasPrefix(out, "Ready: Kubernetes is up: 5 etcd members, 5 control-plane machines")
	})
	close(stop)
	<-stopped
	t.Logf("scale 3 -> 5 etcd,controlplane machines to Ready: %v; etcd /health asked %d times during it, %d failures, at most %d in a row",
		time.Since(scaleStart).Round(100*time.Millisecond), polls, failures, worst)
	if worst >= 2 || polls < 10 {
		t.Errorf("etcd's /health failed %d times in a row during the scale-up (%d asked); want never twice", worst, polls)
	}
	resp, err = etcdClient.Post("https://"+addr+":2379/v3/cluster/member/list", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("etcd member list after the scale-up: %v", err)
	}
	list.Members = nil
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Members) != 5 {
		t.Errorf("etcd lists %d members after the scale-up; want 5", len(list.Members))
	}
	if out, err := kubectlAs(kc, "get", "namespace", "made-through-muster", "-o", "name"); err != nil {
		t.Errorf("the cluster's API through Muster after the scale-up: %v: %s", err, out)
	}

	// And back 5 -> 3: the pool deletes its two newest machines; each
	// one's member leaves etcd (its drain plan) before its host goes, one
	// at a time, etcd answering all along; the deleted machines' hosts are
	// gone only after etcd stopped listing them.
	polls, failures, worst = 0, 0, 0
	stop, stopped = make(chan struct{}), make(chan struct{})
	// Which machines etcd lists, each time a deleted machine's host is
	// seen gone: none of them may be listed then.
	memberNames := func() map[string]bool {
		out := map[string]bool{}
		resp, err := etcdClient.Post("https://"+addr+":2379/v3/cluster/member/list", "application/json", strings.NewReader("{}"))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var l struct {
			Members []struct {
				Name string `json:"name"`
			} `json:"members"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&l)
		for _, m := range l.Members {
			out[m.Name] = true
		}
		return out
	}
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		run := 0
		// Ten probes at least: a scale-down done within a second is
		// judged too, by the probes that follow it.
		stopping := stop
		for {
			if stopping == nil && polls >= 10 {
				return
			}
			select {
			case <-stopping:
				if polls >= 10 {
					return
				}
				stopping = nil
			case <-tick.C:
			}
			resp, err := etcdClient.Get("https://" + addr + ":2379/health")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			polls++
			if ok {
				run = 0
				continue
			}
			failures++
			if run++; run > worst {
				worst = run
			}
		}
	}()
	before := poolMachines(s, name+"-cp")
	scaleStart = time.Now()
	s.mustKubectl("patch", "machinepool", name+"-cp", "--type=merge", "-p", `{"spec":{"replicas":3}}`)
	last = ""
	hostGoneWhileListed := map[string]bool{}
	waitFor(t, 6*time.Minute, "3 etcd members, Ready again, the deleted machines gone", func() bool {
		out, _ := s.kubectl("get", "cluster", name, "-o", "jsonpath={.status.kubernetes.phase}: {.status.kubernetes.message} {.status.kubernetes.etcdMembers}")
		if out != last {
			t.Logf("%6.1fs  %s", time.Since(scaleStart).Seconds(), out)
			last = out
		}
		now := poolMachines(s, name+"-cp")
		listed := memberNames()
		// A pool machine's host is removed in Deleting (after Draining,
		// where its member leaves): Deleting or gone while etcd lists it
		// would be a host going first.
		for m := range before {
			if phase, there := now[m]; (!there || phase == "Deleting") && listed != nil && listed[m] {
				hostGoneWhileListed[m] = true
			}
		}
		return strings.HasPrefix(out, "Ready: Kubernetes is up: 3 etcd members, 3 control-plane machines") && len(now) == 3
	})
	close(stop)
	<-stopped
	t.Logf("scale 5 -> 3 etcd,controlplane machines to Ready: %v; etcd /health asked %d times during it, %d failures, at most %d in a row",
		time.Since(scaleStart).Round(100*time.Millisecond), polls, failures, worst)
	if worst >= 2 || polls < 10 {
		t.Errorf("etcd's /health failed %d times in a row during the scale-down (%d asked); want never twice", worst, polls)
	}
	if len(hostGoneWhileListed) > 0 {
		t.Errorf("machines %v were gone while etcd still listed them as members; a member must leave before its machine goes", hostGoneWhileListed)
	}
	listed := memberNames()
	now := poolMachines(s, name+"-cp")
	if len(listed) != 3 {
		t.Errorf("etcd lists %v after the scale-down; want the 3 remaining machines %v", listed, now)
	}
	for m := range now {
		if !listed[m] {
			t.Errorf("remaining machine %s is not among etcd's members %v", m, listed)
		}
	}
	if out, err := kubectlAs(kc, "get", "namespace", "made-through-muster", "-o", "name"); err != nil {
		t.Errorf("the cluster's API through Muster after the scale-down: %v: %s", err, out)
	}
}

// TestPlannerBadInputs (issue 29): what the planner cannot make a cluster
// of is said on the Cluster, and nothing is started: a cluster whose
// machines have no etcd and no control-plane role (the etcd,controlplane
// machine of another cluster does not count, and the message says so); an
// even etcd count is warned of while the planner goes on; a version
// Kubernetes never had is refused when the Cluster is written. The plans
// here run nothing real: the machines' binary directory is empty.
func TestPlannerBadInputs(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", processDriver, "--kubernetes-bin-dir", t.TempDir())
	killPoolAgentsAtEnd(t, s)
	id := rand.IntN(1_000_000)
	roleless, even, other := fmt.Sprintf("k8s-roleless-%d", id), fmt.Sprintf("k8s-even-%d", id), fmt.Sprintf("other-%d", id)
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(planner.BaseDir, even)) })
	t.Cleanup(func() { _, _ = s.kubectl("delete", "machinepools", "--all", "--wait=true", "--timeout=60s") })
	pool := func(name, cluster string, replicas int, roles string) string {
		return fmt.Sprintf(`---
apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %s}
spec:
  cluster: %s
  replicas: %d
  template: {roles: [%s], driver: process}
`, name, cluster, replicas, roles)
	}
	cluster := func(name, kubernetes string) string {
		return fmt.Sprintf("---\napiVersion: muster.io/v1alpha1\nkind: Cluster\nmetadata: {name: %s}\nspec: {%s}\n", name, kubernetes)
	}
	k8s := "kubernetes: {distribution: kubernetes, version: v1.37.2}"
	doc := cluster(roleless, k8s) + pool(roleless+"-w", roleless, 1, "worker") +
		cluster(other, "") + pool(other+"-cp", other, 1, "etcd, controlplane") +
		cluster(even, k8s) + pool(even+"-cp", even, 2, "etcd, controlplane")
	if out, err := applyDoc(t, s, doc); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	condition := func(cluster, typ string) string {
		out, _ := s.kubectl("get", "cluster", cluster, "-o", fmt.Sprintf(`jsonpath={.status.kubernetes.phase}|{.status.conditions[?(@.type==%q)].status}|{.status.conditions[?(@.type==%q)].reason}|{.status.conditions[?(@.type==%q)].message}`, typ, typ, typ))
		return out
	}
	var got string
	waitFor(t, 90*time.Second, "the roleless cluster to say it has no etcd and no control-plane machine, naming the other cluster's", func() bool {
		got = condition(roleless, "KubernetesRoles")
		return strings.HasPrefix(got, "Invalid|False|MissingRoles|the cluster has no machine with role etcd and no machine with role controlplane, so no Kubernetes can start and nothing was started") &&
			strings.Contains(got, "machines of other clusters do not count: "+other+"-cp-")
	})
	t.Logf("%s: %s", roleless, got)
	waitFor(t, 90*time.Second, "the even cluster to warn of its 2 etcd machines and go on bootstrapping", func() bool {
		got = condition(even, "KubernetesRoles")
		return strings.HasPrefix(got, "BootstrappingEtcd|False|Warning|2 etcd machines: an even count tolerates no more failures than one fewer")
	})
	t.Logf("%s: %s", even, got)
	// Nothing was planned for the roleless cluster, nor for the cluster
	// without spec.kubernetes: the planner's plans are the even cluster's
	// first etcd member's only.
	out := s.mustKubectl("get", "machineplans", "-l", planner.PlannerLabel, "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.labels.muster\.io/planner} {end}`)
	planned := strings.Fields(out)
	if len(planned) != 1 || !strings.HasPrefix(planned[0], even+"-cp-") || !strings.HasSuffix(planned[0], "="+even) {
		t.Errorf("the planner's plans: %q; want only one of %s's etcd machines (the first member; the second waits on it)", out, even)
	}

	// A version Kubernetes never had is refused when written.
	if out, err := applyDoc(t, s, cluster("k8s-badversion", "kubernetes: {distribution: kubernetes, version: \"1.37\"}")); err == nil ||
		!strings.Contains(out, `spec.kubernetes.version: Invalid value: "1.37": a Kubernetes release version is "v" and three numbers`) {
		t.Errorf("a Cluster with version 1.37: %v: %s; want it refused, saying what a version looks like", err, out)
	}
}
