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

// drainSetDoc is a plan set on role=worker whose plan writes set.conf and
// whose drain template runs drain (a shell command; $PLANSET_OUT is the
// agent's own directory), with timeout if not empty.
func drainSetDoc(name, cluster, drain, timeout string) string {
	extra := fmt.Sprintf("  cluster: %s\n  drain:\n", cluster)
	if timeout != "" {
		extra += "    timeout: " + timeout + "\n"
	}
	extra += fmt.Sprintf(`    template:
      maxFailures: 1
      instructions:
      - name: drain
        command: /bin/sh
        args: ["-c", %q]
`, drain)
	return setDoc(name, "role: worker", "v1", extra)
}

// TestClusterDeleteCascades: deleting a Cluster with 3 real agents drains
// each machine (its set's drain plan runs on the agent), deletes the
// machines with their plans and node passwords, revokes the join token
// bound to the cluster, and only then removes the cluster. The agents'
// certificates are refused at once, and a join with the bound token says
// what happened. A dry-run delete changes nothing. SQLite and PostgreSQL.
func TestClusterDeleteCascades(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)
		f := filepath.Join(t.TempDir(), "cluster.yaml")
		if err := os.WriteFile(f, []byte("apiVersion: muster.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: prod\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.mustKubectl("apply", "-f", f)
		token := newToken(t, s, "--cluster", "prod")
		tokenID := token[strings.Index(token, "::")+2 : strings.LastIndex(token, ".")]

		names := []string{"cd-w1", "cd-w2", "cd-w3"}
		out, data := map[string]string{}, map[string]string{}
		for _, name := range names {
			out[name], data[name] = t.TempDir(), t.TempDir()
			runAgentBinaryEnv(t, []string{"PLANSET_OUT=" + out[name]},
				"--server", s.url(), "--data-dir", data[name], "--token", token, "--node-name", name, "--label", "role=worker")
		}
		for _, name := range names {
			waitFor(t, 60*time.Second, "machine "+name+" to register", func() bool {
				_, err := s.kubectl("get", "machine", name)
				return err == nil
			})
			waitPhase(t, s, name, "Running", 60*time.Second)
		}
		applySet(t, s, drainSetDoc("workers", "prod", `echo drained > "$PLANSET_OUT/drain.conf"`, ""))
		waitSetCondition(t, s, "workers", "Complete", "True")
		s.mustKubectl("wait", "cluster/prod", "--for=jsonpath={.status.phase}=Active", "--timeout=30s")
		for _, name := range names {
			if got := readConf(t, out[name]); got != "v1" {
				t.Fatalf("%s: set.conf is %q before the delete, want v1", name, got)
			}
		}

		// A dry run changes nothing: not the objects a delete cascades to
		// (same resource versions), and not the cluster's own deletion
		// state. The cluster's resource version is left out: its status
		// counts are the controller's, which may still be catching up with
		// the rollout that just completed (CI saw it move under a dry run).
		const cascaded = "machines,machineplans,nodepasswords,clusterregistrationtokens"
		const versions = "jsonpath={range .items[*]}{.metadata.name} {.metadata.resourceVersion}{\"\\n\"}{end}"
		const deletion = "jsonpath={.metadata.deletionTimestamp} {.status.phase} {.metadata.finalizers}"
		before, clusterBefore := s.mustKubectl("get", cascaded, "-o", versions), s.mustKubectl("get", "cluster", "prod", "-o", deletion)
		s.mustKubectl("delete", "cluster", "prod", "--dry-run=server")
		after, clusterAfter := s.mustKubectl("get", cascaded, "-o", versions), s.mustKubectl("get", "cluster", "prod", "-o", deletion)
		if before != after || clusterBefore != clusterAfter {
			t.Fatalf("a dry-run delete changed objects:\nbefore:\n%s\ncluster: %s\nafter:\n%s\ncluster: %s", before, clusterBefore, after, clusterAfter)
		}

		s.mustKubectl("delete", "cluster", "prod", "--wait=true", "--timeout=120s")

		// Every machine ran its drain plan before it went.
		for _, name := range names {
			if b, err := os.ReadFile(filepath.Join(out[name], "drain.conf")); err != nil || strings.TrimSpace(string(b)) != "drained" {
				t.Errorf("%s: the drain plan did not run: %q %v", name, b, err)
			}
		}
		for _, kind := range []string{"machines", "machineplans", "nodepasswords", "clusters"} {
			if got := s.mustKubectl("get", kind, "-o", "name"); strings.TrimSpace(got) != "" {
				t.Errorf("%s left after the cluster was deleted: %s", kind, got)
			}
		}
		if got := s.mustKubectl("get", "clusterregistrationtokens", tokenID, "-o", "jsonpath={.status.phase} {.status.reason}"); got != "Revoked ClusterDeleted" {
			t.Errorf("the cluster's join token is %q, want Revoked ClusterDeleted", got)
		}
		reasons := s.mustKubectl("get", "events", "-o", "jsonpath={range .items[*]}{.involvedObject.name} {.reason}{\"\\n\"}{end}")
		for _, name := range names {
			if !strings.Contains(reasons, name+" Drained\n") {
				t.Errorf("no Drained event for %s:\n%s", name, reasons)
			}
		}

		// The agents' certificates are void: their machines are gone.
		for _, name := range names {
			code, _, body := do(t, certHTTPClient(t, s, data[name]), s, "GET", "/apis/muster.io/v1alpha1/machineplans/"+name, nil, nil)
			if code != http.StatusForbidden && code != http.StatusUnauthorized {
				t.Errorf("%s's certificate still works after its machine was deleted: %d %s", name, code, body)
			}
		}

		// A join with the bound token says what happened and what to do.
		a := startAgent(t, s, t.TempDir(), "--token", token, "--node-name", "cd-late")
		msg, code := a.waitExit(30 * time.Second)
		if code == 0 {
			t.Fatalf("a join with the deleted cluster's token succeeded:\n%s", msg)
		}
		for _, want := range []string{"revoked when its cluster prod was deleted", "muster-server token create"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the refused join does not say %q:\n%s", want, msg)
			}
		}
		if got := s.mustKubectl("get", "machines", "-o", "name"); strings.TrimSpace(got) != "" {
			t.Errorf("a refused join made a machine: %s", got)
		}
	})
}

