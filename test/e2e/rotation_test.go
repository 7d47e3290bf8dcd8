package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCertificateRotation: an agent renews its certificate before it
// expires, with the certificate as its credential, and keeps working.
func TestCertificateRotation(t *testing.T) {
	t.Parallel()
	s := startServer(t, "", "--agent-certificate-validity", "12s")
	dir := t.TempDir()
	a := startAgent(t, s, dir, "--token", newToken(t, s), "--node-name", "rotating-1")
	a.waitOutput("running as machine rotating-1", 30*time.Second)
	first, _ := os.ReadFile(filepath.Join(dir, "client.crt"))
	a.waitOutput("renewed the certificate", 30*time.Second)
	second, _ := os.ReadFile(filepath.Join(dir, "client.crt"))
	if bytes.Equal(first, second) {
		t.Fatal("the certificate file did not change")
	}
	if strings.Count(s.mustKubectl("get", "machines", "-o", "name"), "\n") != 1 {
		t.Error("renewal made another machine")
	}
	// The renewed certificate works after the old one has expired.
	time.Sleep(5 * time.Second)
	a.kill()
	b := startAgent(t, s, dir, "--node-name", "rotating-1")
	b.waitOutput("using the stored certificate of machine rotating-1", 30*time.Second)
}
