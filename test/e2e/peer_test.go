package e2e

import (
	"context"
	"encoding/pem"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The peer: a real kube-apiserver on a real standalone kine, which
// aggregated mode puts muster behind and bench-peer measures muster against.

type kubeAPIServer struct {
	url, dir string
	log      *syncBuffer
	// pids are the peer's processes, kube-apiserver then kine: what it
	// costs in CPU and memory is theirs together.
	pids []int
}

// kubectl runs kubectl against the kube-apiserver with a static token.
func (k *kubeAPIServer) kubectl(token string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"--server", k.url, "--insecure-skip-tls-verify", "--token", token}
	out, err := exec.CommandContext(ctx, "kubectl", append(base, args...)...).CombinedOutput()
	return string(out), err
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
