package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuiltinRoles: certificates minted for a viewer, an operator and a
// metrics reader each do what their role allows through the real kubectl,
// and every refusal is a 403 naming the groups that would be allowed.
func TestBuiltinRoles(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	s.mustKubectl("create", "-f", testdata("manifests", "cluster.yaml"))
	manual := newToken(t, s, "--manual-approval")
	a := startAgent(t, s, t.TempDir(), "--token", manual, "--node-name", "roles-1")
	a.waitOutput("to be approved: muster-server registration approve", 30*time.Second)
	reg := strings.TrimSpace(s.mustKubectl("get", "clusterregistrations", "-o", "jsonpath={.items[0].metadata.name}"))

	endpoint := strings.TrimSpace(s.mustKubectl("get", "serverendpoints", "-o", "jsonpath={.items[0].metadata.name}"))
	viewer := userKubeconfig(t, s, "vera", "muster:viewers")
	operator := userKubeconfig(t, s, "otto", "muster:operators")
	metrics := userKubeconfig(t, s, "prometheus", "muster:metrics-readers")

	type step struct {
		who     string
		kc      string
		args    []string
		allowed bool
		// granted is what a refusal must name.
		granted string
	}
	steps := []step{
		{"viewer", viewer, []string{"get", "clusters"}, true, ""},
		{"viewer", viewer, []string{"get", "clusterregistrations"}, true, ""},
		{"viewer", viewer, []string{"get", "clusterregistrationtokens"}, false, "muster:operators"},
		{"viewer", viewer, []string{"get", "nodepasswords"}, false, "system:masters"},
		{"viewer", viewer, []string{"delete", "cluster", "edge-east"}, false, "system:masters"},
		{"viewer", viewer, []string{"patch", "clusterregistration", reg, "--subresource", "status", "--type", "merge", "-p", `{"status":{"phase":"Approved"}}`}, false, "muster:operators"},
		{"viewer", viewer, []string{"create", "-f", testdata("manifests", "machineplan.yaml")}, false, "muster:operators"},
		// The operator approves the waiting registration as an operator would.
		{"operator", operator, []string{"get", "clusterregistrationtokens"}, true, ""},
		{"operator", operator, []string{"patch", "serverendpoint", endpoint, "--type", "merge", "-p", `{"metadata":{"labels":{"x":"y"}}}`}, false, "system:masters"},
		{"operator", operator, []string{"delete", "controllerleases", "--all"}, false, "system:masters"},
		{"operator", operator, []string{"get", "nodepasswords"}, false, "system:masters"},
		{"metrics reader", metrics, []string{"get", "machines"}, false, "muster:viewers"},
		{"metrics reader", metrics, []string{"get", "--raw", "/metrics"}, true, ""},
	}
	for _, st := range steps {
		out, err := kubectlAs(st.kc, st.args...)
		switch {
		case st.allowed && err != nil:
			t.Errorf("%s: kubectl %s refused: %v\n%s", st.who, strings.Join(st.args, " "), err, out)
		case !st.allowed && err == nil && !strings.Contains(out, "No resources"):
			t.Errorf("%s: kubectl %s allowed, want 403:\n%s", st.who, strings.Join(st.args, " "), out)
		case !st.allowed && (!strings.Contains(out, "forbidden") || !strings.Contains(out, st.granted)):
			t.Errorf("%s: kubectl %s: want a 403 naming %s, got %v:\n%s", st.who, strings.Join(st.args, " "), st.granted, err, out)
		}
	}

	// The operator approves through muster-server's own client, with its kubeconfig.
	if out, err := exec.Command(serverBin, "registration", "approve", "roles-1", "--kubeconfig", operator).CombinedOutput(); err != nil {
		t.Fatalf("operator approving: %v\n%s", err, out)
	}
	a.waitOutput("running as machine roles-1", 30*time.Second)
	if out, err := kubectlAs(viewer, "get", "machines", "-o", "name"); err != nil || !strings.Contains(out, "machine.muster.io/roles-1") {
		t.Fatalf("viewer listing machines: %v\n%s", err, out)
	}
	if out, err := kubectlAs(viewer, "delete", "machine", "roles-1"); err == nil || !strings.Contains(out, "forbidden") {
		t.Fatalf("viewer deleting a machine: %v\n%s", err, out)
	}
	if out, err := exec.Command(serverBin, "token", "create", "--kubeconfig", operator).CombinedOutput(); err != nil || !strings.Contains(string(out), "K10") {
		t.Fatalf("operator creating a token: %v\n%s", err, out)
	}
	if out, err := kubectlAs(operator, "label", "machine", "roles-1", "role=worker"); err != nil {
		t.Fatalf("operator labelling a machine: %v\n%s", err, out)
	}
	if out, err := kubectlAs(operator, "delete", "machine", "roles-1"); err != nil {
		t.Fatalf("operator deleting a machine: %v\n%s", err, out)
	}
}

// TestUserKubeconfigRefusals: minting refuses identities that would pass
// for an agent or a server, and groups that grant nothing, and writes no file.
func TestUserKubeconfigRefusals(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "muster:machine:edge-1", "--group", "muster:viewers"}, "belong to agents"},
		{[]string{"--user", "system:kube-controller-manager", "--group", "muster:viewers"}, "belong to agents"},
		{[]string{"--user", "alice", "--group", "muster:machines"}, "grants nothing here"},
		{[]string{"--user", "alice", "--group", "muster:viewer"}, "grants nothing here"},
		{[]string{"--user", "alice"}, "no group"},
		{[]string{"--user", "alice", "--group", "muster:viewers", "--validity", "-1h"}, "validity"},
	} {
		out := filepath.Join(t.TempDir(), "user.kubeconfig")
		b, err := exec.Command(serverBin, append([]string{"kubeconfig", "--data-dir", s.dataDir, "--output", out}, tc.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(b), tc.want) {
			t.Errorf("kubeconfig %s: %v, want a refusal saying %q:\n%s", strings.Join(tc.args, " "), err, tc.want, b)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("kubeconfig %s wrote %s although it refused", strings.Join(tc.args, " "), out)
		}
	}
}