// TestDrainTimeout: a drain plan that outlasts its set's timeout does not
// hold the machine: it moves on to Deleting with reason DrainTimedOut, and
// a Warning event says so.
func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	f := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(f, []byte("apiVersion: muster.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: slow\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", f)
	token := newToken(t, s, "--cluster", "slow")
	out := t.TempDir()
	runAgentBinaryEnv(t, []string{"PLANSET_OUT=" + out},
		"--server", s.url(), "--data-dir", t.TempDir(), "--token", token, "--node-name", "dt-w1", "--label", "role=worker")
	waitFor(t, 60*time.Second, "machine dt-w1 to register", func() bool {
		_, err := s.kubectl("get", "machine", "dt-w1")
		return err == nil
	})
	waitPhase(t, s, "dt-w1", "Running", 60*time.Second)
	applySet(t, s, drainSetDoc("slow-workers", "slow", `touch "$PLANSET_OUT/drain.started"; sleep 30`, "3s"))
	waitSetCondition(t, s, "slow-workers", "Complete", "True")

	start := time.Now()
	s.mustKubectl("delete", "machine", "dt-w1", "--wait=true", "--timeout=60s")
	if _, err := os.Stat(filepath.Join(out, "drain.started")); err != nil {
		t.Errorf("the drain plan never started: %v", err)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("the machine was deleted after %s, before its 3s drain timeout", took)
	}
	row := waitForEvent(t, s, "a DrainTimedOut event", func(r string) bool { return strings.Contains(r, "DrainTimedOut") })
	if !strings.Contains(row, "Warning") || !strings.Contains(row, "spec.drain.timeout") {
		t.Errorf("the DrainTimedOut event does not warn and say why: %s", row)
	}
}

// TestClusterPhaseTruthful: a phase written by hand that contradicts the
// cluster's machines does not stay (Active with no machine goes back to
// WaitCheckIn), and Deleting cannot be written on a cluster that was not
// deleted, since nothing leaves it.
func TestClusterPhaseTruthful(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	f := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(f, []byte("apiVersion: muster.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: empty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl("apply", "-f", f)
	s.mustKubectl("wait", "cluster/empty", "--for=jsonpath={.status.phase}=WaitCheckIn", "--timeout=30s")
	if got := s.mustKubectl("get", "cluster", "empty", "-o", "jsonpath={.metadata.finalizers}"); !strings.Contains(got, "muster.io/cluster-lifecycle") {
		t.Errorf("a new cluster has no lifecycle finalizer: %s", got)
	}

	s.mustKubectl("patch", "cluster", "empty", "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Active"}}`)
	waitFor(t, 30*time.Second, "the hand-set Active phase to be corrected", func() bool {
		got, _ := s.kubectl("get", "cluster", "empty", "-o", "jsonpath={.status.phase} {.status.reason}")
		return got == "WaitCheckIn NoMachineCheckedIn"
	})

	out, err := s.kubectl("patch", "cluster", "empty", "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Deleting"}}`)
	if err == nil || !strings.Contains(out, "kubectl delete cluster empty") {
		t.Errorf("writing Deleting on a live cluster: want a refusal saying to delete it, got %v:\n%s", err, out)
	}
	if got := s.mustKubectl("get", "cluster", "empty", "-o", "jsonpath={.status.phase}"); got != "WaitCheckIn" {
		t.Errorf("the refused write changed the phase to %s", got)
	}
	// An empty cluster goes at once.
	s.mustKubectl("delete", "cluster", "empty", "--wait=true", "--timeout=30s")
}

// TestClusterDeleteTakesItsPool: a pool of a deleted cluster would make
// its machines again, so deleting the cluster deletes the pool too, with
// its machines, their hosts (agent processes) and the pool's join tokens.
func TestClusterDeleteTakesItsPool(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", processDriver)
	killPoolAgentsAtEnd(t, s)
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	applyPool(t, s, `apiVersion: muster.io/v1alpha1
kind: MachinePool
metadata:
  name: edge
spec:
  cluster: edge-east
  replicas: 2
  template:
    driver: process
`)
	waitFor(t, 120*time.Second, "2 pool machines Running", func() bool {
		ms := poolMachines(s, "edge")
		return len(ms) == 2 && countPhase(ms, "Running") == 2
	})
	s.mustKubectl("delete", "cluster", "edge-east", "--wait=true", "--timeout=120s")
	for _, kind := range []string{"machinepools", "machines", "nodepasswords", "clusters"} {
		if got := s.mustKubectl("get", kind, "-o", "name"); strings.TrimSpace(got) != "" {
			t.Errorf("%s left after the cluster was deleted: %s", kind, got)
		}
	}
	waitFor(t, 30*time.Second, "every pool agent to exit", func() bool { return len(poolAgents(s)) == 0 })
	// The one-time join tokens the pool minted for its machines went with
	// them (a revoked token of a deleted cluster would still be listed).
	if out := s.mustKubectl("get", "clusterregistrationtokens", "-o", "jsonpath={.items[*].spec.description}"); strings.Contains(out, "pool edge") {
		t.Errorf("the pool's join tokens outlived it: %s", out)
	}
}
