package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// runIn runs a binary in dir with env added to a clean environment (no
// KUBECONFIG of the test's own), and returns its combined output.
func runIn(dir string, env []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG", "MUSTER_TOKEN", "MUSTER_DATASTORE_ENDPOINT"), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// historyCLI runs `muster-server history` against s's datastore, the
// PostgreSQL DSN in the environment as an operator would pass it.
func historyCLI(s *server, args ...string) (string, error) {
	cmd := exec.Command(serverBin, append([]string{"history", "--data-dir", s.dataDir}, args...)...)
	cmd.Env = append(os.Environ(), "MUSTER_DATASTORE_ENDPOINT="+s.endpoint)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pluginDir is the directory holding kubectl-muster (bin/, beside the
// agent `make build` made), built here if it is missing.
func pluginDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Dir(agentBin)
	plugin := filepath.Join(dir, "kubectl-muster")
	buildPlugin.Do(func() {
		if _, err := os.Stat(plugin); err == nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", plugin, "github.com/muster-io/muster/cmd/kubectl-muster").CombinedOutput(); err != nil {
			t.Fatalf("building kubectl-muster: %v\n%s", err, out)
		}
	})
	return dir
}

// kubectlMuster runs `kubectl muster args...` as a real kubectl plugin
// (found on PATH) with kubeconfig, and returns stdout, stderr and the exit code.
func kubectlMuster(t *testing.T, kubeconfig string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"muster"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+pluginDir(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kubectl muster %.200s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// adminRequest sends method path to s as the admin (its kubeconfig) and
// returns the status and body.
func adminRequest(t testing.TB, s *server, method, path string) (int, string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, s.url()+path, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

func datastoreCLI(s *server, env []string, args ...string) (string, error) {
	cmd := exec.Command(serverBin, append(args, "--data-dir", s.dataDir)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeSecretFile(t *testing.T, content string) string {
	f := filepath.Join(t.TempDir(), "endpoint")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func withoutEnv(env []string, names ...string) []string {
	var kept []string
outer:
	for _, kv := range env {
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				continue outer
			}
		}
		kept = append(kept, kv)
	}
	return kept
}

func mustRun(b *testing.B, bin string, args ...string) string {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		b.Fatalf("%s %v: %v", bin, args, err)
	}
	return string(out)
}

// userKubeconfig mints a user's kubeconfig with muster-server kubeconfig
// --user on the server's host (its data dir) and returns its path.
func userKubeconfig(t *testing.T, s *server, name string, groups ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	args := []string{"kubeconfig", "--data-dir", s.dataDir, "--user", name, "--output", path}
	for _, g := range groups {
		args = append(args, "--group", g)
	}
	out, err := exec.Command(serverBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("muster-server %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// One sentence for the person, no log line (klog's start with a level letter and a date).
	if want := "kubeconfig for user " + name + " in groups "; !strings.HasPrefix(string(out), want) || strings.Count(string(out), "\n") != 1 {
		t.Errorf("muster-server %s printed %q, want one line starting %q", strings.Join(args, " "), out, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("minted kubeconfig %s: %v, mode %v; want 0600", path, err, fi.Mode())
	}
	return path
}

func kubectlAs(kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
