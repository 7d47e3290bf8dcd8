package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterAPIProxyUpdating (issue 29): a cluster's API stays reachable
// through Muster while the control-plane machine that serves it applies a
// changed plan (Updating, as a member of a planner-built cluster is while
// it removes a dead etcd member), as long as the plan's kube-apiserver
// probe last passed; once that probe fails the machine is not used, and
// the 503 says why. A Running machine whose plan reports no kube-apiserver
// (a new member running only etcd yet) is not used either once the
// cluster's plans report it.
func TestClusterAPIProxyUpdating(t *testing.T) {
	t.Parallel()
	d := startDownstream(t)
	s := startServer(t, "")
	if out, err := applyDoc(t, s, d.clusterDoc("prod")); err != nil {
		t.Fatalf("applying the cluster: %v\n%s", err, out)
	}
	a := startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, s, "--cluster", "prod")), "--node-name", "cp-1",
		"--role", "controlplane", "--kube-apiserver-port", fmt.Sprint(d.port))
	a.waitOutput("opened the tunnel to the server", 60*time.Second)
	waitPhase(t, s, "cp-1", "Running", 60*time.Second)
	// cp-0, first by name, is Running with no kube-apiserver to reach (its
	// agent allows another port): as a pool's new machine whose plan runs
	// only etcd yet, it must not be chosen once the cluster's plans report
	// their kube-apiserver's readiness.
	b := startAgent(t, s, t.TempDir(), "--token-file", writeTokenFile(t, newToken(t, s, "--cluster", "prod")), "--node-name", "cp-0",
		"--role", "controlplane", "--kube-apiserver-port", fmt.Sprint(d.port+1))
	b.waitOutput("opened the tunnel to the server", 60*time.Second)
	waitPhase(t, s, "cp-0", "Running", 60*time.Second)

	// The probe stands for the kube-apiserver's readiness (a file the
	// test removes); the gate holds the second plan in progress.
	dir := t.TempDir()
	ready, gate := filepath.Join(dir, "ready"), filepath.Join(dir, "gate")
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf(`  probes:
  - name: kube-apiserver
    periodSeconds: 1
    failureThreshold: 1
    exec:
      command: /usr/bin/test
      args: ["-f", %q]
`, ready)
	// planState is a machine's plan's state, its first probe's health
	// and the machine's phase: "succeeded true Running".
	planState := func(machine string) string {
		plan, _ := s.kubectl("get", "machineplan", machine, "-o", "jsonpath={.status.state} {.status.probes[0].healthy}")
		phase, _ := s.kubectl("get", "machine", machine, "-o", "jsonpath={.status.phase}")
		return plan + " " + phase
	}
	applyPlan(t, s, "cp-1", probe)
	waitFor(t, 30*time.Second, "the plan applied with its kube-apiserver probe passing", func() bool {
		out, _ := s.kubectl("get", "machineplan", "cp-1", "-o", "jsonpath={.status.state} {.status.probes[0].healthy}")
		return out == "succeeded true"
	})
	waitPhase(t, s, "cp-1", "Running", 30*time.Second)

	operator := userKubeconfig(t, s, "otto", "muster:operators")
	hc, _ := httpFor(t, operator)
	readyz := s.url() + "/k8s/clusters/prod/readyz?verbose"
	if code, body := get(t, hc, readyz, nil); code != http.StatusOK || !strings.Contains(body, kubeAPIServerOnlyCheck) {
		t.Errorf("/readyz through Muster with cp-1's kube-apiserver probe passing and cp-0 reporting none: %d %.400s; want 200 through cp-1", code, body)
	}

	applyPlan(t, s, "cp-1", fmt.Sprintf(`  instructions:
  - name: wait-for-the-gate
    command: /bin/sh
    args: ["-c", "while [ ! -f %s ]; do sleep 0.2; done"]
    timeoutSeconds: 120
%s`, gate, probe))
	waitFor(t, 30*time.Second, "the changed plan in progress and the machine Updating", func() bool {
		plan, _ := s.kubectl("get", "machineplan", "cp-1", "-o", "jsonpath={.status.state}")
		phase, _ := s.kubectl("get", "machine", "cp-1", "-o", "jsonpath={.status.phase}")
		return plan == "in-progress" && phase == "Updating"
	})
	if code, body := get(t, hc, readyz, nil); code != http.StatusOK || !strings.Contains(body, kubeAPIServerOnlyCheck) {
		t.Errorf("/readyz through Muster while cp-1, the only machine with a kube-apiserver, is Updating, its probe passing: %d %.400s; want 200 from the kube-apiserver", code, body)
	}

	// Applied; then its kube-apiserver fails its probe, and the machine
	// applies another plan: Updating again, and not used.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, s, "cp-1", "Running", 60*time.Second)
	if err := os.Remove(ready); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the kube-apiserver probe failing", func() bool {
		out, _ := s.kubectl("get", "machineplan", "cp-1", "-o", "jsonpath={.status.probes[0].healthy}")
		return out == "false"
	})
	// No machine's probe passes, but cp-1 is Running: it is tried rather
	// than every request refused (a probe that times out on a busy host
	// leaves a kube-apiserver that answers).
	if code, body := get(t, hc, readyz, nil); code != http.StatusOK || !strings.Contains(body, kubeAPIServerOnlyCheck) {
		t.Errorf("/readyz through Muster with cp-1 Running, its kube-apiserver probe failing, and no probe passing: %d %.400s; want 200 through cp-1", code, body)
	}
	applyPlan(t, s, "cp-1", fmt.Sprintf(`  instructions:
  - name: wait-for-the-gate
    command: /bin/sh
    args: ["-c", "while [ ! -f %s ]; do sleep 0.2; done"]
    timeoutSeconds: 120
%s`, gate+"-2", probe))
	waitFor(t, 30*time.Second, "the next plan in progress, the probe failing", func() bool { return planState("cp-1") == "in-progress false Updating" })
	if code, body := get(t, hc, readyz, nil); code != http.StatusServiceUnavailable || !strings.Contains(body, "no control-plane machine whose kube-apiserver probe last passed") || !strings.Contains(body, "cp-1 is Updating, its kube-apiserver probe failing") {
		t.Errorf("/readyz through Muster with cp-1's kube-apiserver probe failing (cp-1 Updating, cp-0 reporting none): %d %.400s; want 503 saying no machine could serve", code, body)
	}

	// cp-0's plan now says its kube-apiserver is ready, but nothing
	// answers on the port its agent opens (as a kube-apiserver that
	// stopped after its last probe): chosen first by name, it fails, and
	// a read is sent once more through another machine. With none to
	// take it the 503 names both reasons; once cp-1 serves again the
	// read is answered through it.
	applyPlan(t, s, "cp-0", `  probes:
  - name: kube-apiserver
    periodSeconds: 1
    exec:
      command: /bin/true
`)
	waitFor(t, 30*time.Second, "cp-0's plan applied, its kube-apiserver probe passing", func() bool { return planState("cp-0") == "succeeded true Running" })
	if code, body := get(t, hc, readyz, nil); code != http.StatusServiceUnavailable || !strings.Contains(body, "could not be reached through machine cp-0") || !strings.Contains(body, "nor through another") {
		t.Errorf("/readyz through Muster with cp-0 unreachable and cp-1 Updating, its probe failing: %d %.400s; want 503 naming cp-0 and that no other machine could serve", code, body)
	}
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate+"-2", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "cp-1 Running, its probe passing", func() bool { return planState("cp-1") == "succeeded true Running" })
	for i := 0; i < 3; i++ {
		if code, body := get(t, hc, readyz, nil); code != http.StatusOK || !strings.Contains(body, kubeAPIServerOnlyCheck) {
			t.Errorf("/readyz through Muster with cp-0 unreachable (first by name, its probe passing) and cp-1 serving: %d %.400s; want 200, sent again through cp-1", code, body)
		}
	}
}
