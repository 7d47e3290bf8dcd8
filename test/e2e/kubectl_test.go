package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKubectlTour is the README's 5-minute tour, on each backend.
func TestKubectlTour(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, endpoint string) {
		s := startServer(t, endpoint)

		out := s.mustKubectl("api-resources", "--api-group=muster.io", "-o", "name")
		for _, r := range []string{"clusters", "clusterregistrationtokens", "clusterregistrations", "machines", "machineplans", "nodepasswords", "serverendpoints"} {
			if !strings.Contains(out, r+".muster.io") {
				t.Errorf("api-resources is missing %s:\n%s", r, out)
			}
		}

		// Client-side and server-side apply.
		s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))
		s.mustKubectl("apply", "--server-side", "-f", testdata("manifests", "machine.yaml"))
		s.mustKubectl("apply", "--server-side", "-f", testdata("manifests", "machineplan.yaml"))
		s.mustKubectl("apply", "-f", testdata("manifests", "token.yaml"))
		// Applying the same manifest again is a no-op, not an error.
		s.mustKubectl("apply", "--server-side", "-f", testdata("manifests", "machine.yaml"))

		// Printer columns: the operator sees phase and cluster at a glance.
		out = s.mustKubectl("get", "machines")
		for _, col := range []string{"NAME", "CLUSTER", "PHASE", "PLAN", "ROLES", "LAST-SEEN", "AGE"} {
			if !strings.Contains(out, col) {
				t.Errorf("kubectl get machines lacks column %s:\n%s", col, out)
			}
		}
		if !strings.Contains(out, "node-a") || !strings.Contains(out, "Pending") || !strings.Contains(out, "edge-east") {
			t.Errorf("kubectl get machines does not show node-a Pending in edge-east:\n%s", out)
		}
		out = s.mustKubectl("get", "machineplans", "node-a")
		if !strings.Contains(out, "pending") {
			t.Errorf("a new plan should be pending:\n%s", out)
		}
		out = s.mustKubectl("get", "mach", "node-a", "-o", "yaml")
		if !strings.Contains(out, "phase: Pending") || !strings.Contains(out, "generation: 1") {
			t.Errorf("get -o yaml lacks phase or generation:\n%s", out)
		}

		// kubectl explain reads the OpenAPI v3 schema and its doc comments.
		out = s.mustKubectl("explain", "machine.status.phase")
		if !strings.Contains(out, "lifecycle state") {
			t.Errorf("explain machine.status.phase lacks the field's documentation:\n%s", out)
		}
		out = s.mustKubectl("explain", "machineplan.spec.files")
		if !strings.Contains(out, "atomically") {
			t.Errorf("explain machineplan.spec.files lacks documentation:\n%s", out)
		}

		// A watcher sees the status change.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		watch := exec.CommandContext(ctx, "kubectl", "get", "machine", "node-a", "-w", "--output-watch-events",
			"-o", "jsonpath={.type} {.object.status.phase}{\"\\n\"}")
		watch.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig())
		stdout, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		events := make(chan string, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				events <- sc.Text()
			}
			close(events)
		}()
		waitLine(t, events, "ADDED Pending")

		// Legal transitions through the status subresource, as a controller does.
		s.mustKubectl("patch", "machine", "node-a", "--subresource=status", "--type=merge",
			"-p", `{"status":{"phase":"Registering","reason":"AgentRegistered"}}`)
		waitLine(t, events, "MODIFIED Registering")
		s.mustKubectl("wait", "machine/node-a", "--for=jsonpath={.status.phase}=Registering", "--timeout=30s")

		// An illegal transition is a 422 that names the state and the allowed events.
		out, err = s.kubectl("patch", "machine", "node-a", "--subresource=status", "--type=merge",
			"-p", `{"status":{"phase":"Running"}}`)
		if err == nil {
			t.Fatalf("Registering → Running should be refused:\n%s", out)
		}
		for _, want := range []string{"is invalid", "status.phase", `"Registering"`, "allowed"} {
			if !strings.Contains(out, want) {
				t.Errorf("illegal-transition error lacks %q:\n%s", want, out)
			}
		}

		// The transition history is recorded and cannot be rewritten by clients.
		out = s.mustKubectl("get", "machine", "node-a", "-o", "jsonpath={.status.transitions[*].from}>{.status.transitions[*].to}:{.status.transitions[*].reason}")
		if out != "Pending>Registering:AgentRegistered" {
			t.Errorf("transitions = %q, want the one Pending→Registering record", out)
		}
		s.mustKubectl("patch", "machine", "node-a", "--subresource=status", "--type=merge",
			"-p", `{"status":{"transitions":[]}}`)
		out = s.mustKubectl("get", "machine", "node-a", "-o", "jsonpath={.status.transitions[*].to}")
		if out != "Registering" {
			t.Errorf("a client emptied the transition history: %q", out)
		}

		// Spec writes cannot change status, status writes cannot change spec.
		s.mustKubectl("patch", "machine", "node-a", "--type=merge", "-p", `{"status":{"phase":"Deleted"}}`)
		s.mustKubectl("patch", "machine", "node-a", "--subresource=status", "--type=merge", "-p", `{"spec":{"roles":["etcd"]}}`)
		out = s.mustKubectl("get", "machine", "node-a", "-o", "jsonpath={.status.phase} {.spec.roles}")
		if out != `Registering ["worker"]` {
			t.Errorf("spec/status split broken: %q", out)
		}

		// Field selectors on the fields users filter by.
		out = s.mustKubectl("get", "machines", "--field-selector", "spec.cluster=edge-east,status.phase=Registering", "-o", "name")
		if strings.TrimSpace(out) != "machine.muster.io/node-a" {
			t.Errorf("field selector: %q", out)
		}
		out = s.mustKubectl("get", "machines", "--field-selector", "status.phase=Running", "-o", "name")
		if strings.TrimSpace(out) != "" {
			t.Errorf("field selector status.phase=Running matched: %q", out)
		}
		if out, err := s.kubectl("get", "machines", "--field-selector", "spec.bogus=x"); err == nil || !strings.Contains(out, "not supported") {
			t.Errorf("an unknown field selector should be refused clearly: %v\n%s", err, out)
		}

		s.mustKubectl("delete", "machine", "node-a", "--wait=true")
		if out, err := s.kubectl("get", "machine", "node-a"); err == nil || !strings.Contains(out, "NotFound") {
			t.Errorf("machine still there after delete: %v\n%s", err, out)
		}
		cancel()
		_ = watch.Wait()
	})
}

