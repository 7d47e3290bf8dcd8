package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muster-io/muster/internal/planner"
)

// TestPlannerTamperedBinary (issue 29): a cluster pins its etcd by URL and
// SHA-256 (spec.kubernetes.binaries; the URL is the server's own
// /assets/kubernetes/, fetched trusting the server's CA), and what that URL
// serves is not the binary pinned: a script that would leave a mark if
// anything ran it. The machine's plan downloads it, refuses it and fails,
// its output naming the binary, the sum expected and the sum got; the
// binary is not left on the machine, nothing ran it, and the cluster says
// it waits on the failed plan. Then a cluster of a version the server has
// no binaries of: nothing is planned, and its KubernetesUpgrade condition
// says VersionUnavailable, naming the versions there are.
func TestPlannerTamperedBinary(t *testing.T) {
	t.Parallel()
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		cannotRun(t, "no etcd here (Debian's etcd-server; .ci/run installs it): %v", err)
	}
	id := rand.IntN(1_000_000)
	// A version of this test's own, so that its binary directory on the
	// machine is its own (another test's real etcd there would be kept).
	version := fmt.Sprintf("v1.37.2-tamper.%d", id)
	assets := t.TempDir()
	platform := filepath.Join(assets, version, "linux-amd64")
	if err := os.MkdirAll(platform, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(t.TempDir(), "tampered-binary-ran")
	if err := os.WriteFile(filepath.Join(platform, "etcd"), []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "", processDriver, "--kubernetes-assets-dir", assets)
	killPoolAgentsAtEnd(t, s)
	name := fmt.Sprintf("k8s-tamper-%d", id)
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(planner.BaseDir, name)) })
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(planner.BinDir, version)) })
	t.Cleanup(func() { _, _ = s.kubectl("delete", "machinepools", "--all", "--wait=true", "--timeout=60s") })

	url := s.url() + "/assets/kubernetes/" + version + "/linux-amd64/etcd"
	want := fileSHA256(t, etcd) // the real etcd's sum, as the cluster's author pinned it
	got := fileSHA256(t, filepath.Join(platform, "etcd"))
	doc := fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Cluster
metadata: {name: %[1]s}
spec:
  kubernetes:
    distribution: kubernetes
    version: %[2]s
    binaries:
    - {name: etcd, url: %[3]q, sha256: %[4]s}
---
apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %[1]s-cp}
spec:
  cluster: %[1]s
  replicas: 1
  template: {roles: [etcd, controlplane], driver: process}
`, name, version, url, want)
	if out, err := applyDoc(t, s, doc); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	var machine, output string
	waitFor(t, 3*time.Minute, "the machine's plan to fail on the tampered etcd", func() bool {
		ms := poolMachines(s, name+"-cp")
		for m := range ms {
			machine = m
		}
		if machine == "" {
			return false
		}
		out, _ := s.kubectl("get", "machineplan", machine, "-o", `jsonpath={.status.state}|{range .status.output[*]}{.name}: {.output}{"\n"}{end}`)
		output = out
		return strings.HasPrefix(out, "failed|")
	})
	for _, w := range []string{"fetch-binaries: ", "etcd from " + url + " refused", "its sha256 is " + got, "expected " + want, "never run"} {
		if !strings.Contains(output, w) {
			t.Errorf("the failed plan's output does not say %q:\n%s", w, output)
		}
	}
	if _, err := os.Stat(filepath.Join(planner.BinDir, version, "etcd")); !os.IsNotExist(err) {
		t.Errorf("the refused etcd is on the machine (%v); want it deleted", err)
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Errorf("the tampered binary ran (%s exists)", mark)
	}
	if _, err := os.Stat(filepath.Join(planner.BaseDir, name, machine, "etcd.pid")); !os.IsNotExist(err) {
		t.Errorf("the plan started etcd after refusing its binary (%v)", err)
	}
	var status string
	waitFor(t, 30*time.Second, "the cluster to say it waits on the failed plan", func() bool {
		status, _ = s.kubectl("get", "cluster", name, "-o", "jsonpath={.status.kubernetes.phase}|{.status.kubernetes.waitingFor}|{.status.kubernetes.message}")
		return strings.HasPrefix(status, "BootstrappingEtcd|"+machine+"|") && strings.Contains(status, "its plan failed")
	})
	t.Logf("%s", status)

	// A version the server has no binaries of, and the cluster pins none:
	// nothing is planned, and the cluster says why and what there is.
	missing, missingVersion := name+"-missing", fmt.Sprintf("v1.37.2-missing.%d", id)
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(planner.BaseDir, missing)) })
	if out, err := applyDoc(t, s, fmt.Sprintf(`apiVersion: muster.io/v1alpha1
kind: Cluster
metadata: {name: %[1]s}
spec:
  kubernetes: {distribution: kubernetes, version: %[2]s}
---
apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata: {name: %[1]s-cp}
spec:
  cluster: %[1]s
  replicas: 1
  template: {roles: [etcd, controlplane], driver: process}
`, missing, missingVersion)); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	var cond string
	waitFor(t, 2*time.Minute, "the cluster of a version not available to say so", func() bool {
		cond, _ = s.kubectl("get", "cluster", missing, "-o", `jsonpath={.status.conditions[?(@.type=="KubernetesUpgrade")].reason}|{.status.conditions[?(@.type=="KubernetesUpgrade")].message}`)
		return strings.HasPrefix(cond, "VersionUnavailable|")
	})
	for _, w := range []string{"Kubernetes " + missingVersion + " is not available for linux-amd64", "(it has " + version + ")", "--kubernetes-assets-dir"} {
		if !strings.Contains(cond, w) {
			t.Errorf("the condition does not say %q: %s", w, cond)
		}
	}
	if out, _ := s.kubectl("get", "machineplans", "-l", "muster.io/planner="+missing, "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("the planner wrote plans for a version it has no binaries of: %s", out)
	}
	t.Logf("%s", cond)
}
