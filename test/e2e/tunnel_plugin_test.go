package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTunnelPluginKubeconfig: the kubectl plugin finds its credential as
// docs/tunnel.md says: its own --kubeconfig (after "muster"), else
// $KUBECONFIG; and the form kubectl refuses for plugins (the flag before
// "muster") fails with kubectl's own words, which the docs quote.
func TestTunnelPluginKubeconfig(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	startTunnelAgent(t, s, "plug-1")
	// A $KUBECONFIG that names no server: only the flag can make it work.
	nowhere := filepath.Join(t.TempDir(), "missing.kubeconfig")
	run := func(env string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "kubectl", args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env, "PATH="+pluginDir(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	if out, err := run(nowhere, "muster", "--kubeconfig", s.kubeconfig(), "exec", "machine/plug-1", "--", "echo", "by-flag"); err != nil || strings.TrimSpace(out) != "by-flag" {
		t.Errorf("kubectl muster --kubeconfig X exec: %v\n%s", err, out)
	}
	if out, err := run(s.kubeconfig(), "muster", "exec", "machine/plug-1", "--", "echo", "by-env"); err != nil || strings.TrimSpace(out) != "by-env" {
		t.Errorf("KUBECONFIG=X kubectl muster exec: %v\n%s", err, out)
	}
	if out, err := run(nowhere, "--kubeconfig", s.kubeconfig(), "muster", "exec", "machine/plug-1", "--", "true"); err == nil || !strings.Contains(out, "flags cannot be placed before plugin name") {
		t.Errorf("kubectl --kubeconfig X muster exec: %v\n%s\nwant kubectl's refusal, as docs/tunnel.md says", err, out)
	}
}