// waitLine reads watch output until a line equals want.
func waitLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("watch ended before %q; saw %q", want, seen)
			}
			if strings.TrimSpace(l) == want {
				return
			}
			seen = append(seen, l)
		case <-timeout:
			t.Fatalf("no watch event %q within 30s; saw %q", want, seen)
		}
	}
}

// TestBadManifests: each bad object is refused with a message naming the field.
func TestBadManifests(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))
	cases := []struct {
		file string
		want []string
	}{
		{"plan-relative-path.yaml", []string{"spec.files[0].path", "absolute"}},
		{"plan-escaping-path.yaml", []string{"spec.files[0].path", "absolute, clean"}},
		{"plan-negative-timeout.yaml", []string{"spec.instructions[0].timeoutSeconds", "between 0"}},
		{"plan-unknown-probe.yaml", []string{"spec.probes[0]", "httpGet or exec"}},
		{"machine-no-cluster.yaml", []string{"spec.cluster", "Required value"}},
		{"token-plaintext.yaml", []string{"spec.secretHash", "sha256$"}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			// --validate=false sends the object as written, so the server's
			// own validation (not kubectl's schema check) must catch it.
			out, err := s.kubectl("apply", "--validate=false", "-f", testdata("bad", tc.file))
			if err == nil {
				t.Fatalf("apply of %s succeeded; want a 422:\n%s", tc.file, out)
			}
			for _, w := range append([]string{"is invalid"}, tc.want...) {
				if !strings.Contains(out, w) {
					t.Errorf("error lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "hunter2") {
				t.Errorf("the error echoes the secret:\n%s", out)
			}
		})
	}
	// Nothing was stored.
	if out := s.mustKubectl("get", "machineplans,clusterregistrationtokens,machines", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("refused objects were stored: %s", out)
	}
	// With kubectl's default strict validation an unknown field is refused too.
	out, err := s.kubectl("apply", "-f", testdata("bad", "plan-unknown-probe.yaml"))
	if err == nil || !strings.Contains(out, "tcpSocket") {
		t.Errorf("strict validation should name the unknown field: %v\n%s", err, out)
	}
}
