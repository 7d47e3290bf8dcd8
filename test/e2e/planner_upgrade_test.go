package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/planner"
)

// previousPeerDir builds (once; hack/peer-previous.sh) the control plane
// (kube-apiserver, kube-controller-manager, kube-scheduler) of the release
// before the one hack/peer.sh builds, and returns its dir.
func previousPeerDir(t *testing.T) string {
	out, err := exec.Command(filepath.Join("..", "..", "hack", "peer-previous.sh")).Output()
	if err != nil {
		t.Fatalf("hack/peer-previous.sh (builds the v1.36.3 control plane from the Go module proxy): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// controlPlaneComponents are the binaries of a version's control plane,
// which kubernetesAssets takes from one directory per version.
var controlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// kubernetesAssets lays out a --kubernetes-assets-dir: for each version,
// <dir>/<version>/linux-amd64/{etcd,kubectl,kube-apiserver,
// kube-controller-manager,kube-scheduler}, each a link to the binary (the
// server serves what a link points at); the control plane's from the
// directory given for the version.
func kubernetesAssets(t *testing.T, controlPlanes map[string]string) string {
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
	for version, components := range controlPlanes {
		p := filepath.Join(dir, version, "linux-amd64")
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		links := map[string]string{"etcd": etcd, "kubectl": kubectl}
		for _, c := range controlPlaneComponents {
			links[c] = filepath.Join(components, c)
		}
		for name, target := range links {
			if err := os.Symlink(target, filepath.Join(p, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// TestPlannerUpgrade (issue 29): a version change is a rolling upgrade
// with autoRevert. A cluster of 3 etcd,controlplane machines and a worker
// (process driver, a network namespace each) comes up on kube-apiserver
// v1.36.3, its binaries downloaded from the server's
// --kubernetes-assets-dir pinned by their SHA-256; spec.kubernetes.version
// v1.37.2 rolls it over one control-plane machine at a time, then the
// worker, drained first (a Pod bound to it evicted, its Node cordoned
// before its plan is rewritten, uncordoned after), and every
// kube-apiserver then says v1.37.2. Then a broken
// version (its kube-apiserver exits at once; served and pinned by its
// real sum) is reverted by itself: the machine that took it goes back,
// status says v1.37.2 runs and why the other was reverted, and it is not
// tried again. Throughout, the cluster's API is asked through Muster's
// proxy every 200 ms. Not parallel: it logs the upgrade's time, and three
// machines running etcd and kube-apiserver keep both cores busy.
func TestPlannerUpgrade(t *testing.T) {
	const from, to, broken = "v1.36.3", "v1.37.2", "v1.38.0"
	brokenDir := t.TempDir()
	// Each says the version it is asked for, so the plan starts it, and exits.
	for _, c := range controlPlaneComponents {
		if err := os.WriteFile(filepath.Join(brokenDir, c), []byte("#!/bin/sh\ncase \"$1\" in --version) echo \"Kubernetes "+broken+"\";; *) echo 'a broken build: exits at once' >&2; exit 1;; esac\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	assets := kubernetesAssets(t, map[string]string{from: previousPeerDir(t), to: peerDir(t), broken: brokenDir})
	host := newNetns(t)
	s := newServer(t, host.hostIP, "", processDriver, "--kubernetes-assets-dir", assets)
	s.start()
	name := fmt.Sprintf("k8s-up-%d", rand.IntN(1_000_000))
	// The versions' binaries go last, after everything that ran them.
	t.Cleanup(func() {
		for _, v := range []string{from, to, broken} {
			_ = os.RemoveAll(filepath.Join(planner.BinDir, v))
		}
	})
	dir := plannerCluster(t, s, name)

	cidr := fmt.Sprintf("10.214.%d.0/24", rand.IntN(256))
	doc := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Cluster
metadata: {name: %[1]s}
spec:
  kubernetes:
    distribution: kubernetes
    version: %[3]s
    upgradeStrategy: {controlPlaneConcurrency: 1, workerConcurrency: 1, healthTimeoutSeconds: 180}
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
  replicas: 1
  template:
    roles: [worker]
    driver: process
    driverConfig: {networkNamespace: "true", networkCIDR: %[2]q}
`, name, cidr, from)
	start := time.Now()
	if out, err := applyDoc(t, s, doc); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	last := ""
	watchStatus := func(since time.Time, what string, timeout time.Duration, done func(string) bool) {
		t.Helper()
		last = ""
		waitFor(t, timeout, what, func() bool {
			out, _ := s.kubectl("get", "cluster", name, "-o", `jsonpath={.status.kubernetes.phase}|{.status.kubernetes.version}|{.status.kubernetes.failedVersion}|{.status.conditions[?(@.type=="KubernetesUpgrade")].reason}|{.status.kubernetes.message}`)
			if out != last {
				t.Logf("%6.1fs  %s", time.Since(since).Seconds(), out)
				last = out
			}
			return done(out)
		})
	}
	watchStatus(start, "the cluster to be Ready on "+from, 8*time.Minute, func(out string) bool {
		return strings.HasPrefix(out, "Ready|"+from+"||UpToDate|")
	})
	t.Logf("apply to Ready on %s (3 etcd,controlplane + 1 worker, binaries downloaded from the server): %v", from, time.Since(start).Round(100*time.Millisecond))

	// Each control-plane machine's kube-apiserver, asked directly for its
	// version (from this host, which reaches the machines' namespaces).
	cps := poolMachines(s, name+"-cp")
	versions := func() map[string]string {
		got := map[string]string{}
		for m := range cps {
			caPEM, _ := os.ReadFile(filepath.Join(dir, m, "pki", "ca.crt"))
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(caPEM)
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}
			addr := strings.TrimSpace(s.mustKubectl("get", "machine", m, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`))
			resp, err := c.Get("https://" + addr + ":6443/version")
			if err != nil {
				got[m] = err.Error()
				continue
			}
			var v struct {
				GitVersion string `json:"gitVersion"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			got[m] = v.GitVersion
		}
		return got
	}
	allAt := func(v string) {
		t.Helper()
		got := versions()
		for m, gv := range got {
			if gv != v {
				t.Errorf("machine %s's kube-apiserver says %q; want %s (all: %v)", m, gv, v, got)
			}
		}
		if len(got) != 3 {
			t.Errorf("asked %d kube-apiservers; want 3", len(got))
		}
	}
	allAt(from)

	// The cluster's API, through Muster, every 200 ms from here on.
	kc := clusterKubeconfig(t, s.kubeconfig(), name)
	hc, _ := httpFor(t, kc)
	// An answer is an answer however slowly it came (kubectl waits without
	// a limit); a request routed to a kube-apiserver that is gone fails at
	// once (its agent's dial is refused) and is counted below. On these
	// shared machines an idle cluster's read once took over 5 s in a CI
	// run, before the upgrade had changed anything.
	hc.Timeout = 15 * time.Second
	var mu sync.Mutex
	var polls int
	var failures []string
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// A read that goes through kube-apiserver to etcd.
			resp, err := hc.Get(s.url() + "/k8s/clusters/" + name + "/api/v1/namespaces/default")
			why := ""
			switch {
			case err != nil:
				why = err.Error()
			case resp.StatusCode != http.StatusOK:
				// The message says which machine was chosen and why it
				// could not serve; kept short, the log holds every one.
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 600))
				why = resp.Status + " " + string(body)
			}
			if err == nil {
				resp.Body.Close()
			}
			mu.Lock()
			polls++
			if why != "" {
				failures = append(failures, fmt.Sprintf("%s: %s", time.Now().Format("15:04:05.000"), why))
			}
			mu.Unlock()
		}
	}()
	pollFailures := func() (int, []string) {
		mu.Lock()
		defer mu.Unlock()
		return polls, append([]string(nil), failures...)
	}

	// The worker is drained before its plan is rewritten at the new
	// version, and uncordoned after.
	drain := watchWorkerDrain(t, s, kc, name, from)
	upgradeStart := time.Now()
	s.mustKubectl("patch", "cluster", name, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"kubernetes":{"version":%q}}}`, to))
	watchStatus(upgradeStart, "the upgrade to "+to, 10*time.Minute, func(out string) bool {
		return strings.HasPrefix(out, "Ready|"+to+"||UpToDate|")
	})
	drain.check(t, kc)
	upgradeTime := time.Since(upgradeStart)
	n, failed := pollFailures()
	t.Logf("upgrade %s -> %s (3 etcd,controlplane one at a time, then 1 worker): %v; the API through Muster asked %d times, %d failures %v",
		from, to, upgradeTime.Round(100*time.Millisecond), n, len(failed), failed)
	allAt(to)

	// A broken version: the first machine takes it, its plan fails (the
	// kube-apiserver it starts exits), and the planner reverts it.
	revertStart := time.Now()
	s.mustKubectl("patch", "cluster", name, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"kubernetes":{"version":%q}}}`, broken))
	watchStatus(revertStart, "the broken "+broken+" to be reverted", 8*time.Minute, func(out string) bool {
		return strings.HasPrefix(out, "Ready|"+to+"|"+broken+"|Reverted|")
	})
	t.Logf("broken %s reverted to %s in %v", broken, to, time.Since(revertStart).Round(100*time.Millisecond))
	cond := s.mustKubectl("get", "cluster", name, "-o", `jsonpath={.status.conditions[?(@.type=="KubernetesUpgrade")].status} {.status.conditions[?(@.type=="KubernetesUpgrade")].message}`)
	for _, want := range []string{"False Kubernetes " + broken + " was reverted to " + to + ": machine ", "'s plan at " + broken + " failed", "not tried again until spec.kubernetes.version changes"} {
		if !strings.Contains(cond, want) || strings.Count(cond, "was reverted") != 1 {
			t.Errorf("the KubernetesUpgrade condition %q does not say %q", cond, want)
		}
	}
	allAt(to)
	// Not tried again: every plan stays at the version that runs.
	plans := s.mustKubectl("get", "machineplans", "-l", planner.PlannerLabel+"="+name, "-o", `jsonpath={range .items[*]}{.metadata.labels.muster\.io/planner-version}{" "}{end}`)
	for _, v := range strings.Fields(plans) {
		if v != to {
			t.Errorf("plans at versions %q after the revert; want every one at %s", plans, to)
			break
		}
	}
	close(stop)
	<-stopped
	n, failed = pollFailures()
	t.Logf("the API through Muster during the upgrade and the revert: asked %d times, %d failures %v", n, len(failed), failed)
	if n < 100 {
		t.Errorf("the API was asked %d times; want it asked throughout", n)
	}
	if len(failed) > 0 {
		t.Errorf("the cluster's API through Muster failed %d of %d times during the upgrade and the revert: %v", len(failed), n, failed)
	}
}
