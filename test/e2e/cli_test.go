package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/muster-io/muster/pkg/apis/muster/v1alpha1"
)

// TestClientSubcommandsFindTheCredential: muster-server's client
// subcommands and `muster-agent simulate --plan-updates` find the admin
// credential as kubectl does — --kubeconfig, then $KUBECONFIG, then the data
// dir — and `kubeconfig --output` never leaves a broken file behind.
func TestClientSubcommandsFindTheCredential(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	elsewhere := t.TempDir() // not the data dir, not the default one
	withEnv := []string{"KUBECONFIG=" + s.kubeconfig()}
	bogus := filepath.Join(elsewhere, "missing.kubeconfig")

	// $KUBECONFIG, as kubectl: the data dir is not needed.
	for _, args := range [][]string{{"token", "list"}, {"token", "create", "--ttl", "1h"}} {
		if out, err := runIn(elsewhere, withEnv, serverBin, args...); err != nil {
			t.Errorf("muster-server %s with $KUBECONFIG: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Nothing to go by: the error says where it looked and what to do.
	out, err := runIn(elsewhere, nil, serverBin, "token", "list")
	if err == nil || !strings.Contains(out, "admin.kubeconfig does not exist") || !strings.Contains(out, "--data-dir") || !strings.Contains(out, "$KUBECONFIG") {
		t.Errorf("token list with no credential: %v\n%s", err, out)
	}
	// --kubeconfig wins over $KUBECONFIG; an explicit --data-dir too.
	if out, err := runIn(elsewhere, withEnv, serverBin, "token", "list", "--kubeconfig", bogus); err == nil || !strings.Contains(out, bogus) {
		t.Errorf("--kubeconfig %s was not used over $KUBECONFIG: %v\n%s", bogus, err, out)
	}
	if out, err := runIn(elsewhere, []string{"KUBECONFIG=" + bogus}, serverBin, "token", "list", "--data-dir", s.dataDir); err != nil {
		t.Errorf("an explicit --data-dir did not win over $KUBECONFIG: %v\n%s", err, out)
	}

	// kubeconfig --output: a working 0600 file from $KUBECONFIG alone.
	copied := filepath.Join(elsewhere, "admin.kubeconfig")
	if out, err := runIn(elsewhere, withEnv, serverBin, "kubeconfig", "--output", copied); err != nil {
		t.Fatalf("kubeconfig --output: %v\n%s", err, out)
	}
	if fi, err := os.Stat(copied); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig --output wrote %v (mode %v), want mode 0600", err, fi)
	}
	if out, err := exec.Command("kubectl", "--kubeconfig", copied, "get", "clusterregistrationtokens").CombinedOutput(); err != nil {
		t.Errorf("kubectl with the copied kubeconfig: %v\n%s", err, out)
	}
	// A failure leaves no file, and an existing one as it was.
	failed := filepath.Join(elsewhere, "new.kubeconfig")
	if out, err := runIn(elsewhere, nil, serverBin, "kubeconfig", "--output", failed); err == nil {
		t.Errorf("kubeconfig without a credential succeeded:\n%s", out)
	}
	if _, err := os.Stat(failed); !os.IsNotExist(err) {
		t.Errorf("a failed kubeconfig --output left %s behind (%v)", failed, err)
	}
	before, _ := os.ReadFile(copied)
	if _, err := runIn(elsewhere, []string{"KUBECONFIG=" + bogus}, serverBin, "kubeconfig", "--output", copied); err == nil {
		t.Error("kubeconfig with a missing $KUBECONFIG succeeded")
	}
	if after, _ := os.ReadFile(copied); string(after) != string(before) {
		t.Errorf("a failed kubeconfig --output changed the existing file")
	}

	// simulate --plan-updates takes $KUBECONFIG as well.
	c := adminClient(t, s)
	if _, err := c.MusterV1alpha1().Clusters().Create(context.Background(), &api.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "simulated"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := newToken(t, s, "--cluster", "simulated")
	sim := &agentProc{t: t, log: &syncBuffer{}, exited: make(chan struct{})}
	sim.cmd = exec.Command(agentBin, "simulate", "--server", s.url(), "--token", token, "--count", "2", "--concurrency", "2", "--plan-updates", "4")
	sim.cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG"), withEnv...)
	sim.cmd.Stdout, sim.cmd.Stderr = sim.log, sim.log
	if err := sim.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = sim.cmd.Wait(); close(sim.exited) }()
	t.Cleanup(sim.kill)
	sim.waitOutput("simulate: joined 2/2", 60*time.Second)
	waitFor(t, 30*time.Second, "simulate to change a plan with $KUBECONFIG's credential", func() bool {
		plans, err := c.MusterV1alpha1().MachinePlans().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range plans.Items {
			if len(p.Spec.Files) == 1 && strings.HasPrefix(p.Spec.Files[0].Content, "change ") {
				return true
			}
		}
		return false
	})
}

// TestTokenCreateRefusesNegativeTTL: a negative --ttl is refused with a
// message, and no token is created (it used to make one that never expires).
func TestTokenCreateRefusesNegativeTTL(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	out, err := s.musterErr("token", "create", "--ttl", "-5h")
	if err == nil || !strings.Contains(out, "--ttl -5h0m0s is negative") {
		t.Errorf("token create --ttl -5h: %v\n%s", err, out)
	}
	if got := s.mustKubectl("get", "clusterregistrationtokens", "-o", "name"); strings.TrimSpace(got) != "" {
		t.Errorf("a token was created:\n%s", got)
	}
	// 0 still means a token that never expires, which the API agrees with.
	s.muster(t, "token", "create", "--ttl", "0")
	if got := s.mustKubectl("get", "clusterregistrationtokens", "-o", "jsonpath={.items[*].status.phase}:{.items[*].status.expiresAt}"); got != "Active:" {
		t.Errorf("token with --ttl 0: %q, want Active with no expiry", got)
	}
}

// TestServerSecretsOffTheCommandLine: the server token and the datastore
// endpoint (with its password) can come from files or the environment, and
// are then not in the process's command line.
func TestServerSecretsOffTheCommandLine(t *testing.T) {
	// Not parallel: sets the process environment, which parallel tests would inherit.
	secrets := t.TempDir()
	token := "tour-" + strings.Repeat("7", 40)
	tokenFile := filepath.Join(secrets, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmdline := func(s *server) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Run("sqlite", func(t *testing.T) {
		s := startServer(t, "", "--token-file", tokenFile)
		if got := strings.TrimSpace(serverToken(t, s)); got != token {
			t.Errorf("the server uses token %q, want the one in --token-file", got)
		}
		if strings.Contains(cmdline(s), token) {
			t.Error("the server token is in the command line")
		}
		// Both the flag and its file: refused, nothing started.
		out, err := runIn(t.TempDir(), nil, serverBin, "--data-dir", t.TempDir(), "--token", token, "--token-file", tokenFile)
		if err == nil || !strings.Contains(out, "--token and --token-file are both given") {
			t.Errorf("--token with --token-file: %v\n%s", err, out)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := backends[1].endpoint(t)
		endpointFile := filepath.Join(secrets, "datastore")
		if err := os.WriteFile(endpointFile, []byte(dsn+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startServer(t, "", "--datastore-endpoint-file", endpointFile)
		s.mustKubectl("apply", "-f", testdata("manifests", "cluster.yaml"))
		if !strings.Contains(s.log.String(), `datastore="postgres"`) {
			t.Errorf("the server did not use the PostgreSQL of --datastore-endpoint-file:\n%s", s.log.String())
		}
		if strings.Contains(cmdline(s), dsn) || strings.Contains(s.log.String(), dsn) {
			t.Error("the datastore endpoint is in the command line or the log")
		}
		s.stop()
		// The same from the environment; the data is there.
		s2 := newServer(t, "127.0.0.1", "")
		s2.dataDir = s.dataDir
		os.Setenv("MUSTER_DATASTORE_ENDPOINT", dsn)
		defer os.Unsetenv("MUSTER_DATASTORE_ENDPOINT")
		s2.start()
		if out := s2.mustKubectl("get", "cluster", "edge-east", "-o", "name"); strings.TrimSpace(out) != "cluster.muster.io/edge-east" {
			t.Errorf("with $MUSTER_DATASTORE_ENDPOINT the cluster is not there: %q", out)
		}
	})
}
